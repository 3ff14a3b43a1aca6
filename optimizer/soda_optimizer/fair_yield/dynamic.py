"""Re-optimisation of a running allocation under a migration budget (section 6.1).

The workload changed (jobs arrived, left, or changed alpha/m): ``previous[t]`` is the host task t runs on, or -1
for a new task (the paper's e-bar = 1 on every host: a new task costs nothing to place). Moving an old task costs
its memory m_t (bytes to copy), or 1 with ``by_count``; the total must stay within the budget B (eq. 31).

Two methods:
- ``milp``: the MILP of section 6.1 (:func:`.milp.solve_milp` with the budget row), exact, under the deadline;
- ``heuristic`` (the paper leaves heuristics "for future work"; this one is ours): keep every old task where it is;
  if a host's memory is now exceeded, move its largest tasks out (counted against B); put the new and the moved
  tasks, largest memory first, on the memory-fitting host with the lowest CPU load after the move; then, while the
  budget and the deadline allow, take the bottleneck host (the one fixing the minimum yield) and make the single
  move of one of its tasks that raises the minimum yield most (all (task, host) pairs are scored at once with
  numpy), within the remaining budget. Moving a task back to its old host refunds its cost.

``fixed`` tasks (ours: pods without a controller) never move: the heuristic sheds and moves only the others, the
MILP pins them. A task restricted to some hosts (:attr:`.model.Tasks.allowed`, issue 47) only goes to those; one
on a host it may no longer use is moved off it like a task over a host's memory (counted against B).

Both return an :class:`~.model.Allocation` after the average-yield phase; :func:`migration_cost` measures B used.
"""

from __future__ import annotations

import time
from typing import Literal

import numpy as np

from .average import finish
from .milp import hopeless, solve_milp
from .model import EPS, Allocation, Instance, Tasks


def migration_cost(tasks: Tasks, previous: np.ndarray, placement: np.ndarray, by_count: bool = False) -> float:
    """Bytes (memory fractions) -- or tasks with ``by_count`` -- moved from ``previous`` to ``placement``."""
    moved = (previous >= 0) & (placement != previous)
    return float(moved.sum()) if by_count else float(tasks.mem[moved].sum())


