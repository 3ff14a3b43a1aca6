"""The LP bound (optimizer/soda_optimizer/flows/bound.py): never beaten by any plan, equal to the optimum where the
relaxation is exact, reported by the planner with the gap."""

from __future__ import annotations

import itertools

from flows_helpers import FLAT1, pool
from hypothesis import given, settings
from hypothesis import strategies as st
from test_flows_fastsim import with_waiting

from soda_optimizer.flows import Flow, Plan, PlannerParams, PolicyEntry, Problem, Step, plan_flows, simulate
from soda_optimizer.flows import fixtures as fx
from soda_optimizer.flows.bound import lp_bound
from soda_optimizer.flows.compiled import compile_problem


@settings(max_examples=80, deadline=None)
@given(with_waiting())
def test_no_plan_scores_below_the_bound(data: tuple[Problem, Plan]) -> None:
    """Random problems (waiting jobs, capacity-0 pools, several epochs and steps) and random plans (pools, backlog,
    refusals): the simulated score of eq. (2) is never below the bound."""
    prob, plan = data
    b = lp_bound(compile_problem(prob))
    assert b is not None
    assert simulate(prob, plan).score >= b.value - 1e-6 * (1.0 + b.value)


@st.composite
def one_pool(draw: st.DrawFn) -> Problem:
    """One epoch, one pool with a map linear up to its capacity, one-step flows of various utilities, lifespans and
    rates, one run time: the relaxation is exact here (nothing can be held for later, the pool serves by utility) and
    the optimum is on the brute force's grid."""
    n = draw(st.integers(1, 3))
    rt = draw(st.sampled_from([0.5, 1.0, 2.0]))  # one run time: with several, the optimum refuses odd shares
    flows = tuple(
        Flow(name=f"f{i}", steps=(Step(name="s", run_time=rt, pools=("p",)),),
             lifespan=draw(st.sampled_from([30.0, 100.0, 1e4])), utility=draw(st.sampled_from([1.0, 2.0, 3.0])),
             arrival_rate=(draw(st.sampled_from([1.0, 3.0, 6.0])),))
        for i in range(n)
    )
    return Problem(pools=(pool("p", draw(st.sampled_from([0.0, 2.0, 4.0, 8.0])), 1, FLAT1),), flows=flows, epochs=1,
                   epoch_length=60.0)


@settings(max_examples=40, deadline=None)
@given(one_pool())
def test_bound_equals_the_brute_force_optimum_where_exact(prob: Problem) -> None:
    """Brute force over every flow's admitted share in quarters (refused the rest): the best score equals the bound."""
    grid = (0.0, 0.25, 0.5, 0.75, 1.0)
    best = float("inf")
    for shares in itertools.product(grid, repeat=len(prob.flows)):
        entries = tuple(
            PolicyEntry(epoch=0, flow=f.name, cohort=0, step=0, pools={"p": sh} if sh > 0 else {}, refused=1.0 - sh)
            for f, sh in zip(prob.flows, shares)
        )
        best = min(best, simulate(prob, Plan(entries=entries)).score)
    b = lp_bound(compile_problem(prob))
    assert b is not None
    assert abs(best - b.value) <= 1e-6 * (1.0 + best)


def test_planner_reports_the_bound_and_gap_on_the_paper_baseline() -> None:
    r = plan_flows(fx.baseline(), PlannerParams(evaluations=20, seed=1))
    assert r.bound is not None and r.gap is not None
    assert r.bound <= r.result.score
    assert 0.0 <= r.gap < 1.0
    assert abs(r.gap - (r.result.score - r.bound) / r.result.score) < 1e-9
    for s in r.baselines.values():  # no candidate the planner compared beats the bound either
        assert s >= r.bound


def test_refused_flows_count_in_the_bound() -> None:
    """A flow that cannot be routed is dropped whatever the plan: the bound includes its cost."""
    healthy = Flow(name="ok", steps=(Step(name="s", run_time=1.0, pools=("p",)),), lifespan=1e4, utility=1.0,
                   arrival_rate=(1.0,))
    doomed = Flow(name="doomed", steps=(Step(name="s", run_time=1.0, pools=("z",)),), lifespan=1e4, utility=2.0,
                  arrival_rate=(1.0,))
    prob = Problem(pools=(pool("p", 4.0, 1, FLAT1), pool("z", 0.0, 1, FLAT1)), flows=(healthy, doomed), epochs=1,
                   epoch_length=60.0)
    r = plan_flows(prob, PlannerParams(evaluations=5))
    assert r.bound is not None
    assert abs(r.bound - 2.0 * 60.0) <= 1e-6 * 120.0  # the doomed flow's 60 jobs at utility 2; the healthy one fits
    assert abs(r.result.score - r.bound) <= 1e-6 * 120.0 and r.gap is not None and r.gap < 1e-6
