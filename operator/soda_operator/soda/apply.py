"""Plan -> Kubernetes objects: PE instance pods, one headless Service per job, in-place resizes, job status.

Idempotent and restart-safe: pod names are deterministic (``<job>-<pe>-<hash(node)>``), every
change is computed against what is read back from the API server, creates tolerate 409 and
deletes 404, and transient errors (409 conflicts on updates, 429, 5xx) are retried with backoff.

Plan once what was applied (issue 39): what the epochs read back is the pod index, which trails
the API server by the watch's lag (tens of seconds under a flood of thousands of pod events). The
pods this operator has asked to create are kept in :class:`Inflight` from the moment the request
leaves until the pod index shows a pod of that name (the index function tells it) or
``inflight_s`` has passed; the epochs' snapshot counts them as existing pods (:meth:`Inflight.pending`),
so the next epoch neither creates them again nor plans as if they were missing; the same for the
jobs' Services. A create answered
409 (AlreadyExists) is a pod that exists: counted as such, not retried, nothing re-read. Creates are
counted by the API server's answer in ``kubesoda_pod_creates_total{result}``.

A PE instance is one pod per node where the PE has a fraction f > 0. Its CPU request = limit =
f x the node's allocatable cores (millicores); its memory request = limit is the PE's ``memory``
(default 64Mi), fixed, so the pod is Guaranteed and a resize never changes its QoS. It carries labels ``kubesoda.io/job``,
``kubesoda.io/pe``, annotations ``kubesoda.io/node`` and ``kubesoda.io/fraction``, required node
affinity to the PE's candidate nodes (by name, ``matchFields metadata.name``), ``schedulerName: kubesoda`` (the extender then picks the
annotated node), and an owner reference to its StreamJob (garbage collection).

Addressing (issue 39): every PE pod has ``hostname`` = its PE's name (:func:`pe_label`) and
``subdomain`` = its job's headless Service (:func:`service_name`, one per job, selecting the job's
label). Cluster DNS then answers ``<pe>.<job>.<namespace>.svc`` with one A record per ready
instance of that PE (the Kubernetes DNS specification, "Records for a Headless Service": one record
per IP when several endpoints share a hostname), so a producer's KUBESODA_OUTPUTS, immutable env
of a running pod, names something that follows the consumer's instances as they come and go, as a
per-PE Service's name did, for one Service (and its EndpointSlices) per job instead of one per
receiving PE. The hostnames are deliberately shared by a PE's instances, not unique per pod: a
unique name per instance would have to be listed in the producer's env and go stale when the
consumer moves. Services kubesoda owns (a StreamJob owner reference) that are no longer desired,
the per-PE Services of earlier versions included, are deleted; PE pods of earlier versions
(:func:`addressed` is False) are replaced, since hostname and subdomain cannot be changed in place.

Writes are counted in ``kubesoda_writes_total{kind}`` (only requests actually made: a status or
an annotation that would not change is never sent).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from kubernetes import client
from kubernetes.client.rest import ApiException

from ..kube import events, metrics, pods, quantities
from ..kube.api import STREAM_OWNER_API_VERSION, TRANSIENT, Fenced, fenced, raw, retry
from . import crd, resizes

log = logging.getLogger("kubesoda.apply")
T = TypeVar("T")
# the kube-scheduler profile that calls the extender: the chart passes its scheduler.name (default kubesoda)
SCHEDULER = os.environ.get("KUBESODA_SCHEDULER_NAME") or "kubesoda"
MEMORY = "64Mi"  # a PE instance's memory when its template names none (model.DEFAULT_PE_MEMORY)



def dns(s: str, limit: int = 63) -> str:
    s = re.sub(r"[^a-z0-9-]", "-", s.lower()).strip("-")
    return s[:limit].strip("-") or "x"


_LABEL = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")  # a DNS-1035 label: what a Service name must be


def _label(s: str) -> str:
    """``s`` itself when it is a DNS-1035 label, else a valid label made from it with a hash of
    the original (two names that sanitise alike never collide)."""
    if _LABEL.match(s):
        return s
    h = hashlib.sha1(s.encode()).hexdigest()[:8]
    base = dns(s, 53)
    return f"{base}-{h}" if base[0].isalpha() else f"x{base[:52]}-{h}"


def service_name(job: str) -> str:
    """The name of a job's headless Service, the ``subdomain`` of every PE pod of the job."""
    return _label(job)


