"""A FlowPool is shared only where its administrator says so, and one flow's model never fails another's plan
(issue 45, the row "forecast: [1e4]" in the healthy flow's pool, and a lifespan that rounds to 0 minutes).

- ``spec.allowedNamespaces`` on a FlowPool (absent: every namespace; given: only those): a JobFlow of another
  namespace naming it is refused (``Routing`` False, InvalidSpec naming ``spec.steps[i].pools``, a Warning Event),
  joins no group, is in no plan and never routed there; the healthy flow's status is the one it has alone.
- :func:`soda_operator.flows.decide.build` takes each flow alone: one whose model cannot be built (a lifespan stored
  before the CRD's minimum) is refused naming the field and the others are planned as without it.
- The maps a tenant writes onto Kubernetes objects (selectors, a step Job's labels and annotations) are bounded as
  Kubernetes bounds them, in the CRD and again in the parsers.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from test_flows_bounds import _memo, _tick, _view, flowpool, jobflow

from soda_operator.flows import decide, route, spec
from soda_operator.kube.errors import TranslationError


def shared_pool(name: str, namespaces: list[str] | None) -> dict[str, Any]:
    p = flowpool(name)
    if namespaces is not None:
        p["spec"]["allowedNamespaces"] = namespaces
    return p


def test_allowed_namespaces_absent_is_every_namespace_given_only_those() -> None:
    every, only, none = (spec.pool_of(shared_pool("p", ns)) for ns in (None, ["healthy"], []))
    assert every.allows("tenant") and every.allows("healthy")
    assert only.allows("healthy") and not only.allows("tenant")
    assert not none.allows("healthy")
    with pytest.raises(TranslationError) as e:
        spec.pool_of(shared_pool("p", ["Not_a_namespace"]))
    assert e.value.field == "spec.allowedNamespaces[0]"


def test_a_flow_naming_a_pool_not_shared_with_it_is_refused_naming_the_step() -> None:
    pools = spec.pools_of([shared_pool("p1", ["healthy"]), flowpool("p2")])
    body = jobflow("tenant", "t", "p2", [1])
    body["spec"]["steps"].append({**body["spec"]["steps"][0], "pools": ["p2", "p1"]})
    f = spec.flow_of(body)
    with pytest.raises(TranslationError) as e:
        spec.check_shared(f, pools)
    assert e.value.field == "spec.steps[1].pools" and "p1" in e.value.message and "tenant" in e.value.message
    assert not spec.shared(f, pools) and spec.shared(spec.flow_of(jobflow("healthy", "h", "p1", [1])), pools)


def test_the_issues_row_a_tenant_in_a_pool_not_shared_with_it_costs_the_healthy_flow_nothing() -> None:
    """Fails on the integrated tree before this change: the tenant's forecast [1e4] planned beside the healthy flow
    moved its plan from 4.0 to 3.2 completed (allowedNamespaces did not exist)."""
    pools = [shared_pool("p1", ["healthy"])]
    healthy = jobflow("healthy", "h", "p1", [4])
    alone = _tick(_memo(), healthy, [healthy], pools)
    hostile = jobflow("tenant", "t", "p1", [1e4])
    m = _memo()
    st_t = _tick(m, hostile, [healthy, hostile], pools)
    assert st_t["state"] == "invalid" and st_t["message"].startswith("spec.steps[0].pools:"), st_t
    (cond,) = st_t["conditions"]
    assert (cond["type"], cond["status"], cond["reason"]) == ("Routing", "False", "InvalidSpec")
    events = m.loops.core.bodies()  # type: ignore[attr-defined]
    assert [(e["reason"], e["involvedObject"]["name"]) for e in events] == [("InvalidSpec", "t")]
    st_h = _tick(m, healthy, [healthy, hostile], pools)
    assert _view(st_h) == _view(alone) and st_h["plan"]["flows"] == 1


def test_groups_connect_no_flow_through_a_pool_not_shared_with_it() -> None:
    pools = spec.pools_of([shared_pool("p1", ["healthy"])])
    fs = [spec.flow_of(jobflow("healthy", "h", "p1", [1])), spec.flow_of(jobflow("tenant", "t", "p1", [1]))]
    assert [[f.key for f in g] for g in decide.groups(fs, pools)] == [["healthy/h"], ["tenant/t"]]
    planned = decide.plan(fs, pools, 0, {}, 0.0)  # planned together anyway (a caller that did not group): refused alone
    assert planned.refused == {"tenant/t": ("spec.steps[0].pools", pytest.approx(planned.refused["tenant/t"][1]))}
    assert planned.result is not None and {s.flow for s in planned.result.result.flows} == {"healthy/h"}
    # the tick never routes a tenant's job to it, plan or no plan
    acts = route.route(fs[1], pools, [], [], {}, 0, 30.0, new_ids=["x"])
    assert [c.pool for c in acts.create] == [None]


def _planned_view(planned: decide.Planned, key: str, utility: float) -> tuple[Any, ...]:
    assert planned.result is not None, planned.error
    return (sorted(decide.current_entries(planned, key).items()), decide.planned_figures(planned.result.result, key, utility))


def _tiny(f: spec.FlowSpec, where: str) -> spec.FlowSpec:
    if where == "spec.lifespanSeconds":
        return dataclasses.replace(f, lifespan_s=5e-324)
    return dataclasses.replace(f, steps=(dataclasses.replace(f.steps[0], run_seconds=5e-324),))


@pytest.mark.parametrize("field", ["spec.lifespanSeconds", "spec.steps[0].runSeconds"])
def test_a_flow_whose_model_cannot_be_built_is_refused_alone(field: str) -> None:
    """A lifespan or run time stored before the CRD's minimum (1 s), 5e-324 s, rounds to 0 minutes: that flow is
    refused naming the field, and its group (the same pool here) is planned as without it, its planner settings
    (a tiny deadline, a large budget, its seed, a long horizon) included. Fails before this change: the whole
    group's plan failed ("Flow lifespan Input should be greater than 0")."""
    pools = spec.pools_of([flowpool("p1")])
    healthy = spec.flow_of(jobflow("healthy", "h", "p1", [4]))
    bad = dataclasses.replace(_tiny(spec.flow_of(jobflow("tenant", "t", "p1", [4])), field), horizon=1000, deadline_s=1e-9,
                              evaluations=100000, seed=7)
    alone = decide.plan([healthy], pools, 5, {}, 300.0)
    both = decide.plan([healthy, bad], pools, 5, {}, 300.0)
    assert both.error is None and set(both.refused) == {"tenant/t"} and both.refused["tenant/t"][0] == field, both.refused
    assert _planned_view(both, "healthy/h", healthy.utility) == _planned_view(alone, "healthy/h", healthy.utility)
    with pytest.raises(TranslationError) as e:  # problem_of, for callers that take every flow or none
        decide.problem_of([healthy, bad], pools, 5, {}, 300.0)
    assert e.value.field == field


