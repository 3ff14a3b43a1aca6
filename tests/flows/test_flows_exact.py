"""The planner's exact stage on small instances (issue 50, :mod:`soda_optimizer.flows.exact`): its grid holds every
decision the brute-force oracle of ``test_flows_complete.py`` tries, it keeps cohorts no schedule completes refused,
and under a deadline it returns its best so far, never worse with more time."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_flows_complete import PARAMS, _empty_then_open, _options, tiny

from soda_optimizer.flows import PlannerParams, plan_flows, simulate
from soda_optimizer.flows.compiled import compile_problem
from soda_optimizer.flows.exact import combinations, exhaust, grid
from soda_optimizer.flows.planner import admit_policy
from soda_optimizer.flows.sim import simulate_policy

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(tiny())
def test_the_grid_holds_every_decision_the_oracle_tries(prob) -> None:  # type: ignore[no-untyped-def]
    cp = compile_problem(prob)
    f = prob.flows[0]
    idx = prob.pool_index()
    for e in range(prob.epochs):
        for s in range(len(f.steps)):
            got = set(grid(cp, (e, 0, 0, s)))
            for pools, bl in _options(prob, f, e, s):
                assert (tuple(sorted((idx[p], v) for p, v in pools.items())), bl) in got


@SETTINGS
@given(tiny())
def test_cohorts_no_schedule_completes_stay_refused(prob) -> None:  # type: ignore[no-untyped-def]
    res = plan_flows(prob, PARAMS)
    doomed = {(u.flow, u.cohort) for u in res.unroutable if u.cohort is not None}
    whole = {u.flow for u in res.unroutable if u.cohort is None}
    for x in res.plan.entries:
        # refused where they enter (the later steps' entries are never reached)
        if ((x.flow, x.cohort) in doomed or x.flow in whole) and x.step == 0 and x.epoch == x.cohort:
            assert x.refused == 1.0 and not x.pools and x.backlog == 0.0


@SETTINGS
@given(tiny(), st.integers(0, 40), st.integers(0, 40))
def test_under_a_deadline_it_returns_its_best_so_far_and_more_time_is_never_worse(prob, k1, k2) -> None:  # type: ignore[no-untyped-def]
    cp = compile_problem(prob)
    base = admit_policy(cp)
    score0 = simulate_policy(cp, base).score
    _, _, n = combinations(cp, base)
    out = []
    for k in sorted((k1, k2)):
        budget = iter(range(k))
        ex = exhaust(cp, base, score0, lambda _c, b=budget: next(b, None) is not None, 0.0, limit=10_000)
        if ex is None:
            assert n <= 1 or n > 10_000
            return
        assert ex.runs == min(k, n) and ex.complete == (k >= n)
        assert ex.score <= score0
        if ex.policy is not None:
            assert abs(simulate_policy(cp, ex.policy).score - ex.score) <= 1e-9 * max(1.0, ex.score)
        else:
            assert ex.score == score0
        out.append(ex.score)
    assert out[1] <= out[0]


def test_the_stage_is_what_finds_the_three_coordinated_entries() -> None:
    """Without it (``exact_combinations=0``) the planner misses what it finds on the issue's instance."""
    prob = _empty_then_open()
    on = plan_flows(prob, PARAMS)
    off = plan_flows(prob, PARAMS.model_copy(update={"exact_combinations": 0}))
    assert on.exhaustive and not off.exhaustive
    assert on.chosen == "exact" and on.result.score < off.result.score
    assert abs(simulate(prob, on.plan).score - on.result.score) <= 1e-9 * max(1.0, on.result.score)


def test_a_deadline_too_short_for_the_stage_still_returns_a_sound_plan() -> None:
    prob = _empty_then_open()
    res = plan_flows(prob, PlannerParams(evaluations=6, seed=0, deadline_s=1e-3))
    assert abs(simulate(prob, res.plan).score - res.result.score) <= 1e-9 * max(1.0, res.result.score)
