"""Watch-fed state: Kopf indexes of everything an epoch reads, so an epoch lists nothing.

Kopf already watches the resources kubesoda reacts to; these index handlers keep, per resource,
the part of each object the epochs read (nodes, StreamTemplates, StreamJobs, SchedulingPolicies,
kubesoda's Services). Pods, StreamJobs and StreamTemplates are the exception: the operator's own
watches (:mod:`..kube.reflector`: ``memo.pods``, ``memo.jobs``, ``memo.templates``) keep kubesoda's PE
pods (:func:`kubesoda_pods`), the CPU and memory requests of every *other* bound pod
(:func:`..kube.pods.foreign_pods`), the jobs and the templates with the same semantics, since Kopf's
per-event cost on 30,000 pod events and 5,500 job and template events was most of the operator's CPU
at 2,000 nodes. Kopf re-lists on its own when a watch expires, and holds every other handler (the loops' daemon
included) until all its indexes are filled by their first list; the loops' daemon also waits for the
pod watch's first list, so the first epoch never sees a half-listed cluster.

:class:`Reader` turns the indexes into a :class:`~.state.Snapshot`. The copy runs on Kopf's event
loop (the loops run in a thread), so no watch event is half-applied while it is taken: one
snapshot is one consistent point of the watch streams. What the operator wrote itself reaches
the indexes through the same watches, a few milliseconds later; a stale view costs at most an
idempotent write (a create answered 409, a delete 404, a resize or a status patched to what it
already is), and the loops keep the statuses they wrote (:class:`~.epochs.Loops`) so an Event is
never posted twice.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

import kopf

from ..kube.pods import job_of, trim
from . import crd
from .state import Snapshot, owned_by_job

# parts of a PE pod no epoch reads back (the operator writes them from the template and the plan
# and never compares them): about 60% of a PE pod's size, 7,370 times at 2,000 nodes
_POD_SPEC_DROP = ("volumes", "tolerations", "affinity", "securityContext", "dnsPolicy", "enableServiceLinks",
                  "preemptionPolicy", "restartPolicy", "terminationGracePeriodSeconds", "automountServiceAccountToken")
_CONTAINER_DROP = ("env", "ports", "volumeMounts", "securityContext", "command", "args", "terminationMessagePath",
                   "terminationMessagePolicy", "imagePullPolicy", "readinessProbe", "livenessProbe", "startupProbe")


def _trim_pod(body: Mapping[str, Any]) -> dict[str, Any]:
    """A PE pod as the epochs read it: :func:`~..kube.pods.trim` less what only the operator's own writes use."""
    return trim(body, _POD_SPEC_DROP, _CONTAINER_DROP)


@kopf.index("", "v1", "nodes")
async def kubesoda_nodes(name: str, body: kopf.Body, **_: Any) -> dict[str, Any]:
    return {name: trim(body)}


def kubesoda_templates(body: Mapping[str, Any]) -> dict[Any, Any]:
    """StreamTemplates, trimmed: an indexer of the operator's StreamTemplate watch (:mod:`..kube.reflector`)."""
    md = body.get("metadata") or {}
    return {(md.get("namespace"), md.get("name")): trim(body)}


def kubesoda_jobs(body: Mapping[str, Any]) -> dict[Any, Any]:
    """StreamJobs, trimmed: an indexer of the operator's StreamJob watch (:mod:`..kube.reflector`)."""
    md = body.get("metadata") or {}
    return {(md.get("namespace"), md.get("name")): trim(body)}


@kopf.index(crd.GROUP, crd.VERSION, "schedulingpolicies")
async def kubesoda_policies(name: str, body: kopf.Body, **_: Any) -> dict[Any, Any]:
    return {name: trim(body)}


def kubesoda_pods(body: Mapping[str, Any]) -> dict[Any, Any]:
    """SODA's PE pods, trimmed: an indexer of the operator's pod watch (:mod:`..kube.reflector`; not
    Kopf's: its per-event cost was most of the operator's CPU at 2,000 nodes)."""
    md = body.get("metadata") or {}
    if crd.LABEL_JOB not in (md.get("labels") or {}):
        return {}
    return {(md.get("namespace"), md.get("name")): _trim_pod(body)}


def unscheduled(pod: Mapping[str, Any]) -> str | None:
    """A Pending pod's ``PodScheduled`` condition when it is False (kube-scheduler's FailedScheduling:
    reason ``Unschedulable`` or ``SchedulerError``), as "reason: message"; None otherwise (issue 48)."""
    st = pod.get("status") or {}
    if st.get("phase") not in (None, "Pending") or (pod.get("spec") or {}).get("nodeName"):
        return None
    for c in st.get("conditions") or []:
        if isinstance(c, Mapping) and c.get("type") == "PodScheduled" and c.get("status") == "False":
            return f"{c.get('reason') or 'Unschedulable'}: {c.get('message') or ''}".rstrip(": ")
    return None


