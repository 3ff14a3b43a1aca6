"""A YieldGroup's decision written to its pods: the paper's resource allocator acting through the VM
management system (section 2.1; adapting an allocation, section 6.2), here the API server.

- a gated pod placed on node n gets a required node affinity on the Node's name (``matchFields
  metadata.name In [n]``, added to each of its own terms if it has some: adding to a gated pod's
  scheduling constraints is allowed; ``kubernetes.io/hostname`` need not equal the Node's name), its
  CPU resized (``pods/resize``, allowed on a gated pod) to alpha x yield so that it fits the share
  it was planned, and its gate removed, so the default scheduler binds it there;
- a move is an eviction through the Eviction API, so PodDisruptionBudgets hold: the pod's
  controller recreates it, gated again, and the next epoch places it (the paper's migration,
  section 6). An eviction the API refuses (429: a budget allows no disruption now) is reported
  (``blocked``) and tried again at the next epoch, which plans with the pod where it is;
- a running task's CPU is resized in place (same UID) to alpha x yield (section 3.5): the pods that
  shrink first, then the gated pods placed, then the pods that grow, so that the requests on a node
  never sum above what the plan gives it, even between two writes; when a shrink is refused, no pod
  grows this epoch (``failed``). A pod being evicted is not resized: the plan counted it at what it
  holds (issue 47).

Every container's CPU is resized, whatever it declares (:func:`resize_body`): its request (a pod
with requests only keeps no limit), and its limit where it has one; a container whose request is
below its limit keeps that ratio (so the pod's QoS class, which a resize may not change, stays).
A pod gone meanwhile (404) is skipped; any other refusal is logged and the epoch goes on (the next
one retries). Events go through :mod:`..kube.events` (the handlers post them).
"""

from __future__ import annotations

import logging
import math
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from ..kube import quantities
from ..kube.pods import evict, pinned_affinity
from .decide import Decision
from .tasks import ANN_ALPHA, ANN_NODE, ANN_YIELD, GATE, task_of

log = logging.getLogger("kubesoda.yield")



def _cpu(c: dict[str, Any], kind: str) -> float:
    return quantities.amount(((c.get("resources") or {}).get(kind) or {}).get("cpu"))


def resize_body(pod: dict[str, Any], cores: float) -> dict[str, Any] | None:
    """The pods/resize patch that gives ``pod`` ``cores`` CPU in all, shared among its containers as
    their CPU needs are (a container's limit, its request when it has none); None when it declares
    no CPU, or when the change is a growth under 1.5m (not worth a write). Each container's share is
    rounded down to the millicore (at least 1m, taken from the largest), so the pod never gets more
    than ``cores`` (nor less than 1m a container), and a lowering is never
    skipped (issue 47: a 4-core pod planned 3999m kept 4 cores on a node holding 1m more, Pending for
    good). Requests are set on every container, limits only where present; a request below its
    limit keeps its ratio to it."""
    containers = [c for c in (pod.get("spec") or {}).get("containers") or [] if _cpu(c, "limits") or _cpu(c, "requests")]
    need = {c["name"]: _cpu(c, "limits") or _cpu(c, "requests") for c in containers}
    now = sum(need.values())
    if now <= 0:
        return None
    scale = cores / now
    share = {c["name"]: max(1, math.floor(need[c["name"]] * scale * 1000 + 1e-6)) for c in containers}  # millicores
    over = sum(share.values()) - max(len(share), math.floor(cores * 1000 + 1e-6))  # the 1m floors may add up
    for n in sorted(share, key=lambda n: -share[n]):
        take = min(over, share[n] - 1)
        if take <= 0:
            break
        share[n] -= take
        over -= take
    grow = sum(share.values()) - now * 1000
    if all(share[n] >= need[n] * 1000 - 1e-6 for n in share) and grow < 1.5:
        return None
    out = []
    for c in containers:
        res = c.get("resources") or {}
        lim, req = _cpu(c, "limits"), _cpu(c, "requests")
        ratio = req / lim if lim and 0 < req < lim else 1.0
        body = {"requests": {**(res.get("requests") or {}), "cpu": f"{max(1, math.floor(share[c['name']] * ratio + 1e-6))}m"}}
        if lim:
            body["limits"] = {**(res.get("limits") or {}), "cpu": f"{share[c['name']]}m"}
        out.append({"name": c["name"], "resources": body})
    return {"spec": {"containers": out}}


def _resize(core: client.CoreV1Api, namespace: str, decision: Decision, pod: dict[str, Any], name: str, cores: float,
            failed: dict[str, str]) -> bool:
    resize = resize_body(pod, cores)
    if resize is None:
        return False
    try:
        core.patch_namespaced_pod_resize(name, namespace, resize)
        core.patch_namespaced_pod(name, namespace, {"metadata": {"annotations": {ANN_YIELD: f"{decision.yields.get(name, 0):.6f}"}}})
        return True
    except ApiException as e:
        if e.status != 404:
            log.error("resizing %s/%s failed: %s %s", namespace, name, e.reason, e.body)
            failed[name] = f"resize refused: {e.status} {e.reason}"
        return False


def held(pod: dict[str, Any]) -> float:
    """The CPU a pod holds as the resize sees it: each container's limit, else its request."""
    return sum(_cpu(c, "limits") or _cpu(c, "requests") for c in (pod.get("spec") or {}).get("containers") or [])


def write(core: client.CoreV1Api, namespace: str, decision: Decision, pods: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Write a decision: evict (Eviction API), shrink, place (CPU resized to alpha x yield while still
    gated, so the pod fits the node it was planned on; node affinity by name; gate removed), grow.
    Returns the counts placed, evicted and resized, the pods whose eviction was refused
    (``blocked``: pod -> the API server's reason) and the writes refused otherwise (``failed``)."""
    done: dict[str, Any] = {"placed": 0, "evicted": 0, "resized": 0, "blocked": {}, "failed": {}}
    for name in decision.evict:
        evicted, why = evict(core, namespace, name)  # a PodDisruptionBudget may refuse: retried next epoch
        done["evicted"] += evicted
        if why is not None:
            done["blocked"][name] = why
    current = {n: held(pods[n]) for n in decision.cpu}
    shrink = [n for n, cores in decision.cpu.items() if cores < current[n]]
    grow = [n for n in decision.cpu if n not in shrink]
    for name in shrink:
        done["resized"] += _resize(core, namespace, decision, pods[name], name, decision.cpu[name], done["failed"])
    for name, node in decision.place.items():
        pod = pods[name]
        spec = pod.get("spec") or {}
        task = task_of(pod)
        if task is None:
            continue
        gates = [g for g in spec.get("schedulingGates") or [] if g.get("name") != GATE]
        body = {"metadata": {"annotations": {ANN_NODE: node, ANN_ALPHA: f"{task.alpha:g}", ANN_YIELD: f"{decision.yields.get(name, 0):.6f}"}},
                "spec": {"affinity": pinned_affinity(pod, node)}}
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
                done["failed"][name] = f"placing on {node} refused: {e.status} {e.reason}"
    if any(n in done["failed"] for n in shrink):
        return done  # a pod still holds CPU the plan took from it: a growth now could go over its node
    for name in grow:
        done["resized"] += _resize(core, namespace, decision, pods[name], name, decision.cpu[name], done["failed"])
    return done