def pe_label(pe: str) -> str:
    """A PE's ``hostname`` (shared by its instances): the first label of its DNS name."""
    return _label(pe)


def pod_name(job: str, pe: str, node: str) -> str:
    """``<job>-<pe>-<hash(node)>``; when ``<job>-<pe>`` does not fit 53 characters as it is (a job
    name of up to 253), its cut is followed by a hash of job, PE and node, so that two long names
    that share their first 53 characters never name the same pod (issue 45)."""
    base = f"{job}-{pe}"
    short = dns(base, 53)
    h = hashlib.sha1((node if short == base else f"{job}\0{pe}\0{node}").encode()).hexdigest()[:8]
    return f"{short}-{h}"


def millicores(fraction: float, node_cores: float) -> int:
    """Floored, so that the instances planned on a node (sum of fractions <= 1) always fit it."""
    return max(1, int(fraction * node_cores * 1000 + 1e-6))


@dataclass
class Instance:
    namespace: str
    job: str  # job name (no namespace)
    pe: str
    node: str
    fraction: float
    cores: float  # the node's allocatable cores
    candidates: tuple[str, ...]
    spec: dict[str, Any]  # the PE's spec from its StreamTemplate
    owner: dict[str, Any]  # the StreamJob object
    outputs: str = ""  # KUBESODA_OUTPUTS of the PE SDK: "<stream>=<consumer service>:9000,..." (docs/pe-metrics.md)

    @property
    def name(self) -> str:
        return pod_name(self.job, self.pe, self.node)


# where a PE instance serves its metrics (docs/pe-metrics.md): the conventional annotations that
# a Prometheus pod scrape config (or the chart's PodMonitor) selects on
METRICS_PORT = 9100
SCRAPE = {"prometheus.io/scrape": "true", "prometheus.io/port": str(METRICS_PORT), "prometheus.io/path": "/metrics"}


