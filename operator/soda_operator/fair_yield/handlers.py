"""Kopf handlers of the fair-yield groups, the only module here with Kopf decorators: the index of
the groups' pods (an indexer of the operator's pod watch, not Kopf's) and the timer that runs each YieldGroup's epochs (the paper's resource allocator,
section 2.1, run periodically because pods come and go: section 6's dynamic workloads).

Every :data:`TICK_S` the timer of each group reads its spec (:mod:`.spec`; a refused spec sets
``Allocated`` False with reason ``InvalidSpec`` and posts one Warning Event, until it changes) and,
when the group's ``epochSeconds`` have passed, copies what the epoch reads from the indexes on
Kopf's event loop, decides (:mod:`.decide`, through ``soda_optimizer.systems.decide``, on a thread
of the group's own, waited for at most :func:`budget` seconds: :mod:`.worker`; past it, nothing is
applied, the group's state is ``overBudget`` with a Warning Event, and no other group waits),
writes (:mod:`.apply`, in a thread), patches the group's status (:mod:`.status`), sets the group's
gauges (minimum yield, proven bound, gap; :mod:`..kube.metrics`) and posts its Events through
:mod:`..kube.events`.

The nodes and the other workloads' pods come from the indexes the operator keeps anyway
(``kubesoda_nodes``, ``kubesoda_pods``: SODA's; ``foreign_pods``: :mod:`..kube.pods`).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Mapping
from typing import Any

import kopf

from ..kube import api, conditions, events, metrics, periodic, pods
from ..kube.errors import TranslationError
from ..memo import Memo
from . import status as group_status
from . import worker
from .apply import write
from .decide import inputs, plan
from .spec import parse
from .tasks import LABEL

TICK_S = 2.0


def budget(deadline_s: float) -> float:
    """How long an epoch waits for its decision: the group's deadline (the allocator's stages stop at
    it) plus the translation on either side and a loaded machine's slack (twice the deadline, at
    least one second)."""
    return deadline_s + max(1.0, 2.0 * deadline_s)


def yield_pods(body: Mapping[str, Any]) -> dict[Any, Any]:
    """The groups' pods: (namespace, group) -> trimmed pod; an indexer of the operator's pod watch
    (:mod:`..kube.reflector`, ``memo.pods``)."""
    md = body.get("metadata") or {}
    labels = md.get("labels") or {}
    if LABEL not in labels:
        return {}
    return {(md.get("namespace"), labels.get(LABEL, "")): pods.trim(body)}


@periodic.timer(api.GROUP, api.VERSION, "yieldgroups", interval=TICK_S, initial_delay=1.0)
async def yield_epoch(namespace: str | None, name: str, spec: kopf.Spec, status: kopf.Status, memo: Memo, patch: kopf.Patch,
                      body: kopf.Body, **indexes: Any) -> None:
    """One epoch of a YieldGroup when its epoch is due (the timer ticks every TICK_S). Kopf passes
    every index by its name: this reads ``yield_pods``, ``foreign_pods``, ``kubesoda_pods`` and
    ``kubesoda_nodes``."""
    core = memo.loops.core
    generation = (body.get("metadata") or {}).get("generation")
    try:
        settings = parse(spec)
    except TranslationError as e:
        refused = group_status.invalid(e, generation, status.get("conditions"))
        if status.get("state") != "invalid" or not conditions.same(refused["conditions"], status.get("conditions")):
            patch.status.update(refused)
            await asyncio.to_thread(events.post, core, body, e.reason, refused["message"], "Warning")
        return
    if memo.pods is not None:  # the pod indexes are the operator's pod watch's, once it has listed
        if not memo.pods.synced.is_set():
            return
        indexes = {**memo.pods.indexes, **indexes}
    last = memo.fair_yield.last
    key = (namespace or "", name)
    if status.get("state") != "invalid" and time.monotonic() - last.get(key, -math.inf) < settings.epoch_seconds:
        return  # not due (a spec fixed after a refusal is planned at once)
    last[key] = time.monotonic()
    # copy what the epoch reads on Kopf's event loop (the indexes change under a thread)
    members = {(p.get("metadata") or {}).get("name", ""): p for p in indexes["yield_pods"].get(key, [])}
    nodes = [v for k in indexes["kubesoda_nodes"] for v in indexes["kubesoda_nodes"][k]]
    bound = pods.bound_requests(indexes["foreign_pods"], indexes["kubesoda_pods"])
    tasks, hosts, facts = inputs(members, nodes, bound)
    wait = budget(settings.deadline_seconds)
    try:
        decision = await worker.decide(memo.fair_yield.running, key, lambda: plan(tasks, hosts, settings, facts), wait)
    except (worker.OverBudget, worker.Busy) as e:
        late = group_status.over_budget(wait, settings.deadline_seconds, generation, status.get("conditions"), isinstance(e, worker.Busy))
        patch.status.update(late)
        if status.get("state") != "overBudget":
            await asyncio.to_thread(events.post, core, body, "OverBudget", late["message"], "Warning")
        return
    done = await asyncio.to_thread(write, core, key[0], decision, members)
    patch.status.update(group_status.allocated(decision, len(tasks), generation, status.get("conditions"), done["blocked"],
                                               done["failed"], settings.deadline_seconds))
    labels = {"namespace": key[0], "group": name}
    metrics.YIELD_MIN.labels(**labels).set(decision.min_yield)
    metrics.YIELD_BOUND.labels(**labels).set(-1 if decision.bound is None else decision.bound)
    metrics.YIELD_GAP.labels(**labels).set(-1 if decision.gap is None else decision.gap)
    if done["blocked"]:
        metrics.YIELD_BLOCKED.labels(**labels).inc(len(done["blocked"]))
    said = group_status.events(decision, done["placed"], done["evicted"], done["blocked"], done["failed"])
    if said:
        await asyncio.to_thread(events.post_all, core, [(body, reason, message, type_) for reason, message, type_ in said])
