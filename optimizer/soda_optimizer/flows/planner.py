"""Levels 2 and 3 of the planner, under a deadline (Montana & Zinky, sections 3.2 and 3.3).

- Level 2 (multi-flow, single epoch): a steady-state order-based GA (:mod:`.ga`) searches the order in which the
  rapid route builder (:mod:`.route`) routes the flows of the epoch; an ordering is scored by simulating the plan
  (:mod:`.sim`, eq. (2)) from that epoch to the end of the horizon.
- Level 3 (multi-epoch): the epochs are optimised one at a time from the last to the first, each seeing the load the
  later epochs' plans put on the pools (so that backlogging into a later epoch knows what is already there).

Every candidate has an entry for every cohort at every step in every epoch of its life (issue 50, :mod:`.reach`): a
job served late, after waiting in a queue, goes on to its next step instead of being stranded in backlog.

Anytime (issue 36): the first answer is admit-on-arrival with each step spread over its allowed pools in proportion
to their capacity, cohorts whose steps cannot all run now held at entry and those no schedule completes refused
(:func:`.fastsim.admit_arrays`: no ledger, no search, built over arrays), simulated once. At scale (more than
``group_above`` flows, issue 50) the first answer is the plan of the near-identical groups instead (:mod:`.nearby`):
the groups are planned first, by this planner on the grouped problem within 40% of the deadline (its search: the two
seeded orderings per epoch, no route-builder baselines), their LP is solved within 10% of the time left, at least
0.5 s (the bound), their plan is given to every member flow over arrays and simulated once on the real flows;
admit-on-arrival over every flow is then one more candidate when its build (per class of flows with the same entries,
:func:`.nearby.admit_classes`) and simulation fit. Every
later stage stops by ``stop``: the earlier of 80% of the deadline and the deadline less 1.5x what the first answer's
simulation and expansion to the problem's flows took (the output's measured cost). Route builds check it between
subflows and raise :class:`~.route.Late` (the partial build is dropped); a simulation starts only if one fits. The
stages: two whole-plan baselines of the route builder (admit on arrival at the best pool per step; backlog everything
possible: each subflow held to the latest epoch where half its jobs are still alive); the LP bound (:mod:`.bound`,
within a quarter of the time left) and its solution as a whole-plan candidate (:func:`.bound.lp_policy`); then the
GA, each epoch keeping the best of the GA's ordering, the admit-on-arrival build and the backlog-all build (so the
search never scores below either in eq. (2) for the epochs it has planned); epochs not reached are admitted on arrival
at the best pool. On instances small enough (at most ``exact_combinations`` combinations, issue 50) every epoch's
decisions are then searched together over a grid of simple decisions per entry, each combination simulated
(:mod:`.exact`: what section 3.3's epoch-by-epoch search cannot reach; :attr:`PlanResult.exhaustive` when it
finished). A small best candidate is then polished entry by entry (:mod:`.polish`). The returned plan is the
best-scoring candidate of all (:attr:`PlanResult.baselines`, :attr:`PlanResult.chosen`), with :attr:`PlanResult.bound`
and :attr:`PlanResult.gap`. The garbage collector is paused while planning, and the plan's entries are built on first
access (:attr:`PlanResult.plan`).

Unroutable flows: a flow one of whose steps has no allowed pool of positive capacity in any epoch is refused as a
whole (its arrivals are dropped on arrival, :attr:`~.model.PolicyEntry.refused`), reported in
:attr:`PlanResult.unroutable` naming the step, and planned out: the rest is planned on the problem without it, so it
changes nothing for the others. A cohort no schedule completes while its jobs live is refused at entry by every
candidate and reported once (:func:`.reach.doomed_cohorts`).

Identical flows (same steps, lifespan and utility, no waiting jobs) are planned as one flow whose arrival rate is
their sum, and the plan and figures are given back per flow (each its share of the cohort's arrivals). This is exact
in the fluid model: their jobs are interchangeable and a pool serves a class pro rata, so any per-flow policy has a
group policy with the same outcome.

Departures from the paper, on purpose:
- the admit-on-arrival first answer, the admit, backlog-all, LP and grouped candidates, the exact stage on small
  instances, the polishing, the bound,
  the refusal of unroutable flows and doomed cohorts, and the grouping of identical flows (above); the paper's GA
  orders flows, ours orders groups; at scale, under a deadline too short for admit-on-arrival over every flow to be
  built and simulated after the grouped plan, the plan is not compared with it (the property "never below
  admit-on-arrival" is tested below ``group_above``);
- the seeding of each GA population with two heuristic orderings (shortest lifespan
  first, then utility; highest utility first, then lifespan) -- the paper starts from random orderings only; it
  makes the first answer useful and costs two evaluations per epoch;
- the score of an ordering at Level 2 is the score of the epochs from the current one on, with the earlier epochs
  not yet planned (they are planned later, Level 3 order), which is what the paper's backward sweep implies.
"""

