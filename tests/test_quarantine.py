"""One tenant's objects never cost another tenant's jobs their place (issue 32).

Hypothesis draws a StreamTemplate spec and a StreamJob spec from the CRDs' own schemas
(:func:`from_schema`: hypothesis-jsonschema 0.23 no longer runs with this hypothesis; every extreme
finite value the schema admits, its ``minimum`` and ``maximum`` included) into a namespace of their own, beside a fixed healthy set in ``default``
(examples/alternatives and examples/small-pipeline on 8 nodes). The oracle is the healthy set
planned alone: with the hostile objects present, translation never raises, the plan is sound (every
number finite), the first planning run succeeds (the bounds and the screen stop what reaches the
optimizer, the guard is not needed), every healthy job keeps its decision, and each hostile object
is either planned or named in an error.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from soda_operator import manifests
from soda_operator.soda import crd
from soda_optimizer import guard, pipeline

ROOT = Path(__file__).resolve().parents[1]
HEALTHY = manifests.load([str(ROOT / "examples" / "nodes" / "small-8.yaml"), str(ROOT / "examples" / "alternatives"),
                          str(ROOT / "examples" / "small-pipeline")])
POLICY = {"apiVersion": "kubesoda.io/v1alpha1", "kind": "SchedulingPolicy", "metadata": {"name": "default"},
          "spec": {"unitMips": 100, "macroQDeadlineSeconds": 5, "macroWDeadlineSeconds": 0.2}}


def _jsonschema(s: Any) -> Any:
    """A CRD's structural schema as plain JSON Schema (draft 7): no Kubernetes extensions,
    OpenAPI 3.0's boolean exclusiveMinimum as a number."""
    if isinstance(s, list):
        return [_jsonschema(x) for x in s]
    if not isinstance(s, dict):
        return s
    out = {k: _jsonschema(v) for k, v in s.items() if not k.startswith("x-kubernetes") and k not in ("description", "default")}
    for ex, bound in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if out.get(ex) is True:
            out[ex] = out.pop(bound)
        elif out.get(ex) is False:
            del out[ex]
    return out


PE_NAMES = ["a", "b", "c"]  # names and references drawn from a few, so streams, sinks and inputs meet their PEs


