"""Watch-fed state: Kopf indexes of everything an epoch reads, so an epoch lists nothing.

Kopf already watches the resources kubesoda reacts to; these index handlers keep, per resource,
the part of each object the epochs read (nodes, StreamTemplates, StreamJobs, SchedulingPolicies,
kubesoda's PE pods and Services, and the CPU and memory requests of every *other* bound pod).
Kopf re-lists on its own when a watch expires, and holds every other handler (the loops' daemon
included) until all indexes are filled by their first list, so the first epoch never sees a
half-listed cluster.

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
import copy
from collections.abc import Mapping
from typing import Any

import kopf
from kubernetes.utils import parse_quantity

from . import crd
from .state import Snapshot

# metadata fields the epochs never read (managedFields alone is most of a pod's size)
_DROP_METADATA = ("managedFields",)
TERMINAL = ("Succeeded", "Failed")


def _trim(body: Mapping[str, Any], drop_spec: tuple[str, ...] = (), drop_container: tuple[str, ...] = ()) -> dict[str, Any]:
    """A deep copy of ``body``'s metadata, spec and status less ``_DROP_METADATA`` (and the given
    spec and container fields), filtered *before* the copy: a pod's managedFields alone are most
    of its size, and this runs on Kopf's event loop for every watch event."""
    raw: dict[str, Any] = {}
    for k in ("metadata", "spec", "status"):
        if k not in body:
            continue
        part = dict(body.get(k) or {})
        drop = _DROP_METADATA if k == "metadata" else drop_spec if k == "spec" else ()
        for d in drop:
            part.pop(d, None)
        if k == "spec" and drop_container and isinstance(part.get("containers"), list):
            part["containers"] = [{f: v for f, v in c.items() if f not in drop_container} if isinstance(c, Mapping) else c
                                  for c in part["containers"]]
        raw[k] = copy.deepcopy(part)
    for k in ("apiVersion", "kind"):
        if k in body:
            raw[k] = body[k]
    return raw


# parts of a PE pod no epoch reads back (the operator writes them from the template and the plan
# and never compares them): about 60% of a PE pod's size, 7,370 times at 2,000 nodes
_POD_SPEC_DROP = ("volumes", "tolerations", "affinity", "securityContext", "dnsPolicy", "enableServiceLinks",
                  "preemptionPolicy", "restartPolicy", "terminationGracePeriodSeconds", "automountServiceAccountToken")
_CONTAINER_DROP = ("env", "ports", "volumeMounts", "securityContext", "command", "args", "terminationMessagePath",
                   "terminationMessagePolicy", "imagePullPolicy", "readinessProbe", "livenessProbe", "startupProbe")


def _trim_pod(body: Mapping[str, Any]) -> dict[str, Any]:
    """A PE pod as the epochs read it: :func:`_trim` less what only the operator's own writes use."""
    return _trim(body, _POD_SPEC_DROP, _CONTAINER_DROP)


def requests(pod: dict[str, Any]) -> tuple[float, float]:
    """(CPU cores, memory bytes) a pod holds on its node, as the scheduler counts them: the larger
    of the sum over its containers and the largest init container, plus the pod overhead."""
    spec = pod.get("spec") or {}

    def of(c: dict[str, Any], res: str) -> float:
        q = ((c.get("resources") or {}).get("requests") or {}).get(res)
        return float(parse_quantity(q)) if q is not None else 0.0

    out = []
    for res in ("cpu", "memory"):
        main = sum(of(c, res) for c in spec.get("containers") or [])
        init = max((of(c, res) for c in spec.get("initContainers") or []), default=0.0)
        over = (spec.get("overhead") or {}).get(res)
        out.append(max(main, init) + (float(parse_quantity(over)) if over is not None else 0.0))
    return out[0], out[1]


@kopf.index("", "v1", "nodes")
async def kubesoda_nodes(name: str, body: kopf.Body, **_: Any) -> dict[str, Any]:
    return {name: _trim(body)}


@kopf.index(crd.GROUP, crd.VERSION, "streamtemplates")
async def kubesoda_templates(namespace: str, name: str, body: kopf.Body, **_: Any) -> dict[Any, Any]:
    return {(namespace, name): _trim(body)}


@kopf.index(crd.GROUP, crd.VERSION, "streamjobs")
async def kubesoda_jobs(namespace: str, name: str, body: kopf.Body, **_: Any) -> dict[Any, Any]:
    return {(namespace, name): _trim(body)}


@kopf.index(crd.GROUP, crd.VERSION, "schedulingpolicies")
async def kubesoda_policies(name: str, body: kopf.Body, **_: Any) -> dict[Any, Any]:
    return {name: _trim(body)}


@kopf.index("", "v1", "pods", labels={crd.LABEL_JOB: kopf.PRESENT})
async def kubesoda_pods(namespace: str, name: str, body: kopf.Body, **_: Any) -> dict[Any, Any]:
    return {(namespace, name): _trim_pod(body)}


@kopf.index("", "v1", "services", labels={crd.LABEL_JOB: kopf.PRESENT})
async def kubesoda_services(namespace: str, name: str, **_: Any) -> dict[Any, Any]:
    return {(namespace, name): True}


@kopf.index("", "v1", "pods", labels={crd.LABEL_JOB: kopf.ABSENT})
async def foreign_pods(namespace: str, name: str, body: kopf.Body, **_: Any) -> dict[Any, Any]:
    """Other workloads' pods bound to a node and not finished: node -> (pod, cores, bytes)."""
    node = (body.get("spec") or {}).get("nodeName")
    if not node or (body.get("status") or {}).get("phase") in TERMINAL:
        return {}
    try:
        cpu, mem = requests(dict(body))
    except (ValueError, TypeError):
        return {}  # the API server validated it; nothing sensible to count otherwise
    return {node: (f"{namespace}/{name}", cpu, mem)}


def bound_requests(foreign: kopf.Index[Any, Any], kubesoda: kopf.Index[Any, Any]) -> list[tuple[str, str, float, float]]:
    """Every bound, unfinished pod's requests, (node, namespace/name, cores, bytes), from the two
    pod indexes the epochs keep anyway (other workloads' pods and kubesoda's PE pods); the yield
    groups and the batch dispatcher subtract them from the nodes (call on Kopf's event loop)."""
    out = [(node, *v) for node in foreign for v in foreign[node]]
    for key in kubesoda:
        for body in kubesoda[key]:
            node = (body.get("spec") or {}).get("nodeName")
            if not node or (body.get("status") or {}).get("phase") in TERMINAL:
                continue
            try:
                cpu, mem = requests(body)
            except (ValueError, TypeError):
                continue
            md = body.get("metadata") or {}
            out.append((node, f"{md.get('namespace')}/{md.get('name')}", cpu, mem))
    return out


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
                        services=set(ix["kubesoda_services"]), foreign=foreign)

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

    def pod_phases(self, keys: list[tuple[str, str]], timeout: float = 30.0) -> dict[tuple[str, str], str | None]:
        """The phase of each of kubesoda's pods named in ``keys`` (namespace, name) that the index
        holds: the Running refresh's view, without copying the rest of the state."""
        return asyncio.run_coroutine_threadsafe(self._phases(keys), self.loop).result(timeout)

    def policy(self, timeout: float = 30.0) -> dict[str, Any] | None:
        """SchedulingPolicy ``default`` (the loop's timing reads it every tick)."""
        return asyncio.run_coroutine_threadsafe(self._policy(), self.loop).result(timeout)

    def snapshot(self, timeout: float = 30.0) -> Snapshot:
        return asyncio.run_coroutine_threadsafe(self._take(), self.loop).result(timeout)