from __future__ import annotations

import gc
import math
import random
import time
from collections.abc import Callable
from functools import cached_property
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from .bound import cohorts, gap, lp_bound, lp_policy, no_service_cost
from .compact import CompactPlan, PlanClass, compact
from .compiled import Compiled, compile_problem
from .exact import exhaust
from .fastsim import PolicyArrays, admit_arrays
from .ga import steady_state_ga
from .model import (
    INITIAL_COHORT,
    FlowEpochStats,
    Hop,
    Plan,
    PolicyEntry,
    PoolEpochStats,
    Problem,
    Route,
    SimResult,
    Unroutable,
    built,
)
from .nearby import admit_classes, expand_arrays, merged, near_groups
from .polish import polish
from .reach import admit_decision, doomed_cohorts, entry_steps, life_end
from .route import Item, Late, Ledger, RouteSpec, build_epoch, epoch_items, policy_from_routes, unroutable_step
from .sim import Policy, plan_entries, simulate_policy


class PlannerParams(BaseModel):
    """Knobs of the planner. ``evaluations`` per epoch is the paper's GA budget (population = evaluations / 5)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    evaluations: int = Field(default=100, ge=1)
    bound: bool = True  #: compute the LP bound and the gap (:mod:`.bound`), within a quarter of the time left
    deadline_s: float | None = Field(default=None, gt=0)
    seed: int = 0
    split_threshold: float = Field(default=0.2, gt=0, le=1)
    crossover_rate: float = Field(default=0.7, ge=0, le=1)
    #: polish the best candidate entry by entry (:mod:`.polish`) when it has at most this many entries (0: never)
    polish_entries: int = Field(default=64, ge=0)
    #: search every grid combination of a plan's entries (:mod:`.exact`) when there are at most this many (0: never)
    exact_combinations: int = Field(default=2048, ge=0)
    #: above this many (exactly grouped) flows, plan near-identical ones as groups too (:mod:`.nearby`; 0: never)
    group_above: int = Field(default=2000, ge=0)
    group_tolerance: float = Field(default=0.05, ge=0)  #: relative lifespan difference within a near group
    #: the route builder's whole-plan baselines (admit at the best pool, backlog everything); the groups' own
    #: planner at scale goes without them, straight to its search (issue 50)
    route_baselines: bool = True


class PlanResult(BaseModel):
    """The plan, its simulated outcome, and what the search cost.

    :attr:`plan` is built on first access from the chosen policy: the planner's deadline covers the decisions and
    their simulated outcome, not this view (1,921,536 entries at 20,016 flows: 8.6 s and +1.9 GiB on the loaded
    2-core machine, docs/benchmarks/flows.md); :meth:`entries_at` builds one epoch's alone (epoch 0: 120,096, 1.35 s)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    result: SimResult
    entries: int = 0  #: policy entries of the plan (its size)
    first_score: float  #: score of the first answer (admit on arrival)
    evaluations: int
    elapsed_s: float
    timed_out: bool
    epochs_optimised: int
    baselines: dict[str, float] = Field(default_factory=dict)  #: score of each whole-plan candidate compared
    chosen: str = "search"  #: the candidate returned
    unroutable: tuple[Unroutable, ...] = ()  #: flows (or cohorts) refused as a whole, naming the blocked step
    groups: int = 0  #: flow groups planned (identical flows planned as one, see the module docstring)
    first_answer_s: float = 0.0  #: seconds to the first complete, scored answer
    seed_scores: tuple[float, ...] = ()  #: per epoch optimised (last first): best GA seed's score
    ga_scores: tuple[float, ...] = ()  #: per epoch optimised: the GA's best score (< seed: the search moved)
    #: every grid combination of the plan's entries was simulated (:mod:`.exact`): no plan on the grid scores lower
    exhaustive: bool = False
    bound: float | None = None  #: proven lower bound on eq. (2) (:mod:`.bound`; None: too large or out of time)
    gap: float | None = None  #: (score - bound) / score: how far from optimal the plan may be, at most
    _make_plan: Callable[[], Plan] | None = PrivateAttr(default=None)
    _make_epoch: Callable[[int], tuple[PolicyEntry, ...]] | None = PrivateAttr(default=None)
    _make_compact: Callable[[], CompactPlan] | None = PrivateAttr(default=None)
    _policy: Any = PrivateAttr(default=None)  #: the chosen policy, on the planned (exactly grouped) problem

    @cached_property
    def plan(self) -> Plan:
        """The routing/backlog policy of every epoch (built once, on first access)."""
        assert self._make_plan is not None
        return self._make_plan()

    def entries_at(self, epoch: int) -> tuple[PolicyEntry, ...]:
        """The plan's entries of one epoch (those of :attr:`plan` with that epoch, in its order), built from the
        chosen policy's decisions of that epoch alone: what the operator applies is epoch 0, and at 20,016 flows
        the whole plan is 1.9 million entries (issue 50)."""
        if self._make_epoch is None or "plan" in self.__dict__:
            return tuple(x for x in self.plan.entries if x.epoch == epoch)
        return self._make_epoch(epoch)

    def compact(self) -> CompactPlan:
        """The plan with the flows of equal entries listed once (:mod:`.compact`; :meth:`CompactPlan.expand` gives
        back :attr:`plan`'s entries): at 20,016 flows what the groups' plan gives every member, without building the
        1.9 million entries (issue 50)."""
        if self._make_compact is None:
            by: dict[str, list[PolicyEntry]] = {}
            for x in self.plan.entries:
                by.setdefault(x.flow, []).append(x)
            return CompactPlan(classes=tuple(PlanClass(flows=(f,), entries=tuple(v)) for f, v in by.items()))
        return self._make_compact()

    def with_plan(self, make: Callable[[], Plan], policy: Any = None,
                  make_epoch: Callable[[int], tuple[PolicyEntry, ...]] | None = None,
                  make_compact: Callable[[], CompactPlan] | None = None) -> PlanResult:
        self._make_plan = make
        self._make_compact = make_compact
        self._policy = policy
        self._make_epoch = make_epoch
        return self