def pod_body(inst: Instance) -> dict[str, Any]:
    cpu = f"{millicores(inst.fraction, inst.cores)}m"
    mem = str(inst.spec.get("memory") or MEMORY)  # the template's, as written (the planner counted the same bytes)
    md = inst.owner.get("metadata") or {}
    labels, annotations = pods.job_metadata(inst.job)  # a label value of at most 63 characters, the full name beside it
    container: dict[str, Any] = {
        "name": "pe",
        "image": inst.spec.get("image") or "registry.k8s.io/pause:3.10",
        "resources": {"requests": {"cpu": cpu, "memory": mem}, "limits": {"cpu": cpu, "memory": mem}},
        "resizePolicy": [{"resourceName": "cpu", "restartPolicy": "NotRequired"}],
        "ports": [{"name": "stream", "containerPort": 9000}, {"name": "metrics", "containerPort": METRICS_PORT}],
        # the PE metrics contract's labels (docs/pe-metrics.md): job and PE, namespace and pod
        "env": [{"name": "KUBESODA_JOB", "value": inst.job}, {"name": "KUBESODA_PE", "value": inst.pe},
                {"name": "KUBESODA_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                {"name": "KUBESODA_POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]
               + ([{"name": "KUBESODA_OUTPUTS", "value": inst.outputs}] if inst.outputs else []) + list(inst.spec.get("env") or []),
        # the `restricted` Pod Security Standard (the PE's image must run as a non-root user)
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
    }
    if inst.spec.get("command"):
        container["command"] = inst.spec["command"]
    if inst.spec.get("args"):
        container["args"] = inst.spec["args"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": inst.name,
            "namespace": inst.namespace,
            "labels": {**labels, crd.LABEL_PE: inst.pe, "app.kubernetes.io/managed-by": "kubesoda"},
            "annotations": {crd.ANN_NODE: inst.node, crd.ANN_FRACTION: f"{inst.fraction:.6f}", **SCRAPE, **annotations},
            "ownerReferences": [{"apiVersion": STREAM_OWNER_API_VERSION, "kind": "StreamJob", "name": md.get("name"), "uid": md.get("uid"),
                                 "controller": True, "blockOwnerDeletion": False}] if md.get("uid") else [],
        },
        "spec": {
            "schedulerName": SCHEDULER,
            # <pe>.<job>.<namespace>.svc resolves to every ready instance of the PE (module docstring)
            "subdomain": service_name(inst.job),
            "hostname": pe_label(inst.pe),
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                # the Node objects' names (what the plan names), as fields: kube-scheduler's NodeAffinity
                # PreFilter then narrows the pod's feasible set to these nodes before any Filter runs, where a
                # kubernetes.io/hostname label (which need not equal the name) made it filter every node. The
                # API server allows one value per metadata.name requirement: one term per node (terms are ORed)
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [n]}]} for n in sorted(set(inst.candidates) | {inst.node})
            ]}}},
            "containers": [container],
            "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
            "automountServiceAccountToken": False,  # a PE needs no API access
            "terminationGracePeriodSeconds": 5,
        },
    }


def service_host(namespace: str, job: str, pe: str) -> str:
    """The DNS name of a PE: every ready instance's address (through its job's headless Service)."""
    return f"{pe_label(pe)}.{service_name(job)}.{namespace}.svc"


def service_body(namespace: str, job: str, owner: dict[str, Any]) -> dict[str, Any]:
    """A job's headless Service: it selects every PE pod of the job; the pods' hostname and
    subdomain give each PE its own name under it."""
    md = owner.get("metadata") or {}
    labels, annotations = pods.job_metadata(job)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": service_name(job),
            "namespace": namespace,
            "labels": {**labels, "app.kubernetes.io/managed-by": "kubesoda"},
            **({"annotations": annotations} if annotations else {}),
            "ownerReferences": [{"apiVersion": STREAM_OWNER_API_VERSION, "kind": "StreamJob", "name": md.get("name"), "uid": md.get("uid")}] if md.get("uid") else [],
        },
        "spec": {"clusterIP": "None", "selector": labels, "ports": [{"name": "stream", "port": 9000}]},
    }


def addressed(pod: dict[str, Any]) -> bool:
    """Whether a PE pod has the hostname and subdomain that make it ``<pe>.<job>.<namespace>.svc``.
    One made before one Service per job (hostname = the pod's name, subdomain ``<job>-<pe>``) has
    not, and both fields are immutable: the upgrade replaces it (deleted, then created again by the
    next epoch once it is gone: one restart of each PE instance), so that no live pod still needs
    the per-PE Services the upgrade deletes or names addresses they served."""
    md, sp = pod.get("metadata") or {}, pod.get("spec") or {}
    labels = md.get("labels") or {}
    return (sp.get("subdomain") == service_name(pods.job_of(md) or "")
            and sp.get("hostname") == pe_label(str(labels.get(crd.LABEL_PE, ""))))


def _fraction_moved(annotated: str | None, fraction: float, cores: float) -> bool:
    """Whether the fraction annotation (the next epoch's previous state) is worth a write: it is
    missing or unreadable, or it is a millicore or more away from ``fraction``. Below that the CPU
    limit cannot differ, and at thousands of pods a rewrite per micro epoch of a value that moved
    in its sixth decimal is thousands of writes for nothing."""
    try:
        return abs(float(annotated) - fraction) * cores * 1000 >= 1  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return True


