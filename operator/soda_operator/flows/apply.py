"""The writes of a flow's tick: step Jobs created (create-if-absent), requests taken in, backlogged Jobs released
or held, dropped jobs' Jobs deleted, finished jobs marked counted, in this cluster or a member cluster; and the
flows' Events, through the one Event path (:mod:`..kube.events`). Montana & Zinky, section 2.3: the policy is the
one thing under external control; this is where it acts on the clusters.

Each write that fails is logged and counted, never raised: the others of the tick go on, and the next tick sees the
clusters as they are (a Job created twice is a 409, ignored).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from ..kube import api, events
from .jobs import ANN_COUNTED, ANN_DECISION, ANN_REQUEST
from .manifests import moved_manifest, release_patch, step_manifest
from .members import Members
from .route import Actions
from .spec import FlowSpec, PoolSpec

log = logging.getLogger("kubesoda.flows")
DROPPED_EVENTS = 20  # FlowDropped Events posted per tick at most


def write(batch: client.BatchV1Api, members: Members, flow: FlowSpec, pools: Mapping[str, PoolSpec], acts: Actions,
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
            target(pool).create_namespaced_job(flow.namespace, step_manifest(flow, c, pool))  # type: ignore[arg-type]  # a dict is sent as it is
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
            take: dict[str, Any] = {"metadata": {"annotations": {ANN_REQUEST: r.name}}}
            if not r.suspended:
                take["spec"] = {"suspend": True}
            batch.patch_namespaced_job(r.name, flow.namespace, take)
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
                    target(pool).create_namespaced_job(flow.namespace, moved_manifest(body, pool, rel.decision))  # type: ignore[arg-type]
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



def event_object(body: Mapping[str, Any], kind: str) -> dict[str, Any]:
    """The object an Event is about: a JobFlow or a FlowPool."""
    return {"apiVersion": api.API_VERSION, "kind": kind, "metadata": dict(body.get("metadata") or {})}


def post_dropped(core: client.CoreV1Api, body: Mapping[str, Any], dropped: Sequence[tuple[str, int, str]]) -> None:
    """A ``FlowDropped`` Warning on the JobFlow per dropped job (the first :data:`DROPPED_EVENTS` of a tick)."""
    obj = event_object(body, "JobFlow")
    events.post_all(core, [(obj, "FlowDropped", f"job {jid} dropped at step {s}: {why}", "Warning") for jid, s, why in dropped[:DROPPED_EVENTS]])


def post_invalid(core: client.CoreV1Api, body: Mapping[str, Any], kind: str, message: str) -> None:
    """An ``InvalidSpec`` Warning on a JobFlow or FlowPool whose spec cannot be taken (``message`` names the field)."""
    events.post(core, event_object(body, kind), "InvalidSpec", message, "Warning")
