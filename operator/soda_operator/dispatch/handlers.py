"""Kopf handlers of deadline dispatch: the two indexes and the timer that glues the other modules (Lin 2014, 4.1
"System Flow": the status checker's view -> the decision maker -> the dispatcher; docs/dispatch.md).

- :func:`dispatch_pods`: task pods (gated by kubesoda or released by it) by (namespace, Job);
- :func:`dispatch_jobs`: Jobs whose pod template carries the gate, by (namespace, dispatch group);
- :func:`dispatch_tick`: every ``TICK_S`` on each BatchDispatch; a decision when ``spec.intervalSeconds`` passed
  since its last one: :func:`.spec.parse` -> :func:`.decide.decide` -> :func:`.apply.apply` -> the status and the
  Events (:mod:`.status`, :func:`..kube.events.post_all`). A spec refused by :mod:`.spec` gets condition
  ``Dispatching`` False with reason ``InvalidSpec`` naming the field, and one Warning Event, and dispatches nothing.

The state a replica keeps between ticks is ``memo.dispatch`` (:class:`~..memo.DispatchState`).
"""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

import kopf

from ..kube import api, events
from ..kube.errors import TranslationError
from ..kube.pods import bound_requests, trim
from ..memo import Memo
from . import apply, decide
from .objects import dispatched, group_of, ours, owner_job
from .spec import parse
from .status import dispatching, events_of, invalid, me

TICK_S = 1.0


@kopf.index("", "v1", "pods")
async def dispatch_pods(namespace: str | None, body: kopf.Body, **_: Any) -> dict[Any, Any]:
    """Task pods (gated by us or released by us) by (namespace, Job)."""
    if not ours(body):
        return {}
    job = owner_job(body)
    return {(namespace, job): trim(body)} if job else {}


@kopf.index("batch", "v1", "jobs")
async def dispatch_jobs(namespace: str | None, body: kopf.Body, **_: Any) -> dict[Any, Any]:
    """Jobs whose pod template carries the gate, by (namespace, dispatch group)."""
    if not dispatched(body):
        return {}
    return {(namespace, group_of(body)): {**trim(body), "apiVersion": "batch/v1", "kind": "Job"}}


@kopf.timer(api.GROUP, api.VERSION, "batchdispatches", interval=TICK_S, initial_delay=1.0)
async def dispatch_tick(namespace: str | None, name: str, spec: kopf.Spec, status: kopf.Status, memo: Memo, patch: kopf.Patch,
                        body: kopf.Body, **indexes: Any) -> None:
    """One decision of a BatchDispatch when due (the timer ticks every TICK_S). ``indexes``: what Kopf passes by
    name, among them ``dispatch_pods``, ``dispatch_jobs``, ``foreign_pods``, ``kubesoda_pods`` and ``kubesoda_nodes``."""
    namespace = namespace or ""  # namespaced: Kopf always gives one
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
    last = memo.dispatch.last
    if time.monotonic() - last.get(key, -math.inf) < settings.interval_seconds - 1e-3:
        return
    last[key] = time.monotonic()
    # copies of what the decision reads, on Kopf's event loop
    dispatch_pods: kopf.Index[Any, Any] = indexes["dispatch_pods"]
    kubesoda_nodes: kopf.Index[Any, Any] = indexes["kubesoda_nodes"]
    job_bodies = list(indexes["dispatch_jobs"].get(key, []))
    names = {(b.get("metadata") or {}).get("name", "") for b in job_bodies}
    pods_of = {j: list(dispatch_pods.get((namespace, j), [])) for j in names}
    node_bodies = [v for k in kubesoda_nodes for v in kubesoda_nodes[k]]
    seen = memo.dispatch.measured.setdefault(key, set())
    out = decide.decide(settings, job_bodies, pods_of, node_bodies, bound_requests(indexes["foreign_pods"], indexes["kubesoda_pods"]), status,
                        namespace, seen, time.time())
    seen |= set(out.new)
    done = await asyncio.to_thread(apply.apply, memo.loops.core, namespace, out.decision, out.pods, out.classes)
    patch.status.update(dispatching(out, done, status, generation))
    evs = events_of(body, out, done, job_bodies, memo.dispatch.warned)
    if evs:
        await asyncio.to_thread(events.post_all, memo.loops.core, evs)