def inflight_body(body: dict[str, Any]) -> dict[str, Any]:
    """What the epochs read of a pod just created (labels, annotations, the container's resources,
    hostname and subdomain), as the pod index would show it before it is bound: a pending pod."""
    md, sp = body["metadata"], body["spec"]
    return {"metadata": {k: md[k] for k in ("name", "namespace", "labels", "annotations") if k in md},
            "spec": {**{k: sp[k] for k in ("schedulerName", "hostname", "subdomain") if k in sp},
                     "containers": [{"name": c.get("name"), "resources": c.get("resources") or {}} for c in sp.get("containers") or []]},
            "status": {"phase": "Pending"}}


class Inflight:
    """The creates this operator issued whose object the index has not shown yet:
    (namespace, name) -> (when issued, what the epochs read of it: a pod as :func:`inflight_body`,
    a Service as its job's name).

    Recorded before the request is sent (so a watch event that beats the response still clears
    it), kept when the API server answers 201 or 409, dropped when it refuses the create, when the
    index shows an object of that name (:meth:`seen`, from the index function, or the snapshot
    itself holding it), or after ``timeout_s``: a create that never shows up is issued again by
    the next epoch. Thread-safe: the apply workers record, Kopf's event loop clears."""

    def __init__(self, timeout_s: float = 60.0, clock: Callable[[], float] = time.monotonic):
        self.timeout_s = timeout_s
        self.clock = clock
        self._lock = threading.Lock()
        self._items: dict[tuple[str, str], tuple[float, Any]] = {}

    def issued(self, key: tuple[str, str], value: Any) -> None:
        with self._lock:
            self._items[key] = (self.clock(), value)

    def seen(self, key: tuple[str, str]) -> None:
        """The index shows ``key`` (namespace, name): the index speaks for it from now on."""
        if self._items:
            with self._lock:
                self._items.pop(key, None)

    forget = seen  # the API server refused the create, or the object is being deleted: nothing is in flight

    def pending(self, indexed: Any = None) -> dict[tuple[str, str], Any]:
        """The creates still in flight, key -> value, less those ``indexed`` (a container of keys)
        already holds (dropped: seen) and those older than the timeout (dropped: created again)."""
        now = self.clock()
        with self._lock:
            for k in [k for k, (t, _) in self._items.items() if now - t > self.timeout_s or (indexed is not None and k in indexed)]:
                del self._items[k]
            return {k: v for k, (_, v) in self._items.items()}

    def __len__(self) -> int:
        return len(self._items)


