"""A YieldGroup's epoch, pure: the group's tasks and the nodes' free capacity in, the allocator of
:mod:`soda_optimizer.fair_yield` called, where each pod goes and how much CPU it gets out.

- the hosts (section 2.3) are the usable nodes, each offering its allocatable CPU and memory minus
  the requests of every bound pod that is not a task of this group (other workloads, kubesoda's
  stream PEs, other groups): a node is never overcommitted by the allocators together;
- the pods of one controller with equal needs are the tasks of one parallel job (section 5.1: one
  yield for all of them);
- every epoch runs the chosen algorithm (:func:`allocation`). The first (no task running) allocates
  from scratch (sections 3.2-3.4; the default ``anytime``: MCB8, then the MILP warm-started from it
  within the deadline, with its proven bound and gap). Later ones re-place from where the pods run
  within the migration budget B (section 6.1, constraint (31); new pods cost nothing to place, the
  paper's e-bar = 1): ``anytime`` solves section 6.1's MILP warm-started from the re-placement
  heuristic, ``dynamic`` is that heuristic alone (the paper's dynamic variant, explicitly), a named
  algorithm's own allocation is taken when its moves fit the budget and beat the heuristic's
  re-placement (else the re-placement, said in the message); then the average-yield phase (3.5). A
  move is an eviction; a bare pod (no controller) is never moved (the allocator pins it);
- a running pod on a node that is no longer usable (cordoned, NotReady, gone) is handled like SODA's
  node loss: a pod with a controller is evicted (its controller recreates it gated, the next epoch
  places it; free, not counted against B), a bare pod is left where it is, out of the allocation,
  and named in the message.

Departures: the paper's hosts are identical; here each node offers what it has left (the
allocator's per-host capacities), in units of the largest node (or task). Pods without a controller
are fixed tasks (they cannot move); the paper's tasks can all migrate.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from soda_optimizer import fair_yield
from soda_optimizer.fair_yield.average import finish
from soda_optimizer.fair_yield.dynamic import migration_cost

from ..kube import quantities
from .spec import DYNAMIC, GroupSpec
from .tasks import Task


@dataclass
class Decision:
    place: dict[str, str] = field(default_factory=dict)  # gated pod -> node
    evict: list[str] = field(default_factory=list)  # running pods that move (their controller recreates them)
    cpu: dict[str, float] = field(default_factory=dict)  # running pod -> cores (alpha x yield)
    yields: dict[str, float] = field(default_factory=dict)  # pod -> yield
    lost: list[str] = field(default_factory=list)  # running pods on a node no longer usable (evicted when they have a controller)
    min_yield: float = 0.0
    avg_yield: float = 0.0
    bound: float | None = None  # a proven upper bound on the minimum yield (None: the algorithm has none)
    gap: float | None = None  # (bound - min_yield) / bound
    algorithm: str = ""  # what ran
    status: str = "empty"
    message: str = ""


def hosts_for(nodes: list[dict[str, Any]], bound: list[tuple[str, str, float, float]], mine: set[str]) -> dict[str, tuple[float, float]]:
    """Per usable node (Ready and not cordoned), the (cores, bytes) left by every bound pod that is
    not one of ``mine`` (``bound``: (node, namespace/name, cores, bytes))."""
    out: dict[str, tuple[float, float]] = {}
    for n in nodes:
        md, st, sp = n.get("metadata") or {}, n.get("status") or {}, n.get("spec") or {}
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in st.get("conditions") or [])
        if not ready or sp.get("unschedulable"):
            continue
        alloc = st.get("allocatable") or {}
        out[md["name"]] = (quantities.amount(alloc.get("cpu")), quantities.amount(alloc.get("memory")))
    for node, key, cpu, mem in bound:
        if node in out and key not in mine:
            c, m = out[node]
            out[node] = (c - cpu, m - mem)
    return out


def allocation(inst: fair_yield.Instance, prev: np.ndarray, fixed: np.ndarray, budget: float, spec: GroupSpec) -> tuple[fair_yield.Allocation, str]:
    """The chosen algorithm at this epoch (see the module's docstring) and a word on what ran."""
    deadline = spec.deadline_seconds
    if (prev < 0).all():
        if spec.algorithm == DYNAMIC:
            return fair_yield.reallocate(inst, prev, budget, deadline_s=deadline), DYNAMIC
        return fair_yield.allocate(inst, spec.algorithm, deadline_s=deadline), spec.algorithm
    if spec.algorithm == fair_yield.DEFAULT:
        return fair_yield.solve_anytime(inst, deadline_s=deadline, previous=prev, budget=budget, fixed=fixed), spec.algorithm
    start = time.monotonic()
    within = fair_yield.reallocate(inst, prev, budget, deadline_s=deadline / 2 if spec.algorithm != DYNAMIC else deadline, fixed=fixed)
    if spec.algorithm == DYNAMIC:
        return within, DYNAMIC
    own = fair_yield.allocate(inst, spec.algorithm, deadline_s=max(0.01, deadline - (time.monotonic() - start)))
    if own.ok:
        p = np.array(own.placement, dtype=np.int64)
        moved = (prev >= 0) & (p != prev)
        fits = not (moved & fixed).any() and migration_cost(inst.tasks(), prev, p) <= budget + 1e-9
        if fits and (not within.ok or own.min_yield >= within.min_yield - 1e-12):
            return own, spec.algorithm
    why = "moves beyond the migration budget" if own.ok else "no placement"
    return within, f"{DYNAMIC} ({spec.algorithm}: {why})"


def _down(v: float) -> float:
    return math.floor(v * 1e6) / 1e6


def plan(tasks: list[Task], hosts: dict[str, tuple[float, float]], spec: GroupSpec) -> Decision:
    """The group's epoch: ``hosts`` maps a usable node to the (cores, bytes) it offers the group.
    Returns where the gated pods go, which running pods move and every running pod's CPU."""
    out = Decision()
    tasks = [t for t in tasks if t.alpha > 0]
    names = sorted(n for n, (c, m) in hosts.items() if c > 0 and m > 0)
    usable = set(names)
    # node loss: running pods on a node that is not usable any more
    stranded = []
    for t in tasks:
        if not t.gated and t.node not in usable:
            out.lost.append(t.name)
            if t.owner:
                out.evict.append(t.name)
            else:
                stranded.append(t.name)
    tasks = [t for t in tasks if t.name not in out.lost]
    note = f"; left on a lost node (no controller to recreate them): {', '.join(sorted(stranded))}" if stranded else ""
    if not tasks:
        out.message = note[2:]
        return out
    if not names:
        out.status, out.message = "infeasible", "no node offers CPU and memory" + note
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
    prev = np.array([index[t.node] if not t.gated and t.node else -1 for t in order], dtype=np.int64)
    fixed = np.array([not t.owner for t in order], dtype=bool)
    alloc, ran = allocation(inst, prev, fixed, spec.migration_budget / m_unit, spec)
    out.algorithm = ran
    if not alloc.ok:
        out.status, out.message = "infeasible", f"{ran}: the tasks' memory does not fit the nodes ({alloc.status})" + note
        return out
    placement = np.array(alloc.placement, dtype=np.int64)
    for k, t in enumerate(order):
        if prev[k] >= 0 and placement[k] != prev[k]:
            out.evict.append(t.name)  # recreated gated by its controller (fixed pods never move): placed next epoch
            placement[k] = prev[k]  # it still holds its node until it is gone (and if its eviction is refused)
    final = finish(inst.tasks(), placement, ran, alloc.status, time.monotonic())
    y = np.array(final.task_yield)
    for k, t in enumerate(order):
        out.yields[t.name] = _down(float(y[k]))  # rounded down: a share rounded up could overcommit its node
        if t.gated:
            out.place[t.name] = names[int(placement[k])]
        elif t.name not in out.evict:
            out.cpu[t.name] = t.alpha * out.yields[t.name]
    out.min_yield, out.avg_yield = _down(final.min_yield), _down(final.avg_yield)
    out.bound = None if alloc.bound is None else round(float(alloc.bound), 6)
    out.gap = None if out.bound is None else round(max(0.0, (out.bound - out.min_yield) / out.bound) if out.bound > 0 else 0.0, 6)
    out.status = alloc.status
    out.message = note[2:]
    return out
