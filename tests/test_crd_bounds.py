"""Every number a user writes is bounded in the schema (issue 45, "What to build" 2): the API server refuses what
the operator cannot do in its budget, so no object's number reaches a loop, a solver or a float's edge.

Walks the ``spec`` (everything but ``status``, which only the operator writes: the chart's roles give no one else
``*/status``) of every kubesoda CRD (all but Kopf's ``clusterkopfpeerings``): every ``number`` and ``integer`` has
a ``minimum`` and a ``maximum``; every string a ``maxLength`` (or an ``enum``); every list a ``maxItems``; every map
(``additionalProperties``) a ``maxProperties``; every CPU or memory quantity (int-or-string) a ``maxLength`` and a
CEL rule bounding it from above (``quantity(...).compareTo(quantity('...')) <= 0``), since a schema's ``maximum``
cannot speak of quantities. Subtrees the CRD leaves open (``x-kubernetes-preserve-unknown-fields``: a JobFlow step's
batch/v1 JobSpec, which the API server checks when the Job is created) are not walked.

Then the bounds are checked against what the code takes: :func:`test_translation_refuses_past_the_schema` puts
each SODA number one float past its CRD maximum into an object that skipped the schema (stored before the bound,
or ``kubesoda plan -f`` on a file) and expects one error naming the field.
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from soda_operator import schema as offline
from soda_operator.fair_yield import spec as yield_spec
from soda_operator.kube.errors import TranslationError
from soda_operator.soda import crd, learning

ROOT = Path(__file__).resolve().parents[1]
KINDS = sorted(p.stem for p in (ROOT / "crds").glob("*.yaml") if p.stem != "clusterkopfpeerings")
UPPER = re.compile(r"quantity\(string\(self\)\)\.compareTo\(quantity\('[^']+'\)\) <= 0")


def _spec(kind: str) -> dict[str, Any]:
    doc = yaml.safe_load((ROOT / "crds" / f"{kind}.yaml").read_text())
    props = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
    return {"type": "object", "properties": {k: v for k, v in props.items() if k != "status"}}


def walk(s: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """(path, schema) of ``s`` and every node below it, open subtrees left out."""
    yield path, s
    if s.get("x-kubernetes-preserve-unknown-fields"):
        return
    for k, v in (s.get("properties") or {}).items():
        yield from walk(v, f"{path}.{k}" if path else k)
    if isinstance(s.get("items"), dict):
        yield from walk(s["items"], f"{path}[]")
    if isinstance(s.get("additionalProperties"), dict):
        yield from walk(s["additionalProperties"], f"{path}{{}}")


def unbounded(s: dict[str, Any]) -> list[str]:
    """What the schema node ``s`` lacks to be bounded, as "path: what"."""
    out = []
    for path, n in walk(s):
        t = n.get("type")
        if n.get("x-kubernetes-int-or-string"):
            rules = [r.get("rule", "") for r in n.get("x-kubernetes-validations") or []]
            if "maxLength" not in n or not any(UPPER.search(r) for r in rules):
                out.append(f"{path}: a quantity without maxLength and a CEL upper bound")
        elif t in ("number", "integer"):
            out += [f"{path}: no {b}" for b in ("minimum", "maximum") if b not in n]
        elif t == "string" and "maxLength" not in n and "enum" not in n:
            out.append(f"{path}: a string without maxLength or enum")
        elif t == "array" and "maxItems" not in n:
            out.append(f"{path}: a list without maxItems")
        elif t == "object" and isinstance(n.get("additionalProperties"), dict) and "maxProperties" not in n:
            out.append(f"{path}: a map without maxProperties")
    return out


@pytest.mark.parametrize("kind", KINDS)
def test_every_field_a_user_writes_is_bounded(kind):
    bad = unbounded(_spec(kind))
    assert not bad, f"crds/{kind}.yaml: {len(bad)} field(s) not bounded:\n  " + "\n  ".join(bad)


def test_the_walk_finds_what_it_looks_for():
    """The walk is not vacuous: an unbounded field of each sort is named."""
    s = {"type": "object", "properties": {
        "n": {"type": "number", "minimum": 0}, "i": {"type": "integer", "maximum": 3}, "s": {"type": "string"},
        "l": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 1}},
        "m": {"type": "object", "additionalProperties": {"type": "string", "enum": ["a"]}},
        "q": {"x-kubernetes-int-or-string": True, "maxLength": 32},
        "open": {"type": "object", "x-kubernetes-preserve-unknown-fields": True, "properties": {"x": {"type": "number"}}}}}
    assert unbounded(s) == ["n: no maximum", "i: no minimum", "s: a string without maxLength or enum", "l: a list without maxItems",
                            "m: a map without maxProperties", "q: a quantity without maxLength and a CEL upper bound"]


# ------------------------------------------------------------------------------------------ the code's side


def numbers(kind: str) -> dict[str, dict[str, Any]]:
    """Every number and integer of a CRD's spec with a finite maximum, by path."""
    return {p: n for p, n in walk(_spec(kind)) if n.get("type") in ("number", "integer") and "maximum" in n}