def inflight_listener(memo: Any) -> Callable[[str, Mapping[str, Any]], None]:
    """A pod watch listener: a PE pod the watch shows is no longer in flight (apply.Inflight)."""

    def seen(type_: str, body: Mapping[str, Any]) -> None:
        md = body.get("metadata") or {}
        loops = getattr(memo, "loops", None)
        if loops is not None and crd.LABEL_JOB in (md.get("labels") or {}):
            loops.applier.inflight.seen((md.get("namespace") or "", md.get("name") or ""))

    return seen


@kopf.index("", "v1", "services", labels={crd.LABEL_JOB: kopf.PRESENT})
async def kubesoda_services(namespace: str | None, name: str, meta: kopf.Meta, labels: kopf.Labels, memo: Any = None, **_: Any) -> dict[Any, Any]:
    # only those a StreamJob owns (kubesoda's own): the epochs delete the ones no longer desired
    loops = getattr(memo, "loops", None)
    if loops is not None:  # a create of it is no longer in flight (apply.Inflight)
        loops.applier.inflight_services.seen((namespace or "", name))
    return {(namespace, name): job_of(meta) or ""} if owned_by_job(meta.get("ownerReferences")) else {}


# kubesoda_pods, foreign_pods, kubesoda_templates and kubesoda_jobs come from the operator's own watches
# (memo.pods, memo.templates, memo.jobs), the rest from Kopf's
NAMES = ("kubesoda_nodes", "kubesoda_templates", "kubesoda_jobs", "kubesoda_policies", "kubesoda_pods",
         "kubesoda_services", "foreign_pods")


class Reader:
    """Snapshots from the indexes, taken on Kopf's event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, indices: dict[str, kopf.Index[Any, Any]]):
        missing = [n for n in NAMES if n not in indices]
        if missing:
            raise ValueError(f"Kopf indexes missing: {', '.join(missing)}")
        self.loop = loop
        self.indices = {n: indices[n] for n in NAMES}

    def _copy(self) -> Snapshot:
        ix = self.indices

        def values(name: str) -> list[Any]:
            return [v for k in ix[name] for v in ix[name][k]]

        policies = {k: next(iter(ix["kubesoda_policies"][k])) for k in ix["kubesoda_policies"]}
        foreign: dict[str, list[tuple[str, float, float]]] = {}
        for node in ix["foreign_pods"]:
            foreign[node] = sorted(ix["foreign_pods"][node])
        return Snapshot(nodes=values("kubesoda_nodes"), templates=values("kubesoda_templates"), jobs=values("kubesoda_jobs"),
                        policy=policies.get("default"), pods=values("kubesoda_pods"),
                        services={k: next(iter(ix["kubesoda_services"][k])) for k in ix["kubesoda_services"]}, foreign=foreign)

    def count(self) -> int:
        """StreamJobs and StreamTemplates in the indexes (the loop's settle rule reads it every 0.1 s
        from its own thread: the length of a dict, read without a hop to the event loop)."""
        return len(self.indices["kubesoda_jobs"]) + len(self.indices["kubesoda_templates"])

    async def _take(self) -> Snapshot:
        return self._copy()

    async def _policy(self) -> dict[str, Any] | None:
        store = self.indices["kubesoda_policies"].get("default")
        return next(iter(store), None) if store is not None else None

    async def _phases(self, keys: list[tuple[str, str]]) -> dict[tuple[str, str], str | None]:
        ix = self.indices["kubesoda_pods"]
        out: dict[tuple[str, str], str | None] = {}
        for k in keys:
            store = ix.get(k)
            body = next(iter(store), None) if store is not None else None
            if body is not None:
                out[k] = (body.get("status") or {}).get("phase")
        return out

    async def _unscheduled(self, keys: list[tuple[str, str]]) -> dict[tuple[str, str], str]:
        ix = self.indices["kubesoda_pods"]
        out: dict[tuple[str, str], str] = {}
        for k in keys:
            store = ix.get(k)
            body = next(iter(store), None) if store is not None else None
            why = unscheduled(body) if body is not None else None
            if why is not None:
                out[k] = why
        return out

    def pod_unscheduled(self, keys: list[tuple[str, str]], timeout: float = 30.0) -> dict[tuple[str, str], str]:
        """Of kubesoda's pods named in ``keys``, those the scheduler could not place (issue 48):
        (namespace, name) -> its message (:func:`unscheduled`)."""
        return asyncio.run_coroutine_threadsafe(self._unscheduled(keys), self.loop).result(timeout)

    def pod_phases(self, keys: list[tuple[str, str]], timeout: float = 30.0) -> dict[tuple[str, str], str | None]:
        """The phase of each of kubesoda's pods named in ``keys`` (namespace, name) that the index
        holds: the Running refresh's view, without copying the rest of the state."""
        return asyncio.run_coroutine_threadsafe(self._phases(keys), self.loop).result(timeout)

    def policy(self, timeout: float = 30.0) -> dict[str, Any] | None:
        """SchedulingPolicy ``default`` (the loop's timing reads it every tick)."""
        return asyncio.run_coroutine_threadsafe(self._policy(), self.loop).result(timeout)

    def snapshot(self, timeout: float = 30.0) -> Snapshot:
        return asyncio.run_coroutine_threadsafe(self._take(), self.loop).result(timeout)
