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
  grows on that node this epoch and no gated pod is released onto it (``failed``; issue 47: before, a
  pod was still placed there and released onto a node it did not fit). A pod being evicted is not
  resized: the plan counted it at what it holds, and a pod terminating counts at its requests until it
  is gone (issue 47).

The writes are planned pure (:func:`steps`) and issued in order by :func:`run` through a :class:`Writer`
(the API server); the property test of issue 47 item 2 issues the same steps to a plain model of the
cluster over many epochs and checks every node between any two of them (tests/fair_yield_op/test_yield_epochs.py).

Every container's CPU is resized, whatever it declares (:func:`resize_body`): its request (a pod
with requests only keeps no limit), and its limit where it has one; a container whose request is
below its limit keeps that ratio (so the pod's QoS class, which a resize may not change, stays).
A pod gone meanwhile (404) is skipped; any other refusal is logged and the epoch goes on (the next
one retries). Events go through :mod:`..kube.events` (the handlers post them).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

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



def held(pod: dict[str, Any]) -> float:
    """The CPU a pod holds as the resize sees it: each container's limit, else its request."""
    return sum(_cpu(c, "limits") or _cpu(c, "requests") for c in (pod.get("spec") or {}).get("containers") or [])


def node_of(pod: dict[str, Any]) -> str | None:
    """The node whose CPU a running pod of the group holds: where it is bound, else where kubesoda pinned it."""
    return (pod.get("spec") or {}).get("nodeName") or ((pod.get("metadata") or {}).get("annotations") or {}).get(ANN_NODE)


@dataclass(frozen=True)
class Step:
    """One write of an epoch (:func:`steps`): ``evict`` a pod; ``shrink`` or ``grow`` a running pod's CPU on
    ``node`` (``resize``: the pods/resize body, then ``annotations``); ``place`` a gated pod on ``node``
    (``patch``: its annotations and node affinity, then ``resize``, then its scheduling gates replaced by
    ``gates``, which releases it to the scheduler)."""

    kind: Literal["evict", "shrink", "place", "grow"]
    pod: str
    node: str | None = None
    resize: dict[str, Any] | None = None
    annotations: dict[str, str] = field(default_factory=dict)
    patch: dict[str, Any] | None = None
    gates: list[dict[str, Any]] | None = None


def steps(decision: Decision, pods: Mapping[str, dict[str, Any]]) -> list[Step]:
    """The writes of ``decision``, pure and in the order they are issued: evictions (their pods keep what they hold
    until gone: the plan counted it), the shrinks, the placements (CPU resized to alpha x yield while still gated,
    node affinity by name, gate removed), the growths. A resize that changes nothing (:func:`resize_body`) is no
    step; a gated pod that is no longer a task of the group is not placed."""
    out = [Step("evict", name) for name in decision.evict]
    current = {n: held(pods[n]) for n in decision.cpu}
    shrink = [n for n, cores in decision.cpu.items() if cores < current[n]]
    grow = [n for n in decision.cpu if n not in shrink]

    def resize(kind: Literal["shrink", "grow"], name: str) -> None:
        body = resize_body(pods[name], decision.cpu[name])
        if body is not None:
            out.append(Step(kind, name, node_of(pods[name]), body, {ANN_YIELD: f"{decision.yields.get(name, 0):.6f}"}))

    for name in shrink:
        resize("shrink", name)
    for name, node in decision.place.items():
        pod = pods[name]
        task = task_of(pod)
        if task is None:
            continue
        gates = [g for g in (pod.get("spec") or {}).get("schedulingGates") or [] if g.get("name") != GATE]
        patch = {"metadata": {"annotations": {ANN_NODE: node, ANN_ALPHA: f"{task.alpha:g}", ANN_YIELD: f"{decision.yields.get(name, 0):.6f}"}},
                 "spec": {"affinity": pinned_affinity(pod, node)}}
        out.append(Step("place", name, node, resize_body(pod, task.alpha * decision.yields.get(name, 1.0)), patch=patch, gates=gates))
    for name in grow:
        resize("grow", name)
    return out


#: what one write came to: ``done``; ``gone`` (the pod no longer exists: nothing to do); ``refused`` with the
#: API server's reason (an eviction refused is a blocked move)
Outcome = tuple[Literal["done", "gone", "refused"], str | None]


def run(plan: list[Step], do: Callable[[Step], Outcome]) -> dict[str, Any]:
    """Issue ``plan`` in order through ``do`` (:class:`Writer` on a cluster). A node where a shrink was refused
    keeps the CPU the plan took from that pod: no pod is placed there (it stays gated, named in ``failed``, and
    the next epoch plans it again) and none grows there this epoch, so the requests on a node never sum above
    what the plan gives it, between any two writes (issue 47: a pod placed beside a refused shrink was released
    onto a node it did not fit). Returns the counts placed, evicted and resized, the pods whose eviction was
    refused (``blocked``: pod -> reason) and the writes refused or held back (``failed``)."""
    done: dict[str, Any] = {"placed": 0, "evicted": 0, "resized": 0, "blocked": {}, "failed": {}}
    refused: set[str | None] = set()  # nodes where a pod still holds CPU the plan took from it
    for s in plan:
        if s.kind in ("place", "grow") and s.node in refused:
            if s.kind == "place":
                done["failed"][s.pod] = f"not placed on {s.node}: a shrink there was refused"
            continue
        result, why = do(s)
        if result == "done":
            done[{"evict": "evicted", "place": "placed"}.get(s.kind, "resized")] += 1
        elif result == "refused":
            done["blocked" if s.kind == "evict" else "failed"][s.pod] = why or "refused"
            if s.kind == "shrink":
                refused.add(s.node)
    return done


class Writer:
    """The writes of :func:`steps` on the API server, in ``namespace``: an eviction through the Eviction API
    (a PodDisruptionBudget may refuse: retried next epoch), a resize through ``pods/resize``."""

    def __init__(self, core: client.CoreV1Api, namespace: str) -> None:
        self.core, self.namespace = core, namespace

    def __call__(self, s: Step) -> Outcome:
        if s.kind == "evict":
            evicted, why = evict(self.core, self.namespace, s.pod)
            return ("done", None) if evicted else ("gone", None) if why is None else ("refused", why)
        try:
            if s.kind == "place":
                self.core.patch_namespaced_pod(s.pod, self.namespace, s.patch or {})
                if s.resize is not None:
                    self.core.patch_namespaced_pod_resize(s.pod, self.namespace, s.resize)
                # the gate list is replaced, not merged: a JSON patch of the whole list
                self.core.patch_namespaced_pod(s.pod, self.namespace, [{"op": "replace", "path": "/spec/schedulingGates", "value": s.gates}])
            elif s.resize is not None:
                self.core.patch_namespaced_pod_resize(s.pod, self.namespace, s.resize)
                self.core.patch_namespaced_pod(s.pod, self.namespace, {"metadata": {"annotations": s.annotations}})
            return "done", None
        except ApiException as e:
            if e.status == 404:
                return "gone", None
            what = f"placing on {s.node}" if s.kind == "place" else "resize"
            log.error("%s of %s/%s refused: %s %s", what, self.namespace, s.pod, e.reason, e.body)
            return "refused", f"{what} refused: {e.status} {e.reason}"


def write(core: client.CoreV1Api, namespace: str, decision: Decision, pods: Mapping[str, dict[str, Any]]) -> dict[str, Any]:
    """Write a decision (:func:`steps`, issued by :func:`run` through a :class:`Writer`)."""
    return run(steps(decision, pods), Writer(core, namespace))
