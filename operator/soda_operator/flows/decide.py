"""The plan of an epoch: JobFlows, FlowPools and the jobs in the clusters -> the planner's
:class:`soda_optimizer.flows.Problem` -> :func:`soda_optimizer.flows.plan_flows` -> the current epoch's policy
entries (Montana & Zinky, section 2.3: a policy is, per flow and step, the probabilities of each allowed cluster and
of backlog; 2.4: epochs; 3: the planner). Pure: no API call; the handlers run :func:`plan` in a thread.

The flows of one ``epochSeconds`` are planned together, the horizon starting at the current epoch (the problem's
epoch 0). Units at the edge: seconds and jobs per epoch; the problem's are minutes and jobs per minute.
Departure: the jobs already in the system enter as the problem's ``waiting`` jobs (the paper carries backlog and
queues across epoch boundaries inside one simulation, section 2.5; here each epoch is planned afresh from the
clusters as they are).

Bounded (issue 45): the flows planned together are one *group*, a connected component of the flows and the pools
they name (:func:`groups`): flows that share no FlowPool are planned apart, so one namespace's flow never moves the
plan of a flow it shares nothing with, nor spends its deadline. A group is planned through the one entry
(:func:`soda_optimizer.systems.decide`, system ``flows``) under its smallest ``planner.deadlineSeconds``, each flow's
arrivals capped first at what its pools can serve (:func:`soda_optimizer.flows.limits.cap_arrivals`;
:attr:`Planned.capped` in jobs per epoch, reported in the flow's status and obeyed by the forecast generator).
Each flow's model is built alone (:func:`build`): a flow naming a FlowPool not shared with its namespace
(``allowedNamespaces``) or whose model cannot be built is refused with the field (:attr:`Planned.refused`) and the
others are planned as without it.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import networkx as nx
from pydantic import ValidationError

from soda_optimizer import flows as fl
from soda_optimizer import systems
from soda_optimizer.flows import limits

from ..kube import clock
from ..kube.errors import TranslationError
from .jobs import FlowJob
from .spec import FlowSpec, PoolSpec, check_shared

CURRENT, EARLIER = "current", "earlier"  # the cohorts a tick reads: arrived in this epoch, or waiting at its start
Entries = Mapping[tuple[str, int], tuple[dict[str, float], float]]  # (cohort, step) -> (pool probabilities, backlog)


@dataclass(frozen=True)
class Planned:
    """One epoch length's plan at epoch ``k``, or why there is none."""

    fingerprint: tuple[Any, ...]  # the epoch and the objects' generations it was made from
    k: int
    result: fl.PlanResult | None
    error: str | None
    seconds: float
    at: str
    capped: Mapping[str, tuple[float, float]] = field(default_factory=dict)  # flow key -> (asked, cap), jobs per epoch
    epoch0: Mapping[str, list[fl.PolicyEntry]] | None = None  # the plan's epoch-0 entries by flow, built in the thread
    refused: Mapping[str, tuple[str, str]] = field(default_factory=dict)  # flow key -> (field, message): in no plan


@dataclass(frozen=True)
class Built:
    """The planner's problem for the flows that could be taken, and the others with why (flow key -> (field, message))."""

    problem: fl.Problem | None  # None: no flow could be taken
    flows: tuple[FlowSpec, ...]
    refused: Mapping[str, tuple[str, str]]


_FLOW_FIELDS = {"lifespan": "spec.lifespanSeconds", "utility": "spec.utility", "arrival_rate": "spec.arrivals.forecast",
                "name": "metadata.name"}
_STEP_FIELDS = {"run_time": "runSeconds", "pools": "pools", "name": "name"}


def _refusal(e: ValidationError, fields: Mapping[str, str], prefix: str) -> TranslationError:
    err = e.errors()[0]
    head = str(err["loc"][0]) if err["loc"] else ""
    return TranslationError(fields.get(head, prefix), str(err["msg"]).removeprefix("Value error, "))


