"""A YieldGroup's epoch, pure: the group's tasks and the nodes' free capacity in, the allocator of
:mod:`soda_optimizer.fair_yield` called, where each pod goes and how much CPU it gets out.

- the hosts (section 2.3) are the usable nodes, each offering its allocatable CPU and memory minus
  the requests of every bound pod that is not a task of this group (other workloads, kubesoda's
  stream PEs, other groups): a node is never overcommitted by the allocators together;
- the pods of one controller with equal needs are the tasks of one parallel job (section 5.1: one
  yield for all of them);
- the first epoch of a group (no task placed yet) runs the chosen algorithm (sections 3.2-3.4);
  later ones re-optimise from the current placement within the migration budget B (section 6.1,
  constraint (31); new pods cost nothing to place, the paper's e-bar = 1), then the average-yield
  phase (section 3.5). A move is an eviction; a bare pod (no controller) is never moved.

Departure: the paper's hosts are identical; here each node offers what it has left (the
allocator's per-host capacities), in units of the largest node (or task).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from soda_optimizer import fair_yield
from soda_optimizer.fair_yield.average import finish

from ..kube import quantities
from .spec import GroupSpec
from .tasks import Task


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
        out[md["name"]] = (quantities.amount(alloc.get("cpu")), quantities.amount(alloc.get("memory")))
    for node, key, cpu, mem in bound:
        if node in out and key not in mine:
            c, m = out[node]
            out[node] = (c - cpu, m - mem)
    return out


def plan(tasks: list[Task], hosts: dict[str, tuple[float, float]], spec: GroupSpec) -> Decision:
    """The group's epoch: ``hosts`` maps a usable node to the (cores, bytes) it offers the group.
    Returns where the gated pods go, which running pods move and every running pod's CPU."""
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
        alloc = fair_yield.allocate(inst, spec.algorithm, deadline_s=spec.deadline_seconds)
    else:
        alloc = fair_yield.reallocate(inst, prev, spec.migration_budget / m_unit, deadline_s=spec.deadline_seconds)
    if not alloc.ok:
        out.status, out.message = "infeasible", f"{spec.algorithm}: the tasks' memory does not fit the nodes ({alloc.status})"
        return out
    placement = np.array(alloc.placement, dtype=np.int64)
    for k, t in enumerate(order):
        if prev[k] >= 0 and placement[k] != prev[k]:
            if t.owner:
                out.evict.append(t.name)  # recreated gated by its controller: placed next epoch
            placement[k] = prev[k]  # a bare pod stays; an evicted one still holds its node until it is gone
    final = finish(inst.tasks(), placement, spec.algorithm, alloc.status, time.monotonic())
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
