"""No job stranded between epochs (issue 50, item 1): every plan builder gives every cohort an entry at every step in
every epoch of its life; the returned plan never scores below a correct admit-on-arrival or backlog-everything plan
(written here, independently of the planner); and a brute-force oracle agrees on tiny instances."""

from __future__ import annotations

import itertools
import os

from flows_helpers import admit_all, stats
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from soda_optimizer.flows import (
    Flow,
    LoadMap,
    Plan,
    PlannerParams,
    PolicyEntry,
    Pool,
    Problem,
    Step,
    plan_flows,
    simulate,
)
from soda_optimizer.flows.compiled import compile_problem
from soda_optimizer.flows.fastsim import admit_arrays
from soda_optimizer.flows.planner import admit_policy
from soda_optimizer.flows.route import Ledger, build_epoch, epoch_items, policy_from_routes

MAP = LoadMap(points=((0.0, 0.0), (0.8, 0.8), (1.0, 0.9), (100.0, 0.9)))
FLAT = LoadMap(points=((0.0, 0.0), (1.0, 1.0), (2.0, 1.0)))
PARAMS = PlannerParams(evaluations=6, seed=0)
SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def instances(draw: st.DrawFn) -> Problem:
    epochs = draw(st.integers(1, 3))
    pools = tuple(
        Pool(name=f"p{i}", capacity=tuple(draw(st.sampled_from([0.0, 2.0, 5.0, 10.0])) for _ in range(epochs)),
             load_map=draw(st.sampled_from([MAP, FLAT])))
        for i in range(draw(st.integers(1, 3)))
    )
    names = [p.name for p in pools]
    flows = []
    for j in range(draw(st.integers(1, 3))):
        steps = tuple(
            Step(name=f"s{k}", run_time=draw(st.sampled_from([0.5, 1.0])),
                 pools=tuple(sorted(draw(st.sets(st.sampled_from(names), min_size=1)))))
            for k in range(draw(st.integers(1, 3)))
        )
        flows.append(Flow(name=f"f{j}", steps=steps, lifespan=draw(st.sampled_from([10.0, 60.0, 200.0, 1000.0])),
                          utility=draw(st.sampled_from([1.0, 2.0])),
                          arrival_rate=tuple(draw(st.sampled_from([0.0, 2.0, 6.0, 12.0])) for _ in range(epochs))))
    return Problem(pools=pools, flows=tuple(flows), epochs=epochs, epoch_length=60.0)


def life(prob: Problem, f: Flow, a: int) -> range:
    """The epochs in whose start some job of cohort a is alive (its own epoch first)."""
    hi = (a + 1) * prob.epoch_length + f.lifespan
    return range(a, max(a + 1, min(prob.epochs, sum(1 for e in range(prob.epochs) if e * prob.epoch_length < hi))))


def required(prob: Problem) -> set[tuple[int, str, int, int]]:
    return {(e, f.name, a, s) for f in prob.flows for a in range(prob.epochs) if f.arrival_rate[a] > 0
            for e in life(prob, f, a) for s in range(len(f.steps))}


def keys(prob: Problem, policy: dict) -> set[tuple[int, str, int, int]]:
    return {(e, prob.flows[f].name, a, s) for e, f, a, s in policy}


@SETTINGS
@given(instances())
def test_every_cohort_and_step_has_an_entry_in_every_epoch_of_its_life(prob: Problem) -> None:
    need = required(prob)
    cp = compile_problem(prob)
    assert need <= keys(prob, admit_policy(cp))
    assert need <= keys(prob, admit_arrays(cp).to_policy())
    for mode in ("route", "admit", "hold"):
        led, routes = Ledger(cp), []
        for e in reversed(range(cp.n_epochs)):
            items = epoch_items(cp, e)
            routes += build_epoch(cp, led, items, list(range(len(items))), mode=mode)
        assert need <= keys(prob, policy_from_routes(cp, routes))
    res = plan_flows(prob, PARAMS)
    assert need <= {(x.epoch, x.flow, x.cohort, x.step) for x in res.plan.entries}
    assert need <= {(x.epoch, x.flow, x.cohort, x.step) for x in admit_all(prob).entries}
    # the plan simulates to the figures the planner reports
    assert abs(simulate(prob, res.plan).score - res.result.score) <= 1e-6 * max(1.0, res.result.score)


def _serving(prob: Problem, f: Flow, s: int, e: int) -> dict[str, float]:
    caps = {p.name: p.capacity[e] for p in prob.pools}
    live = [p for p in f.steps[s].pools if caps[p] > 0]
    tot = sum(caps[p] for p in live)
    return {p: caps[p] / tot for p in live}


