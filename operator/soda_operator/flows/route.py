"""One tick of a flow by the plan: each job that needs a step goes to a pool or to backlog (Montana & Zinky,
section 2.3: the routing/backlog policy is a set of probabilities per flow and step; 2.2: backlogged jobs are
released when the policy is updated). Pure: the Jobs in the clusters and the plan's entries in, :class:`Actions`
out (:mod:`.apply` writes them).

Departures: the paper's policy acts on fluid flows; jobs here are whole, so the destinations of one (epoch, cohort,
step) entry are apportioned by largest deficit (probability x decided - already sent), and small counts follow the
probabilities exactly; a (cohort, step) the plan has no entry for (it expected no such jobs) goes to the allowed pool
with the most capacity now, else backlog (:func:`fallback`). A job past its lifespan, or whose step Job failed, is
dropped (the paper discards it from its queue, section 2.2).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from soda_optimizer import flows as fl

from .decide import CURRENT, EARLIER, Entries
from .jobs import FlowJob, Request, StepJob
from .spec import FlowSpec, PoolSpec, StepSpec, epoch_index

BACKLOG = fl.BACKLOG


@dataclass
class Create:
    """A step Job to create: in ``pool`` (None: backlogged, suspended in this cluster)."""

    job_id: str
    step: int
    pool: str | None
    arrived: float
    epoch: int
    decision: str
    template: Mapping[str, Any]


@dataclass
class Release:
    job: StepJob
    pool: str
    decision: str


@dataclass
class Actions:
    create: list[Create] = field(default_factory=list)
    release: list[Release] = field(default_factory=list)
    delete: list[StepJob] = field(default_factory=list)  # dropped jobs' unfinished step Jobs
    dropped: list[tuple[str, int, str]] = field(default_factory=list)  # (job id, step, why)
    completed: list[StepJob] = field(default_factory=list)  # last step Jobs to mark counted
    finished_dropped: list[StepJob] = field(default_factory=list)  # a dropped job's completed step Jobs: mark counted (dropped)
    take: list[Request] = field(default_factory=list)  # requests to suspend and annotate
    hold: list[tuple[StepJob, str]] = field(default_factory=list)  # backlogged Jobs kept backlogged: the new decision
    keys: set[tuple[Any, ...]] = field(default_factory=set)  # what was acted on (see :func:`route`'s ``recent``)
    counts: dict[str, float] = field(default_factory=dict)  # arrivals, completed, backlogged, released, dropped, utility


def fallback(step: StepSpec, pools: Mapping[str, PoolSpec], k: int, namespace: str | None = None) -> tuple[dict[str, float], float]:
    """No plan entry (the planner expected no such jobs): the allowed pool with the most capacity now, else backlog.
    ``namespace``: the flow's (a pool not shared with it is never chosen); None: any."""
    best = max((p for p in step.pools if p in pools and pools[p].capacity_at(k) > 0
                and (namespace is None or pools[p].allows(namespace))),
               key=lambda p: (pools[p].capacity_at(k), p), default=None)
    return ({best: 1.0}, 0.0) if best else ({}, 1.0)


def apportion(probs: Mapping[str, float], backlog: float, sent: Mapping[str, int]) -> str:
    """The destination (a pool or ``backlog``) with the largest deficit p x (n + 1) - sent, n = decided so far;
    ties by the larger probability, then name. Deterministic: the same counts give the same answer."""
    dests = {**{p: v for p, v in probs.items() if v > 1e-9}, **({BACKLOG: backlog} if backlog > 1e-9 else {})}
    if not dests:
        return BACKLOG
    n = sum(sent.get(d, 0) for d in dests) + 1
    return max(sorted(dests), key=lambda d: (dests[d] * n - sent.get(d, 0), dests[d]))


def _decision(k: int, cohort: str, dest: str) -> str:
    return f"{k}/{cohort}/{dest}"


def due_arrivals(flow: FlowSpec, k: int, now: float, generated: int, cap: float | None = None) -> int:
    """How many forecast jobs of epoch ``k`` are due by ``now`` (evenly spaced, the first half a gap in) minus the
    ``generated`` ones already made (mode ``forecast``; 0 otherwise). Fractional forecasts round down. ``cap``: the
    plan's cap of the flow's arrivals per epoch (what its pools can serve, issue 45), generated no more."""
    if flow.mode != "forecast":
        return 0
    n = int(math.floor(min(flow.forecast_at(k), math.inf if cap is None else cap) + 1e-9))
    if n <= 0:
        return 0
    start = k * flow.epoch_s
    due = sum(1 for j in range(n) if start + (j + 0.5) * flow.epoch_s / n <= now)
    return max(0, due - generated)


