"""A YieldGroup's epoch, pure: the group's tasks and the nodes' free capacity in, the allocator of
:mod:`soda_optimizer.fair_yield` called through the one entry (``soda_optimizer.systems.decide
('fair_yield', ...)``, issue 45), where each pod goes and how much CPU it gets out.

- the hosts (section 2.3) are the usable nodes, each offering its allocatable CPU and memory minus
  the requests of every bound pod that is not a task of this group (other workloads, kubesoda's
  stream PEs, other groups, pods terminating): a node is never overcommitted by the allocators together;
- each task may only use the nodes its pod's own constraints admit (:mod:`.eligible`: nodeSelector,
  required node affinity, taints and tolerations; issue 47), plus the node it runs on; nodes no
  task may use are not offered. A pod no node admits is left gated, out of the allocation, and
  reported (``unplaceable``, with the scheduler's kind of reason per node);
- the pods of one controller with equal needs and equal allowed nodes are the tasks of one parallel
  job (section 5.1: one yield for all of them);
- every epoch runs the chosen algorithm (:func:`soda_optimizer.fair_yield.epoch.replace`): the first
  (no task running) allocates from scratch, later ones re-place from where the pods run within the
  migration budget B (section 6.1, constraint (31)); a move is an eviction; a bare pod (no
  controller) is never moved (the allocator pins it);
- a pod being moved keeps what it holds on its old node until it is gone (issue 47): the yields of
  the pods that stay are computed with the moving pods' CPU taken off their nodes, so no neighbour
  grows into CPU they still hold (nor while a PodDisruptionBudget refuses their eviction);
- the published ``bound`` bounds the published minimum yield, over the same pods and CPU: the
  allocator's own when nothing moves; while pods move, the yields are those of the pods that stay on
  the CPU left, and the allocator's bound (over its plan: moving pods included, at their new nodes,
  their old CPU free) does not bound them (issue 47: a bound of 0.889 beside a minimum yield of 1, the
  gap clipped to 0), so the bound is the rational relaxation (section 3.1) of that instance. The bound
  is rounded up and the minimum yield down, and the gap is never clipped: a violated bound would show;
- a released pod the scheduler has not bound is where kubesoda pinned it; when the scheduler says it
  is Unschedulable, or its own constraints refuse that node, it is re-planned: evicted (its
  controller recreates it gated; a pod that never started is no migration: free, whatever the
  budget) and reported (``pending``); a bare one cannot be re-gated and is only reported;
- a running pod on a node that is no longer usable (cordoned, NotReady, gone) is handled like SODA's
  node loss: a pod with a controller is evicted (free), a bare pod is left where it is, out of the
  allocation, and named in the message.

``status`` says one thing: the allocator's own (``optimal`` when proven, ``feasible``, ``deadline``,
``infeasible``) only when what is applied is what it decided for every pod of the group; ``partial``
when a pod is unplaceable or Pending for placement reasons, ``moving`` while pods move (evictions
this epoch); the handler adds ``blocked`` and ``unapplied`` from the writes (:mod:`.status`).

Departures: the paper's hosts are identical; here each node offers what it has left (the
allocator's per-host capacities), in units of the largest node (or task). Pods without a controller
are fixed tasks (they cannot move); the paper's tasks can all migrate and go anywhere.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import soda_optimizer.fair_yield as fair_yield
import soda_optimizer.systems as systems
from soda_optimizer.fair_yield.average import finish

from ..kube import quantities
from .eligible import NodeFacts, facts, summary, why_not
from .spec import GroupSpec
from .tasks import Task, task_of


@dataclass
class Decision:
    place: dict[str, str] = field(default_factory=dict)  # gated pod -> node
    evict: list[str] = field(default_factory=list)  # pods that move or are re-planned (their controller recreates them gated)
    cpu: dict[str, float] = field(default_factory=dict)  # running pod -> cores (alpha x yield)
    yields: dict[str, float] = field(default_factory=dict)  # pod -> yield
    lost: list[str] = field(default_factory=list)  # running pods on a node no longer usable (evicted when they have a controller)
    unplaceable: dict[str, str] = field(default_factory=dict)  # gated pod no node admits -> why (left gated)
    pending: dict[str, str] = field(default_factory=dict)  # released pod Pending for placement reasons -> why (re-planned)
    held: dict[str, tuple[str, float]] = field(default_factory=dict)  # moving pod -> (node, cores it still holds there)
    waiting: dict[str, str] = field(default_factory=dict)  # gated pod planned beside a moving pod -> why it stays gated this epoch
    min_yield: float = 0.0
    avg_yield: float = 0.0
    bound: float | None = None  # a proven upper bound on min_yield, over the same pods and CPU (None: the algorithm has none)
    gap: float | None = None  # (bound - min_yield) / bound, not clipped
    algorithm: str = ""  # what ran
    allocator: str = ""  # the allocator's own status, for the pods it allocated
    status: str = "empty"
    message: str = ""
    seconds: float = 0.0  # wall time of the decision


def _ready(node: Mapping[str, Any]) -> bool:
    st, sp = node.get("status") or {}, node.get("spec") or {}
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in st.get("conditions") or [])
    return ready and not sp.get("unschedulable")


def hosts_for(nodes: list[dict[str, Any]], bound: list[tuple[str, str, float, float]], mine: set[str],
              tasks: list[Task] | None = None) -> dict[str, tuple[float, float]]:
    """Per usable node (Ready and not cordoned), the (cores, bytes) left by every bound pod that is
    not one of ``mine`` (``bound``: (node, namespace/name, cores, bytes)). With ``tasks``: only the
    nodes one of them may use (its own constraints, or it runs there): a control-plane, tainted or
    GPU-only node no pod of the group may use is not counted."""
    out: dict[str, tuple[float, float]] = {}
    kinds = None if tasks is None else list({repr(t.constraints): t.constraints for t in tasks}.values())  # one per distinct ask
    where = {t.node for t in tasks or [] if not t.gated}
    for n in nodes:
        md, st = n.get("metadata") or {}, n.get("status") or {}
        if not _ready(n):
            continue
        if kinds is not None:
            f = facts(n)
            if f.name not in where and not any(why_not(c, f) is None for c in kinds):
                continue
        alloc = st.get("allocatable") or {}
        out[md["name"]] = (quantities.amount(alloc.get("cpu")), quantities.amount(alloc.get("memory")))
    for node, key, cpu, mem in bound:
        if node in out and key not in mine:
            c, m = out[node]
            out[node] = (c - cpu, m - mem)
    return out


def node_facts(nodes: list[dict[str, Any]]) -> dict[str, NodeFacts]:
    """Labels and taints of every node, by name (what :func:`plan` checks each pod's constraints on)."""
    return {f.name: f for f in (facts(n) for n in nodes)}


def inputs(members: Mapping[str, dict[str, Any]], nodes: list[dict[str, Any]], bound: list[tuple[str, str, float, float]]
           ) -> tuple[list[Task], dict[str, tuple[float, float]], dict[str, NodeFacts]]:
    """What an epoch of :func:`plan` reads, from the group's pods (``members``: name -> pod), the nodes and every
    bound, unfinished pod's requests (``bound``, :func:`..kube.pods.bound_requests`): the tasks, the hosts and the
    nodes' facts. A pod of the group that is terminating is no task: it counts in ``bound`` at its requests, on
    its node, until it is gone (issue 47)."""
    tasks = [t for t in (task_of(p) for p in members.values()) if t is not None]
    return tasks, hosts_for(nodes, bound, {f"{t.namespace}/{t.name}" for t in tasks}, tasks), node_facts(nodes)


def _down(v: float) -> float:
    return math.floor(v * 1e6) / 1e6


def _up(v: float) -> float:
    """``v`` rounded up to 1e-6 (an upper bound stays one; float noise below 1e-12 is not a step)."""
    return math.ceil(v * 1e6 - 1e-6) / 1e6


def _gap(bound: float | None, min_yield: float) -> float | None:
    """(bound - min_yield) / bound, not clipped: a bound below the minimum yield shows as a negative gap."""
    if bound is None:
        return None
    return round((bound - min_yield) / bound, 6) if bound > 0 else 0.0


def _jobs(order: list[Task], allowed: dict[str, frozenset[int]], hosts: int, c_unit: float, m_unit: float) -> list[fair_yield.Job]:
    """The tasks in ``order`` as jobs: consecutive tasks of one controller with equal needs and equal allowed
    hosts are one parallel job."""
    jobs: list[fair_yield.Job] = []
    key = None
    for t in order:
        k = (t.owner or t.uid, t.alpha, t.mem, allowed[t.name])
        if k == key:
            jobs[-1] = jobs[-1].model_copy(update={"tasks": jobs[-1].tasks + 1})
            continue
        key = k
        may = allowed[t.name]
        jobs.append(fair_yield.Job(alpha=min(1.0, t.alpha / c_unit), mem=min(1.0, t.mem / m_unit),
                                   hosts=None if len(may) == hosts else tuple(sorted(may))))
    return jobs


def _defer(order: list[Task], stay: list[int], prev: list[int], placement: np.ndarray, names: list[str],
           cpu_left: np.ndarray, planned: float, out: Decision) -> list[int]:
    """Issue 47: the allocator plans as if a moving pod's CPU were free at once, but the pod holds it until it is
    gone. A gated pod planned onto such a node, whose yield on the CPU left (the node's pods sharing it in
    proportion to alpha, as :func:`.average.finish` does) would fall below the plan's minimum yield ``planned``,
    stays gated this epoch (``out.waiting``); the next epoch, the moving pods gone, plans it again. Removing a
    pod only raises its neighbours' yields, so one pass over each node, largest alpha first, suffices."""
    held_on = {out.held[order[k].name][0] for k in range(len(order)) if order[k].name in out.held}
    where = {k: int(prev[k]) if prev[k] >= 0 else int(placement[k]) for k in stay}
    drop: set[int] = set()
    for j, node in enumerate(names):
        if node not in held_on:
            continue
        here = [k for k in stay if where[k] == j]
        gated = sorted((k for k in here if order[k].gated), key=lambda k: -order[k].alpha)
        for k in gated:
            load = sum(order[i].alpha for i in here if i not in drop)
            if min(1.0, max(float(cpu_left[j]), 0.0) / load) >= planned - 1e-9:
                break
            drop.add(k)
            movers = sorted(p for p, (n, _) in out.held.items() if n == node)
            out.waiting[order[k].name] = f"planned on {node}, still held by {', '.join(movers)}"
    return [k for k in stay if k not in drop]


def _below_floor(order: list[Task], y: np.ndarray, placement: Any, names: list[str]) -> dict[int, str]:
    """The gated pods of ``order`` whose planned CPU (alpha x yield) is below their floor (1m a container:
    :func:`.apply.resize_body` never gives less), by position, with why. Placed, each would take its floor and
    the floors of several could pass what their node has left (a node whose CPU terminating pods still hold:
    7 pods planned 0.3m each, placed at 1m each beside 2m free, and the scheduler refused five). All of them
    wait (the next epoch plans them again); those left on their nodes only get more."""
    out: dict[int, str] = {}
    for k, t in enumerate(order):
        cores = t.alpha * float(y[k])
        if t.gated and cores < t.floor - 1e-9:
            out[k] = f"planned {1000 * cores:.2f}m on {names[int(placement[k])]}, less than its {1000 * t.floor:.0f}m"
    return out


def plan(tasks: list[Task], hosts: dict[str, tuple[float, float]], spec: GroupSpec,
         nodes: Mapping[str, NodeFacts] | None = None) -> Decision:
    """The group's epoch: ``hosts`` maps a usable node to the (cores, bytes) it offers the group,
    ``nodes`` its labels and taints (a node missing there has none). Returns where the gated pods
    go, which pods move or are re-planned, and every running pod's CPU."""
    t0 = time.monotonic()
    out = Decision()
    tasks = [t for t in tasks if t.alpha > 0]
    names = sorted(n for n, (c, m) in hosts.items() if c > 0 and m > 0)
    usable = set(names)
    fx = {n: (nodes or {}).get(n) or NodeFacts(n) for n in names}
    stranded: list[str] = []
    keep: list[Task] = []
    for t in tasks:
        if t.gated:
            keep.append(t)
        elif t.pending is not None:  # released, not bound: where kubesoda pinned it, unless the scheduler or its constraints refuse
            why = t.pending or ("its node is no longer usable" if t.node not in usable else why_not(t.constraints, fx[t.node]) or "")
            if not why:
                keep.append(t)
                continue
            out.pending[t.name] = f"{t.node}: {why}" + ("" if t.owner else " (no controller to recreate it gated: left as it is)")
            if t.owner:
                out.evict.append(t.name)  # never started: no migration, whatever the budget
        elif t.node not in usable:
            out.lost.append(t.name)
            if t.owner:
                out.evict.append(t.name)
            else:
                stranded.append(t.name)
        else:
            keep.append(t)
    notes = [f"left on a lost node (no controller to recreate them): {', '.join(sorted(stranded))}"] if stranded else []
    if out.pending:
        notes.append("re-planned, Pending where they were placed: " + "; ".join(f"{p} ({w})" for p, w in sorted(out.pending.items())))
    tasks = keep
    if tasks and not names:
        out.status, out.message = "infeasible", "; ".join(["no node offers CPU and memory", *notes])
        out.seconds = time.monotonic() - t0
        return out
    allowed_names: dict[str, set[str]] = {}
    seen: dict[str, dict[str, str | None]] = {}  # the pods of one controller ask the same: checked once
    for t in tasks:
        ask = repr(t.constraints)
        if ask not in seen:
            seen[ask] = {n: why_not(t.constraints, fx[n]) for n in names}
        reasons = seen[ask]
        ok = {n for n, r in reasons.items() if r is None}
        if not t.gated:
            ok.add(str(t.node))  # it runs (or is pinned) there
        if not ok:
            out.unplaceable[t.name] = summary({n: r for n, r in reasons.items() if r})
        allowed_names[t.name] = ok
    if out.unplaceable:
        notes.append("left gated, no node admits them: " + "; ".join(f"{p} ({w})" for p, w in sorted(out.unplaceable.items())))
    tasks = [t for t in tasks if allowed_names[t.name]]
    names = [n for n in names if any(n in allowed_names[t.name] for t in tasks)]  # nodes no pod may use are not offered
    if not tasks:
        out.message = "; ".join(notes)
        out.status = "partial" if out.unplaceable or out.pending else "empty"
        out.seconds = time.monotonic() - t0
        return out
    index = {n: i for i, n in enumerate(names)}
    allowed = {k: frozenset(index[n] for n in v) for k, v in allowed_names.items() if v}
    # units: the largest node (or task) is 1
    c_unit = max(max(hosts[n][0] for n in names), max(t.alpha for t in tasks))
    m_unit = max(max(hosts[n][1] for n in names), max(t.mem for t in tasks), 1.0)
    order = sorted(tasks, key=lambda t: (t.owner or t.uid, t.alpha, t.mem, sorted(allowed[t.name]), t.name))
    inst = fair_yield.Instance(jobs=tuple(_jobs(order, allowed, len(names), c_unit, m_unit)), hosts=len(names),
                               cpu=tuple(hosts[n][0] / c_unit for n in names), mem=tuple(hosts[n][1] / m_unit for n in names))
    prev = [index[str(t.node)] if not t.gated else -1 for t in order]
    fixed = [not t.owner for t in order]
    want = systems.FairYieldSpec(algorithm=spec.algorithm, previous=tuple(prev), budget=spec.migration_budget / m_unit, fixed=tuple(fixed))
    decided = systems.decide("fair_yield", want, inst, spec.deadline_seconds)
    alloc: fair_yield.Allocation = decided.result
    out.algorithm, out.allocator = decided.algorithm, alloc.status
    if not alloc.ok:
        out.status = "infeasible" if alloc.status == "infeasible" else "deadline"
        why = "the pods' memory does not fit the nodes they may use" if alloc.status == "infeasible" else "no placement found within the deadline"
        out.message = "; ".join([f"{out.algorithm}: {why} ({alloc.status})", *notes])
        out.seconds = time.monotonic() - t0
        return out
    placement = np.array(alloc.placement, dtype=np.int64)
    moving = [k for k, t in enumerate(order) if prev[k] >= 0 and placement[k] != prev[k]]
    cpu_left = np.array([hosts[n][0] for n in names], dtype=float)
    for k in moving:  # recreated gated by its controller (fixed pods never move); it holds its node until it is gone
        t = order[k]
        out.evict.append(t.name)
        out.held[t.name] = (names[prev[k]], t.held)
        cpu_left[prev[k]] -= t.held
    stay = [k for k in range(len(order)) if k not in set(moving)]
    if moving:  # the plan counted the moving pods' CPU free: no new pod is placed below the plan's yield beside one
        stay = _defer(order, stay, prev, placement, names, cpu_left, alloc.min_yield, out)
        if out.waiting:
            notes.append("left gated until the moving pods they were planned beside are gone: "
                         + "; ".join(f"{p} ({w})" for p, w in sorted(out.waiting.items())))
    final_order = [order[k] for k in stay]
    final_inst: fair_yield.Instance | None = None
    final = None
    while final_order:
        final_inst = fair_yield.Instance(
            jobs=tuple(_jobs(final_order, allowed, len(names), c_unit, m_unit)), hosts=len(names),
            cpu=tuple(max(c, 1e-9) / c_unit for c in cpu_left), mem=inst.mem)
        final = finish(final_inst.tasks(), np.array([prev[k] if prev[k] >= 0 else placement[k] for k in stay], dtype=np.int64),
                       out.algorithm, alloc.status, time.monotonic())
        low = _below_floor(final_order, np.array(final.task_yield), final.placement, names)
        if not low:
            break
        out.waiting.update({final_order[i].name: why for i, why in low.items()})
        notes.append("left gated, less CPU left where they were planned than a pod's least (1m a container): "
                     + "; ".join(f"{final_order[i].name} ({why})" for i, why in sorted(low.items())))
        stay = [k for i, k in enumerate(stay) if i not in low]
        final_order = [order[k] for k in stay]
    if not final_order or final is None or final_inst is None:
        # every pod moves or waits: nothing stays to resize; the yields (and the bound) are the plan's, once they are placed
        out.min_yield, out.avg_yield = _down(alloc.min_yield), _down(alloc.avg_yield)
        out.bound = None if alloc.bound is None else _up(float(alloc.bound))
        out.gap = _gap(out.bound, out.min_yield)
        if moving:
            notes.append(f"moving (evicted, counted where they are until gone): {', '.join(sorted(order[k].name for k in moving))}")
        # nothing moving, every pod waiting (below its floor): some pods not placed, "partial", never "moving"
        out.status = "partial" if out.unplaceable or out.pending or not out.evict else "moving"
        out.message, out.seconds = "; ".join(notes), time.monotonic() - t0
        return out
    y = np.array(final.task_yield)
    for k, t in enumerate(final_order):
        out.yields[t.name] = _down(float(y[k]))  # rounded down: a share rounded up could overcommit its node
        if t.gated:
            out.place[t.name] = names[int(final.placement[k])]
        else:
            out.cpu[t.name] = t.alpha * out.yields[t.name]
    out.min_yield, out.avg_yield = _down(final.min_yield), _down(final.avg_yield)
    bound = alloc.bound
    if bound is not None and moving:  # the allocator's bound is over its plan; the yields are the stayers' on the CPU left
        left = spec.deadline_seconds - (time.monotonic() - t0)
        bound = fair_yield.lp_bound(final_inst, time_limit_s=max(0.01, left))
    out.bound = None if bound is None else _up(float(bound))
    out.gap = _gap(out.bound, out.min_yield)
    if moving:
        notes.append(f"moving (evicted, counted where they are until gone): {', '.join(sorted(order[k].name for k in moving))}")
    out.status = "partial" if out.unplaceable or out.pending else "moving" if out.evict else alloc.status
    out.message = "; ".join(notes)
    out.seconds = time.monotonic() - t0
    return out
