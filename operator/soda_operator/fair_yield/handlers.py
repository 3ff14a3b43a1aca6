"""Fair-yield groups: the virtual-cluster allocator (Stillwell, Schanzenbach, Vivien & Casanova; the
pure part is :mod:`soda_optimizer.fair_yield`) for ordinary pods, with the platform's own mechanism.

A pod opts in with the scheduling gate ``kubesoda.io/yield`` in its spec and the label
``kubesoda.io/yield-group: <group>``; it may come from any controller (Deployment, StatefulSet, Job)
or none. A namespaced ``YieldGroup`` named ``<group>`` sets the algorithm (``mcb8`` by default), the
migration budget and the epoch. Every epoch of a group (:func:`plan`, pure; :func:`yield_epoch`,
the Kopf timer that applies it):

- the tasks are the group's pods not finished: the gated ones (new: the paper's e-bar = 1, placing
  them costs nothing) and the ones kubesoda released before (annotation ``kubesoda.io/yield-node``);
  a task's CPU need alpha is its CPU limit as created (request when it has no limit; kept in the
  annotation ``kubesoda.io/yield-alpha`` because kubesoda resizes the pod afterwards), its memory
  its memory request (rigid). Pods of one controller with equal needs are the tasks of one parallel
  job (section 5: one yield for all of them);
- the hosts are the usable nodes, each offering its allocatable CPU and memory minus the requests of
  every bound pod that is not a task of this group (other workloads, kubesoda's stream PEs, other
  groups): whoever decides later sees what the earlier decisions hold, so a node is never
  overcommitted by the two allocators together (stream PEs see the group's pods as other workloads);
- the first epoch of a group allocates with the chosen algorithm; later ones re-optimise from the
  current placement within the migration budget (section 6, :func:`~soda_optimizer.fair_yield.reallocate`);
  a move is an eviction (the pod's controller recreates it, gated again); a bare pod (no controller)
  is never moved;
- a gated pod placed on node n gets ``nodeSelector kubernetes.io/hostname: n`` (adding to a gated
  pod's scheduling constraints is allowed), its CPU resized (``pods/resize``, allowed on a gated
  pod) to alpha x yield, request = limit, so that it fits the share it was planned, and its gate
  removed, so the default scheduler binds it there; a running task's CPU is resized in place (same
  UID) to alpha x yield after every epoch's average-yield phase (section 3.5).

Pods without the gate and without kubesoda's annotation are never touched. The group's status has
the minimum and average yield and each pod's yield; Events say when pods are placed, resized or
evicted. Departure: the paper's hosts are identical in size; here each node offers what it has left
(the allocator's per-host capacities), in units of the largest node.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any

import kopf
import numpy as np
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.utils import parse_quantity

from soda_optimizer import fair_yield
from soda_optimizer.fair_yield.average import finish

from ..kube import conditions
from ..kube.pods import TERMINAL, bound_requests, requests
from ..memo import Memo
from ..soda import crd

log = logging.getLogger("kubesoda.yield")

GATE = "kubesoda.io/yield"
LABEL = "kubesoda.io/yield-group"
ANN_ALPHA = "kubesoda.io/yield-alpha"
ANN_NODE = "kubesoda.io/yield-node"
ANN_YIELD = "kubesoda.io/yield"
HOSTNAME = "kubernetes.io/hostname"
TICK_S = 2.0


@dataclass
class Task:
    namespace: str
    name: str
    uid: str
    owner: str  # the controller's uid ("" for a bare pod)
    alpha: float  # cores
    mem: float  # bytes
    node: str | None  # where it runs (None: gated, not placed yet)
    gated: bool


@dataclass
class Decision:
    place: dict[str, str] = field(default_factory=dict)  # gated pod -> node
    evict: list[str] = field(default_factory=list)  # running pods that move (their controller recreates them)
    cpu: dict[str, float] = field(default_factory=dict)  # running pod -> cores (alpha x yield)
    yields: dict[str, float] = field(default_factory=dict)  # pod -> yield
    min_yield: float = 0.0
    avg_yield: float = 0.0
    status: str = "empty"
    message: str = ""


def task_of(pod: dict[str, Any]) -> Task | None:
    """A pod of a group as a task, or None when kubesoda must leave it alone (no gate of ours and
    never released by us, or finished)."""
    md, spec, st = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    gated = any(g.get("name") == GATE for g in spec.get("schedulingGates") or [])
    ann = md.get("annotations") or {}
    if st.get("phase") in TERMINAL or md.get("deletionTimestamp") or not (gated or ANN_NODE in ann):
        return None
    cpu_limit = 0.0
    for c in spec.get("containers") or []:
        res = c.get("resources") or {}
        q = (res.get("limits") or {}).get("cpu") or (res.get("requests") or {}).get("cpu")
        cpu_limit += float(parse_quantity(q)) if q is not None else 0.0
    alpha = float(ann.get(ANN_ALPHA, cpu_limit))
    _, mem = requests(pod)
    owner = next((o.get("uid", "") for o in md.get("ownerReferences") or [] if o.get("controller")), "")
    return Task(md.get("namespace", ""), md.get("name", ""), md.get("uid", ""), owner, alpha, mem,
                None if gated else spec.get("nodeName") or ann.get(ANN_NODE), gated)


def plan(tasks: list[Task], hosts: dict[str, tuple[float, float]], algorithm: str = "mcb8", budget_bytes: float = 0.0,
         deadline_s: float = 1.0) -> Decision:
    """The group's epoch, pure: ``hosts`` maps a usable node to the (cores, bytes) it offers the
    group. Returns where the gated pods go, which running pods move and every running pod's CPU."""
    out = Decision()
    tasks = [t for t in tasks if t.alpha > 0]
    names = sorted(n for n, (c, m) in hosts.items() if c > 0 and m > 0)
    if not tasks:
        return out
    if not names:
        out.status, out.message = "infeasible", "no node offers CPU and memory"
        return out
    # units: the largest node (or task) is 1
    c_unit = max(max(hosts[n][0] for n in names), max(t.alpha for t in tasks))
    m_unit = max(max(hosts[n][1] for n in names), max(t.mem for t in tasks), 1.0)
    groups: dict[tuple[str, float, float], list[Task]] = {}
    for t in sorted(tasks, key=lambda t: (t.owner or t.uid, t.name)):
        groups.setdefault((t.owner or t.uid, t.alpha, t.mem), []).append(t)
    order = [t for g in groups.values() for t in g]
    inst = fair_yield.Instance(
        jobs=tuple(fair_yield.Job(alpha=min(1.0, k[1] / c_unit), mem=min(1.0, k[2] / m_unit), tasks=len(g)) for k, g in groups.items()),
        hosts=len(names), cpu=tuple(hosts[n][0] / c_unit for n in names), mem=tuple(hosts[n][1] / m_unit for n in names))
    index = {n: i for i, n in enumerate(names)}
    prev = np.array([index.get(t.node, -1) if t.node else -1 for t in order], dtype=np.int64)
    if (prev < 0).all():
        alloc = fair_yield.allocate(inst, algorithm, deadline_s=deadline_s)
    else:
        alloc = fair_yield.reallocate(inst, prev, budget_bytes / m_unit, deadline_s=deadline_s)
    if not alloc.ok:
        out.status, out.message = "infeasible", f"{algorithm}: the tasks' memory does not fit the nodes ({alloc.status})"
        return out
    placement = np.array(alloc.placement, dtype=np.int64)
    for k, t in enumerate(order):
        if prev[k] >= 0 and placement[k] != prev[k]:
            if t.owner:
                out.evict.append(t.name)  # recreated gated by its controller: placed next epoch
            placement[k] = prev[k]  # a bare pod stays; an evicted one still holds its node until it is gone
    tk = inst.tasks()
    final = finish(tk, placement, algorithm, alloc.status, time.monotonic())
    y = np.array(final.task_yield)
    for k, t in enumerate(order):
        out.yields[t.name] = round(float(y[k]), 6)
        if t.gated:
            out.place[t.name] = names[int(placement[k])]
        elif t.name not in out.evict:
            out.cpu[t.name] = t.alpha * float(y[k])
    out.min_yield, out.avg_yield = round(final.min_yield, 6), round(final.avg_yield, 6)
    out.status = alloc.status
    return out