def test_the_lifespan_and_run_time_have_a_minimum_of_a_second() -> None:
    for where, field in ((("lifespanSeconds",), "spec.lifespanSeconds"), (("steps", 0, "runSeconds"), "spec.steps[0].runSeconds")):
        body = jobflow("tenant", "t", "p", [1])
        target: Any = body["spec"]
        for k in where[:-1]:
            target = target[k]
        target[where[-1]] = 5e-324
        with pytest.raises(TranslationError) as e:
            spec.flow_of(body)
        assert e.value.field == field and "greater than or equal to 1" in e.value.message


@pytest.mark.parametrize(("template", "field"), [
    ({"metadata": {"labels": {"a": "x" * 64}}}, "spec.steps[0].jobTemplate.metadata.labels.a"),
    ({"metadata": {"labels": {f"k{i}": "v" for i in range(65)}}}, "spec.steps[0].jobTemplate.metadata.labels"),
    ({"metadata": {"annotations": {"a": "x" * 4097}}}, "spec.steps[0].jobTemplate.metadata.annotations.a"),
    ({"metadata": {"annotations": {f"k{i}": "v" for i in range(33)}}}, "spec.steps[0].jobTemplate.metadata.annotations"),
])
def test_a_step_jobs_labels_and_annotations_are_bounded_as_kubernetes_bounds_them(template: dict[str, Any], field: str) -> None:
    body = jobflow("tenant", "t", "p", [1])
    body["spec"]["steps"][0]["jobTemplate"] = {**body["spec"]["steps"][0]["jobTemplate"], **template}
    with pytest.raises(TranslationError) as e:
        spec.flow_of(body)
    assert e.value.field == field


def test_a_step_jobs_template_is_kept_as_written() -> None:
    body = jobflow("tenant", "t", "p", [1])
    t = {"metadata": {"labels": {"a": "b"}, "annotations": {"c": "d" * 4096}, "name": "kept"},
         "spec": {"backoffLimit": 1, "template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}}}
    body["spec"]["steps"][0]["jobTemplate"] = t
    assert spec.flow_of(body).steps[0].template == t


def test_a_pools_node_selector_values_are_label_values() -> None:
    p = flowpool("p")
    p["spec"]["nodeSelector"] = {"zone": "x" * 64}
    with pytest.raises(TranslationError) as e:
        spec.pool_of(p)
    assert e.value.field == "spec.nodeSelector.zone"
