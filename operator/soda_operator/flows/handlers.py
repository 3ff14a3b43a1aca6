"""Routing and backlogging flows of multi-step batch jobs across node pools and member clusters (issue 18, the
Kubernetes side; the pure planner is :mod:`soda_optimizer.flows`, docs/flows.md).

Objects:

- ``FlowPool`` (cluster-scoped, ``crds/flowpools.yaml``): a pool of the paper -- nodes of this cluster matching
  ``spec.nodeSelector``, or another cluster reached through a kubeconfig Secret (``spec.cluster.kubeconfigSecret``,
  optionally narrowed there by ``spec.nodeSelector``); ``spec.capacity`` per epoch (concurrent standard step Jobs;
  the list is cycled) and ``spec.loadMap`` (normalised load -> throughput).
- ``JobFlow`` (namespaced, ``crds/jobflows.yaml``): ordered ``spec.steps`` (a ``batch/v1`` Job template, a mean run
  time, the allowed pools), ``utility``, ``lifespanSeconds``, ``arrivals`` (``forecast``: jobs per epoch, cycled;
  ``mode: forecast`` makes the operator create the jobs itself at that rate, a load generator; ``mode: external``
  uses the forecast for planning only), ``epochSeconds`` and ``horizonEpochs``.

Epochs are aligned to the Unix clock: epoch k covers [k x epochSeconds, (k + 1) x epochSeconds). Every tick
(:func:`flow_tick`, a Kopf timer per JobFlow; the translations below are pure):

1. once per epoch (or when a JobFlow's or FlowPool's generation changes) the JobFlows of one ``epochSeconds`` and
   the pools they name become one :class:`soda_optimizer.flows.Problem` (:func:`problem_of`: the horizon starts at
   the current epoch; the jobs already in the system are its ``waiting`` jobs) and ``plan_flows`` plans it under a
   deadline; the current epoch's policy entries go into each JobFlow's ``status.plan``;
2. arrivals: the forecast jobs due by now (mode ``forecast``), and any ``batch/v1`` Job labelled
   ``kubesoda.io/flow=<name>`` that kubesoda did not create (a *request*: kubesoda suspends it and runs its pod
   template as step 0, so the request itself never runs);
3. :func:`decide` applies the policy: a job needing a step (an arrival, a job whose previous step's Job completed,
   a backlogged job) goes to a pool or to backlog by the entry of (current epoch, flow, cohort, step), where cohort
   is "arrived in this epoch" or "earlier"; the destinations are apportioned by largest deficit (prob x decided -
   already sent there), so small counts follow the probabilities exactly. A step Job in a pool of this cluster has
   node affinity to the pool's selector; in a member cluster it is created there (same namespace, created if
   missing). A backlogged job is its step Job with ``spec.suspend: true`` in this cluster; on release it is
   given the pool's affinity and unsuspended (local pool), or created in the member cluster and the suspended one
   deleted;
4. a job whose lifespan has passed before its last step completed is dropped: its unfinished step Job is deleted
   (in whichever cluster), counted, and a ``FlowDropped`` Event posted;
5. ``status``: the figures per epoch (arrivals, completed, backlogged, released, dropped, utility earned vs the plan's
   utility of that epoch) and in total, where the jobs are now.

Step Jobs carry labels ``kubesoda.io/flow``, ``kubesoda.io/flow-job``, ``kubesoda.io/flow-step`` and (once placed)
``kubesoda.io/flow-pool``, and annotations with the arrival time, the arrival epoch and the last decision, so an
operator restart rebuilds everything from the clusters. Counters are kept in memory, seeded from the status.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import hashlib
import logging
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import kopf
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from soda_optimizer import flows as fl

from ..batch_dispatch import _time
from ..kube import conditions
from ..memo import Memo
from ..soda import crd
from . import kubeconfigs

log = logging.getLogger("kubesoda.flows")

LABEL_FLOW = "kubesoda.io/flow"
LABEL_JOB = "kubesoda.io/flow-job"
LABEL_STEP = "kubesoda.io/flow-step"
LABEL_POOL = "kubesoda.io/flow-pool"
ANN_ARRIVED = "kubesoda.io/flow-arrived"  # unix seconds of the flow job's arrival
ANN_EPOCH = "kubesoda.io/flow-epoch"  # the epoch index it arrived in (its cohort)
ANN_DECISION = "kubesoda.io/flow-decision"  # "<epoch>/<current|earlier>/<pool or backlog>" of the last decision
ANN_COUNTED = "kubesoda.io/flow-counted"  # "completed" on the last step Job, "dropped" on a dropped job's completed steps
ANN_REQUEST = "kubesoda.io/flow-request"  # on a request Job once taken in: the flow job's id
BACKLOG = fl.BACKLOG
CURRENT, EARLIER = "current", "earlier"
LOCAL = ""  # the cluster kubesoda runs in
TICK_S = 1.0
DEFAULT_MAP = ((0.0, 0.0), (1.0, 1.0), (2.0, 1.0))
EPOCHS_KEPT = 12
RECENT_S = 30.0  # what a tick did is not acted on again for this long (the watch may lag behind the writes)


# ------------------------------------------------------------------------------------ pure translation


@dataclass(frozen=True)
class PoolSpec:
    """A FlowPool: where (selector, member cluster) and how much (capacity per epoch, cycled; load map)."""

    name: str
    selector: Mapping[str, str]
    kubeconfig: tuple[str, str, str] | None  # Secret (namespace, name, key) of a member cluster
    capacity: tuple[float, ...]
    load_map: tuple[tuple[float, float], ...]
    generation: int = 0

    @property
    def cluster(self) -> str:
        """The cluster key step Jobs of this pool live in: LOCAL, or the pool's name for a member cluster."""
        return self.name if self.kubeconfig else LOCAL

    def capacity_at(self, k: int) -> float:
        return self.capacity[k % len(self.capacity)] if self.capacity else 0.0