def _model(f: FlowSpec, pools: Mapping[str, PoolSpec], k: int, horizon: int, em: float, jobs: Sequence[FlowJob], now: float
           ) -> tuple[fl.Flow, dict[tuple[str, int, str | None], list[float]]]:
    """One flow as the planner's :class:`~soda_optimizer.flows.Flow` (minutes, jobs per minute) and its jobs in the
    system by (flow, step, pool); a :class:`TranslationError` naming the field the model cannot take."""
    steps = []
    for i, s in enumerate(f.steps):
        try:
            steps.append(fl.Step(name=s.name, run_time=s.run_seconds / 60.0, pools=tuple(p for p in s.pools if p in pools)))
        except ValidationError as e:
            raise _refusal(e, {k_: f"spec.steps[{i}].{v}" for k_, v in _STEP_FIELDS.items()}, f"spec.steps[{i}]") from e
    try:
        model = fl.Flow(name=f.key, steps=tuple(steps), lifespan=f.lifespan_s / 60.0, utility=f.utility,
                        arrival_rate=tuple(f.forecast_at(k + e) / em for e in range(horizon)))
    except ValidationError as e:
        raise _refusal(e, _FLOW_FIELDS, "spec") from e
    waiting: dict[tuple[str, int, str | None], list[float]] = {}
    for j in jobs:
        cur = j.current
        if cur.deleting or cur.failed:
            continue
        remaining = (j.arrived + f.lifespan_s - now) / 60.0
        if remaining <= 0:
            continue
        if cur.complete:
            if cur.step + 1 >= len(f.steps):
                continue
            where: tuple[str, int, str | None] = (f.key, cur.step + 1, None)
        else:
            pool = cur.pool if cur.pool in steps[cur.step].pools else None
            where = (f.key, cur.step, None if cur.suspended or pool is None else pool)
        waiting.setdefault(where, []).append(remaining)
    return model, waiting


def build(flows: Sequence[FlowSpec], pools: Mapping[str, PoolSpec], k: int, jobs: Mapping[str, Sequence[FlowJob]], now: float,
          discount_per_hour: float = 0.995) -> Built:
    """The planner's problem for the flows of one epoch length at epoch ``k`` (the problem's epoch 0): times in
    minutes, arrivals in jobs per minute, the pools the flows name (capacity cycled from ``k``), and as waiting jobs
    the flow jobs in the system now (a backlogged step Job: backlog; any other unfinished one: its pool's queue),
    with their remaining lifespans. ``jobs`` is keyed by the flow's ``key``.

    Each flow is taken alone (issue 45): one that names a FlowPool not shared with its namespace
    (:func:`.spec.check_shared`) or whose model cannot be built (a lifespan that rounds to 0 minutes, stored before
    the CRD's minimum) is refused with the field, and the problem (its horizon included) is the other flows'."""
    refused: dict[str, tuple[str, str]] = {}
    ok = []
    for f in flows:
        try:
            check_shared(f, pools)
            ok.append(f)
        except TranslationError as e:
            refused[f.key] = (e.field, e.message)
    em = flows[0].epoch_s / 60.0 if flows else 1.0
    built: dict[str, tuple[fl.Flow, dict[tuple[str, int, str | None], list[float]]]] = {}
    while ok:
        horizon = max(f.horizon for f in ok)
        built = {}
        for f in ok:
            try:
                built[f.key] = _model(f, pools, k, horizon, em, jobs.get(f.key, ()), now)
            except TranslationError as e:
                refused[f.key] = (e.field, e.message)
        if len(built) == len(ok):
            break
        ok = [f for f in ok if f.key in built]  # a shorter horizon: built again without the refused flows
    if not ok:
        return Built(None, (), refused)
    names = sorted({p for f in ok for s in f.steps for p in s.pools if p in pools})
    out_pools = tuple(fl.Pool(name=n, capacity=tuple(pools[n].capacity_at(k + e) for e in range(horizon)),
                              load_map=fl.LoadMap(points=pools[n].load_map)) for n in names)
    waiting: dict[tuple[str, int, str | None], list[float]] = {}
    for f in ok:
        waiting.update(built[f.key][1])
    out_waiting = tuple(fl.Waiting(flow=fk, step=s, pool=p, jobs=float(len(r)), min_remaining=min(r), max_remaining=max(r))
                        for (fk, s, p), r in sorted(waiting.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2] or "")))
    problem = fl.Problem(pools=out_pools, flows=tuple(built[f.key][0] for f in ok), epochs=horizon, epoch_length=em,
                         discount_per_hour=discount_per_hour, waiting=out_waiting)
    return Built(problem, tuple(ok), refused)


