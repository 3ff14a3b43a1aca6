"""Multi-capacity bin packing inside a binary search on the yield: MCB1..MCB8 (section 3.4).

For a fixed yield Y every task has a fixed CPU need alpha*Y and a fixed memory need m, and the two-dimensional
packing heuristic of Leinberger et al. applies: split the tasks into the CPU-heavier and the memory-heavier list,
sort both by the algorithm's key, then fill the hosts one after the other; the first task of a host is the first
that fits in the CPU list, then in the memory list; afterwards the list that goes *against the host's current
imbalance* is scanned first (more CPU than memory left: the CPU-heavy list), then the other; when neither has a
task that fits, the next host is opened. Success when every task is placed.

Sort keys (c = alpha*Y, m = memory): MCB1 c+m ascending, MCB2 max-min ascending, MCB3 max/min ascending, MCB4 max
ascending, MCB5..MCB8 the same in descending order. MCB8 (max, descending) is the paper's algorithm of choice.

The yield lies in [0, Y_max], Y_max = min(1, total CPU capacity / total alpha). The scan of a list is one numpy
mask-and-argmax, so one packing costs O(T + H) numpy operations.

Departures from the paper:
- Y_max itself is tried first (the paper starts its binary search at Y_max / 2, so it can only approach Y_max);
  when it packs, the answer is provably optimal;
- a packing at Y often leaves every host with CPU to spare; its placement's own best minimum yield Y' >= Y is
  computed and the search continues from Y' (the lower end never decreases, so this only saves iterations);
- if no probed yield packs, Y = 0 (memory only) is tried last before reporting a failure;
- the search stops when the interval is narrower than ``tol`` (the paper does not give its precision);
- with unequal hosts the imbalance compares the fractions of CPU and memory left; keys use absolute needs;
- the deadline is checked between packings; the best placement so far is returned when it passes;
- a task restricted to some hosts (:attr:`.model.Tasks.allowed`, issue 47) is only a candidate on those: the
  scan of a host masks out the tasks that may not use it (Y_max stays a valid, looser, bound).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from .average import finish
from .model import EPS, Allocation, Instance, Tasks

_Key = Callable[[np.ndarray, np.ndarray], np.ndarray]


def _ratio(c: np.ndarray, m: np.ndarray) -> np.ndarray:
    hi, lo = np.maximum(c, m), np.minimum(c, m)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        r = np.where(lo > 0, hi / np.where(lo > 0, lo, 1.0), np.inf)
    return np.where(hi > 0, r, 1.0)


#: sort key and whether it is descending, per MCB variant (section 3.4's list)
KEYS: dict[int, tuple[_Key, bool]] = {
    1: (lambda c, m: c + m, False),
    2: (lambda c, m: np.maximum(c, m) - np.minimum(c, m), False),
    3: (_ratio, False),
    4: (lambda c, m: np.maximum(c, m), False),
    5: (lambda c, m: c + m, True),
    6: (lambda c, m: np.maximum(c, m) - np.minimum(c, m), True),
    7: (_ratio, True),
    8: (lambda c, m: np.maximum(c, m), True),
}


def pack(cpu: np.ndarray, mem: np.ndarray, cpu_cap: np.ndarray, mem_cap: np.ndarray, variant: int,
         allowed: np.ndarray | None = None) -> np.ndarray | None:
    """One multi-capacity packing of tasks with fixed needs; the host of each task, or None on failure.
    ``allowed[t, j]``: task t may use host j (None: any); a task is only ever scanned on its hosts."""
    n = cpu.shape[0]
    if mem.sum() > mem_cap.sum() + EPS or cpu.sum() > cpu_cap.sum() + EPS:
        return None
    key_fn, desc = KEYS[variant]
    key = key_fn(cpu, mem)
    heavy_cpu = cpu > mem
    lists = []
    for sel in (heavy_cpu, ~heavy_cpu):  # 0: CPU-heavy list, 1: memory-heavy list
        idx = np.flatnonzero(sel)
        kv = key[idx]
        order = np.argsort(-kv if desc else kv, kind="stable")
        idx = idx[order]
        lists.append((idx, cpu[idx], mem[idx], np.ones(idx.shape[0], dtype=bool),
                      None if allowed is None else allowed[idx]))
    placement = np.full(n, -1, dtype=np.int64)
    left = n
    for j in range(cpu_cap.shape[0]):
        rc, rm = float(cpu_cap[j]), float(mem_cap[j])
        first = True
        while left:
            if first:
                scan = (0, 1)
            else:
                scan = (0, 1) if rc / cpu_cap[j] > rm / mem_cap[j] else (1, 0)
            placed = False
            for li in scan:
                idx, c, m, alive, may = lists[li]
                if not idx.size:
                    continue
                fit = alive & (c <= rc + EPS) & (m <= rm + EPS)
                if may is not None:
                    fit &= may[:, j]
                k = int(np.argmax(fit))
                if fit[k]:
                    alive[k] = False
                    placement[idx[k]] = j
                    rc -= float(c[k])
                    rm -= float(m[k])
                    left -= 1
                    placed = True
                    break
            first = False
            if not placed:
                break
        if not left:
            return placement
    return None


def solve_mcb(
    inst: Instance | Tasks, variant: int = 8, deadline_s: float | None = 1.0, tol: float = 1e-5
) -> Allocation:
    """MCB``variant`` (1..8): the best minimum yield the binary search finds, then the average-yield phase."""
    t0 = time.monotonic()
    tasks = inst.tasks() if isinstance(inst, Instance) else inst
    name = f"mcb{variant}"
    deadline = t0 + deadline_s if deadline_s is not None else None
    y_max = float(min(1.0, tasks.cpu_cap.sum() / tasks.alpha.sum()))
    best: np.ndarray | None = None
    best_y = -1.0

    def attempt(y: float) -> bool:
        nonlocal best, best_y
        p = pack(tasks.alpha * y, tasks.mem, tasks.cpu_cap, tasks.mem_cap, variant, tasks.allowed)
        if p is None:
            return False
        got = tasks.max_min_yield(p)
        if got > best_y:
            best, best_y = p, got
        return True

    timed_out = False
    if attempt(y_max) and best_y >= y_max - 1e-12:
        return finish(tasks, best, name, "optimal", t0, bound=y_max)
    lo, hi = 0.0, y_max
    y = y_max / 2.0
    while hi - lo > tol:
        if deadline is not None and time.monotonic() >= deadline:
            timed_out = True
            break
        if attempt(y):
            lo = max(y, best_y)
        else:
            hi = y
        y = (lo + hi) / 2.0
    if best is None and not timed_out:
        attempt(0.0)
    if best is None:
        return finish(tasks, None, name, "deadline" if timed_out else "infeasible", t0, bound=y_max)
    return finish(tasks, best, name, "deadline" if timed_out else "feasible", t0, bound=y_max)
