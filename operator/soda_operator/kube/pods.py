"""Pods as every system reads them: trimmed copies for Kopf's indexes, what a pod holds on its
node, the index of other workloads' bound pods that every system subtracts from the nodes
(capacity is shared: DESIGN, "One mechanism for every allocation system"), and the two writes the
fair-yield and dispatch systems share: a pod pinned to a node by name, and an eviction."""

from __future__ import annotations

import copy
import hashlib
import json
import logging
from collections.abc import Mapping
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from . import quantities

LABEL_JOB = "kubesoda.io/job"  # on SODA's PE pods and Services: job_label(the job's name)
ANN_JOB = "kubesoda.io/job-name"  # the job's full name, beside a label that had to be shortened
LABEL_MAX = 63  # a label value's length limit
TERMINAL = ("Succeeded", "Failed")
FIELD = "metadata.name"  # a plan names a Node by its name; the kubernetes.io/hostname label need not equal it
log = logging.getLogger("kubesoda.pods")
# metadata fields no epoch reads (managedFields alone is most of a pod's size)
_DROP_METADATA = ("managedFields",)


def job_label(job: str) -> str:
    """The ``kubesoda.io/job`` label value of a StreamJob named ``job`` (issue 45): the name itself
    when it fits a label value (63 characters; a StreamJob's name may have 253), else its first 52
    characters, ``_`` and 10 hex digits of its SHA-256. ``_`` never occurs in an object name, so a
    shortened value is never another job's name, and the full name is on the object as the
    annotation :data:`ANN_JOB` (:func:`job_of` reads it back)."""
    if len(job) <= LABEL_MAX:
        return job
    return f"{job[:52]}_{hashlib.sha256(job.encode()).hexdigest()[:10]}"


def job_of(metadata: Mapping[str, Any]) -> str | None:
    """The StreamJob name (without namespace) a PE pod or Service belongs to, from its metadata:
    the :data:`ANN_JOB` annotation when the label had to be shortened, else the label; None
    without the label."""
    label = (metadata.get("labels") or {}).get(LABEL_JOB)
    if label is None:
        return None
    full = (metadata.get("annotations") or {}).get(ANN_JOB)
    return str(full) if full and job_label(str(full)) == label else str(label)


def job_metadata(job: str) -> tuple[dict[str, str], dict[str, str]]:
    """(labels, annotations) that mark an object as job ``job``'s: the label, and the full name
    when the label is shortened."""
    label = job_label(job)
    return {LABEL_JOB: label}, ({ANN_JOB: job} if label != job else {})


def trim(body: Mapping[str, Any], drop_spec: tuple[str, ...] = (), drop_container: tuple[str, ...] = ()) -> dict[str, Any]:
    """A deep copy of ``body``'s metadata, spec and status less ``managedFields`` (and the given
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


def requests(pod: Mapping[str, Any]) -> tuple[float, float]:
    """(CPU cores, memory bytes) a pod holds on its node, as the scheduler counts them: the larger
    of the sum over its containers and the largest init container, plus the pod overhead."""
    spec = pod.get("spec") or {}

    def of(c: Mapping[str, Any], res: str) -> float:
        return quantities.amount(((c.get("resources") or {}).get("requests") or {}).get(res))

    out = []
    for res in ("cpu", "memory"):
        main = sum(of(c, res) for c in spec.get("containers") or [])
        init = max((of(c, res) for c in spec.get("initContainers") or []), default=0.0)
        out.append(max(main, init) + quantities.amount((spec.get("overhead") or {}).get(res)))
    return out[0], out[1]


def foreign_pods(body: Mapping[str, Any]) -> dict[Any, Any]:
    """Other workloads' pods bound to a node and not finished: node -> (pod, cores, bytes); an indexer of
    the operator's pod watch (:mod:`.reflector`)."""
    md = body.get("metadata") or {}
    if LABEL_JOB in (md.get("labels") or {}):
        return {}
    node = (body.get("spec") or {}).get("nodeName")
    if not node or (body.get("status") or {}).get("phase") in TERMINAL:
        return {}
    try:
        cpu, mem = requests(body)
    except (ValueError, TypeError):
        return {}  # the API server validated it; nothing sensible to count otherwise
    return {node: (f"{md.get('namespace')}/{md.get('name')}", cpu, mem)}


def bound_requests(foreign: Mapping[Any, Any], kubesoda: Mapping[Any, Any]) -> list[tuple[str, str, float, float]]:
    """Every bound, unfinished pod's requests, (node, namespace/name, cores, bytes), from the two
    pod indexes the operator keeps anyway (other workloads' pods, :func:`foreign_pods`, and SODA's
    PE pods); the yield groups and the batch dispatcher subtract them from the nodes (call on
    Kopf's event loop, where the pod watch changes them)."""
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


def pinned_affinity(pod: Mapping[str, Any], node: str) -> dict[str, Any]:
    """The pod's node affinity required on ``node`` by name: one term ``metadata.name In [node]``, or
    that requirement added to each of the pod's own required terms (the only change the API server
    allows on a gated pod that has some)."""
    spec = pod.get("spec") or {}
    affinity = spec.get("affinity") or {}
    na = affinity.get("nodeAffinity") or {}
    req = {"key": FIELD, "operator": "In", "values": [node]}
    terms = (na.get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or []
    terms = [{**t, "matchFields": [*(t.get("matchFields") or []), req]} for t in terms] or [{"matchFields": [req]}]
    return {**affinity, "nodeAffinity": {**na, "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}


def evict(core: client.CoreV1Api, namespace: str, name: str) -> tuple[bool, str | None]:
    """Evict a pod through the Eviction API, so its PodDisruptionBudgets are respected: ``(True, None)``
    when evicted, ``(False, None)`` when it was gone already, ``(False, why)`` when the API server
    refused (429: a budget allows no disruption now; the caller tries again at its next decision)."""
    try:
        core.create_namespaced_pod_eviction(name, namespace, client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=namespace)))
        return True, None
    except ApiException as e:
        if e.status == 404:
            return False, None
        if e.status != 429:
            log.error("evicting %s/%s failed: %s", namespace, name, e.reason)
        try:
            msg = json.loads(e.body or "{}").get("message")
        except (ValueError, AttributeError):
            msg = None
        return False, str(msg or e.reason or e.status)
