"""Plan -> Kubernetes objects: PE instance pods, headless Services, in-place resizes, job status.

Idempotent and restart-safe: pod names are deterministic (``<job>-<pe>-<hash(node)>``), every
change is computed against what is read back from the API server, creates tolerate 409 and
deletes 404, and transient errors (409 conflicts, 429, 5xx) are retried with backoff.

A PE instance is one pod per node where the PE has a fraction f > 0. Its CPU request = limit =
f x the node's allocatable cores (millicores; memory is a fixed request = limit so the pod is
Guaranteed and a resize never changes its QoS). It carries labels ``kubesoda.io/job``,
``kubesoda.io/pe``, annotations ``kubesoda.io/node`` and ``kubesoda.io/fraction``, required node
affinity to the PE's candidate nodes, ``schedulerName: kubesoda`` (the extender then picks the
annotated node), and an owner reference to its StreamJob (garbage collection).
"""

from __future__ import annotations

import hashlib
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from kubernetes import client
from kubernetes.client.rest import ApiException

from . import crd, metrics

log = logging.getLogger("kubesoda.apply")
T = TypeVar("T")
SCHEDULER = "kubesoda"
MEMORY = "64Mi"


TRANSIENT = (429, 500, 502, 503, 504)


def retry(fn: Callable[[], T], what: str, attempts: int = 5, codes: tuple[int, ...] = TRANSIENT) -> T:
    """Call ``fn``, retrying with exponential backoff on transient API errors (and on 409
    conflicts for updates: pass ``codes=TRANSIENT + (409,)``)."""
    delay = 0.2
    for i in range(attempts):
        try:
            return fn()
        except ApiException as e:
            if e.status in codes and i < attempts - 1:
                log.info("retrying %s after %s", what, e.status)
                time.sleep(delay)
                delay *= 2
                continue
            raise
    raise RuntimeError("unreachable")


def dns(s: str, limit: int = 63) -> str:
    s = re.sub(r"[^a-z0-9-]", "-", s.lower()).strip("-")
    return s[:limit].strip("-") or "x"


def pod_name(job: str, pe: str, node: str) -> str:
    h = hashlib.sha1(node.encode()).hexdigest()[:8]
    return f"{dns(f'{job}-{pe}', 53)}-{h}"


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

    @property
    def name(self) -> str:
        return pod_name(self.job, self.pe, self.node)


def pod_body(inst: Instance) -> dict[str, Any]:
    cpu = f"{millicores(inst.fraction, inst.cores)}m"
    md = inst.owner.get("metadata") or {}
    container: dict[str, Any] = {
        "name": "pe",
        "image": inst.spec.get("image") or "registry.k8s.io/pause:3.10",
        "resources": {"requests": {"cpu": cpu, "memory": MEMORY}, "limits": {"cpu": cpu, "memory": MEMORY}},
        "resizePolicy": [{"resourceName": "cpu", "restartPolicy": "NotRequired"}],
        "env": [{"name": "KUBESODA_JOB", "value": inst.job}, {"name": "KUBESODA_PE", "value": inst.pe}] + list(inst.spec.get("env") or []),
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
            "labels": {crd.LABEL_JOB: inst.job, crd.LABEL_PE: inst.pe, "app.kubernetes.io/managed-by": "kubesoda"},
            "annotations": {crd.ANN_NODE: inst.node, crd.ANN_FRACTION: f"{inst.fraction:.6f}"},
            "ownerReferences": [{"apiVersion": crd.API_VERSION, "kind": "StreamJob", "name": md.get("name"), "uid": md.get("uid"),
                                 "controller": True, "blockOwnerDeletion": False}] if md.get("uid") else [],
        },
        "spec": {
            "schedulerName": SCHEDULER,
            "subdomain": dns(f"{inst.job}-{inst.pe}"),
            "hostname": inst.name,
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": sorted(set(inst.candidates) | {inst.node})}]}
            ]}}},
            "containers": [container],
            "terminationGracePeriodSeconds": 5,
        },
    }


def service_body(namespace: str, job: str, pe: str, owner: dict[str, Any]) -> dict[str, Any]:
    md = owner.get("metadata") or {}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": dns(f"{job}-{pe}"),
            "namespace": namespace,
            "labels": {crd.LABEL_JOB: job, crd.LABEL_PE: pe},
            "ownerReferences": [{"apiVersion": crd.API_VERSION, "kind": "StreamJob", "name": md.get("name"), "uid": md.get("uid")}] if md.get("uid") else [],
        },
        "spec": {"clusterIP": "None", "selector": {crd.LABEL_JOB: job, crd.LABEL_PE: pe}, "ports": [{"name": "stream", "port": 9000}]},
    }