@dataclass(frozen=True)
class StepSpec:
    name: str
    run_seconds: float
    pools: tuple[str, ...]
    template: Mapping[str, Any]  # the Job template: {"metadata": {...}, "spec": {...}}


@dataclass(frozen=True)
class FlowSpec:
    """A JobFlow. ``forecast`` is jobs per epoch, cycled over the absolute epoch index."""

    namespace: str
    name: str
    steps: tuple[StepSpec, ...]
    utility: float
    lifespan_s: float
    forecast: tuple[float, ...]
    mode: str  # "forecast" (kubesoda creates the jobs) or "external"
    epoch_s: float
    horizon: int
    evaluations: int = 20
    deadline_s: float = 2.0
    seed: int = 0
    generation: int = 0

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def forecast_at(self, k: int) -> float:
        return self.forecast[k % len(self.forecast)] if self.forecast else 0.0


@dataclass(frozen=True)
class StepJob:
    """A step Job of a flow job, in the cluster ``cluster`` (LOCAL or a member pool's name)."""

    cluster: str
    name: str
    job_id: str
    step: int
    pool: str | None  # None: backlogged (suspended, no pool yet)
    suspended: bool
    complete: bool
    failed: bool
    arrived: float
    epoch: int
    counted: bool = False
    decision: str = ""
    deleting: bool = False


@dataclass(frozen=True)
class Request:
    """A user's Job labelled ``kubesoda.io/flow=<name>``: an arrival of step 0."""

    name: str
    created: float
    suspended: bool
    taken: bool  # already annotated by kubesoda
    template: Mapping[str, Any]


@dataclass(frozen=True)
class FlowJob:
    """One job of a flow, through its steps: the step Jobs that exist for it."""

    id: str
    arrived: float
    epoch: int
    steps: tuple[StepJob, ...]

    @property
    def current(self) -> StepJob:
        live = [s for s in self.steps if not s.deleting] or list(self.steps)
        return max(live, key=lambda s: (s.step, not s.deleting))


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
    keys: set[tuple[Any, ...]] = field(default_factory=set)  # what was acted on (see ``decide``'s ``recent``)
    counts: dict[str, float] = field(default_factory=dict)  # arrivals, completed, backlogged, released, dropped, utility


def _f(v: Any, default: float) -> float:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return default
    return x if math.isfinite(x) else default


def epoch_index(now: float, epoch_s: float) -> int:
    return int(math.floor(now / epoch_s + 1e-9))


def pool_of(body: Mapping[str, Any]) -> PoolSpec:
    """A FlowPool object as a :class:`PoolSpec` (load map default: throughput = load up to 1, flat after)."""
    md, spec = body.get("metadata") or {}, body.get("spec") or {}
    ref = ((spec.get("cluster") or {}).get("kubeconfigSecret")) or None
    # namespace "": the operator's own, the only one it reads Secrets in (kubeconfigs.operator_namespace)
    kc = (str(ref.get("namespace") or ""), str(ref["name"]), str(ref.get("key") or "kubeconfig")) if ref and ref.get("name") else None
    pts = tuple(sorted((_f(p.get("load"), 0.0), _f(p.get("throughput"), 0.0)) for p in spec.get("loadMap") or []))
    if pts and pts[0] != (0.0, 0.0):
        pts = ((0.0, 0.0), *pts)
    return PoolSpec(
        name=str(md.get("name", "")),
        selector={str(k): str(v) for k, v in (spec.get("nodeSelector") or {}).items()},
        kubeconfig=kc,
        capacity=tuple(max(0.0, _f(c, 0.0)) for c in spec.get("capacity") or [0.0]),
        load_map=pts if len(pts) >= 2 else DEFAULT_MAP,
        generation=int(md.get("generation") or 0),
    )


def flow_of(body: Mapping[str, Any]) -> FlowSpec:
    """A JobFlow object as a :class:`FlowSpec` (defaults: epoch 240 s, horizon = the forecast's length)."""
    md, spec = body.get("metadata") or {}, body.get("spec") or {}
    arr = spec.get("arrivals") or {}
    forecast = tuple(max(0.0, _f(x, 0.0)) for x in arr.get("forecast") or [0.0])
    planner = spec.get("planner") or {}
    steps = tuple(
        StepSpec(
            name=str(s.get("name") or f"step-{i}"),
            run_seconds=max(1e-3, _f(s.get("runSeconds"), 60.0)),
            pools=tuple(str(p) for p in s.get("pools") or []),
            template=copy.deepcopy(dict(s.get("jobTemplate") or {})),
        )
        for i, s in enumerate(spec.get("steps") or [])
    )
    return FlowSpec(
        namespace=str(md.get("namespace") or "default"),
        name=str(md.get("name", "")),
        steps=steps,
        utility=max(1e-9, _f(spec.get("utility"), 1.0)),
        lifespan_s=max(1e-3, _f(spec.get("lifespanSeconds"), 3600.0)),
        forecast=forecast,
        mode=str(arr.get("mode") or "external"),
        epoch_s=max(1.0, _f(spec.get("epochSeconds"), 240.0)),
        horizon=max(1, int(_f(spec.get("horizonEpochs"), float(len(forecast))))),
        evaluations=max(1, int(_f(planner.get("evaluations"), 20))),
        deadline_s=max(0.05, _f(planner.get("deadlineSeconds"), 2.0)),
        seed=int(_f(planner.get("seed"), 0)),
        generation=int(md.get("generation") or 0),
    )


def _condition(st: Mapping[str, Any], kind: str) -> bool:
    return any(c.get("type") == kind and c.get("status") == "True" for c in st.get("conditions") or [])


