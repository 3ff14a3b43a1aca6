"""Kopf handlers of the flows: the indexes of JobFlows, FlowPools and flow Jobs, and two timers that glue the
other modules together (Montana & Zinky, section 3.3: the policy is re-planned at each epoch; here each tick
applies it to the jobs that arrived or moved since the last).

Every tick of a JobFlow (:func:`flow_tick`, 1 s):

1. its spec (:func:`.spec.flow_of`); one it cannot take sets ``Routing`` False, reason InvalidSpec, naming the
   field, with a Warning Event once per change, and does nothing else; so does one naming a FlowPool whose
   ``allowedNamespaces`` leaves its namespace out (:func:`.spec.check_shared`, ``spec.steps[i].pools``), or whose
   model the plan cannot build (:attr:`.decide.Planned.refused`: refused alone, its group planned without it);
2. once per epoch, or when a JobFlow's or FlowPool's generation changes, the flow's *group* -- the JobFlows of one
   ``epochSeconds`` connected to it through the pools they name (:func:`.decide.groups`) -- is planned together
   (:func:`.decide.plan`, in a worker thread, under the group's own lock in ``memo.flows.plan_locks``; the plan is
   kept in ``memo.flows.plans`` per (epoch length, group)); flows that share no pool are planned apart and never wait
   on each other's plan (issue 45); a flow naming a missing or invalid pool waits and does not hold up the others';
3. the flow's Jobs here and in the member clusters (:mod:`.jobs`, :func:`.members.step_jobs`) and the plan's
   current entries become the tick's actions (:func:`.route.route`), written by :func:`.apply.write`; what a tick
   did is not acted on again for :data:`RECENT_S` (the watch may lag behind the writes);
4. the counts and the status (:mod:`.status`), and a ``FlowDropped`` Event per dropped job.

A FlowPool's tick (:func:`pool_tick`, 2 s) reports whether its member cluster is reachable and the plan's figures
for it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

import kopf
from kubernetes import client

from ..kube import api, metrics, periodic, pods
from ..kube.errors import TranslationError
from ..memo import FlowsState, Memo
from . import apply, decide, kubeconfigs, route, spec
from .jobs import LABEL_FLOW, FlowJob, Request, flow_jobs, request_of, step_job_of
from .manifests import safe_name
from .members import Members, step_jobs
from .spec import LOCAL, FlowSpec, PoolSpec
from .status import Counters, add_counts, changed, flow_status, pool_status, refused, reported

log = logging.getLogger("kubesoda.flows")

TICK_S = 1.0
RECENT_S = 30.0  # what a tick did is not acted on again for this long (the watch may lag behind the writes)


@kopf.index(api.GROUP, api.VERSION, "jobflows")
def flow_objects(namespace: str | None, name: str, body: kopf.Body, **_: Any) -> dict[Any, Any]:
    return {"all": {**pods.trim(body), "kind": "JobFlow"}}


@kopf.index(api.GROUP, api.VERSION, "flowpools")
def flow_pools(name: str, body: kopf.Body, **_: Any) -> dict[Any, Any]:
    return {name: pods.trim(body)}


@kopf.index("batch", "v1", "jobs", labels={LABEL_FLOW: kopf.PRESENT})
def flow_local_jobs(namespace: str | None, body: kopf.Body, **_: Any) -> dict[Any, Any]:
    """Step Jobs and requests of this cluster by (namespace, flow)."""
    return {(namespace, (body.get("metadata") or {}).get("labels", {}).get(LABEL_FLOW, "")): pods.trim(body)}


def _members(memo: Memo) -> Members:
    if memo.flows.members is None:
        memo.flows.members = Members(memo.loops.core)
    return memo.flows.members


async def _refuse(core: client.CoreV1Api, kind: str, body: kopf.Body, status: kopf.Status, patch: kopf.Patch, err: TranslationError) -> None:
    """A spec that cannot be taken: the condition says so, naming the field; a Warning Event when that is new."""
    out = refused(kind, err, (body.get("metadata") or {}).get("generation"), status.get("conditions"))
    changed(patch.status, status, out)
    if not reported(status.get("conditions"), out["conditions"]):
        md = body.get("metadata") or {}
        log.warning("%s %s: %s", kind, "/".join(x for x in (md.get("namespace"), md.get("name")) if x), out["message"])
        await asyncio.to_thread(apply.post_invalid, core, body, kind, out["message"])


async def _plan(state: FlowsState, flows: Sequence[FlowSpec], pools: Mapping[str, PoolSpec], k: int,
                jobs: Mapping[str, Sequence[FlowJob]], now: float) -> decide.Planned:
    """The plan of one group of flows at epoch ``k``, made once per epoch and per change of the objects, under the
    group's own lock (another group's plan never holds it up)."""
    key = (flows[0].epoch_s, decide.group_key(flows))
    lock = state.plan_locks.setdefault(key, asyncio.Lock())
    async with lock:
        got = state.plans.get(key)
        if got is not None and got.fingerprint == decide.fingerprint(flows, pools, k):
            return got
        got = await asyncio.to_thread(decide.plan, flows, pools, k, jobs, now)
        if got.error:
            log.error("flow plan of %s for epoch %d failed: %s", key[1], k, got.error)
        elif got.result is not None:
            metrics.FLOWS_GAP.labels(epoch_seconds=str(flows[0].epoch_s)).set(
                got.result.gap if got.result.gap is not None else -1.0)
        # a group that changed (a flow joined or left) leaves its old plans: drop those that share a flow with it
        mine = set(key[1].split(","))
        for old in [o for o in state.plans if o[0] == key[0] and o != key and mine & set(o[1].split(","))]:
            del state.plans[old]
            state.plan_locks.pop(old, None)
        state.plans[key] = got
        return got


async def _jobs(members: Members, group: Sequence[FlowSpec], me: FlowSpec, pools: Mapping[str, PoolSpec], local_jobs: kopf.Index[Any, Any]
                ) -> tuple[dict[str, list[FlowJob]], dict[tuple[str, str], dict[str, Any]], list[Request], dict[str, str]]:
    """The jobs of every flow of the group (the plan's waiting jobs), this flow's with the member clusters'; this
    flow's Job bodies by (cluster, name), its requests, and the member clusters it could not reach."""
    jobs: dict[str, list[FlowJob]] = {}
    bodies: dict[tuple[str, str], dict[str, Any]] = {}
    requests: list[Request] = []
    errors: dict[str, str] = {}
    for f in group:
        local = list(local_jobs.get((f.namespace, f.name), []))
        steps = [s for s in (step_job_of(b, LOCAL) for b in local) if s is not None]
        if f.key == me.key:
            remote, rbodies, errors = await asyncio.to_thread(step_jobs, members, f, pools)
            steps += remote
            bodies = {**{(LOCAL, (b.get("metadata") or {}).get("name", "")): b for b in local}, **rbodies}
            requests = [r for r in (request_of(b) for b in local) if r is not None]
        jobs[f.key] = flow_jobs(steps)
    return jobs, bodies, requests, errors


# the indexes come by name (kube.periodic passes every Kopf index, as Kopf passed them to its timers)
@periodic.timer(api.GROUP, api.VERSION, "jobflows", interval=TICK_S, initial_delay=1.0)
async def flow_tick(namespace: str | None, name: str, body: kopf.Body, status: kopf.Status, memo: Memo, patch: kopf.Patch,
                    flow_objects: kopf.Index[Any, Any], flow_pools: kopf.Index[Any, Any], flow_local_jobs: kopf.Index[Any, Any],
                    **_: Any) -> None:
    """One tick of a JobFlow: plan once per epoch (jointly with the flows of the same epoch length), take in
    arrivals, apply the current epoch's policy, count, report."""
    core = memo.loops.core
    try:
        me = spec.flow_of(body)
    except TranslationError as e:
        await _refuse(core, "JobFlow", body, status, patch, e)
        return
    members = _members(memo)
    pools = spec.pools_of(b for n in flow_pools for b in flow_pools[n])
    try:  # a pool the administrator has not shared with this namespace: refused, in no plan (issue 45)
        spec.check_shared(me, pools)
    except TranslationError as e:
        await _refuse(core, "JobFlow", body, status, patch, e)
        return
    # flows that name a missing or invalid pool wait, and do not hold up the others' plan; flows naming a pool not
    # shared with them are refused; of the rest, the ones connected to this flow through their pools are planned
    # with it (issue 45: the others apart)
    same = [f for f in spec.flows_of(flow_objects.get("all", [])) if f.epoch_s == me.epoch_s and f.key != me.key
            and not spec.missing_pools(f, pools) and spec.shared(f, pools)] + [me]
    group = next(g for g in decide.groups(same, pools) if any(f.key == me.key for f in g))
    now = time.time()
    k = spec.epoch_index(now, me.epoch_s)
    missing = spec.missing_pools(me, pools)
    jobs, bodies, requests, errors = await _jobs(members, group, me, pools, flow_local_jobs)
    planned = await _plan(memo.flows, group, pools, k, jobs, now) if not missing else None
    if planned is not None and me.key in planned.refused:  # its model cannot be built: refused alone, the group planned
        await _refuse(core, "JobFlow", body, status, patch, TranslationError(*planned.refused[me.key]))
        return
    result = planned.result if planned is not None else None
    entries = decide.current_entries(planned, me.key) if planned is not None and result is not None else {}
    uid = (body.get("metadata") or {}).get("uid")
    c = memo.flows.counters.get(me.key)
    if c is None or c.uid != uid:
        c = memo.flows.counters[me.key] = Counters.seeded(uid, status)
    gen_count = c.generated[1] if c.generated[0] == k else 0
    cap = planned.capped.get(me.key) if planned is not None else None
    n_new = route.due_arrivals(me, k, now, gen_count, cap[1] if cap else None) if result is not None else 0
    new_ids = [safe_name(me.name, f"e{k}-{gen_count + i}") for i in range(n_new)]
    if missing:
        acts = route.Actions(counts={})
    else:
        recent = memo.flows.recent.setdefault(me.key, {})
        for key in [key for key, t in recent.items() if t < now]:
            del recent[key]
        acts = route.route(me, pools, [j for j in jobs[me.key] if j.id not in c.dropped], requests, entries, k, now, new_ids, set(recent))
        recent.update({key: now + min(RECENT_S, me.epoch_s / 2) for key in acts.keys})
    done = await asyncio.to_thread(apply.write, client.BatchV1Api(core.api_client), members, me, pools, acts, bodies)
    c.generated = (k, gen_count + n_new)
    c.dropped |= {jid for jid, _, _ in acts.dropped}
    figures = decide.planned_figures(result.result, me.key, me.utility) if planned is not None and result is not None and planned.k == k else None
    add_counts(c.epochs, c.totals, k, acts.counts, figures, me.epoch_s)
    changed(patch.status, status, flow_status(me, k, c, jobs[me.key], errors, missing, planned, entries, len(group), status.get("conditions")))
    if acts.dropped:
        await asyncio.to_thread(apply.post_dropped, core, body, acts.dropped)
    if done["errors"]:
        log.warning("flow %s: %d action(s) failed this tick", me.key, done["errors"])


@periodic.timer(api.GROUP, api.VERSION, "flowpools", interval=2.0, initial_delay=1.0)
async def pool_tick(name: str, body: kopf.Body, status: kopf.Status, memo: Memo, patch: kopf.Patch, **_: Any) -> None:
    """A FlowPool's status: its capacity now, the plan's load and throughput for it, the member cluster reachable."""
    try:
        pool = spec.pool_of(body)
    except TranslationError as e:
        await _refuse(memo.loops.core, "FlowPool", body, status, patch, e)
        return
    members = _members(memo)
    reach: dict[str, Any] = {"reachable": True}
    refused_ = False
    if pool.kubeconfig is not None:
        try:
            await asyncio.to_thread(members.api, pool.kubeconfig)
            reach["message"] = ""
        except kubeconfigs.Refused as e:  # the Secret's place or content: says what and the flag
            reach = {"reachable": False, "message": str(e)[:600]}
            refused_ = True
        except Exception as e:  # noqa: BLE001
            reach = {"reachable": False, "message": str(getattr(e, "reason", None) or e)[:300]}
    changed(patch.status, status, pool_status(pool, reach, refused_, memo.flows.plans, status.get("conditions")))