def hosts_for(nodes: list[dict[str, Any]], bound: list[tuple[str, str, float, float]], mine: set[str]) -> dict[str, tuple[float, float]]:
    """Per usable node, the (cores, bytes) left by every bound pod that is not one of ``mine``
    (``bound``: (node, namespace/name, cores, bytes))."""
    out: dict[str, tuple[float, float]] = {}
    for n in nodes:
        md, st, sp = n.get("metadata") or {}, n.get("status") or {}, n.get("spec") or {}
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in st.get("conditions") or [])
        if not ready or sp.get("unschedulable"):
            continue
        alloc = st.get("allocatable") or {}
        out[md["name"]] = (float(parse_quantity(alloc.get("cpu", "0"))), float(parse_quantity(alloc.get("memory", "0"))))
    for node, key, cpu, mem in bound:
        if node in out and key not in mine:
            c, m = out[node]
            out[node] = (c - cpu, m - mem)
    return out


# ------------------------------------------------------------------------------------ Kubernetes


@kopf.index("", "v1", "pods", labels={LABEL: kopf.PRESENT})
async def yield_pods(namespace: str, body: kopf.Body, **_: Any) -> dict[Any, Any]:
    return {(namespace, (body.get("metadata") or {}).get("labels", {}).get(LABEL, "")): copy.deepcopy(dict(body))}