def problem_of(flows: Sequence[FlowSpec], pools: Mapping[str, PoolSpec], k: int, jobs: Mapping[str, Sequence[FlowJob]], now: float,
               discount_per_hour: float = 0.995) -> fl.Problem:
    """:func:`build`'s problem when every flow can be taken; else the first refused flow's :class:`TranslationError`."""
    b = build(flows, pools, k, jobs, now, discount_per_hour)
    for field_, message in b.refused.values():
        raise TranslationError(field_, message)
    assert b.problem is not None
    return b.problem


def groups(flows: Sequence[FlowSpec], pools: Mapping[str, PoolSpec]) -> list[list[FlowSpec]]:
    """The flows in connected groups: two flows are in one group when they name a common FlowPool (directly, or
    through a chain of flows and pools; pools that do not exist, or are not shared with the flow's namespace,
    connect nothing). Each group sorted by key, the
    groups by their first key."""
    g: nx.Graph = nx.Graph()
    for f in flows:
        g.add_node(("flow", f.key))
    for f in flows:  # a flow connects only to the pools shared with its namespace (the others refuse it: :func:`build`)
        for s in f.steps:
            for p in s.pools:
                if p in pools and pools[p].allows(f.namespace):
                    g.add_edge(("flow", f.key), ("pool", p))
    by_key = {f.key: f for f in flows}
    out = [sorted((by_key[k] for kind, k in comp if kind == "flow"), key=lambda f: f.key) for comp in nx.connected_components(g)]
    return sorted((c for c in out if c), key=lambda c: c[0].key)


def group_key(flows: Sequence[FlowSpec]) -> str:
    """A group's name: its flows' keys."""
    return ",".join(sorted(f.key for f in flows))


def fingerprint(flows: Sequence[FlowSpec], pools: Mapping[str, PoolSpec], k: int) -> tuple[Any, ...]:
    """What a plan is made from: a new epoch, or a JobFlow's or FlowPool's new generation, asks for a new one."""
    return (k, tuple(sorted((f.key, f.generation) for f in flows)), tuple(sorted((p.name, p.generation) for p in pools.values())))


def plan(flows: Sequence[FlowSpec], pools: Mapping[str, PoolSpec], k: int, jobs: Mapping[str, Sequence[FlowJob]],
         now: float) -> Planned:
    """The plan of one epoch length's flows at epoch ``k``, under the smallest deadline and the largest budget among
    the flows taken (:func:`build`: a flow it refuses is in :attr:`Planned.refused` with the field, and neither its
    model nor its planner settings touch the others' plan); a problem the planner refuses becomes a
    :class:`Planned` with the error (reported in status; the flows keep their jobs)."""
    t0 = time.monotonic()
    fp = fingerprint(flows, pools, k)
    em = flows[0].epoch_s / 60.0
    refused: Mapping[str, tuple[str, str]] = {}
    try:
        built = build(flows, pools, k, jobs, now)
        refused = built.refused
        if built.problem is None:
            return Planned(fp, k, None, "no flow of the group can be planned", time.monotonic() - t0, clock.iso(time.time()) or "",
                           refused=refused)
        problem, capped = limits.cap_arrivals(built.problem)
        taken = built.flows
        deadline = min(f.deadline_s for f in taken)
        params = fl.PlannerParams(evaluations=max(f.evaluations for f in taken), deadline_s=deadline, seed=taken[0].seed)
        res = systems.decide("flows", params, problem, deadline).result
        # the plan's entries are built on first access, their size the horizon's square x steps: here, in the worker
        # thread, never on Kopf's loop by a tick (issue 45); those of epoch 0 alone, what the flows apply (issue 50:
        # 120,096 of 1,921,536 entries at 20,016 flows, 1.3 s and ~100 MiB instead of 8.5 s and ~2 GiB)
        index = _index(res.entries_at(0))
    except Exception as e:  # noqa: BLE001  (an invalid problem is reported in status, the flows keep their jobs)
        return Planned(fp, k, None, str(e)[:500], time.monotonic() - t0, clock.iso(time.time()) or "", refused=refused)
    return Planned(fp, k, res, None, time.monotonic() - t0, clock.iso(time.time()) or "",
                   {c.flow: (c.asked * em, c.cap * em) for c in capped}, index, refused)


