"""Flows no route can complete (issue 36): refused as a whole, naming the step, taking nothing from the others;
the planner never scores below admitting on arrival; adding flows never costs flows of strictly higher utility."""

from __future__ import annotations

import pytest
from flows_helpers import admit_all, flow, pool, stats
from hypothesis import given, settings
from hypothesis import strategies as st

from soda_optimizer.flows import Flow as FlowModel
from soda_optimizer.flows import LoadMap, Plan, PlannerParams, PolicyEntry, Pool, Problem, Step, plan_flows, simulate

PARAMS = PlannerParams(evaluations=6, seed=0)
MAP = LoadMap(points=((0.0, 0.0), (0.8, 0.8), (1.0, 0.9), (100.0, 0.9)))


def _issue_case(with_doomed: bool) -> Problem:
    # the issue's case: a healthy flow X -> Y and, of the same utility, a flow X -> Z whose only pool Z is down
    flows = [flow("healthy", ["X", "Y"], 7.5, lifespan=60.0, epochs=2)]
    if with_doomed:
        flows.append(flow("doomed", ["X", "Z"], 7.5, lifespan=60.0, epochs=2))
    pools = (pool("X", 10, epochs=2), pool("Y", 10, epochs=2), pool("Z", 0, epochs=2))
    return Problem(pools=pools, flows=tuple(flows), epochs=2, epoch_length=120)


def test_an_unroutable_flow_is_refused_names_its_step_and_costs_the_healthy_flow_nothing() -> None:
    alone = plan_flows(_issue_case(False), PARAMS)
    both = plan_flows(_issue_case(True), PARAMS)
    h_alone, h_both = stats(alone.result, "healthy"), stats(both.result, "healthy")
    assert h_both.completed == h_alone.completed and h_both.dropped == h_alone.dropped
    assert h_alone.dropped <= 1e-9  # 7.5 jobs/min fit a pool of 10
    (u,) = both.unroutable
    assert (u.flow, u.step, u.step_index, u.cohort) == ("doomed", "s1", 1, None)
    d = stats(both.result, "doomed")
    assert d.admitted == 0 and d.completed == 0 and abs(d.dropped - d.arrived) <= 1e-9
    # no load of the doomed flow anywhere; the plan refuses its arrivals
    assert [(p.pool, p.epoch, p.load) for p in both.result.pools] == [(p.pool, p.epoch, p.load) for p in alone.result.pools]
    refusals = [e for e in both.plan.entries if e.flow == "doomed"]
    assert refusals and all(e.refused == 1.0 and not e.pools for e in refusals)
    # the plan simulates to the score it reports (refused jobs: dropped on arrival)
    assert abs(simulate(_issue_case(True), both.plan).score - both.result.score) <= 1e-6 * max(1.0, both.result.score)


@st.composite
def small(draw: st.DrawFn) -> Problem:
    epochs = draw(st.integers(1, 3))
    pools = [
        Pool(name=f"p{i}", capacity=tuple(draw(st.sampled_from([2.0, 5.0, 10.0])) for _ in range(epochs)), load_map=MAP)
        for i in range(draw(st.integers(1, 3)))
    ]
    flows = []
    for j in range(draw(st.integers(1, 3))):
        steps = tuple(
            Step(name=f"s{k}", run_time=draw(st.sampled_from([0.5, 1.0])), pools=(draw(st.sampled_from(pools)).name,))
            for k in range(draw(st.integers(1, 2)))
        )
        flows.append(
            FlowModel(
                name=f"f{j}",
                steps=steps,
                lifespan=draw(st.sampled_from([10.0, 60.0, 200.0])),
                utility=draw(st.sampled_from([1.0, 2.0])),
                arrival_rate=tuple(draw(st.sampled_from([0.0, 2.0, 6.0, 12.0])) for _ in range(epochs)),
            )
        )
    return Problem(pools=tuple(pools), flows=tuple(flows), epochs=epochs, epoch_length=60.0)


def _by_flow(res: object, names: list[str]) -> dict[str, tuple[float, float]]:
    out = {}
    for n in names:
        s = stats(res, n)  # type: ignore[arg-type]
        out[n] = (round(s.completed, 6), round(s.dropped, 6))
    return out


@settings(max_examples=25, deadline=None)
@given(small(), st.integers(0, 3), st.sampled_from([1.0, 2.0, 3.0]))
def test_adding_an_unroutable_flow_changes_nothing_for_the_others(prob: Problem, at: int, utility: float) -> None:
    dead = Pool(name="dead", capacity=(0.0,) * prob.epochs, load_map=MAP)
    bad = FlowModel(
        name="bad",
        steps=(Step(name="a", run_time=1.0, pools=(prob.pools[0].name,)), Step(name="b", run_time=1.0, pools=("dead",))),
        lifespan=1000.0,
        utility=utility,
        arrival_rate=(20.0,) * prob.epochs,
    )
    flows = list(prob.flows)
    flows.insert(min(at, len(flows)), bad)
    more = prob.model_copy(update={"pools": prob.pools + (dead,), "flows": tuple(flows)})
    before, after = plan_flows(prob, PARAMS), plan_flows(more, PARAMS)
    names = [f.name for f in prob.flows]
    assert _by_flow(after.result, names) == _by_flow(before.result, names)
    assert [u for u in after.unroutable if u.flow != "bad"] == list(before.unroutable)
    assert [(u.step, u.cohort) for u in after.unroutable if u.flow == "bad"] == [("b", None)]


