"""Known answers of the paper's section 4.1 on our hub-and-spokes fixture (baseline and P1-P3).

Each scenario is planned once per module (60 GA evaluations per epoch, seed 1, a few seconds each)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from soda_optimizer.flows import PlannerParams, PlanResult, Problem, plan_flows
from soda_optimizer.flows import fixtures as fx

PARAMS = PlannerParams(evaluations=60, seed=1)


def _total(res: PlanResult, field: str, pred: Callable[[str, int, int], bool]) -> float:
    """Sum of ``field`` over flow records with pred(flow name, epoch, cohort) (epochs are 0-based)."""
    return sum(getattr(s, field) for s in res.result.flows if pred(s.flow, s.epoch, s.cohort))


def spoke(name: str) -> int:
    return int(name[1])


def long_(name: str) -> bool:
    return name.endswith("-long")


def hi(name: str) -> bool:
    return "-hi-" in name


@pytest.fixture(scope="module")
def runs() -> dict[str, tuple[Problem, PlanResult]]:
    out = {}
    for name, make in fx.SCENARIOS.items():
        prob = make()
        out[name] = (prob, plan_flows(prob, PARAMS))
    return out


def test_ga_and_levels_improve_on_the_first_answer(runs: dict[str, tuple[Problem, PlanResult]]) -> None:
    for _, res in runs.values():
        assert res.result.score <= res.first_score + 1e-9
        assert res.epochs_optimised == 6 and not res.timed_out


def test_spoke1_backlogs_long_flows_in_epoch1_and_releases_them_in_epochs_3_4(runs: dict) -> None:
    _, res = runs["baseline"]
    arrived = _total(res, "arrived", lambda f, e, a: spoke(f) == 1 and long_(f) and e == 0 and a == 0)
    backlogged = _total(res, "backlogged", lambda f, e, a: spoke(f) == 1 and long_(f) and e == 0 and a == 0)
    assert backlogged >= 0.3 * arrived
    released = _total(res, "released", lambda f, e, a: spoke(f) == 1 and a == 0)
    released_34 = _total(res, "released", lambda f, e, a: spoke(f) == 1 and a == 0 and e in (2, 3))
    assert released > 0 and released_34 >= 0.9 * released
    # short-lifespan jobs of spoke 1 are not backlogged and (almost) none drop in epoch 1
    short_arrived = _total(res, "arrived", lambda f, e, a: spoke(f) == 1 and not long_(f) and e == 0)
    assert _total(res, "backlogged", lambda f, e, a: spoke(f) == 1 and not long_(f) and a == 0) == 0
    assert _total(res, "dropped", lambda f, e, a: spoke(f) == 1 and not long_(f) and a == 0) <= 0.01 * short_arrived
    # the backlogged long jobs of epoch 1 are completed, not dropped
    assert _total(res, "dropped", lambda f, e, a: spoke(f) == 1 and a == 0) <= 0.01 * (arrived + short_arrived)


def test_spoke2_backlogs_in_epoch3_and_releases_in_epochs_5_6(runs: dict) -> None:
    _, res = runs["baseline"]
    arrived = _total(res, "arrived", lambda f, e, a: spoke(f) == 2 and long_(f) and a == 2)
    assert _total(res, "backlogged", lambda f, e, a: spoke(f) == 2 and long_(f) and a == 2 and e == 2) >= 0.3 * arrived
    released = _total(res, "released", lambda f, e, a: spoke(f) == 2 and a == 2)
    assert released > 0
    assert _total(res, "released", lambda f, e, a: spoke(f) == 2 and a == 2 and e in (4, 5)) >= 0.9 * released
    # nothing of spoke 2 is backlogged before its overload
    assert _total(res, "backlogged", lambda f, e, a: spoke(f) == 2 and e < 2) == 0
    short = _total(res, "arrived", lambda f, e, a: spoke(f) == 2 and not long_(f) and a == 2)
    assert _total(res, "dropped", lambda f, e, a: spoke(f) == 2 and not long_(f) and a == 2) <= 0.01 * short


def test_spoke3_admits_everything_before_its_peak_and_all_high_utility_work(runs: dict) -> None:
    _, res = runs["baseline"]
    assert _total(res, "backlogged", lambda f, e, a: spoke(f) == 3 and e < 4) == 0
    # high-utility jobs held in epoch 5 (to let the short low-utility ones through) are all released and completed
    assert _total(res, "backlogged", lambda f, e, a: spoke(f) == 3 and hi(f)) <= _total(
        res, "released", lambda f, e, a: spoke(f) == 3 and hi(f)
    ) + 1e-6
    assert _total(res, "dropped", lambda f, e, a: spoke(f) == 3 and hi(f)) <= 1e-6


def test_spoke3_admits_everything(runs: dict) -> None:
    """Paper: spoke 3 admits everything (the boundary effect): every job of spoke 3 is admitted in its arrival epoch.
    An xfail until issue 50: the plans left no entry for the jobs served late (after waiting in a queue), which then
    sat in backlog to the horizon, and holding spoke 3's jobs at entry in epoch 5 looked better than admitting them."""
    _, res = runs["baseline"]
    arrived = _total(res, "arrived", lambda f, e, a: spoke(f) == 3)
    assert _total(res, "admitted", lambda f, e, a: spoke(f) == 3 and e == a) == arrived > 0


