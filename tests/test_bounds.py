"""One table of bounds (soda_optimizer.bounds) for the CRDs' ``maximum`` and the model's
validation: every number a tenant writes in a StreamTemplate or StreamJob has a maximum in the CRD,
equal to the bound, and translation accepts the bound and refuses the next float above it, naming
the field."""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import pytest
import yaml

from soda_operator.soda import crd
from soda_optimizer import bounds

ROOT = Path(__file__).resolve().parents[1]

# CRD path (schema properties, "[]" for list items) -> (bound, the field path in an error)
TEMPLATE = {
    "pes[].resourceFunction.a": (bounds.MAX_RF, "spec.pes[1].resourceFunction.a"),
    "pes[].resourceFunction.b": (bounds.MAX_RF, "spec.pes[1].resourceFunction.b"),
    "pes[].risk": (bounds.MAX_RISK, "spec.pes[1].risk"),
    "pes[].fairness": (bounds.MAX_FAIRNESS, "spec.pes[1].fairness"),
    "streams[].weight": (bounds.MAX_WEIGHT, "spec.streams[0].weight"),
    "streams[].value.slope": (bounds.MAX_SLOPE, "spec.streams[0].value.slope"),
    "streams[].value.cap": (bounds.MAX_RATE, "spec.streams[0].value.cap"),
    "streams[].value.points[].x": (bounds.MAX_RATE, "spec.streams[0].value.points"),
    "streams[].value.points[].y": (bounds.MAX_VALUE, "spec.streams[0].value.points"),
    "streams[].selectivity": (bounds.MAX_SELECTIVITY, "spec.streams[0].selectivity"),
    "streams[].bytesPerTuple": (bounds.MAX_BYTES_PER_TUPLE, "spec.streams[0].bytesPerTuple"),
    "sinks[].weight": (bounds.MAX_WEIGHT, "spec.sinks[0].weight"),
    "sinks[].value.slope": (bounds.MAX_SLOPE, "spec.sinks[0].value.slope"),
    "primalInputs[].rate": (bounds.MAX_RATE, "spec.primalInputs[0].rate"),
    "exports[].selectivity": (bounds.MAX_SELECTIVITY, "spec.exports[0].selectivity"),
}
JOB = {
    "weightOverrides{}": (bounds.MAX_WEIGHT, "spec.weightOverrides[sink:b]"),
    "imports[].weight": (bounds.MAX_WEIGHT, "spec.imports[0].weight"),
}


def schema(kind: str) -> dict[str, Any]:
    doc = yaml.safe_load((ROOT / "crds" / f"{kind}.yaml").read_text())
    return doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]  # type: ignore[no-any-return]


def numbers(s: dict[str, Any], path: str = "") -> dict[str, dict[str, Any]]:
    """Every number schema under ``s`` by its path."""
    out: dict[str, dict[str, Any]] = {}
    if s.get("type") == "number":
        out[path] = s
    for k, v in (s.get("properties") or {}).items():
        out.update(numbers(v, f"{path}.{k}" if path else k))
    if isinstance(s.get("items"), dict):
        out.update(numbers(s["items"], f"{path}[]"))
    if isinstance(s.get("additionalProperties"), dict):
        out.update(numbers(s["additionalProperties"], f"{path}{{}}"))
    return out


@pytest.mark.parametrize(("kind", "table"), [("streamtemplates", TEMPLATE), ("streamjobs", JOB)])
def test_every_number_a_tenant_writes_has_the_bounds_maximum(kind, table):
    found = numbers(schema(kind))
    value_paths = {p.replace("streams[].value", "sinks[].value") for p in table if p.startswith("streams[].value")}
    assert set(found) == set(table) | value_paths, sorted(set(found) ^ (set(table) | value_paths))
    for path, s in found.items():
        bound = table.get(path, table.get(path.replace("sinks[].value", "streams[].value"), (None, None)))[0]
        assert s.get("maximum") == bound, (path, s.get("maximum"), bound)


BASE_T = {"apiVersion": crd.API_VERSION, "kind": "StreamTemplate", "metadata": {"name": "t", "namespace": "ns"},
          "spec": {"pes": [{"name": "a", "kind": "source"}, {"name": "b", "kind": "sink", "resourceFunction": {"a": 1, "b": 1}, "risk": 0, "fairness": 0}],
                   "streams": [{"from": "a", "to": "b", "weight": 1, "selectivity": 1, "bytesPerTuple": 1,
                                "value": {"kind": "capped", "slope": 1, "cap": 10}}],
                   "sinks": [{"pe": "b", "weight": 1, "value": {"kind": "linear", "slope": 1}}],
                   "primalInputs": [{"pe": "a", "rate": 1}], "exports": [{"name": "e", "pe": "b", "selectivity": 1}]}}
BASE_J = {"apiVersion": crd.API_VERSION, "kind": "StreamJob", "metadata": {"name": "j", "namespace": "ns"},
          "spec": {"templates": ["t"], "weightOverrides": {"sink:b": 1}, "imports": [{"job": "x", "export": "e", "pe": "a", "weight": 1}]}}


def _set(obj: dict[str, Any], path: str, value: float) -> None:
    """Put ``value`` at a table path in ``obj['spec']`` (the first list item; the map's one key)."""
    if path.startswith("streams[].value.points"):
        v = obj["spec"]["streams"][0]["value"] = {"kind": "piecewise", "points": [{"x": 0, "y": 0}, {"x": 1, "y": 1}]}
        v["points"][1]["x" if path.endswith("x") else "y"] = value
        return
    cur: Any = obj["spec"]
    parts = path.split(".")
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if part.endswith("{}"):
            cur[part[:-2]] = {next(iter(cur[part[:-2]])): value}
            return
        key = part.removesuffix("[]")
        if part.endswith("[]"):
            cur = cur[key][1 if key == "pes" else 0]
        elif last:
            cur[key] = value
        else:
            cur = cur[key]


@pytest.mark.parametrize("path", sorted(TEMPLATE) + sorted(JOB))
def test_translation_takes_the_bound_and_refuses_the_next_float(path):
    bound, field = (TEMPLATE | JOB)[path]
    translate = crd.template_from_object if path in TEMPLATE else crd.job_from_object
    base = BASE_T if path in TEMPLATE else BASE_J
    ok = copy.deepcopy(base)
    _set(ok, path, bound)
    translate(ok)
    for bad_value in (math.nextafter(bound, math.inf), 1e308, math.inf, math.nan):
        bad = copy.deepcopy(base)
        _set(bad, path, bad_value)
        with pytest.raises(crd.TranslationError) as e:
            translate(bad)
        assert e.value.field.startswith(field), (path, e.value.field, e.value.message)