def step_job_of(body: Mapping[str, Any], cluster: str) -> StepJob | None:
    """A Job kubesoda created for a flow step, None for any other Job."""
    md, spec, st = body.get("metadata") or {}, body.get("spec") or {}, body.get("status") or {}
    labels, ann = md.get("labels") or {}, md.get("annotations") or {}
    if LABEL_STEP not in labels or LABEL_JOB not in labels:
        return None
    try:
        step = int(labels[LABEL_STEP])
    except ValueError:
        return None
    return StepJob(
        cluster=cluster,
        name=str(md.get("name", "")),
        job_id=str(labels[LABEL_JOB]),
        step=step,
        pool=labels.get(LABEL_POOL) or None,
        suspended=bool(spec.get("suspend")),
        complete=_condition(st, "Complete"),
        failed=_condition(st, "Failed"),
        arrived=_f(ann.get(ANN_ARRIVED), _time(md.get("creationTimestamp")) or 0.0),
        epoch=int(_f(ann.get(ANN_EPOCH), 0)),
        counted=ANN_COUNTED in ann,
        decision=str(ann.get(ANN_DECISION) or ""),
        deleting=bool(md.get("deletionTimestamp")),
    )


def request_of(body: Mapping[str, Any]) -> Request | None:
    """A user's Job labelled with the flow (not a step Job kubesoda made): an arrival request."""
    md, spec = body.get("metadata") or {}, body.get("spec") or {}
    labels = md.get("labels") or {}
    if LABEL_FLOW not in labels or LABEL_STEP in labels:
        return None
    tmpl = copy.deepcopy(dict(spec.get("template") or {}))
    job_spec = {k: copy.deepcopy(v) for k, v in spec.items() if k in ("backoffLimit", "completions", "parallelism", "completionMode",
                                                                      "activeDeadlineSeconds", "podFailurePolicy")}
    return Request(name=str(md.get("name", "")), created=_time(md.get("creationTimestamp")) or time.time(), suspended=bool(spec.get("suspend")),
                   taken=ANN_REQUEST in (md.get("annotations") or {}), template={"metadata": {}, "spec": {**job_spec, "template": tmpl}})


def flow_jobs(steps: Iterable[StepJob]) -> list[FlowJob]:
    by: dict[str, list[StepJob]] = {}
    for s in steps:
        by.setdefault(s.job_id, []).append(s)
    out = []
    for jid, ss in sorted(by.items()):
        ss.sort(key=lambda s: (s.step, s.cluster, s.name))
        out.append(FlowJob(jid, min(s.arrived for s in ss), min(s.epoch for s in ss), tuple(ss)))
    return out


def problem_of(flows: Sequence[FlowSpec], pools: Mapping[str, PoolSpec], k: int, jobs: Mapping[str, Sequence[FlowJob]], now: float,
               discount_per_hour: float = 0.995) -> fl.Problem:
    """The planner's problem for the flows of one epoch length at epoch ``k`` (the problem's epoch 0): times in
    minutes, arrivals in jobs per minute, the pools the flows name (capacity cycled from ``k``), and as waiting jobs
    the flow jobs in the system now (a backlogged step Job: backlog; any other unfinished one: its pool's queue),
    with their remaining lifespans. ``jobs`` is keyed by the flow's ``key``."""
    epoch_s = flows[0].epoch_s
    horizon = max(f.horizon for f in flows)
    names = sorted({p for f in flows for s in f.steps for p in s.pools if p in pools})
    em = epoch_s / 60.0
    out_pools = tuple(fl.Pool(name=n, capacity=tuple(pools[n].capacity_at(k + e) for e in range(horizon)),
                              load_map=fl.LoadMap(points=pools[n].load_map)) for n in names)
    out_flows = []
    waiting: dict[tuple[str, int, str | None], list[float]] = {}
    for f in flows:
        steps = tuple(fl.Step(name=s.name, run_time=s.run_seconds / 60.0, pools=tuple(p for p in s.pools if p in pools)) for s in f.steps)
        out_flows.append(fl.Flow(name=f.key, steps=steps, lifespan=f.lifespan_s / 60.0, utility=f.utility,
                                 arrival_rate=tuple(f.forecast_at(k + e) / em for e in range(horizon))))
        for j in jobs.get(f.key, ()):
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
    out_waiting = tuple(fl.Waiting(flow=fk, step=s, pool=p, jobs=float(len(r)), min_remaining=min(r), max_remaining=max(r))
                        for (fk, s, p), r in sorted(waiting.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2] or "")))
    return fl.Problem(pools=out_pools, flows=tuple(out_flows), epochs=horizon, epoch_length=em, discount_per_hour=discount_per_hour,
                      waiting=out_waiting)


def current_entries(plan: fl.Plan, flow_key: str) -> dict[tuple[str, int], tuple[dict[str, float], float]]:
    """The plan's entries of the problem's epoch 0 (the current epoch) for one flow: (cohort, step) -> (pool
    probabilities, backlog probability); cohort ``current`` = arrived in this epoch, ``earlier`` = waiting at 0."""
    out: dict[tuple[str, int], tuple[dict[str, float], float]] = {}
    for e in plan.entries:
        if e.epoch != 0 or e.flow != flow_key:
            continue
        cohort = CURRENT if e.cohort == 0 else EARLIER if e.cohort == fl.model.INITIAL_COHORT else None
        if cohort is not None:
            out[(cohort, e.step)] = (dict(e.pools), e.backlog)
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


def valid_pool(pool: PoolSpec) -> bool:
    """The pool's load map is one the planner accepts (increasing loads, throughput not decreasing, <= load, <= 1)."""
    try:
        fl.LoadMap(points=pool.load_map)
    except ValueError:
        return False
    return True


def missing_pools(flow: FlowSpec, pools: Mapping[str, PoolSpec]) -> list[str]:
    return sorted({p for s in flow.steps for p in s.pools} - set(pools))