class Applier:
    """Writes a plan's difference to the API server, ``workers`` requests at a time.

    Every write first checks ``fence()``: once it returns True (the loops' daemon was stopped,
    e.g. because peering paused this replica), the epoch is abandoned with :class:`Fenced`, so a
    replica that lost leadership mid-epoch stops writing at once instead of finishing its epoch
    while the new leader starts its own."""

    def __init__(self, api: client.ApiClient, workers: int = 16, fence: Callable[[], bool] | None = None, inflight_s: float = 60.0):
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.workers = max(1, workers)
        self.fence = fence or (lambda: False)
        self.inflight = Inflight(inflight_s)  # pods created, not yet in the pod index
        self.inflight_services = Inflight(inflight_s)  # Services created, not yet in the Service index
        self.resizes = resizes.Backoff()  # refused resizes per pod (issue 46)
        # (namespace, job) -> why the API server refused a create of its pods / its Service at the last
        # sync (issue 45: the job's status and one Event say so; the log says it once per new reason)
        self.pod_failures: dict[tuple[str, str], str] = {}
        self.service_failures: dict[tuple[str, str], str] = {}

    @property
    def create_failures(self) -> dict[tuple[str, str], str]:
        """(namespace, job) -> why a create of its pods (else of its Service) was refused at the last sync."""
        return {**self.service_failures, **self.pod_failures}

    def _guard(self) -> None:
        if self.fence():
            raise Fenced("this replica may no longer act")

    def _each(self, fn: Callable[[Any], T], items: list[Any]) -> list[T]:
        """``fn`` over ``items`` with at most ``workers`` requests in flight; a Fenced stops it. Each
        write is fenced twice: by ``fn``'s own ``_guard`` and at the client's send (:func:`..kube.api.fenced`)."""
        def one(item: Any) -> T:
            with fenced(self.fence):
                return fn(item)
        if len(items) <= 1 or self.workers == 1:
            return [one(i) for i in items]
        with ThreadPoolExecutor(self.workers, thread_name_prefix="apply") as pool:
            return list(pool.map(one, items))

    def sync_services(self, wanted: list[tuple[str, str, dict[str, Any]]], existing: dict[tuple[str, str], str],
                      managed_jobs: set[tuple[str, str]]) -> dict[str, int]:
        """Create the headless Service of every (namespace, job, owner) in ``wanted`` whose
        (namespace, name) is not in ``existing`` (kubesoda's Services: (namespace, name) -> the job
        label), and delete each of ``existing`` that is not wanted and whose job is one of
        ``managed_jobs`` (a quarantined job's Service stays with its pods). The per-PE Services of
        earlier versions go this way on upgrade. Returns {"service": created, "service-delete": deleted}."""
        failed: list[tuple[tuple[str, str], str]] = []

        def create(item: tuple[str, str, dict[str, Any]]) -> int:
            namespace, job, owner = item
            body = service_body(namespace, job, owner)
            key = (namespace, body["metadata"]["name"])
            self._guard()
            self.inflight_services.issued(key, job)
            try:
                self._write("service_create")
                retry(lambda: raw(self.core.create_namespaced_service, namespace, body), f"create service {body['metadata']['name']}")
                return 1
            except ApiException as e:
                if e.status != 409:  # one job's failure (e.g. its namespace is terminating) never stops the others
                    self.inflight_services.forget(key)
                    failed.append(((namespace, job), f"Service {body['metadata']['name']}: {refusal(e)}"))
                return 0
            except BaseException:
                self.inflight_services.forget(key)
                raise

        def delete(k: tuple[str, str]) -> int:
            self._guard()
            self.inflight_services.forget(k)
            try:
                self._write("service_delete")
                retry(lambda: raw(self.core.delete_namespaced_service, k[1], k[0]), f"delete service {k[1]}")
                return 1
            except ApiException as e:
                if e.status != 404:
                    log.error("delete service %s/%s: %s %s", k[0], k[1], e.status, e.reason)
                return 0

        # a Service of the wanted name made for another job (an earlier version's per-PE Service
        # `<job>-<pe>` of job `<job>` is named like a job `<job>-<pe>`) is stale too: deleted, then created
        want = {(w[0], service_name(w[1])): w[1] for w in wanted}
        stale = sorted(k for k, job in existing.items() if want.get(k) != job and (k[0], job) in managed_jobs)
        missing = [w for w in wanted if existing.get((w[0], service_name(w[1]))) != w[1]]
        deleted = sum(self._each(delete, stale))  # first: a name taken by another job's Service is freed
        created = sum(self._each(create, missing))
        self.service_failures = _failures(self.service_failures, failed, "create service")
        return {"service": created, "service-delete": deleted}

    def _write(self, kind: str) -> None:
        """Count one write request about to be made (``kubesoda_writes_total``)."""
        metrics.WRITES.labels(kind).inc()

    def sync_pods(self, wanted: list[Instance], existing: list[dict[str, Any]], managed_jobs: set[tuple[str, str]]) -> dict[str, int]:
        """Make the PE pods of ``managed_jobs`` (namespace, job) exactly ``wanted``: delete the
        rest first, then resize in place (all shrinks before any grow), then create the missing
        ones, so that capacity is freed before it is claimed. Each phase runs its requests
        concurrently; the phases are sequential."""
        want = {(i.namespace, i.name): i for i in wanted}
        have = {}
        replace = []  # pods from before one Service per job: hostname and subdomain are immutable
        for p in existing:
            md = p["metadata"]
            if (md["namespace"], pods.job_of(md)) in managed_jobs and not md.get("deletionTimestamp"):
                if (md["namespace"], md["name"]) in want and not addressed(p):
                    replace.append((md["namespace"], md["name"]))  # deleted below, created again once gone
                    continue
                have[(md["namespace"], md["name"])] = p

        def delete(k: tuple[str, str]) -> int:
            self._guard()
            self.inflight.forget(k)
            try:
                self._write("pod_delete")
                retry(lambda: raw(self.core.delete_namespaced_pod, k[1], k[0], grace_period_seconds=0), f"delete {k[1]}")
                return 1
            except ApiException as e:
                if e.status != 404:
                    log.error("delete pod %s/%s: %s %s", k[0], k[1], e.status, e.reason)
                return 0

        def update(inst: Instance) -> int:
            cur = have[(inst.namespace, inst.name)]
            cpu = f"{millicores(inst.fraction, inst.cores)}m"
            limits = (cur["spec"]["containers"][0].get("resources") or {}).get("limits") or {}
            ann = (cur["metadata"].get("annotations") or {}).get(crd.ANN_FRACTION)
            done = 0
            target = millicores(inst.fraction, inst.cores)
            key = (inst.namespace, inst.name)
            if quantities.millicores(limits.get("cpu")) != target:
                if not self.resizes.due(key, target):
                    return 0  # refused before: backing off (the annotation keeps the fraction in force)
                body = {"spec": {"containers": [{"name": "pe", "resources": {"requests": {"cpu": cpu}, "limits": {"cpu": cpu}}}]}}
                self._guard()
                try:
                    self._write("pod_resize")
                    retry(lambda: raw(self.core.patch_namespaced_pod_resize, inst.name, inst.namespace, body), f"resize {inst.name}",
                          codes=TRANSIENT + (409,))
                    done = 1
                    self.resizes.done(key)
                except ApiException as e:
                    if e.status == 404:
                        return 0
                    why = resizes.message_of(e.body, e.status, e.reason)
                    metrics.RESIZES_REFUSED.inc()
                    if self.resizes.refuse(key, f"{inst.namespace}/{inst.job}", target, why):  # once per pod and target
                        log.warning("resize %s/%s to %s refused, retried with backoff: %s", inst.namespace, inst.name, cpu, why)
                        self.event(inst.owner, "ResizeRefused", f"pod {inst.name}: CPU {cpu} refused ({why}); retried with backoff, "
                                   f"its CPU stays {limits.get('cpu')}", "Warning")
                    return 0
            if done or _fraction_moved(ann, inst.fraction, inst.cores):
                patch = {"metadata": {"annotations": {crd.ANN_FRACTION: f"{inst.fraction:.6f}"}}}
                self._guard()
                try:
                    self._write("pod_annotate")
                    retry(lambda: raw(self.core.patch_namespaced_pod, inst.name, inst.namespace, patch), f"annotate {inst.name}",
                          codes=TRANSIENT + (409,))
                except ApiException as e:
                    log.error("annotate pod %s/%s: %s %s", inst.namespace, inst.name, e.status, e.reason)
            return done

        def send(body: dict[str, Any]) -> int:
            """One create request, counted by its answer (a 409 is left to the caller)."""
            try:
                code = raw(self.core.create_namespaced_pod, body["metadata"]["namespace"], body)
            except ApiException as e:
                metrics.POD_CREATES.labels("exists" if e.status == 409 else "retried" if e.status in TRANSIENT else "failed").inc()
                raise
            metrics.POD_CREATES.labels("created").inc()
            return code

        failed: list[tuple[tuple[str, str], str]] = []

        def create(inst: Instance) -> int:
            body = pod_body(inst)
            self._guard()
            self.inflight.issued((inst.namespace, inst.name), inflight_body(body))  # before the request: the watch may show the pod first
            try:
                self._write("pod_create")
                retry(lambda: send(body), f"create pod {inst.name}")
                return 1
            except ApiException as e:
                if e.status == 409:  # AlreadyExists: the pod is there (an earlier create, or a retry after a lost answer)
                    return 0
                self.inflight.forget((inst.namespace, inst.name))
                failed.append(((inst.namespace, inst.job), f"pod {inst.name}: {refusal(e)}"))
                return 0
            except BaseException:
                self.inflight.forget((inst.namespace, inst.name))
                raise

        def growth(k: tuple[str, str]) -> int:
            limits = (have[k]["spec"]["containers"][0].get("resources") or {}).get("limits") or {}
            return millicores(want[k].fraction, want[k].cores) - quantities.millicores(limits.get("cpu"))

        def stale(k: tuple[str, str]) -> bool:
            """Whether ``update`` has anything to write for a kept pod (its CPU or its fraction's
            annotation); checked before the pool, not in it: a micro epoch at 10x LSD handed 7,370
            pods to the workers to find nothing to do (issue 53)."""
            inst, cur = want[k], have[k]
            limits = (cur["spec"]["containers"][0].get("resources") or {}).get("limits") or {}
            ann = (cur["metadata"].get("annotations") or {}).get(crd.ANN_FRACTION)
            return quantities.millicores(limits.get("cpu")) != millicores(inst.fraction, inst.cores) or _fraction_moved(ann, inst.fraction, inst.cores)

        kept = [k for k in want if k in have and stale(k)]
        counts = {
            "delete": sum(self._each(delete, [k for k in have if k not in want] + replace)),
            # shrinks (and annotation-only updates) before grows, so a node is never asked for more than it has
            "resize": sum(self._each(update, [want[k] for k in kept if growth(k) <= 0]))
            + sum(self._each(update, [want[k] for k in kept if growth(k) > 0])),
            "create": sum(self._each(create, [want[k] for k in want if k not in have])),  # last: freed capacity first
        }
        self.pod_failures = _failures(self.pod_failures, failed, "create pod")
        for kind, n in counts.items():
            metrics.PATCHES.labels(kind).inc(n)
        return counts

    def job_statuses(self, updates: list[tuple[str, str, dict[str, Any]]]) -> None:
        """Patch the status of each (namespace, name, status), concurrently."""
        self._each(lambda u: self.job_status(*u), updates)

    def job_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        body = {"status": status}
        self._guard()
        try:
            self._write("job_status")
            retry(lambda: raw(self.custom.patch_namespaced_custom_object_status, crd.GROUP, crd.VERSION, namespace, "streamjobs", name, body),
                  f"status {namespace}/{name}", codes=TRANSIENT + (409,))
        except ApiException as e:
            if e.status != 404:
                log.error("status of %s/%s failed: %s", namespace, name, e.reason)

    def policy_status(self, status: dict[str, Any]) -> None:
        """Patch the status of the SchedulingPolicy ``default`` (the budget managers' bookkeeping, the
        plan's importance, bound and gap)."""
        self._guard()
        try:
            self._write("policy_status")
            retry(lambda: raw(self.custom.patch_cluster_custom_object_status, crd.GROUP, crd.VERSION, "schedulingpolicies", "default",
                              {"status": status}), "status of SchedulingPolicy default", codes=TRANSIENT + (409,))
        except ApiException as e:
            log.error("status of SchedulingPolicy default failed: %s", e.reason)

    def object_statuses(self, writes: list[tuple[str, str | None, str, dict[str, Any]]]) -> None:
        """:meth:`object_status` of each (plural, namespace, name, status), concurrently."""
        self._each(lambda w: self.object_status(*w), writes)

    def object_status(self, plural: str, namespace: str | None, name: str, status: dict[str, Any]) -> None:
        """Patch the status of a StreamTemplate (namespaced) or the SchedulingPolicy (cluster-scoped)."""
        self._guard()
        body = {"status": status}
        self._write("template_status" if plural == "streamtemplates" else "policy_status")
        try:
            if namespace:
                retry(lambda: raw(self.custom.patch_namespaced_custom_object_status, crd.GROUP, crd.VERSION, namespace, plural, name, body),
                      f"status of {plural} {namespace}/{name}", codes=TRANSIENT + (409,))
            else:
                retry(lambda: raw(self.custom.patch_cluster_custom_object_status, crd.GROUP, crd.VERSION, plural, name, body),
                      f"status of {plural} {name}", codes=TRANSIENT + (409,))
        except ApiException as e:
            if e.status != 404:
                log.error("status of %s %s/%s failed: %s", plural, namespace or "", name, e.reason)

    def events(self, items: list[tuple[dict[str, Any], str, str, str]], at: str | None = None) -> None:
        """Events (object, reason, message, type), concurrently; ``at``: when they happened, if earlier
        than now (:func:`..kube.events.body`)."""
        self._each(lambda e: self.event(e[0], e[1], e[2], e[3], at=at), items)

    def event(self, obj: dict[str, Any], reason: str, message: str, type_: str = "Normal", at: str | None = None) -> None:
        def before() -> None:
            self._guard()
            self._write("event")
        events.post(self.core, {"apiVersion": crd.API_VERSION, "kind": "StreamJob", **obj}, reason, message, type_, before=before, at=at)