def _milli(cores: float) -> str:
    return f"{max(1, int(cores * 1000 + 1e-6))}m"


def _resize_body(pod: dict[str, Any], cores: float) -> dict[str, Any] | None:
    """The pods/resize patch that gives ``pod`` ``cores`` CPU in all (request = limit), shared
    among its containers as their limits are; None when it has that already (within 1.5m)."""
    containers = [c for c in (pod.get("spec") or {}).get("containers") or [] if ((c.get("resources") or {}).get("limits") or {}).get("cpu")]
    now = sum(float(parse_quantity(c["resources"]["limits"]["cpu"])) for c in containers)
    if now <= 0 or abs(now - cores) < 0.0015:
        return None
    scale = cores / now
    return {"spec": {"containers": [
        {"name": c["name"], "resources": {k: {**((c.get("resources") or {}).get(k) or {}), "cpu": _milli(float(parse_quantity(c["resources"]["limits"]["cpu"])) * scale)}
                                          for k in ("requests", "limits")}}
        for c in containers]}}


def apply(core: client.CoreV1Api, namespace: str, decision: Decision, pods: dict[str, dict[str, Any]]) -> dict[str, int]:
    """Write a decision: place (CPU resized to alpha x yield while still gated, so the pod fits the
    node it was planned on; nodeSelector; gate removed), evict, resize the running ones."""
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
            resize = _resize_body(pod, task.alpha * decision.yields.get(name, 1.0))
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
        resize = _resize_body(pod, cores)
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


def _quantity(q: Any, default: float) -> float:
    try:
        return float(parse_quantity(str(q))) if q is not None else default
    except (ValueError, TypeError):
        return default


@kopf.timer(crd.GROUP, crd.VERSION, "yieldgroups", interval=TICK_S, initial_delay=1.0)
async def yield_epoch(namespace: str, name: str, spec: kopf.Spec, status: kopf.Status, memo: Memo, patch: kopf.Patch,
                      body: kopf.Body, yield_pods: kopf.Index, foreign_pods: kopf.Index, kubesoda_pods: kopf.Index,
                      kubesoda_nodes: kopf.Index, **_: Any) -> None:
    """One epoch of a YieldGroup when its epoch is due (the timer ticks every TICK_S)."""
    last = memo.fair_yield.last
    epoch = float(spec.get("epochSeconds", 10))
    key = (namespace, name)
    if time.monotonic() - last.get(key, -math.inf) < epoch:
        return
    last[key] = time.monotonic()
    # copy what the epoch reads on Kopf's event loop (the indexes change under a thread)
    pods = {(p.get("metadata") or {}).get("name", ""): p for p in yield_pods.get(key, [])}
    nodes = [v for k in kubesoda_nodes for v in kubesoda_nodes[k]]
    bound = bound_requests(foreign_pods, kubesoda_pods)
    tasks = [t for t in (task_of(p) for p in pods.values()) if t is not None]
    mine = {f"{t.namespace}/{t.name}" for t in tasks}
    hosts = hosts_for(nodes, bound, mine)
    algorithm = str(spec.get("algorithm", "mcb8"))
    budget = _quantity(spec.get("migrationBudget"), 0.0)
    decision = await asyncio.to_thread(plan, tasks, hosts, algorithm, budget, float(spec.get("deadlineSeconds", 1.0)))
    core = memo.loops.core
    done = await asyncio.to_thread(apply, core, namespace, decision, pods)
    patch.status["minYield"] = decision.min_yield
    patch.status["averageYield"] = decision.avg_yield
    patch.status["pods"] = len(tasks)
    patch.status["state"] = decision.status
    patch.status["message"] = decision.message
    patch.status["yields"] = [{"pod": p, "yield": y} for p, y in sorted(decision.yields.items())]
    ok = None if decision.status == "empty" else decision.status != "infeasible"
    patch.status["conditions"] = [conditions.condition(
        "Allocated", ok, {"empty": "NoPods", "infeasible": "Infeasible"}.get(decision.status, "Allocated"),
        decision.message or f"{len(tasks)} pod(s), minimum yield {decision.min_yield:.3f}",
        (body.get("metadata") or {}).get("generation"), status.get("conditions"))]
    if done["placed"] or done["evicted"]:
        kopf.info(body, reason="Placed", message=f"{done['placed']} pod(s) placed, {done['evicted']} evicted to move; "
                                                 f"minimum yield {decision.min_yield:.3f}, average {decision.avg_yield:.3f}")
    if decision.status == "infeasible":
        kopf.warn(body, reason="Infeasible", message=decision.message)