def fallback(step: StepSpec, pools: Mapping[str, PoolSpec], k: int) -> tuple[dict[str, float], float]:
    """No plan entry (the planner expected no such jobs): the allowed pool with the most capacity now, else backlog."""
    best = max((p for p in step.pools if p in pools and pools[p].capacity_at(k) > 0), key=lambda p: (pools[p].capacity_at(k), p), default=None)
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


def due_arrivals(flow: FlowSpec, k: int, now: float, generated: int) -> int:
    """How many forecast jobs of epoch ``k`` are due by ``now`` (evenly spaced, the first half a gap in) minus the
    ``generated`` ones already made (mode ``forecast``; 0 otherwise). Fractional forecasts round down."""
    if flow.mode != "forecast":
        return 0
    n = int(math.floor(flow.forecast_at(k) + 1e-9))
    if n <= 0:
        return 0
    start = k * flow.epoch_s
    due = sum(1 for j in range(n) if start + (j + 0.5) * flow.epoch_s / n <= now)
    return max(0, due - generated)


def decide(flow: FlowSpec, pools: Mapping[str, PoolSpec], jobs: Sequence[FlowJob], requests: Sequence[Request], entries: Mapping[tuple[str, int], tuple[dict[str, float], float]],
           k: int, now: float, new_ids: Sequence[str] = (), recent: set[tuple[Any, ...]] | frozenset[tuple[Any, ...]] = frozenset()) -> Actions:
    """One tick of a flow, pure. ``jobs``: the flow jobs in the clusters; ``requests``: the user's labelled Jobs;
    ``entries``: :func:`current_entries` of the plan for epoch ``k``; ``new_ids``: forecast arrivals due now;
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
        probs, bl = entries.get((cohort, step)) or fallback(flow.steps[step], pools, k)
        probs = {p: v for p, v in probs.items() if p in pools}
        if not probs and bl <= 1e-9:
            probs, bl = fallback(flow.steps[step], pools, k)
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


def _safe_name(base: str, suffix: str) -> str:
    name = f"{base}-{suffix}"
    if len(name) <= 63:
        return name
    h = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{base[: 63 - len(suffix) - 10]}-{h}-{suffix}"


def step_job_name(job_id: str, step: int) -> str:
    return _safe_name(job_id, f"s{step}")


def with_affinity(pod_spec: Mapping[str, Any], selector: Mapping[str, str]) -> dict[str, Any]:
    """``pod_spec`` with required node affinity to ``selector`` added to each of its node selector terms (AND)."""
    ps = copy.deepcopy(dict(pod_spec))
    if not selector:
        return ps
    exprs = [{"key": k, "operator": "In", "values": [v]} for k, v in sorted(selector.items())]
    aff = ps.setdefault("affinity", {}).setdefault("nodeAffinity", {})
    req = aff.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    terms = req.get("nodeSelectorTerms") or [{}]
    req["nodeSelectorTerms"] = [{**t, "matchExpressions": [*(t.get("matchExpressions") or []), *exprs]} for t in terms]
    return ps


_DROP_LABELS = ("controller-uid", "job-name", "batch.kubernetes.io/controller-uid", "batch.kubernetes.io/job-name")


def step_manifest(flow: FlowSpec, c: Create, pool: PoolSpec | None) -> dict[str, Any]:
    """The ``batch/v1`` Job of one step of one flow job: the step's template (for a request's step 0, the request's
    own), labelled and annotated for kubesoda, suspended when backlogged, with node affinity to the pool's selector."""
    tmpl = copy.deepcopy(dict(c.template))
    tmd = tmpl.get("metadata") or {}
    spec = copy.deepcopy(dict(tmpl.get("spec") or {}))
    for k in ("selector", "manualSelector", "suspend"):
        spec.pop(k, None)
    pod = copy.deepcopy(dict(spec.get("template") or {}))
    pmd = dict(pod.get("metadata") or {})
    labels = {LABEL_FLOW: flow.name, LABEL_JOB: c.job_id, LABEL_STEP: str(c.step), **({LABEL_POOL: c.pool} if c.pool else {})}
    pmd["labels"] = {**{k: v for k, v in (pmd.get("labels") or {}).items() if k not in _DROP_LABELS}, **labels}
    pod["metadata"] = pmd
    pod_spec = dict(pod.get("spec") or {})
    pod_spec.setdefault("restartPolicy", "Never")
    pod["spec"] = with_affinity(pod_spec, pool.selector) if pool is not None else pod_spec
    spec["template"] = pod
    spec["suspend"] = c.pool is None
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": step_job_name(c.job_id, c.step),
            "namespace": flow.namespace,
            "labels": {**(tmd.get("labels") or {}), **labels},
            "annotations": {**(tmd.get("annotations") or {}), ANN_ARRIVED: f"{c.arrived:.3f}", ANN_EPOCH: str(c.epoch), ANN_DECISION: c.decision},
        },
        "spec": spec,
    }


def release_patch(job_body: Mapping[str, Any], pool: PoolSpec, decision: str) -> dict[str, Any]:
    """The patch that releases a backlogged step Job into a pool of this cluster: pool label, node affinity (a
    suspended Job that never started may change its pod template's scheduling directives), unsuspended."""
    pod = ((job_body.get("spec") or {}).get("template") or {})
    pod_spec = with_affinity(pod.get("spec") or {}, pool.selector)
    return {
        "metadata": {"labels": {LABEL_POOL: pool.name}, "annotations": {ANN_DECISION: decision}},
        "spec": {"suspend": False, "template": {"metadata": {"labels": {LABEL_POOL: pool.name}}, "spec": {"affinity": pod_spec.get("affinity")}}},
    }


