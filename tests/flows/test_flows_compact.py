"""The compact form of a plan (issue 50, :mod:`soda_optimizer.flows.compact`): expanded, it is the plan's entries,
exactly; its classes over arrays are those found over the dict of decisions; at scale it holds far fewer entries."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from test_flows_admit_classes import copies
from test_flows_complete import PARAMS, instances
from test_flows_nearby import _distinct

from soda_optimizer.flows import PlannerParams, Problem, plan_flows
from soda_optimizer.flows.compact import flow_classes
from soda_optimizer.flows.compiled import compile_problem
from soda_optimizer.flows.fastsim import admit_arrays

SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _rows(entries) -> list[tuple[object, ...]]:  # type: ignore[no-untyped-def]
    return sorted((x.epoch, x.flow, x.cohort, x.step, sorted(x.pools.items()), x.backlog, x.refused) for x in entries)


@SETTINGS
@given(instances())
def test_expanded_it_is_the_plans_entries(prob: Problem) -> None:
    res = plan_flows(prob, PARAMS)
    assert _rows(res.compact().expand().entries) == _rows(res.plan.entries)


@SETTINGS
@given(copies())
def test_classes_over_arrays_are_those_over_the_dict(prob: Problem) -> None:
    cp = compile_problem(prob)
    pa = admit_arrays(cp)
    assert flow_classes(cp, pa) == flow_classes(cp, pa.to_policy())


def test_at_scale_the_groups_plan_is_held_once_per_class() -> None:
    prob = _distinct(3)  # 72 flows, no two identical; planned as groups above group_above
    res = plan_flows(prob, PlannerParams(evaluations=4, seed=1, group_above=10, polish_entries=0))
    cpt = res.compact()
    assert _rows(cpt.expand().entries) == _rows(res.plan.entries)
    assert len(cpt.classes) < len(prob.flows) and cpt.size < len(res.plan.entries)