def refusal(e: ApiException) -> str:
    """The API server's own words for a refused request (its Status message), else its code and reason."""
    try:
        msg = json.loads(e.body or "{}").get("message")
    except (ValueError, AttributeError):
        msg = None
    return f"{e.status} {e.reason}: {msg}"[:600] if msg else f"{e.status} {e.reason}"


def _failures(before: dict[tuple[str, str], str], failed: list[tuple[tuple[str, str], str]], what: str) -> dict[tuple[str, str], str]:
    """This sync's failures by job (the first of each), logged when a job's reason is new: a
    create refused every epoch for the same reason is one log line, not one per epoch."""
    now: dict[tuple[str, str], str] = {}
    for job, why in sorted(failed):
        now.setdefault(job, why)
    for job, why in now.items():
        if before.get(job) != why:
            log.error("%s of StreamJob %s/%s failed: %s", what, job[0], job[1], why)
    return now


def status_changed(old: dict[str, Any] | None, new: dict[str, Any]) -> bool:
    """A merge patch of ``new`` onto ``old`` would change something (a skipped no-op write is one
    request less per job per micro epoch)."""
    old = old or {}
    return any(old.get(k) != v for k, v in new.items())


def changed_fields(old: dict[str, Any] | None, new: dict[str, Any]) -> list[str]:
    """The status fields a merge patch of ``new`` onto ``old`` would change, ``pes[].field`` for a
    PE's own (issue 53: the log of each macro epoch counts the job status writes by field, so a
    rewrite of every job's status says which field moved)."""
    old = old or {}
    out: set[str] = set()
    for k, v in new.items():
        if old.get(k) == v:
            continue
        if k == "pes" and isinstance(v, list) and isinstance(old.get(k), list):
            before = {p.get("name"): p for p in old[k] if isinstance(p, dict)}
            n = len(out)
            for pe in v:
                prev = before.get(pe.get("name")) if isinstance(pe, dict) else None
                if prev is None:
                    out.add("pes[]")
                    continue
                out.update(f"pes[].{f}" for f in set(pe) | set(prev) if pe.get(f) != prev.get(f))
            if len(before) != len(v) or len(out) == n:  # a PE gone, or the same PEs in another order
                out.add("pes[]")
        else:
            out.add(k)
    return sorted(out)