def test_spoke3_holds_some_low_utility_jobs_between_steps_in_epoch5_and_that_is_better_in_our_model(runs: dict) -> None:
    """Where the plan departs from the paper: it holds some low-utility long-lifespan jobs of spoke 3 between two
    steps in epoch 5 (all admitted on arrival, above); running every step of spoke 3 on arrival from epoch 5 on
    (capacity-proportional, an entry in every epoch) scores worse in our simulator."""
    from soda_optimizer.flows.compiled import compile_problem
    from soda_optimizer.flows.reach import proportional
    from soda_optimizer.flows.sim import policy_from_plan, simulate_policy

    prob, res = runs["baseline"]
    cp = compile_problem(prob)
    pol = policy_from_plan(prob, res.plan)
    alt = dict(pol)
    for (e, f, a, s) in pol:
        if prob.flows[f].labels["spoke"] == "3" and e >= 4:
            alt[(e, f, a, s)] = proportional(cp, f, s, e)
    assert simulate_policy(cp, alt).score > simulate_policy(cp, pol).score
    assert _total(res, "backlogged", lambda f, e, a: spoke(f) == 3 and (hi(f) or e != 4)) == 0


def _pool_jobs(res: PlanResult, pool: str, epochs: tuple[int, ...]) -> float:
    return sum(p.jobs_in for p in res.result.pools if p.pool == pool and p.epoch in epochs)


def test_p1_reroutes_around_1e_and_backlogs_more_long_jobs(runs: dict) -> None:
    _, base = runs["baseline"]
    _, res = runs["P1"]
    assert _pool_jobs(res, "1E", (0, 1)) == 0
    assert _pool_jobs(res, "2E", (0, 1)) + _pool_jobs(res, "3E", (0, 1)) > _pool_jobs(base, "2E", (0, 1)) + _pool_jobs(
        base, "3E", (0, 1)
    )
    assert _pool_jobs(res, "1E", (2, 3)) > 0  # back in use once it returns

    def long_backlog(r: PlanResult) -> float:
        return _total(r, "backlogged", lambda f, e, a: long_(f) and e in (0, 1))

    assert long_backlog(res) > long_backlog(base)
    short = _total(res, "arrived", lambda f, e, a: not long_(f) and a in (0, 1))
    assert _total(res, "dropped", lambda f, e, a: not long_(f) and a in (0, 1)) <= 0.02 * short
    # the extra backlog of epochs 1-2 is released after 1E returns
    assert _total(res, "released", lambda f, e, a: spoke(f) != 1 and a in (0, 1) and e >= 2) > 0


def test_p2_completes_high_utility_now_and_lets_low_utility_drop(runs: dict) -> None:
    _, base = runs["baseline"]
    _, res = runs["P2"]

    def s1(r: PlanResult, field: str, pred: Callable[[str], bool]) -> float:
        return _total(r, field, lambda f, e, a: spoke(f) == 1 and a == 0 and pred(f))

    # high-utility spoke-1 jobs of epoch 1 are no longer backlogged, and are completed
    assert s1(base, "backlogged", hi) > 0
    assert s1(res, "backlogged", hi) == 0
    assert s1(res, "dropped", hi) <= 0.01 * s1(res, "arrived", hi)
    # low-utility spoke-1 jobs of epoch 1 are dropped instead
    lo = lambda f: not hi(f)  # noqa: E731
    assert s1(res, "dropped", lo) >= 0.1 * s1(res, "arrived", lo)
    assert s1(res, "dropped", lo) > s1(base, "dropped", lo) + 100


def test_p3_surge_partly_admitted_partly_backlogged_low_utility_dropped(runs: dict) -> None:
    _, base = runs["baseline"]
    _, res = runs["P3"]
    surge = fx.P3_FLOW
    assert _total(res, "admitted", lambda f, e, a: f == surge and a == 0 and e == 0) > 0
    assert _total(res, "backlogged", lambda f, e, a: f == surge and a == 0 and e == 0) > 0
    # high-utility spoke-1 jobs are all completed
    hi_arrived = _total(res, "arrived", lambda f, e, a: spoke(f) == 1 and hi(f))
    assert _total(res, "dropped", lambda f, e, a: spoke(f) == 1 and hi(f)) <= 0.01 * hi_arrived

    # low-utility jobs of the first four epochs are dropped (by cohort: in our model a job is dropped when its
    # deadline passes, so the planner sacrifices them by backlog or queueing and the drop may register later) ...
    def lo_drops(r: PlanResult, pred: Callable[[int, int], bool]) -> float:
        return _total(r, "dropped", lambda f, e, a: spoke(f) == 1 and not hi(f) and pred(e, a))

    assert lo_drops(res, lambda e, a: a <= 3) > lo_drops(base, lambda e, a: a <= 3) + 100
    # ... and keep being dropped after the surge has ceased (epochs 3 on), to make room for its backlog
    assert lo_drops(res, lambda e, a: e >= 2) > lo_drops(base, lambda e, a: e >= 2) + 100