def moved_manifest(job_body: Mapping[str, Any], pool: PoolSpec, decision: str) -> dict[str, Any]:
    """A backlogged step Job re-made for a member cluster's pool (the suspended one here is then deleted)."""
    md = job_body.get("metadata") or {}
    spec = copy.deepcopy(dict(job_body.get("spec") or {}))
    for k in ("selector", "manualSelector"):
        spec.pop(k, None)
    pod = spec.get("template") or {}
    pmd = dict(pod.get("metadata") or {})
    pmd["labels"] = {**{k: v for k, v in (pmd.get("labels") or {}).items() if k not in _DROP_LABELS}, LABEL_POOL: pool.name}
    pod["metadata"] = pmd
    pod["spec"] = with_affinity(pod.get("spec") or {}, pool.selector)
    spec["template"] = pod
    spec["suspend"] = False
    ann = {k: v for k, v in (md.get("annotations") or {}).items() if not k.startswith("kopf.") and k != "batch.kubernetes.io/job-tracking"}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": md.get("name"), "namespace": md.get("namespace"),
                         "labels": {**{k: v for k, v in (md.get("labels") or {}).items() if k not in _DROP_LABELS}, LABEL_POOL: pool.name},
                         "annotations": {**ann, ANN_DECISION: decision}},
            "spec": spec}


def entries_status(flow: FlowSpec, entries: Mapping[tuple[str, int], tuple[dict[str, float], float]]) -> list[dict[str, Any]]:
    return [{"cohort": c, "step": s, "stepName": flow.steps[s].name if s < len(flow.steps) else str(s),
             "pools": {p: round(v, 4) for p, v in sorted(probs.items())}, "backlog": round(bl, 4)}
            for (c, s), (probs, bl) in sorted(entries.items(), key=lambda kv: (kv[0][1], kv[0][0]))]


def where_now(flow: FlowSpec, jobs: Sequence[FlowJob]) -> dict[str, Any]:
    """Where the flow's unfinished jobs are: backlogged (suspended) and running per pool."""
    backlogged, by_pool = 0, {}
    for j in jobs:
        cur = j.current
        if cur.deleting or cur.failed or (cur.complete and cur.step >= len(flow.steps) - 1):
            continue
        if cur.suspended and cur.pool is None:
            backlogged += 1
        elif cur.pool and not cur.complete:
            by_pool[cur.pool] = by_pool.get(cur.pool, 0) + 1
    return {"backlogged": backlogged, "running": sum(by_pool.values()), "byPool": dict(sorted(by_pool.items()))}


def add_counts(epochs: list[dict[str, Any]], totals: dict[str, Any], k: int, counts: Mapping[str, float], planned: Mapping[str, float] | None,
               epoch_s: float) -> None:
    """Add one tick's counts to the epoch record ``k`` and to the totals; the record keeps the figures of the first
    plan seen in the epoch."""
    rec = next((e for e in epochs if e.get("epoch") == k), None)
    if rec is None:
        rec = {"epoch": k, "start": _iso(k * epoch_s), "arrivals": 0, "completed": 0, "backlogged": 0, "released": 0, "dropped": 0,
               "utilityEarned": 0.0, "utilityPlanned": 0.0, "planned": {}}
        epochs.append(rec)
        epochs.sort(key=lambda e: e["epoch"])
        del epochs[:-EPOCHS_KEPT]
    if planned is not None and not rec.get("planned"):  # the plan made at the epoch's start (a mid-epoch replan sees only the rest)
        rec["planned"] = {k2: v for k2, v in planned.items() if k2 != "utility"}
        rec["utilityPlanned"] = planned.get("utility", 0.0)
    for key in ("arrivals", "completed", "backlogged", "released", "dropped"):
        rec[key] = int(rec.get(key, 0)) + int(counts.get(key, 0))
        totals[key] = int(totals.get(key, 0)) + int(counts.get(key, 0))
    rec["utilityEarned"] = round(float(rec.get("utilityEarned", 0.0)) + float(counts.get("utility", 0.0)), 6)
    totals["utilityEarned"] = round(float(totals.get("utilityEarned", 0.0)) + float(counts.get("utility", 0.0)), 6)


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t).astimezone().isoformat(timespec="seconds")


# ------------------------------------------------------------------------------------ Kubernetes


def _trim(body: Mapping[str, Any]) -> dict[str, Any]:
    raw = {k: copy.deepcopy(dict(body.get(k) or {})) for k in ("metadata", "spec", "status")}
    raw["metadata"].pop("managedFields", None)
    return raw


@kopf.index(crd.GROUP, crd.VERSION, "jobflows")
def flow_objects(namespace: str, name: str, body: kopf.Body, **_: Any) -> dict[Any, Any]:
    return {"all": {**_trim(body), "kind": "JobFlow"}}


@kopf.index(crd.GROUP, crd.VERSION, "flowpools")
def flow_pools(name: str, body: kopf.Body, **_: Any) -> dict[Any, Any]:
    return {name: _trim(body)}


@kopf.index("batch", "v1", "jobs", labels={LABEL_FLOW: kopf.PRESENT})
def flow_local_jobs(namespace: str, body: kopf.Body, **_: Any) -> dict[Any, Any]:
    """Step Jobs and requests of this cluster by (namespace, flow)."""
    return {(namespace, (body.get("metadata") or {}).get("labels", {}).get(LABEL_FLOW, "")): _trim(body)}