POLICY = {"apiVersion": crd.API_VERSION, "kind": "SchedulingPolicy", "metadata": {"name": "default"}, "spec": {}}


def _put(obj: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """``obj`` with ``value`` at a walk path under ``spec`` (a list gets one item, a map the key ``k``)."""
    out = copy.deepcopy(obj)
    cur: Any = out
    parts = re.findall(r"[^.\[\]{}]+|\[\]|\{\}", path)
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        nxt = parts[i + 1] if not last else None
        if part in ("[]", "{}"):
            continue
        fresh: Any = [] if nxt == "[]" else {}
        if nxt == "[]":
            cur[part] = [value] if i + 1 == len(parts) - 1 else [{}]
            cur = cur[part][0]
        elif nxt == "{}":
            cur[part] = {"k": value} if i + 1 == len(parts) - 1 else {"k": {}}
            cur = cur[part]["k"]
        elif last:
            cur[part] = value
        else:
            cur = cur.setdefault(part, fresh)
    return out


# SchedulingPolicy fields whose translation does not take them (read elsewhere, checked there)
POLICY_ELSEWHERE = ("spec.observation.", "spec.learning.")


@pytest.mark.parametrize("path", sorted(p for p in numbers("schedulingpolicies") if not p.startswith(POLICY_ELSEWHERE)))
def test_policy_translation_refuses_past_the_schema(path):
    """A SchedulingPolicy stored before its bounds (or read from a file) with a number past the CRD's maximum gets
    one error naming the field, not a plan that overflows (issue 45: macroWDeadlineSeconds 1e308 had the guard
    blame a healthy job)."""
    top = numbers("schedulingpolicies")[path]["maximum"]
    over = top + 1 if isinstance(top, int) and numbers("schedulingpolicies")[path]["type"] == "integer" else math.nextafter(float(top), math.inf)
    base = _put(POLICY, path, top)
    if "merit.windows" in path:
        base["spec"]["merit"]["windows"][0].setdefault("weights", {})
    crd.policy_from_object(base)  # the bound itself is taken
    bad = _put(base, path, over)
    assert offline.problem(bad) is not None and offline.problem(bad).startswith(path.split("{")[0].split("[")[0]), offline.problem(bad)
    with pytest.raises(TranslationError) as e:
        crd.policy_from_object(bad)
    want = path.replace("[]", "[0]").replace("{}", "[k]").split(".")[-1].split("[")[0]
    assert want in e.value.field or want in e.value.message, (path, e.value.field, e.value.message)


def test_policy_deadline_1e308_is_refused_naming_it():
    bad = _put(POLICY, "spec.macroWDeadlineSeconds", 1.0e308)
    with pytest.raises(TranslationError) as e:
        crd.policy_from_object(bad)
    assert e.value.field == "spec.macroWDeadlineSeconds", (e.value.field, e.value.message)


TEMPLATE = {"apiVersion": crd.API_VERSION, "kind": "StreamTemplate", "metadata": {"name": "t", "namespace": "ns"},
            "spec": {"pes": [{"name": "a", "kind": "source"}]}}


@pytest.mark.parametrize(("field", "value"), [("maxInstances", 1_000_001), ("integrity", 1_000_001), ("integrity", -1_000_001),
                                              ("minCandidates", 1_000_001), ("maxCandidates", 1_000_001), ("maxChange", 1_000_001),
                                              ("memory", "2E")])
def test_template_pe_counts_past_the_schema_are_refused(field, value):
    bad = copy.deepcopy(TEMPLATE)
    bad["spec"]["pes"][0][field] = value
    with pytest.raises(TranslationError) as e:
        crd.template_from_object(bad)
    assert e.value.field == f"spec.pes[0].{field}", (e.value.field, e.value.message)


def test_job_rank_past_the_schema_is_refused():
    bad = {"apiVersion": crd.API_VERSION, "kind": "StreamJob", "metadata": {"name": "j", "namespace": "ns"},
           "spec": {"templates": ["t"], "rank": 1_000_001}}
    assert offline.problem(bad) is not None and offline.problem(bad).startswith("spec.rank"), offline.problem(bad)
    with pytest.raises(TranslationError) as e:
        crd.job_from_object(bad)
    assert e.value.field == "spec.rank", (e.value.field, e.value.message)


@pytest.mark.parametrize(("field", "value"), [("epochSeconds", 86_400.5), ("migrationBudget", "2E")])
def test_yield_group_past_the_schema_is_refused(field, value):
    good = {"algorithm": "anytime", "migrationBudget": "0", "epochSeconds": 10, "deadlineSeconds": 1}
    yield_spec.parse(good)
    with pytest.raises(TranslationError) as e:
        yield_spec.parse({**good, field: value})
    assert e.value.field == f"spec.{field}", (e.value.field, e.value.message)


@pytest.mark.parametrize("k", ["a", "b"])
def test_learning_defaults_past_the_schema_are_left_out_not_raised(k):
    """A policy's learning default past MAX_RF is dropped with a warning (the per-kind default a = b = 1 stays)."""
    pol = {"spec": {"learning": {"defaults": {"source": {"a": 1, "b": 1, k: 1e10}, "sink": {"a": 2, "b": 3}}}}}
    got = learning.settings_from(pol)
    assert "source" not in {str(x.value) for x in got.defaults} and {str(x.value) for x in got.defaults} == {"sink"}


def test_the_charts_policy_values_have_the_crds_bounds():
    """The chart's values.schema.json refuses at ``helm install`` what the CRD would refuse when the chart applies
    the SchedulingPolicy it renders from ``policy.*``."""
    import json

    values = json.loads((ROOT / "charts" / "kubesoda" / "values.schema.json").read_text())["properties"]["policy"]["properties"]
    crd_props = _spec("schedulingpolicies")["properties"]["spec"]["properties"]
    assert values
    for k, v in values.items():
        assert v.get("maximum") == crd_props[k].get("maximum"), (k, v, crd_props[k].get("maximum"))


@pytest.mark.parametrize("k", ["a", "b"])
def test_a_pinned_profile_past_the_schema_is_skipped_naming_the_field(k):
    """A pinned ResourceProfile stored before its CRD had the maximum (or read by ``kubesoda plan -f``) is skipped
    with its field named, not restored into the learner to fail a plan."""
    obj = {"apiVersion": crd.API_VERSION, "kind": "ResourceProfile", "metadata": {"name": "transform.x"},
           "spec": {"pinned": True, k: 1e10},
           "status": {"key": "transform.x", "kind": "transform", "level": "flowspec", "a": 1.0, "b": 1.0,
                      "path": ["transform", "exe:x", "args:x", "flow:x"]}}
    lrn = learning.Learning(None)
    skipped = lrn.read_profiles([obj])
    assert [n for n, _ in skipped] == ["transform.x"] and skipped[0][1].startswith(f"spec.{k}:"), skipped
    assert "transform.x" not in lrn.learner.models
    ok = copy.deepcopy(obj)
    ok["spec"][k] = 1e9
    assert lrn.read_profiles([ok]) == []