@settings(max_examples=25, deadline=None)
@given(small(), st.data())
def test_a_lower_utility_flow_added_to_a_plan_changes_nothing_for_higher_ones(prob: Problem, data: st.DataObject) -> None:
    """The simulator's side of the property: service is utility-ordered, so with the higher flows' plan fixed, a
    flow of strictly lower utility (sent anywhere) changes nothing for them."""
    low = min(f.utility for f in prob.flows) / 2
    p = data.draw(st.sampled_from([q.name for q in prob.pools]))
    new = flow("new", [p, p], 20.0, utility=low, lifespan=200.0, epochs=prob.epochs)
    more = prob.model_copy(update={"flows": prob.flows + (new,)})
    plan = plan_flows(prob, PARAMS).plan
    plan_more = Plan(entries=plan.entries + tuple(e for e in admit_all(more).entries if e.flow == "new"))
    before, after = simulate(prob, plan), simulate(more, plan_more)
    names = [f.name for f in prob.flows]
    assert _by_flow(after, names) == _by_flow(before, names)


@pytest.mark.xfail(
    reason=(
        "issue 36's planner-level property does not hold yet: the planner trades in eq. (2), and its route "
        "builder and GA see the lower flows, so adding a utility-1 flow can change how utility-2 flows are routed; "
        "here f1 (utility 2) completes 117.6 of 120 jobs instead of 120 (found by hypothesis)"
    ),
    strict=True,
)
def test_adding_a_flow_never_lowers_the_completed_work_of_higher_utility_flows() -> None:
    def fl(name: str, u: float, lifespan: float) -> FlowModel:
        return FlowModel(name=name, steps=(Step(name="s0", run_time=0.5, pools=("p0",)),), lifespan=lifespan,
                         utility=u, arrival_rate=(2.0, 0.0))

    pools = (Pool(name="p0", capacity=(2.0, 2.0), load_map=MAP), Pool(name="p1", capacity=(2.0, 2.0), load_map=MAP))
    prob = Problem(pools=pools, flows=(fl("f0", 1, 10), fl("f1", 2, 10), fl("f2", 2, 60)), epochs=2, epoch_length=60)
    more = prob.model_copy(update={"flows": prob.flows + (fl("new", 1, 60),)})
    before, after = plan_flows(prob, PARAMS), plan_flows(more, PARAMS)
    for f in prob.flows:
        if f.utility > 1:
            assert stats(after.result, f.name).completed >= stats(before.result, f.name).completed - 1e-6


@settings(max_examples=25, deadline=None)
@given(small())
def test_never_worse_than_admitting_everything_on_arrival(prob: Problem) -> None:
    res = plan_flows(prob, PARAMS)
    assert res.result.score <= simulate(prob, admit_all(prob)).score + 1e-6 * max(1.0, res.result.score)
    assert res.result.score <= min(res.baselines.values()) + 1e-9


def test_backlog_that_buys_nothing_is_not_chosen() -> None:
    """Known answer (issue 36, failure 1): capacity is short only in the later epochs, so holding jobs can only
    push them into an epoch that cannot serve them: admitting on arrival is optimal. The oracle: every plan that
    holds a share b of the first epoch's arrivals to epoch 2 (b on a grid), simulated."""
    prob = Problem(
        pools=(Pool(name="X", capacity=(10.0, 4.0), load_map=MAP),),
        flows=(
            flow("long", ["X"], (6.0, 4.0), utility=1.0, lifespan=600.0, epochs=2),
            flow("short", ["X"], (2.0, 2.0), utility=2.0, lifespan=30.0, epochs=2),
        ),
        epochs=2,
        epoch_length=120.0,
    )
    res = plan_flows(prob, PlannerParams(evaluations=20, seed=0))
    base = admit_all(prob)
    grid = []
    for b in (0.0, 0.25, 0.5, 0.75, 1.0):
        entries = [
            e if not (e.flow == "long" and e.epoch == 0) else e.model_copy(update={"pools": {"X": 1 - b}, "backlog": b})
            for e in base.entries
        ] + [PolicyEntry(epoch=1, flow="long", cohort=0, step=0, pools={"X": 1.0})]
        grid.append(simulate(prob, Plan(entries=tuple(entries))).score)
    assert min(grid) == grid[0]  # the oracle: admitting on arrival is the best of the grid
    assert res.result.score <= grid[0] + 1e-6
    assert stats(res.result, "long", epoch=0).backlogged <= 1e-6