class Members:
    """API clients of the member clusters, from their kubeconfig Secrets (re-read every ``ttl``
    seconds). Secrets are read only in ``namespace`` (the operator's) and kubeconfigs hold only
    inline credentials unless ``allow_unsafe`` (:mod:`.kubeconfigs`)."""

    def __init__(self, core: client.CoreV1Api, ttl: float = 30.0, namespace: str | None = None, allow_unsafe: bool = False):
        self.core = core
        self.ttl = ttl
        self.namespace = kubeconfigs.operator_namespace(namespace)
        self.allow_unsafe = allow_unsafe
        self.cache: dict[tuple[str, str, str], tuple[float, str, client.ApiClient]] = {}
        self.namespaces: set[tuple[str, str]] = set()

    def api(self, ref: tuple[str, str, str]) -> client.ApiClient:
        ns = ref[0] or self.namespace
        if ns != self.namespace:
            raise kubeconfigs.Refused(f"Secret {ns}/{ref[1]}: kubeconfig Secrets are read only from the operator's namespace "
                                      f"{self.namespace} (spec.cluster.kubeconfigSecret.namespace)")
        hit = self.cache.get(ref)
        if hit and time.monotonic() - hit[0] < self.ttl:
            return hit[2]
        sec = self.core.read_namespaced_secret(ref[1], ns)
        raw = (sec.data or {}).get(ref[2])
        if not raw:
            raise ValueError(f"Secret {ns}/{ref[1]} has no key {ref[2]}")
        rv = sec.metadata.resource_version or ""
        if hit and hit[1] == rv:
            self.cache[ref] = (time.monotonic(), rv, hit[2])
            return hit[2]
        try:
            api = kubeconfigs.api_client(base64.b64decode(raw), self.allow_unsafe)
        except kubeconfigs.Refused as e:
            raise kubeconfigs.Refused(f"Secret {ns}/{ref[1]} key {ref[2]}: {e}") from e
        self.cache[ref] = (time.monotonic(), rv, api)
        return api

    def batch(self, pool: PoolSpec) -> client.BatchV1Api:
        assert pool.kubeconfig is not None
        return client.BatchV1Api(self.api(pool.kubeconfig))

    def ensure_namespace(self, pool: PoolSpec, ns: str) -> None:
        if (pool.name, ns) in self.namespaces:
            return
        core = client.CoreV1Api(self.api(pool.kubeconfig))  # type: ignore[arg-type]
        try:
            core.create_namespace({"metadata": {"name": ns}})
        except ApiException as e:
            if e.status != 409:
                raise
        self.namespaces.add((pool.name, ns))


def _read_members(members: Members, flow: FlowSpec, pools: Mapping[str, PoolSpec]) -> tuple[list[StepJob], dict[tuple[str, str], dict[str, Any]], dict[str, str]]:
    """The flow's step Jobs in every member cluster its steps may use; unreachable pools with the reason."""
    steps: list[StepJob] = []
    bodies: dict[tuple[str, str], dict[str, Any]] = {}
    errors: dict[str, str] = {}
    seen: set[tuple[str, str, str]] = set()
    for pname in sorted({p for s in flow.steps for p in s.pools}):
        pool = pools.get(pname)
        if pool is None or pool.kubeconfig is None or pool.kubeconfig in seen:
            continue
        seen.add(pool.kubeconfig)
        try:
            api = members.batch(pool)
            items = api.list_namespaced_job(flow.namespace, label_selector=f"{LABEL_FLOW}={flow.name}").items
        except Exception as e:  # noqa: BLE001  (an unreachable member must not stop the others)
            errors[pname] = str(getattr(e, "reason", None) or e)[:200]
            continue
        for it in items:
            body = api.api_client.sanitize_for_serialization(it)
            sj = step_job_of(body, pool.cluster)
            if sj is not None:
                steps.append(sj)
                bodies[(pool.cluster, sj.name)] = body
    return steps, bodies, errors


def _apply(batch: client.BatchV1Api, members: Members, flow: FlowSpec, pools: Mapping[str, PoolSpec], acts: Actions,
           bodies: Mapping[tuple[str, str], Mapping[str, Any]]) -> dict[str, int]:
    """Write one tick's actions; returns what was done. Create is create-if-absent (409 ignored)."""
    done = {"created": 0, "released": 0, "deleted": 0, "errors": 0}

    def target(pool: PoolSpec | None) -> client.BatchV1Api:
        if pool is None or pool.kubeconfig is None:
            return batch
        members.ensure_namespace(pool, flow.namespace)
        return members.batch(pool)

    for c in acts.create:
        pool = pools.get(c.pool) if c.pool else None
        try:
            target(pool).create_namespaced_job(flow.namespace, step_manifest(flow, c, pool))
            done["created"] += 1
        except ApiException as e:
            if e.status != 409:
                log.error("creating step %d of %s in %s failed: %s %s", c.step, c.job_id, c.pool or "backlog", e.reason, e.body)
                done["errors"] += 1
        except Exception as e:  # noqa: BLE001
            log.error("creating step %d of %s in %s failed: %s", c.step, c.job_id, c.pool, e)
            done["errors"] += 1
    for sj, why in acts.hold:
        try:
            batch.patch_namespaced_job(sj.name, flow.namespace, {"metadata": {"annotations": {ANN_DECISION: why}}})
        except ApiException as e:
            if e.status != 404:
                log.error("annotating backlogged %s failed: %s", sj.name, e.reason)
    for r in acts.take:  # after their step 0 Jobs were created above
        try:
            body: dict[str, Any] = {"metadata": {"annotations": {ANN_REQUEST: r.name}}}
            if not r.suspended:
                body["spec"] = {"suspend": True}
            batch.patch_namespaced_job(r.name, flow.namespace, body)
        except ApiException as e:
            if e.status != 404:
                log.error("taking in request %s/%s failed: %s", flow.namespace, r.name, e.reason)
                done["errors"] += 1
    for rel in acts.release:
        pool = pools[rel.pool]
        body = bodies.get((rel.job.cluster, rel.job.name)) or {}
        try:
            if pool.kubeconfig is None:
                batch.patch_namespaced_job(rel.job.name, flow.namespace, release_patch(body, pool, rel.decision))
            else:
                try:
                    target(pool).create_namespaced_job(flow.namespace, moved_manifest(body, pool, rel.decision))
                except ApiException as e:
                    if e.status != 409:
                        raise
                batch.delete_namespaced_job(rel.job.name, flow.namespace, propagation_policy="Background")
            done["released"] += 1
        except Exception as e:  # noqa: BLE001
            log.error("releasing %s into %s failed: %s", rel.job.name, rel.pool, getattr(e, "reason", e))
            done["errors"] += 1
    for sj in acts.delete:
        pool = pools.get(sj.cluster) if sj.cluster else None
        try:
            api = batch if pool is None or pool.kubeconfig is None else members.batch(pool)
            api.delete_namespaced_job(sj.name, flow.namespace, propagation_policy="Background")
            done["deleted"] += 1
        except ApiException as e:
            if e.status != 404:
                log.error("deleting dropped %s failed: %s", sj.name, e.reason)
                done["errors"] += 1
        except Exception as e:  # noqa: BLE001
            log.error("deleting dropped %s failed: %s", sj.name, e)
            done["errors"] += 1
    for sj, how in [(s, "completed") for s in acts.completed] + [(s, "dropped") for s in acts.finished_dropped]:
        pool = pools.get(sj.cluster) if sj.cluster else None
        try:
            api = batch if pool is None or pool.kubeconfig is None else members.batch(pool)
            api.patch_namespaced_job(sj.name, flow.namespace, {"metadata": {"annotations": {ANN_COUNTED: how}}})
        except Exception as e:  # noqa: BLE001
            log.warning("marking %s counted failed: %s", sj.name, getattr(e, "reason", e))
    return done