def heuristic_order(cp: Compiled, items: list[Item]) -> list[int]:
    """Shortest lifespan first, then highest utility, then flow index."""
    return sorted(range(len(items)), key=lambda i: (cp.lifespan[items[i].flow], -cp.flow_utility[items[i].flow], i))


def utility_order(cp: Compiled, items: list[Item]) -> list[int]:
    """Highest utility first, then shortest lifespan, then flow index."""
    return sorted(range(len(items)), key=lambda i: (-cp.flow_utility[items[i].flow], cp.lifespan[items[i].flow], i))


def _routes_out(cp: Compiled, routes: list[RouteSpec], members: list[list[int]], full: Problem) -> tuple[Route, ...]:
    names = [p.name for p in cp.problem.pools]
    out = []
    for r in routes:
        for f in members[r.flow]:
            out.append(
                Route(
                    flow=full.flows[f].name,
                    cohort=r.cohort,
                    share=r.share,
                    first_step=r.first_step,
                    hops=tuple(Hop(epoch=e, pool=names[c]) for e, c in r.hops),
                )
            )
    return tuple(out)



def _group(problem: Problem, bad: set[int]) -> tuple[Problem | None, list[list[int]]]:
    """The reduced problem: routable flows with the same steps, lifespan and utility (and no waiting jobs) merged
    into one flow whose arrival rate is their sum; returns it (None: no routable flow) and each group's members."""
    waiting = {w.flow for w in problem.waiting}
    keys: dict[object, int] = {}
    members: list[list[int]] = []
    for f, fl in enumerate(problem.flows):
        if f in bad:
            continue
        key: object = (
            ("w", f) if fl.name in waiting else (tuple((s.run_time, s.pools) for s in fl.steps), fl.lifespan, fl.utility)
        )
        g = keys.get(key)
        if g is None:
            keys[key] = len(members)
            members.append([f])
        else:
            members[g].append(f)
    if not members:
        return None, members
    if all(len(m) == 1 for m in members) and not bad:
        return problem, members
    flows = []
    for m in members:
        first = problem.flows[m[0]]
        if len(m) == 1:
            flows.append(first)
            continue
        flows.append(merged(problem, m))
    kept = {problem.flows[m[0]].name for m in members}
    red = Problem.model_construct(
        **{**dict(problem), "flows": tuple(flows), "waiting": tuple(w for w in problem.waiting if w.flow in kept)}
    )
    return red, members


