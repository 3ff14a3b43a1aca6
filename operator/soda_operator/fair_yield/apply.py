"""A YieldGroup's decision written to its pods: the paper's resource allocator acting through the VM
management system (section 2.1; adapting an allocation, section 6.2), here the API server.

- a gated pod placed on node n gets ``nodeSelector kubernetes.io/hostname: n`` (adding to a gated
  pod's scheduling constraints is allowed), its CPU resized (``pods/resize``, allowed on a gated
  pod) to alpha x yield, request = limit, so that it fits the share it was planned, and its gate
  removed, so the default scheduler binds it there;
- a move is an eviction: the pod's controller recreates it, gated again, and the next epoch places it
  (the paper's migration, section 6);
- a running task's CPU is resized in place (same UID) to alpha x yield (section 3.5).

A pod gone meanwhile (404) is skipped; any other refusal is logged and the epoch goes on (the next
one retries). Events go through :mod:`..kube.events` (the handlers post them).
"""

from __future__ import annotations

import logging
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from ..kube import quantities
from .decide import Decision
from .tasks import ANN_ALPHA, ANN_NODE, ANN_YIELD, GATE, task_of

log = logging.getLogger("kubesoda.yield")

HOSTNAME = "kubernetes.io/hostname"


def resize_body(pod: dict[str, Any], cores: float) -> dict[str, Any] | None:
    """The pods/resize patch that gives ``pod`` ``cores`` CPU in all (request = limit), shared
    among its containers as their limits are; None when it has that already (within 1.5m)."""
    containers = [c for c in (pod.get("spec") or {}).get("containers") or [] if ((c.get("resources") or {}).get("limits") or {}).get("cpu")]
    now = sum(quantities.amount(c["resources"]["limits"]["cpu"]) for c in containers)
    if now <= 0 or abs(now - cores) < 0.0015:
        return None
    scale = cores / now
    return {"spec": {"containers": [
        {"name": c["name"], "resources": {k: {**((c.get("resources") or {}).get(k) or {}), "cpu": quantities.milli(quantities.amount(c["resources"]["limits"]["cpu"]) * scale)}
                                          for k in ("requests", "limits")}}
        for c in containers]}}


def write(core: client.CoreV1Api, namespace: str, decision: Decision, pods: dict[str, dict[str, Any]]) -> dict[str, int]:
    """Write a decision: place (CPU resized to alpha x yield while still gated, so the pod fits the
    node it was planned on; nodeSelector; gate removed), evict, resize the running ones. Returns
    how many pods were placed, evicted and resized."""
    done = {"placed": 0, "evicted": 0, "resized": 0}
    for name, node in decision.place.items():
        pod = pods[name]
        spec = pod.get("spec") or {}
        task = task_of(pod)
        if task is None:
            continue
        gates = [g for g in spec.get("schedulingGates") or [] if g.get("name") != GATE]
        body = {"metadata": {"annotations": {ANN_NODE: node, ANN_ALPHA: f"{task.alpha:g}", ANN_YIELD: f"{decision.yields.get(name, 0):.6f}"}},
                "spec": {"nodeSelector": {**(spec.get("nodeSelector") or {}), HOSTNAME: node}}}
        try:
            core.patch_namespaced_pod(name, namespace, body)
            resize = resize_body(pod, task.alpha * decision.yields.get(name, 1.0))
            if resize is not None:
                core.patch_namespaced_pod_resize(name, namespace, resize)
            # the gate list is replaced, not merged: a JSON patch of the whole list
            core.patch_namespaced_pod(name, namespace, [{"op": "replace", "path": "/spec/schedulingGates", "value": gates}])
            done["placed"] += 1
        except ApiException as e:
            if e.status != 404:
                log.error("placing %s/%s on %s failed: %s %s", namespace, name, node, e.reason, e.body)
    for name in decision.evict:
        try:
            core.delete_namespaced_pod(name, namespace)
            done["evicted"] += 1
        except ApiException as e:
            if e.status != 404:
                log.error("evicting %s/%s failed: %s", namespace, name, e.reason)
    for name, cores in decision.cpu.items():
        pod = pods[name]
        resize = resize_body(pod, cores)
        if resize is None:
            continue
        try:
            core.patch_namespaced_pod_resize(name, namespace, resize)
            core.patch_namespaced_pod(name, namespace, {"metadata": {"annotations": {ANN_YIELD: f"{decision.yields.get(name, 0):.6f}"}}})
            done["resized"] += 1
        except ApiException as e:
            if e.status != 404:
                log.error("resizing %s/%s failed: %s %s", namespace, name, e.reason, e.body)
    return done