class Applier:
    def __init__(self, api: client.ApiClient):
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)

    def ensure_service(self, namespace: str, job: str, pe: str, owner: dict[str, Any]) -> None:
        body = service_body(namespace, job, pe, owner)
        try:
            retry(lambda: self.core.create_namespaced_service(namespace, body), f"create service {body['metadata']['name']}")
        except ApiException as e:
            if e.status != 409:  # one job's failure (e.g. its namespace is terminating) never stops the others
                log.error("service %s/%s: %s %s", namespace, body["metadata"]["name"], e.status, e.reason)

    def sync_pods(self, wanted: list[Instance], existing: list[dict[str, Any]], managed_jobs: set[tuple[str, str]]) -> dict[str, int]:
        """Make the PE pods of ``managed_jobs`` (namespace, job) exactly ``wanted``: delete the
        rest first, then resize in place (shrinks before grows), then create the missing ones,
        so that capacity is freed before it is claimed."""
        counts = {"create": 0, "resize": 0, "delete": 0}
        want = {(i.namespace, i.name): i for i in wanted}
        have = {}
        for p in existing:
            md = p["metadata"]
            if (md["namespace"], (md.get("labels") or {}).get(crd.LABEL_JOB)) in managed_jobs and not md.get("deletionTimestamp"):
                have[(md["namespace"], md["name"])] = p
        for k, p in have.items():
            if k not in want:
                try:
                    retry(lambda k=k: self.core.delete_namespaced_pod(k[1], k[0], grace_period_seconds=0), f"delete {k[1]}")
                    counts["delete"] += 1
                except ApiException as e:
                    if e.status != 404:
                        log.error("delete pod %s/%s: %s %s", k[0], k[1], e.status, e.reason)
        creates = []
        # shrinks before grows, so a node is never asked for more than it has
        def growth(k: tuple[str, str]) -> int:
            cur = have.get(k)
            limits = ((cur["spec"]["containers"][0].get("resources") or {}).get("limits") or {}) if cur else {}
            return millicores(want[k].fraction, want[k].cores) - _millis(limits.get("cpu"))

        for k in sorted(want, key=growth):
            inst = want[k]
            cur = have.get(k)
            if cur is None:
                creates.append(inst)
                continue
            cpu = f"{millicores(inst.fraction, inst.cores)}m"
            limits = (cur["spec"]["containers"][0].get("resources") or {}).get("limits") or {}
            ann = (cur["metadata"].get("annotations") or {}).get(crd.ANN_FRACTION)
            if _millis(limits.get("cpu")) != millicores(inst.fraction, inst.cores):
                body = {"spec": {"containers": [{"name": "pe", "resources": {"requests": {"cpu": cpu}, "limits": {"cpu": cpu}}}]}}
                try:
                    retry(lambda body=body, i=inst: self.core.patch_namespaced_pod_resize(i.name, i.namespace, body), f"resize {inst.name}", codes=TRANSIENT + (409,))
                    counts["resize"] += 1
                except ApiException as e:
                    log.error("resize %s/%s failed: %s %s", inst.namespace, inst.name, e.status, e.body)
                    continue
            if ann != f"{inst.fraction:.6f}":
                patch = {"metadata": {"annotations": {crd.ANN_FRACTION: f"{inst.fraction:.6f}"}}}
                try:
                    retry(lambda patch=patch, i=inst: self.core.patch_namespaced_pod(i.name, i.namespace, patch), f"annotate {inst.name}",
                          codes=TRANSIENT + (409,))
                except ApiException as e:
                    log.error("annotate pod %s/%s: %s %s", inst.namespace, inst.name, e.status, e.reason)
        for inst in creates:  # last: capacity freed by deletes and shrinks comes first
            body = pod_body(inst)
            try:
                retry(lambda body=body, ns=inst.namespace: self.core.create_namespaced_pod(ns, body), f"create pod {inst.name}")
                counts["create"] += 1
            except ApiException as e:
                if e.status != 409:
                    log.error("create pod %s/%s failed: %s", inst.namespace, inst.name, e.reason)
        for kind, n in counts.items():
            metrics.PATCHES.labels(kind).inc(n)
        return counts

    def job_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        body = {"status": status}
        try:
            retry(lambda: self.custom.patch_namespaced_custom_object_status(crd.GROUP, crd.VERSION, namespace, "streamjobs", name, body),
                  f"status {namespace}/{name}", codes=TRANSIENT + (409,))
        except ApiException as e:
            if e.status != 404:
                log.error("status of %s/%s failed: %s", namespace, name, e.reason)

    def event(self, obj: dict[str, Any], reason: str, message: str, type_: str = "Normal") -> None:
        md = obj.get("metadata") or {}
        ns = md.get("namespace", "default")
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        body = {
            "metadata": {"generateName": f"{md.get('name')}.", "namespace": ns},
            "involvedObject": {"apiVersion": crd.API_VERSION, "kind": obj.get("kind", "StreamJob"), "name": md.get("name"), "namespace": ns, "uid": md.get("uid")},
            "reason": reason, "message": message[:1000], "type": type_, "source": {"component": "kubesoda"},
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        }
        try:
            self.core.create_namespaced_event(ns, body)
        except ApiException as e:
            log.warning("event for %s failed: %s", md.get("name"), e.reason)


def _millis(q: Any) -> int:
    if q is None:
        return -1
    return int(round(crd.cores(q, "cpu") * 1000))
