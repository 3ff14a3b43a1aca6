"""Kopf handlers of deadline dispatch: the two indexes, the watches that mark a namespace changed, and the timer that
glues the other modules (Lin 2014, 4.1 "System Flow": the status checker's view -> the decision maker -> the
dispatcher; 3.5.2: the decision maker runs on a job's submission or completion, a worker's report, and
periodically; docs/dispatch.md).

- :func:`dispatch_pods`: task pods (gated by kubesoda or released by it) by (namespace, Job), an indexer of the
  operator's pod watch (:mod:`..kube.reflector`), not of Kopf;
- :func:`dispatch_jobs`: Jobs whose pod template carries the gate, by (namespace, dispatch group);
- :func:`pod_listener` (the pod watch's), :func:`dispatch_job_changed`, :func:`dispatch_node_changed`: an event of a task pod
  (created, released, running, finished, failed, deleted) or of a dispatched Job marks its namespace changed; a
  Node whose readiness, cordon, allocatable CPU or labels changed (or that went away) marks every namespace;
- :func:`dispatch_tick`: every ``TICK_S`` on each BatchDispatch; a decision when its namespace changed since its
  last decision or ``spec.intervalSeconds`` passed: :func:`.spec.parse` -> :func:`.decide.decide` (the plan over
  every slot through :func:`soda_optimizer.systems.decide`, in a worker thread off Kopf's event loop, on copies of
  the indexes, within its deadline and work caps: issue 45) -> :func:`.apply.apply` -> the status and the Events
  (:mod:`.status`, :func:`..kube.events.post_all`). So a slot that a finished task frees goes to the Job the plan
  names within about ``TICK_S`` of the pod's event. A spec refused by :mod:`.spec` gets condition ``Dispatching``
  False with reason ``InvalidSpec`` naming the field, and one Warning Event, and dispatches nothing.

The state a replica keeps between ticks is ``memo.dispatch`` (:class:`~..memo.DispatchState`), among it the pods a
decision released that the index may not show released yet (``inflight``, :func:`.decide.decide`), so that the
next decision never hands their slots out twice.
"""

from __future__ import annotations

import asyncio
import copy
import math
import time
from collections.abc import Callable, Mapping
from typing import Any

import kopf

from ..kube import api, events, periodic, quantities
from ..kube.errors import TranslationError
from ..kube.pods import bound_requests, trim
from ..memo import Memo
from . import apply, decide
from .objects import dispatched, group_of, ours, owner_job
from .spec import parse
from .status import dispatching, events_of, invalid, me

TICK_S = 0.5
INFLIGHT_S = 10.0  # how long a release is trusted over an index that still shows the pod gated
ALL = ""  # memo.dispatch.changed's key for every namespace (a Node changed)


def dispatch_pods(body: Mapping[str, Any]) -> dict[Any, Any]:
    """Task pods (gated by us or released by us) by (namespace, Job); an indexer of the operator's pod
    watch (:mod:`..kube.reflector`, ``memo.pods``)."""
    if not ours(body):
        return {}
    job = owner_job(body)
    return {((body.get("metadata") or {}).get("namespace"), job): trim(body)} if job else {}


@kopf.index("batch", "v1", "jobs")
async def dispatch_jobs(namespace: str | None, body: kopf.Body, **_: Any) -> dict[Any, Any]:
    """Jobs whose pod template carries the gate, by (namespace, dispatch group)."""
    if not dispatched(body):
        return {}
    return {(namespace, group_of(body)): {**trim(body), "apiVersion": "batch/v1", "kind": "Job"}}


def _dispatched_job(body: kopf.Body, **_: Any) -> bool:
    return dispatched(body)


def pod_listener(memo: Memo) -> Callable[[str, Mapping[str, Any]], None]:
    """A listener of the operator's pod watch: a task pod's event (created, released, finished, failed,
    deleted) has its namespace decide at the next tick; other pods' events pass."""

    def dispatch_pod_changed(type_: str, body: Mapping[str, Any]) -> None:
        if ours(body):
            memo.dispatch.changed[(body.get("metadata") or {}).get("namespace") or ""] = time.monotonic()

    return dispatch_pod_changed


@kopf.on.event("batch", "v1", "jobs", when=_dispatched_job)
async def dispatch_job_changed(namespace: str | None, body: kopf.Body, memo: Memo, **_: Any) -> None:
    """A dispatched Job's event (submitted, progress, complete, deleted)."""
    if dispatched(body):
        memo.dispatch.changed[namespace or ""] = time.monotonic()