# the last plans' epoch-0 entries by flow (each JobFlow's tick reads its own: one pass per plan, not one per flow,
# which at 20,000 flows and 720,000 entries would be 10^10 steps); a plan is held with its index, so its id is not
# reused while cached
_EPOCH0: dict[int, tuple[fl.Plan, dict[str, list[fl.PolicyEntry]]]] = {}


def _index(entries: Iterable[fl.PolicyEntry]) -> dict[str, list[fl.PolicyEntry]]:
    """The entries of epoch 0 by flow."""
    idx: dict[str, list[fl.PolicyEntry]] = {}
    for e in entries:
        if e.epoch == 0:
            idx.setdefault(e.flow, []).append(e)
    return idx


def _epoch0(plan: fl.Plan) -> dict[str, list[fl.PolicyEntry]]:
    got = _EPOCH0.get(id(plan))
    if got is None or got[0] is not plan:
        idx = _index(plan.entries)
        if len(_EPOCH0) >= 8:
            _EPOCH0.clear()
        _EPOCH0[id(plan)] = got = (plan, idx)
    return got[1]


def current_entries(plan: fl.Plan | Planned, flow_key: str) -> dict[tuple[str, int], tuple[dict[str, float], float]]:
    """The plan's entries of the problem's epoch 0 (the current epoch) for one flow: (cohort, step) -> (pool
    probabilities, backlog probability); cohort ``current`` = arrived in this epoch, ``earlier`` = waiting at 0.
    Given a :class:`Planned`, its index built with the plan."""
    if isinstance(plan, Planned):
        index = plan.epoch0 if plan.epoch0 is not None else _epoch0(plan.result.plan) if plan.result is not None else {}
    else:
        index = _epoch0(plan)
    out: dict[tuple[str, int], tuple[dict[str, float], float]] = {}
    for e in index.get(flow_key, ()):
        cohort = CURRENT if e.cohort == 0 else EARLIER if e.cohort == fl.model.INITIAL_COHORT else None
        if cohort is not None:
            # the share the plan refuses (no route can complete it) is held in backlog: a suspended Job takes nothing
            out[(cohort, e.step)] = (dict(e.pools), e.backlog + e.refused)
    return out


def planned_figures(result: fl.SimResult, flow_key: str, utility: float) -> dict[str, float]:
    """What the plan expects of a flow in the current epoch (problem epoch 0): jobs and utility."""
    acc = {"arrivals": 0.0, "completed": 0.0, "backlogged": 0.0, "released": 0.0, "dropped": 0.0}
    for s in result.flows:
        if s.flow == flow_key and s.epoch == 0:
            acc["arrivals"] += s.arrived
            acc["completed"] += s.completed
            acc["backlogged"] += s.backlogged
            acc["released"] += s.released
            acc["dropped"] += s.dropped
    acc["utility"] = acc["completed"] * utility
    return {k: round(v, 3) for k, v in acc.items()}