async def _plan_group(memo: Memo, flows: list[FlowSpec], pools: Mapping[str, PoolSpec], k: int,
                      jobs: Mapping[str, Sequence[FlowJob]], now: float) -> dict[str, Any]:
    """The plan of one epoch length's flows at epoch ``k``, made once per epoch and per change of the objects."""
    plans = memo.flows.plans
    lock = memo.flows.plan_lock
    epoch_s = flows[0].epoch_s
    fp = (k, tuple(sorted((f.key, f.generation) for f in flows)), tuple(sorted((p.name, p.generation) for p in pools.values())))
    async with lock:
        got = plans.get(epoch_s)
        if got and got["fingerprint"] == fp:
            return got
        t0 = time.monotonic()
        try:
            problem = problem_of(flows, pools, k, jobs, now)
            params = fl.PlannerParams(evaluations=max(f.evaluations for f in flows), deadline_s=min(f.deadline_s for f in flows),
                                      seed=flows[0].seed)
            res = await asyncio.to_thread(fl.plan_flows, problem, params)
            got = {"fingerprint": fp, "k": k, "result": res, "error": None, "seconds": time.monotonic() - t0, "at": _iso(time.time())}
        except Exception as e:  # noqa: BLE001  (an invalid problem is reported in status, the flows keep their jobs)
            log.error("flow plan for epoch %d failed: %s", k, e)
            got = {"fingerprint": fp, "k": k, "result": None, "error": str(e)[:500], "seconds": time.monotonic() - t0, "at": _iso(time.time())}
        plans[epoch_s] = got
        return got


def _set_status(patch: kopf.Patch, status: Mapping[str, Any], out: Mapping[str, Any]) -> None:
    """Only the fields that changed (a tick with nothing new writes nothing)."""
    for key, value in out.items():
        if status.get(key) != value:
            patch.status[key] = value