def _host_yield(tasks: Tasks, load: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.minimum(np.where(load > 0, tasks.cpu_cap / np.where(load > 0, load, 1.0), 1.0), 1.0)


def _heuristic(
    tasks: Tasks, previous: np.ndarray, budget: float, by_count: bool, deadline: float | None, fixed: np.ndarray
) -> tuple[np.ndarray | None, bool]:
    cost_of = np.ones(tasks.n) if by_count else tasks.mem.copy()
    placement = previous.copy()
    pinned = fixed & (previous >= 0)
    may = tasks.may()
    if hopeless(tasks, previous, fixed):
        return None, False
    placement[(placement >= 0) & ~may[np.arange(tasks.n), np.maximum(placement, 0)]] = -1  # forced: off a forbidden host
    if np.any(np.bincount(previous[pinned], weights=tasks.mem[pinned], minlength=tasks.hosts) > tasks.mem_cap + EPS):
        return None, False  # the tasks that cannot move overflow a host by themselves
    free = tasks.mem_cap - np.bincount(
        placement[placement >= 0], weights=tasks.mem[placement >= 0], minlength=tasks.hosts
    )
    # forced moves: hosts whose memory is now exceeded shed their largest movable tasks
    for h in np.flatnonzero(free < -EPS):
        on_h = np.flatnonzero((placement == h) & ~pinned)
        for t in on_h[np.argsort(-tasks.mem[on_h], kind="stable")]:
            if free[h] >= -EPS:
                break
            placement[t] = -1
            free[h] += tasks.mem[t]
    load = np.bincount(placement[placement >= 0], weights=tasks.alpha[placement >= 0], minlength=tasks.hosts)
    todo = np.flatnonzero(placement < 0)
    for t in todo[np.argsort(-tasks.mem[todo], kind="stable")]:
        fits = (free + EPS >= tasks.mem[t]) & may[t]
        if not fits.any():
            return None, False
        j = int(np.argmin(np.where(fits, (load + tasks.alpha[t]) / tasks.cpu_cap, np.inf)))
        placement[t] = j
        load[j] += tasks.alpha[t]
        free[j] -= tasks.mem[t]
    if migration_cost(tasks, previous, placement, by_count) > budget + EPS:
        return None, False
    # improvement: single moves out of the bottleneck host
    while True:
        if deadline is not None and time.monotonic() >= deadline:
            return placement, True
        hy = _host_yield(tasks, load)
        b = int(np.argmin(hy))
        if hy[b] >= 1.0:
            return placement, False
        used = migration_cost(tasks, previous, placement, by_count)
        on_b = np.flatnonzero(placement == b)
        # cost change of moving t from b to j: + cost if t was on b before, - cost if j is t's old host
        was_here = (previous[on_b] == b)[:, None]
        back_home = previous[on_b][:, None] == np.arange(tasks.hosts)[None, :]
        delta = cost_of[on_b][:, None] * (was_here.astype(float) - back_home.astype(float))
        delta = np.where(previous[on_b][:, None] < 0, 0.0, delta)
        new_load = load[None, :] + tasks.alpha[on_b][:, None]  # target host load after the move
        ok = (free[None, :] + EPS >= tasks.mem[on_b][:, None]) & (used + delta <= budget + EPS)
        ok &= may[on_b]
        ok[:, b] = False
        ok[pinned[on_b], :] = False
        target_y = np.minimum(tasks.cpu_cap[None, :] / new_load, 1.0)
        src_load = load[b] - tasks.alpha[on_b]
        src_y = np.where(src_load > 0, tasks.cpu_cap[b] / np.maximum(src_load, EPS), 1.0)
        # the new minimum: min over the source, the target and every other host
        others_min = np.empty(tasks.hosts)
        for dst in range(tasks.hosts):  # min over hosts other than b and dst (H values; cheap)
            mask = np.ones(tasks.hosts, dtype=bool)
            mask[b] = False
            mask[dst] = False
            others_min[dst] = hy[mask].min() if mask.any() else 1.0
        score = np.minimum(np.minimum(target_y, np.minimum(src_y, 1.0)[:, None]), others_min[None, :])
        score = np.where(ok, score, -1.0)
        k, dest = (int(v) for v in np.unravel_index(int(np.argmax(score)), score.shape))
        if score[k, dest] <= hy[b] + 1e-12:
            return placement, False
        t = int(on_b[k])
        j = dest
        placement[t] = j
        load[b] -= tasks.alpha[t]
        load[j] += tasks.alpha[t]
        free[b] += tasks.mem[t]
        free[j] -= tasks.mem[t]


def reallocate(
    inst: Instance | Tasks,
    previous: np.ndarray | list[int],
    budget: float,
    method: Literal["heuristic", "milp"] = "heuristic",
    by_count: bool = False,
    deadline_s: float | None = 1.0,
    fixed: np.ndarray | list[bool] | None = None,
) -> Allocation:
    """Re-place the tasks of ``inst`` from ``previous`` (one host per task, -1 = new) moving at most ``budget``;
    ``fixed[t]``: task t never leaves its previous host (ours: a pod without a controller cannot move)."""
    t0 = time.monotonic()
    tasks = inst.tasks() if isinstance(inst, Instance) else inst
    prev = np.asarray(previous, dtype=np.int64)
    if prev.shape != (tasks.n,):
        raise ValueError(f"previous: one host (or -1) per task, {tasks.n} tasks")
    pin = np.zeros(tasks.n, dtype=bool) if fixed is None else np.asarray(fixed, dtype=bool)
    if pin.shape != (tasks.n,):
        raise ValueError(f"fixed: one flag per task, {tasks.n} tasks")
    if method == "milp":
        return solve_milp(
            tasks, deadline_s=deadline_s, previous=prev, budget=budget, by_count=by_count, algorithm="dynamic-milp",
            fixed=pin,
        )
    deadline = t0 + deadline_s if deadline_s is not None else None
    placement, timed_out = _heuristic(tasks, prev, budget, by_count, deadline, pin)
    if placement is None:
        return finish(tasks, None, "dynamic", "infeasible", t0)
    return finish(tasks, placement, "dynamic", "deadline" if timed_out else "feasible", t0)