def completes(prob: Problem, f: Flow, a: int) -> bool:
    """Some schedule runs cohort a's steps in order, each in an epoch with capacity for it, while some jobs live."""
    e, ep = a, life(prob, f, a)
    for s in range(len(f.steps)):
        while e in ep and not _serving(prob, f, s, e):
            e += 1
        if e not in ep:
            return False
    return True


def admit_now(prob: Problem) -> Plan:
    """Admit on arrival, written plainly: every step of every cohort, in every epoch of its life, spread over the
    step's pools that have capacity then; backlog where none has (refused in the last epoch). A cohort no schedule
    completes is refused (the planner's rule: eq. (2) discounts a drop deferred, so letting such jobs die later would
    score lower, by that discount, while taking capacity from the others)."""
    out = []
    for e, name, a, s in sorted(required(prob)):
        f = next(x for x in prob.flows if x.name == name)
        if not completes(prob, f, a):
            out.append(PolicyEntry(epoch=e, flow=name, cohort=a, step=s, pools={}, refused=1.0))
            continue
        pools = _serving(prob, f, s, e)
        out.append(PolicyEntry(epoch=e, flow=name, cohort=a, step=s, pools=pools,
                               backlog=0.0 if pools or e == prob.epochs - 1 else 1.0,
                               refused=1.0 if not pools and e == prob.epochs - 1 else 0.0))
    return Plan(entries=tuple(out))


def backlog_everything(prob: Problem) -> Plan:
    """Hold every cohort at its first step until the last epoch of its life, then as :func:`admit_now`."""
    base = {(x.epoch, x.flow, x.cohort, x.step): x for x in admit_now(prob).entries}
    for (e, name, a, s), x in list(base.items()):
        f = next(y for y in prob.flows if y.name == name)
        if s == 0 and e < life(prob, f, a)[-1] and completes(prob, f, a):
            base[(e, name, a, s)] = x.model_copy(update={"pools": {}, "backlog": 1.0, "refused": 0.0})
    return Plan(entries=tuple(base.values()))


@SETTINGS
@given(instances())
def test_the_plan_never_scores_below_admitting_on_arrival_or_backlogging_everything(prob: Problem) -> None:
    res = plan_flows(prob, PARAMS)
    tol = 1e-6 * max(1.0, res.result.score)
    assert res.result.score <= simulate(prob, admit_now(prob)).score + tol
    assert res.result.score <= simulate(prob, backlog_everything(prob)).score + tol
    assert res.result.score <= min(res.baselines.values(), default=res.result.score) + tol


# --- the brute-force oracle: one flow, two pools, two epochs -----------------------------------------------------


def _options(prob: Problem, f: Flow, e: int, s: int) -> list[tuple[dict[str, float], float]]:
    """Every destination of an entry on a grid: all to one pool of positive capacity, half and half over two, all to
    backlog (not in the last epoch), all refused. Pools of capacity 0 are left out: a job queued there waits for
    free in eq. (2) (only backlog is charged holding), a loophole the planner does not use."""
    live = [p for p in f.steps[s].pools if next(q for q in prob.pools if q.name == p).capacity[e] > 0]
    out: list[tuple[dict[str, float], float]] = [({p: 1.0}, 0.0) for p in live]
    if len(live) == 2:
        out.append(({live[0]: 0.5, live[1]: 0.5}, 0.0))
    if e < prob.epochs - 1:
        out.append(({}, 1.0))
    out.append(({}, 0.0))
    return out


def brute_force(prob: Problem) -> float:
    (f,) = prob.flows
    ks = [(e, a, s) for a in range(prob.epochs) if f.arrival_rate[a] > 0 for e in range(a, prob.epochs)
          for s in range(len(f.steps))]
    best = float("inf")
    for combo in itertools.product(*[_options(prob, f, e, s) for e, _, s in ks]):
        entries = tuple(PolicyEntry(epoch=e, flow=f.name, cohort=a, step=s, pools=pools, backlog=bl,
                                    refused=1.0 - sum(pools.values()) - bl) for (e, a, s), (pools, bl) in zip(ks, combo))
        best = min(best, simulate(prob, Plan(entries=entries)).score)
    return best