@kopf.timer(crd.GROUP, crd.VERSION, "jobflows", interval=TICK_S, initial_delay=1.0)
async def flow_tick(namespace: str, name: str, body: kopf.Body, status: kopf.Status, memo: Memo, patch: kopf.Patch,
                    flow_objects: kopf.Index, flow_pools: kopf.Index, flow_local_jobs: kopf.Index, **_: Any) -> None:
    """One tick of a JobFlow: plan once per epoch (jointly with the flows of the same epoch length), take in
    arrivals, apply the current epoch's policy, count, report."""
    core = memo.loops.core
    batch = client.BatchV1Api(core.api_client)
    if memo.flows.members is None:
        memo.flows.members = Members(core)
    members = memo.flows.members
    me = flow_of(body)
    pools = {p.name: p for p in (pool_of(b) for n in flow_pools for b in flow_pools[n]) if valid_pool(p)}
    group = sorted((flow_of(b) for b in flow_objects.get("all", [])), key=lambda f: f.key)
    # flows that name a missing or invalid pool wait, and do not hold up the others' plan
    group = sorted([f for f in group if f.epoch_s == me.epoch_s and f.key != me.key and not missing_pools(f, pools)] + [me], key=lambda f: f.key)
    requests: list[Request] = []
    now = time.time()
    k = epoch_index(now, me.epoch_s)
    missing = missing_pools(me, pools)
    # the jobs of every flow of the group (the plan's waiting jobs), this flow's with the member clusters'
    jobs: dict[str, list[FlowJob]] = {}
    my_bodies: dict[tuple[str, str], dict[str, Any]] = {}
    errors: dict[str, str] = {}
    for f in group:
        local = list(flow_local_jobs.get((f.namespace, f.name), []))
        steps = [s for s in (step_job_of(b, LOCAL) for b in local) if s is not None]
        if f.key == me.key:
            remote, rbodies, errors = await asyncio.to_thread(_read_members, members, f, pools)
            steps += remote
            my_bodies = {**{(LOCAL, (b.get("metadata") or {}).get("name", "")): b for b in local}, **rbodies}
            requests = [r for r in (request_of(b) for b in local) if r is not None]
        jobs[f.key] = flow_jobs(steps)
    plan = await _plan_group(memo, group, pools, k, jobs, now) if not missing else None
    result: fl.PlanResult | None = plan["result"] if plan else None
    entries = current_entries(result.plan, me.key) if result is not None else {}
    # counters: in memory, seeded from the status
    state = memo.flows.counters
    st = state.get(me.key)
    if st is None or st.get("uid") != (body.get("metadata") or {}).get("uid"):
        gen = status.get("generated") or {}
        st = {"uid": (body.get("metadata") or {}).get("uid"), "epochs": copy.deepcopy(list(status.get("epochs") or [])),
              "totals": copy.deepcopy(dict(status.get("totals") or {})),
              "generated": (int(gen.get("epoch", -1)), int(gen.get("count", 0))), "dropped": set()}
        state[me.key] = st
    gen_epoch, gen_count = st["generated"]
    if gen_epoch != k:
        gen_count = 0
    n_new = due_arrivals(me, k, now, gen_count) if result is not None else 0
    new_ids = [_safe_name(me.name, f"e{k}-{gen_count + i}") for i in range(n_new)]
    if missing:
        acts = Actions(counts={})
    else:
        flow_jobs_now = [j for j in jobs[me.key] if j.id not in st["dropped"]]
        recent = memo.flows.recent.setdefault(me.key, {})
        for key in [key for key, t in recent.items() if t < now]:
            del recent[key]
        acts = decide(me, pools, flow_jobs_now, requests, entries, k, now, new_ids, set(recent))
        recent.update({key: now + min(RECENT_S, me.epoch_s / 2) for key in acts.keys})
    done = await asyncio.to_thread(_apply, batch, members, me, pools, acts, my_bodies)
    st["generated"] = (k, gen_count + n_new)
    st["dropped"] |= {jid for jid, _, _ in acts.dropped}
    planned = planned_figures(result.result, me.key, me.utility) if result is not None and plan["k"] == k else None
    add_counts(st["epochs"], st["totals"], k, acts.counts, planned, me.epoch_s)
    out: dict[str, Any] = {}
    out["epoch"] = k
    out["epochStart"] = _iso(k * me.epoch_s)
    out["generated"] = {"epoch": k, "count": gen_count + n_new}
    out["epochs"] = copy.deepcopy(st["epochs"])
    out["totals"] = copy.deepcopy(st["totals"])
    out["now"] = where_now(me, [j for j in jobs[me.key] if j.id not in st["dropped"]])
    out["unreachablePools"] = errors or None
    if missing:
        out["state"] = "waiting"
        out["message"] = f"missing or invalid FlowPools: {', '.join(missing)}"
    elif plan is not None and plan["error"]:
        out["state"] = "invalid"
        out["message"] = plan["error"]
    else:
        out["state"] = "routing"
        out["message"] = ""
    gen = (body.get("metadata") or {}).get("generation")
    out["conditions"] = [conditions.condition(
        "Routing", out["state"] == "routing", {"routing": "Routing", "waiting": "MissingPools", "invalid": "InvalidPlan"}[out["state"]],
        out["message"] or f"epoch {k}: routing by the plan", gen, status.get("conditions"))]
    if result is not None:
        out["plan"] = {"epoch": plan["k"], "plannedAt": plan["at"], "seconds": round(plan["seconds"], 3), "timedOut": result.timed_out,
                       "score": round(result.result.score, 6), "evaluations": result.evaluations,
                       "flows": len(group), "entries": entries_status(me, entries)}
    _set_status(patch, status, out)
    if acts.dropped:
        from ..batch_dispatch import post_events

        obj = {"apiVersion": crd.API_VERSION, "kind": "JobFlow", "metadata": dict(body.get("metadata") or {})}
        msgs = [(obj, "Warning", "FlowDropped", f"job {jid} dropped at step {s}: {why}") for jid, s, why in acts.dropped[:20]]
        await asyncio.to_thread(post_events, core, msgs)
    if done["errors"]:
        log.warning("flow %s: %d action(s) failed this tick", me.key, done["errors"])


@kopf.timer(crd.GROUP, crd.VERSION, "flowpools", interval=2.0, initial_delay=1.0)
async def pool_tick(name: str, body: kopf.Body, status: kopf.Status, memo: Memo, patch: kopf.Patch, **_: Any) -> None:
    """A FlowPool's status: its capacity now, the plan's load and throughput for it, the member cluster reachable."""
    pool = pool_of(body)
    out: dict[str, Any] = {}
    refused = False
    if memo.flows.members is None:
        memo.flows.members = Members(memo.loops.core)
    members = memo.flows.members
    if pool.kubeconfig is not None:
        try:
            await asyncio.to_thread(members.api, pool.kubeconfig)
            out["reachable"] = True
            out["message"] = ""
        except kubeconfigs.Refused as e:  # the Secret's place or content: says what and the flag
            out["reachable"] = False
            out["message"] = str(e)[:600]
            refused = True
        except Exception as e:  # noqa: BLE001
            out["reachable"] = False
            out["message"] = str(getattr(e, "reason", None) or e)[:300]
    else:
        out["reachable"] = True
    for epoch_s, plan in sorted(memo.flows.plans.items()):
        res = plan.get("result")
        if res is None:
            continue
        for ps in res.result.pools:
            if ps.pool == pool.name and ps.epoch == 0:
                out["epoch"] = plan["k"]
                out["epochSeconds"] = epoch_s
                out["capacity"] = ps.capacity
                out["plannedLoad"] = round(ps.load, 4)
                out["plannedThroughput"] = round(ps.throughput, 4)
    why = "Reachable" if out["reachable"] else "KubeconfigRefused" if refused else "Unreachable"
    out["conditions"] = [conditions.condition("Reachable", bool(out["reachable"]), why,
                                              out.get("message") or ("a member cluster" if pool.kubeconfig is not None else "this cluster"),
                                              (body.get("metadata") or {}).get("generation"), status.get("conditions"))]
    _set_status(patch, status, out)


__all__ = [
    "Actions", "Create", "FlowJob", "FlowSpec", "PoolSpec", "Release", "Request", "StepJob", "StepSpec",
    "add_counts", "apportion", "current_entries", "decide", "due_arrivals", "epoch_index", "fallback", "flow_jobs", "flow_of",
    "missing_pools", "moved_manifest", "planned_figures", "pool_of", "problem_of", "release_patch", "request_of", "step_job_of",
    "step_manifest", "valid_pool", "where_now", "with_affinity",
]