def admit_policy(cp: Compiled) -> Policy:
    """The cheapest sound plan (:func:`.reach.admit_decision`): every cohort runs every step on arrival, spread over
    the step's allowed pools in proportion to their capacity in that epoch (no ledger, no search); a cohort whose
    steps cannot all run now is held at entry until they can, and refused when no schedule completes it while it
    lives; an entry for every epoch of every cohort's life and every step (issue 50: jobs served late, after waiting
    in a queue, go on to their next step)."""
    pol: Policy = {}
    for (f, a), s0 in entry_steps(cp).items():
        for e in range(max(a, 0), life_end(cp, f, a) + 1):
            for s in range(s0, cp.n_steps[f]):
                pol[(e, f, a, s)] = admit_decision(cp, f, a, s, e, entry=s == s0)
    return pol


def _expand(
    cp: Compiled, full: Problem, members: list[list[int]], policy: Policy, res: SimResult, refused: dict[int, int],
    want_plan: bool = True,
) -> tuple[Plan, SimResult]:
    """The reduced plan and result back on the problem's own flows: each member of a group gets the group's
    decisions (exact in the fluid model: jobs of identical flows are interchangeable and a pool serves a class
    pro rata), its share of the group's figures (its share of the cohort's arrivals), and the refused flows."""
    if not refused and len(members) == len(full.flows):
        return Plan.model_construct(entries=plan_entries(full, policy) if want_plan else (), routes=()), res
    names = [p.name for p in full.pools]
    fnames = [f.name for f in full.flows]
    rates = [f.arrival_rate for f in full.flows]
    entries: list[PolicyEntry] = []
    for (e, g, a, s), (pools, bl) in sorted(policy.items()) if want_plan else ():
        pd = {names[c]: pr for c, pr in pools}
        tot = sum(pr for _, pr in pools)
        back = min(bl, max(0.0, 1.0 - tot))
        ref = max(0.0, 1.0 - tot - back)
        for f in members[g]:
            entries.append(
                built(PolicyEntry, {"epoch": e, "flow": fnames[f], "cohort": a, "step": s, "pools": pd, "backlog": back,
                                         "refused": ref})
            )
    extra = [0.0] * cp.n_epochs
    stats: list[FlowEpochStats] = []
    red_idx, full_idx = cp.problem.flow_index(), full.flow_index()
    grouped = len(members) != len(full.flows)
    for st in res.flows:
        mem = members[red_idx[st.flow]] if grouped else [full_idx[st.flow]]
        tot_r = sum(rates[f][st.cohort] for f in mem) if st.cohort >= 0 else 0.0
        for f in mem:
            share = rates[f][st.cohort] / tot_r if tot_r > 0 else 1.0 / len(mem)
            d = {k: getattr(st, k) * share for k in ("arrived", "admitted", "completed", "dropped", "backlogged",
                                                      "released", "held")}
            stats.append(built(FlowEpochStats, {"epoch": st.epoch, "flow": fnames[f], "cohort": st.cohort, **d}))
    tau = full.epoch_length
    for f, s in sorted(refused.items()):
        fl = full.flows[f]
        for e in range(full.epochs):
            n = fl.arrival_rate[e] * full.epoch_length
            if n <= 0:
                continue
            for e2 in range(e, full.epochs):  # refused at every step and epoch of the cohort's life (issue 50)
                if e2 > e and e2 * tau >= (e + 1) * tau + fl.lifespan:
                    break
                for s2 in range(len(fl.steps)):
                    entries.append(PolicyEntry.model_construct(epoch=e2, flow=fl.name, cohort=e, step=s2, pools={},
                                                               backlog=0.0, refused=1.0))
            stats.append(
                FlowEpochStats.model_construct(
                    epoch=e, flow=fl.name, cohort=e, arrived=n, admitted=0.0, completed=0.0, dropped=n,
                    backlogged=0.0, released=0.0, held=0.0,
                )
            )
            extra[e] += fl.utility * n * cp.weight(e)
        for w in full.waiting:
            if w.flow == fl.name:
                st0 = w.step + (1 if w.pool is not None else 0)
                for e2 in range(full.epochs):
                    if e2 > 0 and e2 * tau >= w.max_remaining:
                        break
                    for s2 in range(st0, len(fl.steps)):
                        entries.append(PolicyEntry.model_construct(epoch=e2, flow=fl.name, cohort=INITIAL_COHORT,
                                                                   step=s2, pools={}, backlog=0.0, refused=1.0))
                stats.append(
                    FlowEpochStats.model_construct(
                        epoch=0, flow=fl.name, cohort=INITIAL_COHORT, arrived=0.0, admitted=0.0, completed=0.0,
                        dropped=w.jobs, backlogged=0.0, released=0.0, held=0.0,
                    )
                )
                extra[0] += fl.utility * w.jobs
    stats.sort(key=lambda x: (x.epoch, x.flow, x.cohort))
    by_epoch = tuple(a + b for a, b in zip(res.score_by_epoch, extra)) if res.score_by_epoch else tuple(extra)
    out = SimResult.model_construct(
        score=float(sum(by_epoch)), score_by_epoch=by_epoch, flows=tuple(stats), pools=res.pools,
        left_at_horizon=res.left_at_horizon,
    )
    entries = list({(x.epoch, x.flow, x.cohort, x.step): x for x in entries}.values())  # waiting jobs at 2 steps
    entries.sort(key=lambda x: (x.epoch, x.flow, x.cohort, x.step))
    return Plan.model_construct(entries=tuple(entries), routes=()), out


