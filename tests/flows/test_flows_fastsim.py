"""The vectorised simulator (fastsim) gives the reference simulator's numbers: random small problems (with jobs
waiting at time 0, refused shares, capacity-0 pools), random policies, every start epoch (hypothesis)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from test_flows_properties import problem_and_plan

from soda_optimizer.flows import Plan, Problem, Waiting
from soda_optimizer.flows.compiled import compile_problem
from soda_optimizer.flows.fastsim import simulate_arrays
from soda_optimizer.flows.sim import policy_from_plan, simulate_policy_ref

FIELDS = ("arrived", "admitted", "completed", "dropped", "backlogged", "released", "held")


def close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-7 * (1.0 + abs(a))


@st.composite
def with_waiting(draw: st.DrawFn) -> tuple[Problem, Plan]:
    prob, plan = draw(problem_and_plan())
    waiting = []
    for f in prob.flows:
        if draw(st.booleans()):
            s = draw(st.integers(0, len(f.steps) - 1))
            pool = draw(st.sampled_from((None,) + f.steps[s].pools))
            lo = draw(st.sampled_from([5.0, 30.0, 200.0]))
            waiting.append(Waiting(flow=f.name, step=s, pool=pool, jobs=draw(st.sampled_from([3.0, 50.0])),
                                   min_remaining=lo, max_remaining=lo + draw(st.sampled_from([0.0, 40.0]))))
    # refuse a random share of some entries (the pools and backlog scaled down)
    entries = []
    for en in plan.entries:
        k = draw(st.sampled_from([1.0, 1.0, 0.5, 0.0]))
        if k < 1.0:
            en = en.model_copy(update={"pools": {p: v * k for p, v in en.pools.items()}, "backlog": en.backlog * k,
                                       "refused": 1.0 - k})
        entries.append(en)
    return prob.model_copy(update={"waiting": tuple(waiting)}), Plan(entries=tuple(entries))


@settings(max_examples=150, deadline=None)
@given(with_waiting(), st.integers(0, 2))
def test_vectorised_simulator_matches_the_reference(data: tuple[Problem, Plan], start: int) -> None:
    prob, plan = data
    cp = compile_problem(prob)
    pol = policy_from_plan(prob, plan)
    start = min(start, prob.epochs - 1)
    ref = simulate_policy_ref(cp, pol, start_epoch=start)
    fast = simulate_arrays(cp, pol, start_epoch=start)
    assert close(ref.score, fast.score)
    assert all(close(a, b) for a, b in zip(ref.score_by_epoch, fast.score_by_epoch, strict=True))
    assert close(ref.left_at_horizon, fast.left_at_horizon)
    assert [(x.epoch, x.flow, x.cohort) for x in ref.flows] == [(x.epoch, x.flow, x.cohort) for x in fast.flows]
    for x, y in zip(ref.flows, fast.flows):
        assert all(close(getattr(x, k), getattr(y, k)) for k in FIELDS), (x, y)
    assert len(ref.pools) == len(fast.pools)
    for x, y in zip(ref.pools, fast.pools):
        assert (x.epoch, x.pool) == (y.epoch, y.pool)
        assert all(close(getattr(x, k), getattr(y, k)) for k in ("load", "throughput", "jobs_in", "jobs_out"))


@settings(max_examples=80, deadline=None)
@given(with_waiting())
def test_admit_on_arrival_built_as_arrays_is_the_dict_built_one(data: tuple[Problem, Plan]) -> None:
    """The planner's first answer (admit_arrays) is the reference admit_policy, entry for entry (refusing steps with
    no capacity, jobs waiting at time 0 included), and simulates to the same score."""
    from soda_optimizer.flows.fastsim import admit_arrays
    from soda_optimizer.flows.planner import admit_policy

    prob, _ = data
    cp = compile_problem(prob)
    ref, arr = admit_policy(cp), admit_arrays(cp)
    got = arr.to_policy()
    assert got.keys() == ref.keys()
    for k, (pools, bl) in ref.items():
        gp, gbl = got[k]
        assert [c for c, _ in gp] == [c for c, _ in pools] and gbl == bl
        assert all(close(a, b) for (_, a), (_, b) in zip(gp, pools))
    assert close(simulate_arrays(cp, arr).score, simulate_policy_ref(cp, ref).score)