def from_schema(s: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Values valid against the structural schema ``s`` (the subset the CRDs use: object, array,
    string with enum/pattern/length, number/integer with bounds, boolean, anyOf). Numbers favour
    the bounds and the largest values; optional properties come and go; names and the PE
    references come from :data:`PE_NAMES`."""
    if "anyOf" in s:
        rest = {k: v for k, v in s.items() if k != "anyOf"}
        return st.one_of([from_schema({**rest, **alt}) for alt in s["anyOf"]])
    if "enum" in s:
        return st.sampled_from(s["enum"])
    t = s.get("type")
    if t == "object":
        props = s.get("properties") or {}
        if not props and isinstance(s.get("additionalProperties"), dict):
            return st.dictionaries(st.text("abcdefghijklmnopqrstuvwxyz:-", min_size=1, max_size=12), from_schema(s["additionalProperties"]),
                                   max_size=s.get("maxProperties", 4))
        req = set(s.get("required") or ())

        def of(k: str, v: dict[str, Any]) -> st.SearchStrategy[Any]:
            return st.sampled_from(PE_NAMES) if k in ("name", "from", "to", "pe") else from_schema(v)

        return st.fixed_dictionaries({k: of(k, v) for k, v in props.items() if k in req},
                                     optional={k: of(k, v) for k, v in props.items() if k not in req})
    if t == "array":
        return st.lists(from_schema(s.get("items") or {}), min_size=s.get("minItems", 0), max_size=min(s.get("maxItems", 6), 6))
    if t == "string":
        if "pattern" in s:
            strat = st.from_regex(s["pattern"], fullmatch=True)
        else:
            strat = st.text(min_size=s.get("minLength", 0), max_size=min(s.get("maxLength", 24), 24))
        return strat.filter(lambda x: s.get("minLength", 0) <= len(x) <= s.get("maxLength", 10**9))
    if t in ("number", "integer"):
        lo = s.get("minimum", s.get("exclusiveMinimum", -1e300 if t == "number" else -(2**53)))
        hi = s.get("maximum", s.get("exclusiveMaximum", 1e300 if t == "number" else 2**53))
        if t == "integer":
            return st.integers(int(lo), int(hi))
        ex_lo, ex_hi = "exclusiveMinimum" in s, "exclusiveMaximum" in s
        edges = [x for x in (lo, hi, hi / 2, math.nextafter(lo, math.inf), math.nextafter(hi, -math.inf)) if (lo < x or not ex_lo and x == lo)
                 and (x < hi or not ex_hi and x == hi)]
        return st.sampled_from(edges) | st.floats(lo, hi, exclude_min=ex_lo, exclude_max=ex_hi, allow_nan=False, allow_infinity=False)
    if t == "boolean":
        return st.booleans()
    return st.none() | st.integers() | st.text(max_size=4)


def spec_schema(kind: str) -> dict[str, Any]:
    crd_doc = yaml.safe_load((ROOT / "crds" / f"{kind}.yaml").read_text())
    return _jsonschema(crd_doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"])  # type: ignore[no-any-return]


def decide(objs: list[dict[str, Any]]) -> tuple[Any, list[crd.ObjectError], guard.Outcome]:
    nodes = [o for o in objs if o["kind"] == "Node"]
    tmpl = [o for o in objs if o["kind"] == "StreamTemplate"]
    jobs = [o for o in objs if o["kind"] == "StreamJob"]
    scen, errors = crd.scenario_from_objects(nodes, tmpl, jobs, POLICY, validate=True)
    return scen, errors, guard.run(scen, pipeline.run)


def healthy() -> list[dict[str, Any]]:
    return [*HEALTHY.nodes, *HEALTHY.templates, *HEALTHY.jobs]


_, _, ALONE = decide(healthy())
BASELINE = {d.job: (d.admitted, d.template) for d in ALONE.plan.jobs}


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(from_schema(spec_schema("streamtemplates")), from_schema(spec_schema("streamjobs")), st.booleans())
def test_hostile_objects_cost_the_healthy_jobs_nothing(t_spec, j_spec, own_template):
    j_spec = copy.deepcopy(j_spec)
    if own_template:  # the job runs the drawn template (else whatever names it drew)
        j_spec["templates"] = ["drawn"]
    j_spec.update(rank=max(1000, j_spec.get("rank", 1)), required=False)  # it never outranks the healthy set
    hostile = [{"apiVersion": crd.API_VERSION, "kind": "StreamTemplate", "metadata": {"name": "drawn", "namespace": "tenant"}, "spec": t_spec},
               {"apiVersion": crd.API_VERSION, "kind": "StreamJob", "metadata": {"name": "drawn", "namespace": "tenant"}, "spec": j_spec}]
    scen, errors, out = decide(healthy() + hostile)
    assert guard.unsound(out.plan) is None
    assert out.runs == 1 and not out.quarantined, out.quarantined
    got = {d.job: (d.admitted, d.template) for d in out.plan.jobs}
    assert {k: got.get(k) for k in BASELINE} == BASELINE
    named = {e.name for e in errors}
    assert "tenant/drawn" in got or "tenant/drawn" in named
    assert not [e for e in errors if e.name not in ("tenant/drawn",)], errors
    assert all(math.isfinite(x) for x in (out.plan.importance, *(d.importance for d in out.plan.jobs)))


def test_the_schema_admits_the_extremes_and_they_plan():
    """The largest finite numbers the schema admits, everywhere at once: refused by the screen with
    a message naming the job's template, never a crash, the healthy jobs as planned alone."""
    big = {"pes": [{"name": "s", "kind": "source", "resourceFunction": {"a": 1e9, "b": 1e9}},
                   {"name": "t", "resourceFunction": {"a": 1e9, "b": 1e9}},
                   {"name": "k", "kind": "sink", "resourceFunction": {"a": 1e9, "b": 1e9}}],
           "streams": [{"from": "s", "to": "t", "weight": 1e9, "selectivity": 1e6, "bytesPerTuple": 1e9, "value": {"kind": "linear", "slope": 1e9}},
                       {"from": "t", "to": "k", "weight": 1e9, "selectivity": 1e6}],
           "sinks": [{"pe": "k", "weight": 1e9, "value": {"kind": "linear", "slope": 1e9}}],
           "primalInputs": [{"pe": "s", "rate": 1e12}]}
    hostile = [{"apiVersion": crd.API_VERSION, "kind": "StreamTemplate", "metadata": {"name": "big", "namespace": "tenant"}, "spec": big},
               {"apiVersion": crd.API_VERSION, "kind": "StreamJob", "metadata": {"name": "big", "namespace": "tenant"},
                "spec": {"templates": ["big"], "rank": 1, "required": True, "weightOverrides": {"sink:k": 1e9}}}]
    _, errors, out = decide(healthy() + hostile)
    assert [(e.name, e.field) for e in errors] == [("tenant/big", "spec.templates[0]")]
    assert "may carry" in errors[0].message
    assert {d.job: (d.admitted, d.template) for d in out.plan.jobs} == BASELINE


def test_past_the_schema_every_number_names_its_field():
    """What the API server refuses by schema is refused again in translation (objects from files,
    or a cluster without the CRDs' current schema), with the field and the value."""
    cases = [("sinks", [{"pe": "k", "weight": 1e308}], "spec.sinks[0].weight"),
             ("streams", [{"from": "s", "to": "k", "value": {"kind": "linear", "slope": math.inf}}], "spec.streams[0].value.slope"),
             ("streams", [{"from": "s", "to": "k", "bytesPerTuple": math.inf}], "spec.streams[0].bytesPerTuple"),
             ("primalInputs", [{"pe": "s", "rate": math.nan}], "spec.primalInputs[0].rate")]
    for fld, value, path in cases:
        spec = {"pes": [{"name": "s", "kind": "source"}, {"name": "k", "kind": "sink"}], "streams": [{"from": "s", "to": "k"}], fld: value}
        t = {"apiVersion": crd.API_VERSION, "kind": "StreamTemplate", "metadata": {"name": "x", "namespace": "tenant"}, "spec": spec}
        scen, errors = crd.scenario_from_objects(HEALTHY.nodes, [*HEALTHY.templates, t], HEALTHY.jobs, POLICY)
        assert [(e.kind, e.name, e.field) for e in errors] == [("StreamTemplate", "tenant/x", path)], errors
        assert ("got" in errors[0].message) or ("finite" in errors[0].message)


def test_nodes_out_of_range_are_refused_by_name():
    def node(name: str, cpu: str, mpc: str = "1000") -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {crd.MIPS_LABEL: mpc}},
                "status": {"allocatable": {"cpu": cpu}}}

    bad = [node("neg", "-4"), node("huge", "1e40"), node("mpc", "8", "1e30"), node("nan", "NaN")]
    scen, errors = crd.scenario_from_objects([*HEALTHY.nodes, *bad], HEALTHY.templates, HEALTHY.jobs, POLICY)
    assert sorted((e.name, e.field) for e in errors) == [("huge", "status.allocatable.cpu"), ("mpc", f"metadata.labels[{crd.MIPS_LABEL}]"),
                                                         ("nan", "status.allocatable.cpu"), ("neg", "status.allocatable.cpu")]
    assert {n.name for n in scen.nodes} == {(n["metadata"]["name"]) for n in HEALTHY.nodes}
    assert {d.job: (d.admitted, d.template) for d in pipeline.run(scen).jobs} == BASELINE