def route(flow: FlowSpec, pools: Mapping[str, PoolSpec], jobs: Sequence[FlowJob], requests: Sequence[Request], entries: Entries,
          k: int, now: float, new_ids: Sequence[str] = (), recent: set[tuple[Any, ...]] | frozenset[tuple[Any, ...]] = frozenset()) -> Actions:
    """One tick of a flow, pure. ``jobs``: the flow jobs in the clusters; ``requests``: the user's labelled Jobs;
    ``entries``: :func:`.decide.current_entries` of the plan for epoch ``k``; ``new_ids``: forecast arrivals due now;
    ``recent``: keys of what earlier ticks acted on that the clusters may not show yet (``("req", name)``,
    ``("step", job, step)`` created, ``("rel", job, step)`` released or held, ``("done", job)``), skipped; the keys
    acted on now are in ``Actions.keys``."""
    out = Actions(counts={"arrivals": 0, "completed": 0, "backlogged": 0, "released": 0, "dropped": 0, "utility": 0.0})
    last = len(flow.steps) - 1
    # decisions already made in this epoch, per (cohort, step) and destination
    sent: dict[tuple[str, int], dict[str, int]] = {}
    for j in jobs:
        for s in j.steps:
            parts = s.decision.split("/")
            if len(parts) == 3 and parts[0] == str(k):
                d = sent.setdefault((parts[1], s.step), {})
                d[parts[2]] = d.get(parts[2], 0) + 1

    def choose(cohort: str, step: int) -> tuple[str, str]:
        probs, bl = entries.get((cohort, step)) or fallback(flow.steps[step], pools, k, flow.namespace)
        probs = {p: v for p, v in probs.items() if p in pools and pools[p].allows(flow.namespace)}
        if not probs and bl <= 1e-9:
            probs, bl = fallback(flow.steps[step], pools, k, flow.namespace)
        counts = sent.setdefault((cohort, step), {})
        dest = apportion(probs, bl, counts)
        counts[dest] = counts.get(dest, 0) + 1
        return dest, _decision(k, cohort, dest)

    def place(job_id: str, step: int, arrived: float, epoch: int, template: Mapping[str, Any]) -> None:
        cohort = CURRENT if epoch == k else EARLIER
        dest, why = choose(cohort, step)
        pool = None if dest == BACKLOG else dest
        out.create.append(Create(job_id, step, pool, arrived, epoch, why, template))
        out.keys.add(("step", job_id, step))
        if pool is None:
            out.counts["backlogged"] += 1

    existing = {j.id for j in jobs}
    for r in sorted(requests, key=lambda r: (r.created, r.name)):
        if r.taken or r.name in existing or ("req", r.name) in recent:
            continue  # taken in earlier (its flow job may be gone since: dropped or cleaned up)
        out.take.append(r)
        out.keys.add(("req", r.name))
        out.counts["arrivals"] += 1
        if now > r.created + flow.lifespan_s:
            out.dropped.append((r.name, 0, "lifespan passed before it was taken in"))
            out.counts["dropped"] += 1
            continue
        place(r.name, 0, r.created, epoch_index(r.created, flow.epoch_s), r.template)
    for jid in new_ids:
        if jid in existing or ("step", jid, 0) in recent:
            continue
        out.counts["arrivals"] += 1
        place(jid, 0, now, k, flow.steps[0].template)
    for j in jobs:
        cur = j.current
        if cur.deleting or any(s.counted for s in j.steps):
            continue  # being deleted, or finished and counted (completed, or dropped after some steps)
        if cur.complete and cur.step >= last:
            if not cur.counted and ("done", j.id) not in recent:
                out.completed.append(cur)
                out.keys.add(("done", j.id))
                out.counts["completed"] += 1
                out.counts["utility"] += flow.utility
            continue
        if now > j.arrived + flow.lifespan_s or cur.failed:
            if not cur.complete:
                out.delete.append(cur)
            out.finished_dropped += [s for s in j.steps if s.complete and not s.deleting]
            out.dropped.append((j.id, cur.step + (1 if cur.complete else 0), "step Job failed" if cur.failed else "lifespan passed"))
            out.counts["dropped"] += 1
            continue
        if cur.complete:
            nxt = cur.step + 1
            if nxt < len(flow.steps) and ("step", j.id, nxt) not in recent:
                place(j.id, nxt, j.arrived, j.epoch, flow.steps[nxt].template)
            continue
        if cur.suspended and cur.pool is None:
            if cur.decision.split("/")[0] == str(k) or ("rel", j.id, cur.step) in recent:
                continue  # decided in this epoch already: stays backlogged until the next epoch
            cohort = CURRENT if j.epoch == k else EARLIER
            dest, why = choose(cohort, cur.step)
            out.keys.add(("rel", j.id, cur.step))
            if dest != BACKLOG:
                out.release.append(Release(cur, dest, why))
                out.counts["released"] += 1
            else:
                out.hold.append((cur, why))
    return out

