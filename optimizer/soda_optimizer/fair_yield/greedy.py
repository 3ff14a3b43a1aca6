"""Greedy placements GR, SG, GB and SGB (section 3.3).

GR takes the tasks in the given order and puts each on the least CPU-loaded host (load = total alpha already on
it) whose free memory fits it; SG does the same after sorting the tasks by memory, largest first. GB and SGB add
backtracking: a depth-first search over the memory-fitting hosts of each task, least loaded first (so its first
leaf is GR's / SG's answer), bounded by a number of placement attempts (the paper's 500,000) and the deadline.
The placement's minimum yield is then min(1, min_j capacity / load) and the average-yield phase follows.

Departures: with unequal hosts the load is total alpha divided by the host's CPU capacity; ties go to the lower
host index; the deadline is checked every 1,024 placement attempts; a task restricted to some hosts
(:attr:`.model.Tasks.allowed`, issue 47) only goes to those.
"""

from __future__ import annotations

import time

import numpy as np

from .average import finish
from .model import EPS, Allocation, Instance, Tasks

MAX_ATTEMPTS = 500_000  #: section 3.3's bound on placement attempts when backtracking


def _order(tasks: Tasks, sort: bool) -> np.ndarray:
    if not sort:
        return np.arange(tasks.n)
    return np.argsort(-tasks.mem, kind="stable")


def _greedy(tasks: Tasks, order: np.ndarray) -> np.ndarray | None:
    load = np.zeros(tasks.hosts)
    free = tasks.mem_cap.astype(float).copy()
    placement = np.full(tasks.n, -1, dtype=np.int64)
    may = tasks.may()
    for t in order:
        fits = (free + EPS >= tasks.mem[t]) & may[t]
        if not fits.any():
            return None
        j = int(np.argmin(np.where(fits, load / tasks.cpu_cap, np.inf)))
        placement[t] = j
        load[j] += tasks.alpha[t]
        free[j] -= tasks.mem[t]
    return placement


def _backtrack(
    tasks: Tasks, order: np.ndarray, max_attempts: int, deadline: float | None
) -> tuple[np.ndarray | None, bool]:
    """Depth-first search; (placement or None, whether the deadline stopped it)."""
    n = tasks.n
    load = np.zeros(tasks.hosts)
    free = tasks.mem_cap.astype(float).copy()
    placement = np.full(n, -1, dtype=np.int64)
    cands: list[np.ndarray] = []
    pos: list[int] = []
    attempts = 0
    depth = 0

    may = tasks.may()

    def candidates(t: int) -> np.ndarray:
        fits = np.flatnonzero((free + EPS >= tasks.mem[t]) & may[t])
        return fits[np.argsort(load[fits] / tasks.cpu_cap[fits], kind="stable")]

    cands.append(candidates(int(order[0])))
    pos.append(0)
    while True:
        t = int(order[depth])
        if placement[t] >= 0:  # undo the previous try of this task
            j = int(placement[t])
            load[j] -= tasks.alpha[t]
            free[j] += tasks.mem[t]
            placement[t] = -1
        if pos[depth] >= cands[depth].shape[0]:
            cands.pop()
            pos.pop()
            depth -= 1
            if depth < 0:
                return None, False
            continue
        j = int(cands[depth][pos[depth]])
        pos[depth] += 1
        placement[t] = j
        load[j] += tasks.alpha[t]
        free[j] -= tasks.mem[t]
        attempts += 1
        if depth == n - 1:
            return placement, False
        if attempts >= max_attempts:
            return None, False
        if deadline is not None and attempts % 1024 == 0 and time.monotonic() >= deadline:
            return None, True
        depth += 1
        cands.append(candidates(int(order[depth])))
        pos.append(0)


def solve_greedy(
    inst: Instance | Tasks,
    sort: bool = False,
    backtrack: bool = False,
    deadline_s: float | None = 1.0,
    max_attempts: int = MAX_ATTEMPTS,
) -> Allocation:
    """GR (default), SG (``sort``), GB (``backtrack``), SGB (both)."""
    t0 = time.monotonic()
    tasks = inst.tasks() if isinstance(inst, Instance) else inst
    name = ("s" if sort else "") + ("gb" if backtrack else ("g" if sort else "gr"))
    order = _order(tasks, sort)
    if backtrack:
        deadline = t0 + deadline_s if deadline_s is not None else None
        placement, timed_out = _backtrack(tasks, order, max_attempts, deadline)
        if placement is None:
            return finish(tasks, None, name, "deadline" if timed_out else "infeasible", t0)
    else:
        placement = _greedy(tasks, order)
        if placement is None:
            return finish(tasks, None, name, "infeasible", t0)
    return finish(tasks, placement, name, "feasible", t0)
