"""Local search on a placement's minimum yield (ours, issue 47: the anytime default's first answer, before the
MILP; the paper has none).

For a fixed placement the best minimum yield is min(1, min_j C_j / load_j) (section 2.5's program with the
placement fixed), so raising it means lowering the largest relative load load_j / C_j. From a placement
(MCB8's), repeatedly take the host of the largest relative load and apply the best of

- a move: one of its tasks to another host it may use (:attr:`.model.Tasks.allowed`) where the memory fits;
- a swap: one of its tasks with a smaller one on another host, both allowed and within memory,

that leaves both hosts strictly below the current largest relative load (the best: the lower of the two new
relative loads' maximum). Each step lowers (largest relative load, number of hosts at it) lexicographically, so
the search ends; it also ends when the minimum yield is 1 or at the deadline. Numpy over every (task, host) and
(task, task) pair of the bottleneck host: microseconds per step at the off-grid sizes (8-18 tasks).

Only for a fresh allocation: re-placements (section 6.1) count migrations against a budget, which the MILP keeps.
"""

from __future__ import annotations

import time

import numpy as np

from .model import EPS, Tasks


def improve(tasks: Tasks, placement: np.ndarray, deadline: float | None = None, max_steps: int = 1000) -> np.ndarray:
    """A placement at least as good as ``placement`` (a higher or equal best minimum yield), by moves and swaps
    off the most loaded host until none helps, the yield is 1, or ``deadline`` (a ``time.monotonic()`` value)."""
    p = np.asarray(placement, dtype=np.int64).copy()
    alpha, mem, cap, mcap = tasks.alpha, tasks.mem, tasks.cpu_cap, tasks.mem_cap
    may = tasks.may()
    hosts = np.arange(tasks.hosts)
    load = np.bincount(p, weights=alpha, minlength=tasks.hosts)
    used = np.bincount(p, weights=mem, minlength=tasks.hosts)
    for _ in range(max_steps):
        if deadline is not None and time.monotonic() >= deadline:
            break
        rel = load / cap
        b = int(np.argmax(rel))
        top = float(rel[b])
        if top <= 1.0 + EPS:
            break
        on_b = np.flatnonzero(p == b)
        # moves: task t (on b) to host j
        nb_move = (load[b] - alpha[on_b]) / cap[b]  # (Tb,)
        nj_move = (load[None, :] + alpha[on_b, None]) / cap[None, :]  # (Tb, H)
        ok = may[on_b] & (used[None, :] + mem[on_b, None] <= mcap[None, :] + EPS) & (hosts[None, :] != b)
        worst_move = np.where(ok, np.maximum(nb_move[:, None], nj_move), np.inf)
        # swaps: task t (on b) with task u (elsewhere), alpha_u < alpha_t
        others = np.flatnonzero(p != b)
        ju = p[others]
        nb_swap = (load[b] - alpha[on_b, None] + alpha[None, others]) / cap[b]  # (Tb, U)
        nj_swap = (load[ju][None, :] - alpha[None, others] + alpha[on_b, None]) / cap[ju][None, :]
        ok_s = (
            (alpha[None, others] < alpha[on_b, None])
            & may[on_b][:, ju]
            & may[others, b][None, :]
            & (used[ju][None, :] - mem[None, others] + mem[on_b, None] <= mcap[ju][None, :] + EPS)
            & (used[b] - mem[on_b, None] + mem[None, others] <= mcap[b] + EPS)
        )
        worst_swap = np.where(ok_s, np.maximum(nb_swap, nj_swap), np.inf)
        best_move = float(worst_move.min()) if worst_move.size else np.inf
        best_swap = float(worst_swap.min()) if worst_swap.size else np.inf
        if min(best_move, best_swap) >= top - 1e-12:
            break
        if best_move <= best_swap:
            k, jj = np.unravel_index(int(np.argmin(worst_move)), worst_move.shape)
            t, j = int(on_b[k]), int(jj)
            load[b] -= alpha[t]
            used[b] -= mem[t]
            load[j] += alpha[t]
            used[j] += mem[t]
            p[t] = j
        else:
            k, m = np.unravel_index(int(np.argmin(worst_swap)), worst_swap.shape)
            t, u = int(on_b[k]), int(others[m])
            j2 = int(p[u])
            load[b] += alpha[u] - alpha[t]
            used[b] += mem[u] - mem[t]
            load[j2] += alpha[t] - alpha[u]
            used[j2] += mem[t] - mem[u]
            p[t], p[u] = j2, b
    return p
