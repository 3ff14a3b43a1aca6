"""The step Jobs of a flow job as manifests and patches (Montana & Zinky, section 2.1: each task of a job runs in
one cluster; 2.2: a backlogged job waits in a cluster's output queue, here a suspended Job). Pure: the writes are
:mod:`.apply`'s.

A step Job in a pool of this cluster gets required node affinity to the pool's ``nodeSelector`` (ANDed with the
template's own terms); in a member cluster it is created there, with the selector's affinity if any. A backlogged
step Job is created suspended in this cluster with no pool label; on release it is given the pool's affinity and
unsuspended (a suspended Job that never started may change its pod template's scheduling directives), or re-made
for a member cluster's pool (:func:`moved_manifest`).
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Mapping
from typing import Any

from .jobs import ANN_ARRIVED, ANN_DECISION, ANN_EPOCH, LABEL_FLOW, LABEL_JOB, LABEL_POOL, LABEL_STEP
from .route import Create
from .spec import FlowSpec, PoolSpec


def safe_name(base: str, suffix: str) -> str:
    """``<base>-<suffix>`` as a Kubernetes name: hashed in the middle when longer than 63 characters."""
    name = f"{base}-{suffix}"
    if len(name) <= 63:
        return name
    h = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{base[: 63 - len(suffix) - 10]}-{h}-{suffix}"


def step_job_name(job_id: str, step: int) -> str:
    return safe_name(job_id, f"s{step}")


def with_affinity(pod_spec: Mapping[str, Any], selector: Mapping[str, str]) -> dict[str, Any]:
    """``pod_spec`` with required node affinity to ``selector`` added to each of its node selector terms (AND)."""
    ps = copy.deepcopy(dict(pod_spec))
    if not selector:
        return ps
    exprs = [{"key": k, "operator": "In", "values": [v]} for k, v in sorted(selector.items())]
    aff = ps.setdefault("affinity", {}).setdefault("nodeAffinity", {})
    req = aff.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    terms = req.get("nodeSelectorTerms") or [{}]
    req["nodeSelectorTerms"] = [{**t, "matchExpressions": [*(t.get("matchExpressions") or []), *exprs]} for t in terms]
    return ps


_DROP_LABELS = ("controller-uid", "job-name", "batch.kubernetes.io/controller-uid", "batch.kubernetes.io/job-name")


def step_manifest(flow: FlowSpec, c: Create, pool: PoolSpec | None) -> dict[str, Any]:
    """The ``batch/v1`` Job of one step of one flow job: the step's template (for a request's step 0, the request's
    own), labelled and annotated for kubesoda, suspended when backlogged, with node affinity to the pool's selector."""
    tmpl = copy.deepcopy(dict(c.template))
    tmd = tmpl.get("metadata") or {}
    spec = copy.deepcopy(dict(tmpl.get("spec") or {}))
    for k in ("selector", "manualSelector", "suspend"):
        spec.pop(k, None)
    pod = copy.deepcopy(dict(spec.get("template") or {}))
    pmd = dict(pod.get("metadata") or {})
    labels = {LABEL_FLOW: flow.name, LABEL_JOB: c.job_id, LABEL_STEP: str(c.step), **({LABEL_POOL: c.pool} if c.pool else {})}
    pmd["labels"] = {**{k: v for k, v in (pmd.get("labels") or {}).items() if k not in _DROP_LABELS}, **labels}
    pod["metadata"] = pmd
    pod_spec = dict(pod.get("spec") or {})
    pod_spec.setdefault("restartPolicy", "Never")
    pod["spec"] = with_affinity(pod_spec, pool.selector) if pool is not None else pod_spec
    spec["template"] = pod
    spec["suspend"] = c.pool is None
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": step_job_name(c.job_id, c.step),
            "namespace": flow.namespace,
            "labels": {**(tmd.get("labels") or {}), **labels},
            "annotations": {**(tmd.get("annotations") or {}), ANN_ARRIVED: f"{c.arrived:.3f}", ANN_EPOCH: str(c.epoch), ANN_DECISION: c.decision},
        },
        "spec": spec,
    }


def release_patch(job_body: Mapping[str, Any], pool: PoolSpec, decision: str) -> dict[str, Any]:
    """The patch that releases a backlogged step Job into a pool of this cluster: pool label, node affinity (a
    suspended Job that never started may change its pod template's scheduling directives), unsuspended."""
    pod = ((job_body.get("spec") or {}).get("template") or {})
    pod_spec = with_affinity(pod.get("spec") or {}, pool.selector)
    return {
        "metadata": {"labels": {LABEL_POOL: pool.name}, "annotations": {ANN_DECISION: decision}},
        "spec": {"suspend": False, "template": {"metadata": {"labels": {LABEL_POOL: pool.name}}, "spec": {"affinity": pod_spec.get("affinity")}}},
    }


def moved_manifest(job_body: Mapping[str, Any], pool: PoolSpec, decision: str) -> dict[str, Any]:
    """A backlogged step Job re-made for a member cluster's pool (the suspended one here is then deleted)."""
    md = job_body.get("metadata") or {}
    spec = copy.deepcopy(dict(job_body.get("spec") or {}))
    for k in ("selector", "manualSelector"):
        spec.pop(k, None)
    pod = spec.get("template") or {}
    pmd = dict(pod.get("metadata") or {})
    pmd["labels"] = {**{k: v for k, v in (pmd.get("labels") or {}).items() if k not in _DROP_LABELS}, LABEL_POOL: pool.name}
    pod["metadata"] = pmd
    pod["spec"] = with_affinity(pod.get("spec") or {}, pool.selector)
    spec["template"] = pod
    spec["suspend"] = False
    ann = {k: v for k, v in (md.get("annotations") or {}).items() if not k.startswith("kopf.") and k != "batch.kubernetes.io/job-tracking"}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": md.get("name"), "namespace": md.get("namespace"),
                         "labels": {**{k: v for k, v in (md.get("labels") or {}).items() if k not in _DROP_LABELS}, LABEL_POOL: pool.name},
                         "annotations": {**ann, ANN_DECISION: decision}},
            "spec": spec}