@st.composite
def tiny(draw: st.DrawFn) -> Problem:
    caps = st.sampled_from([0.0, 4.0, 8.0, 12.0])
    pools = tuple(Pool(name=n, capacity=(draw(caps), draw(caps)), load_map=draw(st.sampled_from([MAP, FLAT])))
                  for n in ("X", "Y"))
    steps = tuple(Step(name=f"s{k}", run_time=draw(st.sampled_from([0.5, 1.0])),
                       pools=draw(st.sampled_from([("X",), ("Y",), ("X", "Y")]))) for k in range(draw(st.integers(1, 2))))
    rates = (draw(st.sampled_from([3.0, 6.0, 12.0])), draw(st.sampled_from([0.0, 3.0, 6.0, 12.0])))
    f = Flow(name="f", steps=steps, lifespan=draw(st.sampled_from([10.0, 60.0, 200.0])), utility=1.0,
             arrival_rate=rates)
    return Problem(pools=pools, flows=(f,), epochs=2, epoch_length=60.0)


def late_at_first_pool() -> Problem:
    """X serves 4 of the 6 jobs a minute in epoch 0 and the rest wait in its queue into epoch 1 (issue 50)."""
    return Problem(
        pools=(Pool(name="X", capacity=(4.0, 8.0), load_map=FLAT), Pool(name="Y", capacity=(10.0, 10.0), load_map=FLAT)),
        flows=(Flow(name="f", steps=(Step(name="a", run_time=1.0, pools=("X",)), Step(name="b", run_time=1.0, pools=("Y",))),
                    lifespan=1000.0, utility=1.0, arrival_rate=(6.0, 0.0)),),
        epochs=2, epoch_length=60.0)


# random again (issue 50: the planner's exact stage closed the known miss below; CI=true still derandomizes,
# tests/conftest.py); FLOWS_ORACLE_EXAMPLES widens a local run (500 with several --hypothesis-seed, the report)
ORACLE_EXAMPLES = int(os.environ.get("FLOWS_ORACLE_EXAMPLES", "25"))


@settings(max_examples=ORACLE_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tiny())
@example(late_at_first_pool())
def test_a_brute_force_oracle_agrees_on_one_flow_two_pools_two_epochs(prob: Problem) -> None:
    f = prob.flows[0]
    n = 1
    for a in range(2):
        if f.arrival_rate[a] > 0:
            for e in range(a, 2):
                for s in range(len(f.steps)):
                    n *= len(_options(prob, f, e, s))
    assume(n <= 600)
    best = brute_force(prob)
    res = plan_flows(prob, PARAMS)
    if res.unroutable:
        # refusing jobs no schedule completes drops them now; eq. (2) discounts later drops, so a plan that lets
        # them die in a later epoch scores at most that discount lower
        assert res.result.score * 0.995 ** ((prob.epochs - 1) * prob.epoch_length / 60) <= best + 1e-6
    else:
        assert res.result.score <= best + 1e-6 * max(1.0, best)


def test_jobs_served_late_at_their_first_pool_go_on_to_their_second() -> None:
    """The issue's case of one flow, two pools and two epochs: X serves 4 of the 6 jobs a minute in epoch 0 and the
    rest wait in its queue; served in epoch 1, they need an entry for their second step there (Y). With it nothing
    is lost (score 0); without it they sat in backlog to the horizon and were dropped."""
    prob = late_at_first_pool()
    res = plan_flows(prob, PARAMS)
    assert res.result.score <= 1e-9 and res.baselines["admit"] <= 1e-9
    assert stats(res.result, "f").completed == 360.0


def _empty_then_open() -> Problem:
    """Found by Hypothesis (issue 50, h50b): Y has no capacity in epoch 0 and 4 in epoch 1, both steps need Y."""
    lm = LoadMap(points=((0.0, 0.0), (0.8, 0.8), (1.0, 0.9), (100.0, 0.9)))
    return Problem(
        pools=(Pool(name="X", capacity=(0.0, 0.0), load_map=lm), Pool(name="Y", capacity=(0.0, 4.0), load_map=lm)),
        flows=(Flow(name="f", steps=(Step(name="s0", run_time=0.5, pools=("Y",)), Step(name="s1", run_time=0.5, pools=("Y",))),
                    lifespan=60.0, utility=1.0, arrival_rate=(6.0, 6.0)),),
        epochs=2, epoch_length=60.0)


def test_the_three_coordinated_entries_the_polish_missed_are_found() -> None:
    """Found by Hypothesis (issue 50, h50b): the plan scored 540.59 where the brute force finds 539.9955; reaching it
    takes three coordinated entries (hold cohort 0, run it in epoch 1, refuse cohort 1), which neither the route
    builder nor the entry-by-entry polish finds. The exact stage (:mod:`soda_optimizer.flows.exact`) searches every
    epoch's decisions together. Was a strict xfail on main."""
    prob = _empty_then_open()
    res = plan_flows(prob, PARAMS)
    assert res.exhaustive
    assert res.result.score <= brute_force(prob) + 1e-6
    assert abs(simulate(prob, res.plan).score - res.result.score) <= 1e-9 * max(1.0, res.result.score)