def node_seen(body: Any) -> tuple[Any, ...]:
    """What a decision reads of a Node: readiness, cordon, allocatable CPU, labels."""
    st, sp = body.get("status") or {}, body.get("spec") or {}
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in st.get("conditions") or [])
    labels = tuple(sorted(((body.get("metadata") or {}).get("labels") or {}).items()))
    return (ready, bool(sp.get("unschedulable")), quantities.amount((st.get("allocatable") or {}).get("cpu")), labels)


@kopf.on.event("", "v1", "nodes")
async def dispatch_node_changed(event: kopf.RawEvent, name: str, body: kopf.Body, memo: Memo, **_: Any) -> None:
    """A Node change that moves slots (not its heartbeats): every namespace decides at the next tick."""
    seen = None if event.get("type") == "DELETED" else node_seen(body)
    if memo.dispatch.nodes.get(name) != seen:
        if seen is None:
            memo.dispatch.nodes.pop(name, None)
        else:
            memo.dispatch.nodes[name] = seen
        memo.dispatch.changed[ALL] = time.monotonic()


@periodic.timer(api.GROUP, api.VERSION, "batchdispatches", interval=TICK_S, initial_delay=1.0)
async def dispatch_tick(namespace: str | None, name: str, spec: kopf.Spec, status: kopf.Status, memo: Memo, patch: kopf.Patch,
                        body: kopf.Body, **indexes: Any) -> None:
    """One decision of a BatchDispatch when due (the timer ticks every TICK_S). ``indexes``: what Kopf passes by
    name, among them ``dispatch_pods``, ``dispatch_jobs``, ``foreign_pods``, ``kubesoda_pods`` and ``kubesoda_nodes``."""
    namespace = namespace or ""  # namespaced: Kopf always gives one
    if memo.pods is not None:  # the pod indexes are the operator's pod watch's, once it has listed
        if not memo.pods.synced.is_set():
            return
        indexes = {**memo.pods.indexes, **indexes}
    key = (namespace, name)
    generation = (body.get("metadata") or {}).get("generation")
    try:
        settings = parse(spec)
    except TranslationError as e:
        refused = invalid(e, status, generation)
        if refused is not None:  # once per refusal: the status says it from then on
            patch.status.update(refused)
            await asyncio.to_thread(events.post, memo.loops.core, me(body), e.reason, refused["message"], "Warning")
        return
    last, changed = memo.dispatch.last, memo.dispatch.changed
    now_m = time.monotonic()
    prev = last.get(key, -math.inf)
    if now_m - prev < settings.interval_seconds - 1e-3 and max(changed.get(namespace, -math.inf), changed.get(ALL, -math.inf)) < prev:
        return  # nothing happened since the last decision, and no periodic one is due
    last[key] = now_m
    flight = memo.dispatch.inflight.setdefault(key, {})
    for pod in [p for p, (_, t) in flight.items() if now_m - t > INFLIGHT_S]:
        del flight[pod]
    # copies of what the decision reads, on Kopf's event loop
    dispatch_pods: kopf.Index[Any, Any] = indexes["dispatch_pods"]
    kubesoda_nodes: kopf.Index[Any, Any] = indexes["kubesoda_nodes"]
    job_bodies = list(indexes["dispatch_jobs"].get(key, []))
    names = {(b.get("metadata") or {}).get("name", "") for b in job_bodies}
    pods_of = {j: list(dispatch_pods.get((namespace, j), [])) for j in names}
    node_bodies = [v for k in kubesoda_nodes for v in kubesoda_nodes[k]]
    seen = memo.dispatch.measured.setdefault(key, set())
    read = copy.deepcopy({k: status.get(k) for k in ("speeds", "measured")})
    bound = bound_requests(indexes["foreign_pods"], indexes["kubesoda_pods"])
    # the decision in a worker thread: Kopf's loop (liveness, every other object's handlers) never waits on it
    out = await asyncio.to_thread(decide.decide, settings, job_bodies, pods_of, node_bodies, bound, read, namespace, set(seen),
                                  time.time(), {p: n for p, (n, _) in flight.items()})
    seen |= set(out.new)
    done = await asyncio.to_thread(apply.apply, memo.loops.core, namespace, out.decision, out.pods, out.classes)
    flight.update({p: (n, now_m) for p, n in done["released"].items()})
    # only the fields that moved: a decision that changed nothing writes nothing (ticks come every TICK_S)
    patch.status.update({k: v for k, v in dispatching(out, done, status, generation).items() if status.get(k) != v})
    evs = events_of(body, out, done, job_bodies, memo.dispatch.warned, status.get("preemptionBlocked") or [])
    if evs:
        await asyncio.to_thread(events.post_all, memo.loops.core, evs)