def test_a_dropped_jobs_running_pods_hold_their_cpu():
    """An invalid or quarantined job's bound pods run on as they are: the node offers the others
    its capacity less their requests (no overcommit behind their back)."""
    node = HEALTHY.nodes[0]
    name = node["metadata"]["name"]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "tenant", "labels": {crd.LABEL_JOB: "gone", crd.LABEL_PE: "x"}},
           "spec": {"nodeName": name, "containers": [{"name": "pe", "resources": {"requests": {"cpu": "1500m"}}}]},
           "status": {"phase": "Running"}}
    alone, _ = crd.scenario_from_objects(HEALTHY.nodes, HEALTHY.templates, HEALTHY.jobs, POLICY)
    held, _ = crd.scenario_from_objects(HEALTHY.nodes, HEALTHY.templates, HEALTHY.jobs, POLICY, pods=[pod])
    before = next(n for n in alone.nodes if n.name == name).mips
    after = next(n for n in held.nodes if n.name == name).mips
    assert before - after == 1500.0 * float(node["metadata"]["labels"].get(crd.MIPS_LABEL, 1000)) / 1000
    # quarantined: dropped with its reason, its pod holds the same
    job = {"apiVersion": crd.API_VERSION, "kind": "StreamJob", "metadata": {"name": "gone", "namespace": "tenant"},
           "spec": {"templates": ["clickstream"]}}
    tmpl = copy.deepcopy(next(t for t in HEALTHY.templates if t["metadata"]["name"] == "clickstream"))
    tmpl["metadata"]["namespace"] = "tenant"
    scen, errors = crd.scenario_from_objects(HEALTHY.nodes, [*HEALTHY.templates, tmpl], [*HEALTHY.jobs, job], POLICY, pods=[pod],
                                             quarantined={"tenant/gone": "ValueError: boom"})
    assert [(e.name, e.reason) for e in errors] == [("tenant/gone", "Quarantined")] and "boom" in errors[0].message
    assert next(n for n in scen.nodes if n.name == name).mips == after