def plan_flows(problem: Problem, params: PlannerParams | None = None) -> PlanResult:
    """Plan routing and backlog for every epoch of ``problem`` (anytime: see the module docstring).

    The cyclic garbage collector is paused while planning: the planner makes no reference cycles, and at 20,000
    flows its collections (triggered by the plan's 720,000 entries and the simulator's records) took 17 of 33 s."""
    was = gc.isenabled()
    gc.disable()
    try:
        return _plan_flows(problem, params)
    finally:
        if was:
            gc.enable()


def _plan_flows(problem: Problem, params: PlannerParams | None) -> PlanResult:
    params = params or PlannerParams()
    t0 = time.monotonic()
    deadline = t0 + params.deadline_s if params.deadline_s is not None else None

    def late(frac: float = 1.0) -> bool:
        return deadline is not None and time.monotonic() >= t0 + frac * (deadline - t0)

    full_cp = compile_problem(problem)
    refused: dict[int, int] = {}
    unroutable: list[Unroutable] = []
    blocked: dict[object, int | None] = {}  # per flows' allowed pools (20,016 flows: 24 distinct)
    for f in range(full_cp.n_flows):
        key = full_cp.allowed[f]
        s = blocked[key] if key in blocked else blocked.setdefault(key, unroutable_step(full_cp, f))
        if s is not None:
            refused[f] = s
            fl = problem.flows[f]
            unroutable.append(
                Unroutable(flow=fl.name, step=fl.steps[s].name, step_index=s,
                           reason=f"step {fl.steps[s].name}: no allowed pool has positive capacity in any epoch")
            )
    red, members = _group(problem, set(refused))
    if red is None:
        idle = tuple(PoolEpochStats(epoch=e, pool=p.name, capacity=p.capacity[e], load=0.0, throughput=0.0, jobs_in=0.0,
                                    jobs_out=0.0) for e in range(problem.epochs) for p in problem.pools)
        empty = SimResult(score=0.0, score_by_epoch=(0.0,) * problem.epochs, flows=(), pools=idle, left_at_horizon=0.0)
        plan, res = _expand(full_cp, problem, [], {}, empty, refused)
        return PlanResult(entries=len(plan.entries), result=res, first_score=res.score, evaluations=0, elapsed_s=time.monotonic() - t0,
                          timed_out=False, epochs_optimised=problem.epochs, unroutable=tuple(unroutable),
                          chosen="refused").with_plan(lambda: plan)
    cp = compile_problem(red) if red is not problem else full_cp
    rng = random.Random(params.seed)
    E = cp.n_epochs
    th = params.split_threshold

    # at scale (issue 50, item 3): near-identical flows planned as groups FIRST, within its own share of the deadline
    # (40% of it), then their LP (10% of what is left): the groups' plan, given to every member flow (over arrays) and scored on the real flows, is the
    # first answer; the grouped problem's LP is the bound at that size (:mod:`.nearby`)
    group_bound: float | None = None
    t_build = 0.0  # seconds to give the groups' plan to every flow (the cost of building a plan over every flow)
    first_policy: Policy | PolicyArrays | None = None
    first_label = "admit"
    scale = bool(params.group_above) and len(problem.flows) > params.group_above
    if scale:
        red2, mem2 = near_groups(cp.problem, params.group_tolerance)
        # grouped near-identically, or exactly (20,016 copies of 24 flows: 12 groups, whose plan is cheap where
        # its figures given back to every flow are not): the groups' plan first
        if len(mem2) < cp.n_flows or cp.n_flows < len(problem.flows):
            sub_dl = None if deadline is None else max(0.4 * (deadline - time.monotonic()), 1e-3)
            # the groups' search is its two seeded orderings per epoch (the GA rarely moves off its seeds,
            # docs/flows.md), without the route builder's whole-plan baselines: what 40% of 5 s has room for
            sub = _plan_flows(red2, params.model_copy(update={"deadline_s": sub_dl, "group_above": 0,
                                                              "evaluations": min(params.evaluations, 2),
                                                              "route_baselines": False, "bound": False}))
            g_cp = compile_problem(red2)
            if params.bound:
                # the grouped LP, with its own share: 10% of the time left, at least 0.5 s (~0.1 s of CPU at 18
                # groups; at load 9 on 2 cores a 0.2 s floor left it unsolved)
                lb2 = lp_bound(g_cp, time_limit_s=None if deadline is None else
                               max(0.1 * (deadline - time.monotonic()), 0.5))
                group_bound = lb2.value if lb2 is not None else None
            if sub._policy is not None and sub.groups == len(mem2):
                ts = time.monotonic()
                arr = sub._policy if isinstance(sub._policy, PolicyArrays) else PolicyArrays(g_cp, sub._policy)
                first_policy, first_label = expand_arrays(cp, g_cp, arr, mem2), "grouped"
                t_build = time.monotonic() - ts
    # otherwise the first answer: admit on arrival, capacity-proportional (cheap at any size); simulated once in detail
    # (at scale built per class of flows with the same entries, :func:`.nearby.admit_classes`)
    admit_pol: Policy | PolicyArrays | None = None
    if first_policy is None:
        first_policy = admit_pol = admit_classes(cp) if scale else admit_arrays(cp)
    ts = time.monotonic()
    first_res = simulate_policy(cp, first_policy)
    t_sim = time.monotonic() - ts
    first_score = first_res.score
    ts = time.monotonic()
    _, first_full = _expand(cp, problem, members, {}, first_res, refused, want_plan=False)
    t_out = time.monotonic() - ts
    first_s = time.monotonic() - t0
    # every later stage stops by ``stop``: 80% of the deadline, and early enough to leave the output its time
    # (a detailed simulation and its expansion to the problem's own flows, as long as the first answer's took, x1.5)
    reserve = 1.5 * (t_sim + t_out)
    stop = min(t0 + 0.8 * (deadline - t0), deadline - reserve) if deadline is not None else None

    def fits(cost: float) -> bool:
        return stop is None or time.monotonic() + cost < stop

    cands: dict[str, tuple[float, Policy | PolicyArrays, list[RouteSpec] | None]] = {
        first_label: (first_score, first_policy, None)
    }
    if admit_pol is None and fits(t_sim + 1.5 * t_build):
        # admit on arrival over every flow, when its build and simulation fit: built per class of flows with the same
        # entries and given to every member like the groups' plan (issue 50; per flow it took about a simulation)
        admit_pol = admit_classes(cp)
        if fits(t_sim):
            cands["admit"] = (simulate_policy(cp, admit_pol, detail=False).score, admit_pol, None)

    # whole-plan baselines of the route builder: admit on arrival at the best pool per step, and backlog
    # everything possible, last epoch first (each costs one route build and one simulation)
    for mode in ("admit-best", "backlog-all") if params.route_baselines else ():
        led = Ledger(cp)
        rs: list[RouteSpec] = []
        try:
            for e in reversed(range(E)):
                rs += build_epoch(cp, led, epoch_items(cp, e), heuristic_order(cp, epoch_items(cp, e)), th,
                                  "admit" if mode == "admit-best" else "hold", stop=stop)
        except Late:
            break
        pol = policy_from_routes(cp, rs)
        if not fits(t_sim):
            break
        cands[mode] = (simulate_policy(cp, pol, detail=False).score, pol, rs)

    # the LP bound (issue 36): within a quarter of the time left, on the grouped problem (the relaxation of a
    # group is that of its members summed), plus the refused flows' cost when nothing of them is served
    bound: float | None = None
    if params.bound and fits(0.0):
        lb = lp_bound(cp, time_limit_s=0.25 * (stop - time.monotonic()) if stop is not None else None)
        if lb is not None:
            bound = lb.value + sum(no_service_cost(full_cp, f, a, n) for f, a, n, _s, _p in cohorts(full_cp)
                                   if f in refused)
            if fits(t_sim):
                # the LP's solution as a whole-plan candidate (the search's LP seed)
                b0 = admit_pol if admit_pol is not None else first_policy
                base = b0.to_policy() if isinstance(b0, PolicyArrays) else b0
                pol_lp = lp_policy(cp, lb, base)
                cands["lp"] = (simulate_policy(cp, pol_lp, detail=False).score, pol_lp, None)

    if bound is None and group_bound is not None:
        bound = group_bound + sum(no_service_cost(full_cp, f, a, n) for f, a, n, _s, _p in cohorts(full_cp)
                                  if f in refused)

    # Level 3 over Level 2; each epoch keeps the best of the GA's ordering, admit on arrival and backlog-all
    ledger = Ledger(cp)
    committed: list[RouteSpec] = []
    evaluations = 0
    timed_out = False
    optimised = 0
    seed_scores: list[float] = []
    ga_scores: list[float] = []
    for e in reversed(range(E)):
        if not fits(0.0):
            timed_out = True
            break
        items = epoch_items(cp, e)
        if not items:
            optimised += 1
            continue

        def evaluate(
            order: list[int], e: int = e, items: list[Item] = items, committed: list[RouteSpec] = committed,
            mode: str = "route", base: Ledger = ledger,
        ) -> float:
            led = base.copy()
            try:
                routes = build_epoch(cp, led, items, order, th, mode, stop=stop)
            except Late:
                return math.inf
            if not fits(t_sim):
                return math.inf
            return simulate_policy(cp, policy_from_routes(cp, committed + routes), start_epoch=e, detail=False).score

        seeds = [heuristic_order(cp, items), utility_order(cp, items)]
        ga = steady_state_ga(len(items), evaluate, params.evaluations, rng, seeds=seeds, deadline=stop,
                             crossover_rate=params.crossover_rate)
        evaluations += ga.evaluations
        if not math.isfinite(ga.best_score):
            timed_out = True
            break
        seed_scores.append(min(ga.history[: len(seeds)]) if ga.history else float("inf"))
        ga_scores.append(ga.best_score)
        best_mode, best_score = "route", ga.best_score
        for mode in ("admit", "hold"):
            sc = evaluate(seeds[0], mode=mode)
            if not math.isfinite(sc):
                break
            evaluations += 1
            if sc < best_score - 1e-9:
                best_mode, best_score = mode, sc
        order = ga.best if best_mode == "route" else seeds[0]
        led = ledger.copy()
        try:
            committed += build_epoch(cp, led, items, order, th, best_mode, stop=stop)
        except Late:
            timed_out = True
            break
        ledger = led
        optimised += 1
        if ga.timed_out:
            timed_out = True
            break
    if optimised > 0:
        # epochs not reached: admit on arrival at the best pool against the optimised epochs' loads
        try:
            for e in reversed(range(E - optimised)):
                committed += build_epoch(cp, ledger, epoch_items(cp, e), heuristic_order(cp, epoch_items(cp, e)),
                                         th, "admit", stop=stop)
            pol = policy_from_routes(cp, committed)
            if fits(t_sim):
                cands["search"] = (simulate_policy(cp, pol, detail=False).score, pol, committed)
        except Late:
            timed_out = True
    chosen = min(cands, key=lambda k: (cands[k][0], k != "search"))
    exhaustive = False
    if 0 < len(cands[chosen][1]) <= params.exact_combinations and fits(t_sim):
        # every epoch's decisions together, over a grid, on instances small enough to enumerate (:mod:`.exact`)
        sc0, pol0, _ = cands[chosen]
        ex = exhaust(cp, pol0.to_policy() if isinstance(pol0, PolicyArrays) else pol0, sc0, fits, t_sim,
                     params.exact_combinations)
        if ex is not None:
            evaluations += ex.runs
            exhaustive = ex.complete
            timed_out = timed_out or not ex.complete
            if ex.policy is not None:
                cands["exact"] = (ex.score, ex.policy, None)
                chosen = "exact"
    if 0 < len(cands[chosen][1]) <= params.polish_entries and fits(t_sim) and not (exhaustive and chosen == "exact"):
        sc0, pol0, _ = cands[chosen]
        base = pol0.to_policy() if isinstance(pol0, PolicyArrays) else pol0
        pol_p, sc_p, runs = polish(cp, base, sc0, fits, t_sim)
        evaluations += runs
        if sc_p < sc0:
            cands["polish"] = (sc_p, pol_p, None)
            chosen = "polish"
    _, policy, routes = cands[chosen]
    final = first_res if chosen == first_label else simulate_policy(cp, policy)
    if chosen == first_label:
        result = first_full
    else:
        _, result = _expand(cp, problem, members, {}, final, refused, want_plan=False)

    def make_plan(policy: Policy | PolicyArrays = policy, routes: list[RouteSpec] | None = routes) -> Plan:
        pol = policy.to_policy() if isinstance(policy, PolicyArrays) else policy
        was = gc.isenabled()
        gc.disable()
        try:
            plan, _ = _expand(cp, problem, members, pol, final, refused)
            if routes is not None and len(members) == len(problem.flows) and not refused:
                plan = Plan(entries=plan.entries, routes=_routes_out(cp, routes, members, problem))
            return plan
        finally:
            if was:
                gc.enable()

    def make_compact(policy: Policy | PolicyArrays = policy) -> CompactPlan:
        stub = SimResult.model_construct(**{**dict(final), "flows": ()})  # the entries only, not the figures
        was = gc.isenabled()
        gc.disable()
        try:
            off, _ = _expand(cp, problem, [], {}, stub, refused) if refused else (Plan(entries=()), None)
            by: dict[str, list[PolicyEntry]] = {}
            for x in off.entries:
                by.setdefault(x.flow, []).append(x)
            return compact(cp, policy, lambda g: [problem.flows[f].name for f in members[g]],
                           lambda sub: list(_expand(cp, problem, members, sub, stub, {})[0].entries),
                           [PlanClass(flows=(f,), entries=tuple(v)) for f, v in by.items()])
        finally:
            if was:
                gc.enable()

    def make_epoch(epoch: int, policy: Policy | PolicyArrays = policy) -> tuple[PolicyEntry, ...]:
        if isinstance(policy, PolicyArrays):
            pol = policy.at_epoch(epoch).to_policy()
        else:
            pol = {k: v for k, v in policy.items() if k[0] == epoch}
        was = gc.isenabled()
        gc.disable()
        try:
            stub = SimResult.model_construct(**{**dict(final), "flows": ()})  # the entries only, not the figures
            plan, _ = _expand(cp, problem, members, pol, stub, refused)
            return tuple(x for x in plan.entries if x.epoch == epoch)
        finally:
            if was:
                gc.enable()
    extra = result.score - final.score
    # cohorts no schedule completes while they live: refused at entry by every candidate, reported once per cohort
    for (g, a), k in sorted(doomed_cohorts(cp).items(), key=lambda x: (x[0][1], x[0][0])):
        fl = cp.problem.flows[g]
        for f in members[g]:
            if a >= 0 and problem.flows[f].arrival_rate[a] <= 0:
                continue
            when = f"the jobs of epoch {a}" if a >= 0 else "the jobs waiting now"
            unroutable.append(Unroutable(
                flow=problem.flows[f].name, step=fl.steps[k].name, step_index=k, cohort=a,
                reason=f"step {fl.steps[k].name}: no allowed pool has positive capacity while {when} live"))
    return PlanResult(
        entries=len(policy),
        result=result,
        first_score=first_score + extra,
        evaluations=evaluations,
        elapsed_s=time.monotonic() - t0,
        timed_out=timed_out,
        epochs_optimised=optimised,
        baselines={k: v[0] + extra for k, v in cands.items()},
        chosen=chosen,
        unroutable=tuple(unroutable),
        groups=len(members),
        bound=bound,
        gap=gap(result.score, bound) if bound is not None else None,
        first_answer_s=first_s,
        seed_scores=tuple(seed_scores),
        ga_scores=tuple(ga_scores),
        exhaustive=exhaustive,
    ).with_plan(make_plan, policy, make_epoch, make_compact)


__all__ = ["PlanResult", "PlannerParams", "admit_policy", "heuristic_order", "plan_flows", "utility_order"]
