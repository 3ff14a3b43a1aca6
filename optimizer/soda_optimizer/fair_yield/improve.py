"""Local search on a placement's minimum yield (ours, issue 47: the anytime default's first answer, before the
MILP; the paper has none).

For a fixed placement the best minimum yield is min(1, min_j C_j / load_j) (section 2.5's program with the
placement fixed), so raising it means lowering the largest relative load load_j / C_j. From a placement
(MCB8's), repeatedly take the host of the largest relative load and apply the best of

- a move: one of its tasks to another host it may use (:attr:`.model.Tasks.allowed`) where the memory fits;
- a swap: one of its tasks with a smaller one on another host, both allowed and within memory,

that leaves both hosts strictly below the current largest relative load (the best: the lower of the two new
relative loads' maximum); when neither helps (memory-tight instances: the host a task should go to lacks the
memory), an ejection chain: one of its tasks to host j and a task of j to a third host, all three then below it
(:func:`_chain`). Each step lowers (largest relative load, number of hosts at it) lexicographically, so
the search ends; it also ends when the minimum yield is 1 or at the deadline. Numpy over every (task, host) and
(task, task) pair of the bottleneck host: microseconds per step at the off-grid sizes (8-18 tasks).

Only for a fresh allocation: re-placements (section 6.1) count migrations against a budget, which the MILP keeps.

:func:`search` iterates it (ours too): random kicks of a few tasks, each followed by the local search, beside
SCIP in :mod:`.anytime` until the deadline.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from .model import EPS, Tasks
from .pace import Pace


def improve(tasks: Tasks, placement: np.ndarray, deadline: float | None = None, max_steps: int = 1000,
            pace: Pace | None = None) -> np.ndarray:
    """A placement at least as good as ``placement`` (a higher or equal best minimum yield), by moves and swaps
    off the most loaded host until none helps, the yield is 1, or ``deadline`` (a ``time.monotonic()`` value; with
    ``pace``, less the worst stall seen: :mod:`.pace`)."""
    p = np.asarray(placement, dtype=np.int64).copy()
    alpha, mem, cap, mcap = tasks.alpha, tasks.mem, tasks.cpu_cap, tasks.mem_cap
    may = tasks.may()
    hosts = np.arange(tasks.hosts)
    load = np.bincount(p, weights=alpha, minlength=tasks.hosts)
    used = np.bincount(p, weights=mem, minlength=tasks.hosts)
    for _ in range(max_steps):
        if pace.passed(deadline) if pace is not None else deadline is not None and time.monotonic() >= deadline:
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
            chain = _chain(tasks, p, load, used, may, b, top)
            if chain is None:
                break
            for t, j in chain:
                load[p[t]] -= alpha[t]
                used[p[t]] -= mem[t]
                load[j] += alpha[t]
                used[j] += mem[t]
                p[t] = j
            continue
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


#: the largest kick of the iterated search (tasks moved or swapped); a kicked-and-improved placement is kept when
#: at least as good as the current one (measured on the memory-tight misses of yield_exact.json: larger kicks, or
#: accepting a placement up to 1-6% worse, reached the optimum on no more of them)
KICK_MAX = 3


def kick(tasks: Tasks, placement: np.ndarray, rng: np.random.Generator, k: int) -> np.ndarray:
    """A perturbation for the iterated search: ``k`` random tasks each moved to a random other host it may use
    where its memory fits, or swapped with a random task of another host when both fit (memory and allowed hosts
    kept, so the result is as sound as ``placement``)."""
    p = np.asarray(placement, dtype=np.int64).copy()
    mem, mcap, may = tasks.mem, tasks.mem_cap, tasks.may()
    used = np.bincount(p, weights=mem, minlength=tasks.hosts)
    for t in rng.choice(tasks.n, size=min(k, tasks.n), replace=False).tolist():
        b = int(p[t])
        room = may[t] & (used + mem[t] <= mcap + EPS)
        room[b] = False
        if room.any() and rng.random() < 0.5:
            j = int(rng.choice(np.flatnonzero(room)))
            used[b] -= mem[t]
            used[j] += mem[t]
            p[t] = j
            continue
        u = int(rng.integers(tasks.n))
        j = int(p[u])
        if j == b or not (may[t, j] and may[u, b]):
            continue
        if used[j] - mem[u] + mem[t] <= mcap[j] + EPS and used[b] - mem[t] + mem[u] <= mcap[b] + EPS:
            used[b] += mem[u] - mem[t]
            used[j] += mem[t] - mem[u]
            p[t], p[u] = j, b
    return p


def search(tasks: Tasks, starts: list[np.ndarray], until: float, stop: Callable[[], bool] | None = None,
           seed: int = 0, pace: Pace | None = None) -> np.ndarray:
    """Iterated local search (ours, issue 47): :func:`improve` from each start, then, from the best placement,
    random :func:`kick` s of 1-3 tasks each followed by :func:`improve`; a result at least as good becomes the
    current placement (plateaus are walked), a better one the best. Until ``until`` (a ``time.monotonic()`` value),
    the yield 1, or ``stop()`` (e.g. the MILP proved its optimum). Deterministic for a seed, save for where the
    deadline cuts it. The best placement, never below the best start. With ``pace`` (:mod:`.pace`), ``until`` is
    taken as passed the worst stall seen before it."""
    rng = np.random.default_rng(seed)
    pace = pace if pace is not None else Pace()

    def late() -> bool:
        return pace.passed(until)

    best_p, best_y = starts[0], tasks.max_min_yield(starts[0])
    for s in starts:
        if late():
            break
        p = improve(tasks, s, deadline=until, pace=pace)
        y = tasks.max_min_yield(p)
        if y > best_y + 1e-12:
            best_p, best_y = p, y
    cur_p, cur_y = best_p, best_y
    while best_y < 1.0 - 1e-12 and not late() and not (stop is not None and stop()):
        p = improve(tasks, kick(tasks, cur_p, rng, int(rng.integers(1, KICK_MAX + 1))), deadline=until, pace=pace)
        y = tasks.max_min_yield(p)
        if y >= cur_y - 1e-12:
            cur_p, cur_y = p, y
            if y > best_y + 1e-12:
                best_p, best_y = p, y
        elif rng.random() < 0.05:  # now and then back to the best
            cur_p, cur_y = best_p, best_y
    return best_p


def _chain(tasks: Tasks, p: np.ndarray, load: np.ndarray, used: np.ndarray, may: np.ndarray, b: int,
           top: float) -> list[tuple[int, int]] | None:
    """An ejection chain off the bottleneck host ``b`` when no move or swap helps (memory-tight instances: the
    host a task should go to lacks the memory): task t from b to host j and a task u of j to a third host k,
    every host it touches then strictly below ``top`` and within memory. The best such pair of moves (the lowest
    maximum of the new relative loads), or None."""
    alpha, mem, cap, mcap = tasks.alpha, tasks.mem, tasks.cpu_cap, tasks.mem_cap
    others = np.flatnonzero(p != b)
    if others.size == 0:
        return None
    ju = p[others]  # (U,) the host j of each u
    hosts = np.arange(tasks.hosts)
    best, pick = top - 1e-12, None
    for t in np.flatnonzero(p == b).tolist():
        nb = (load[b] - alpha[t]) / cap[b]
        if nb >= best:
            continue
        # t to j = p[u], u to k: j's load and memory after both, k's after u arrives
        nj = (load[ju] + alpha[t] - alpha[others]) / cap[ju]  # (U,)
        ok_j = may[t, ju] & (used[ju] + mem[t] - mem[others] <= mcap[ju] + EPS)
        nk = (load[None, :] + alpha[others, None]) / cap[None, :]  # (U, H)
        ok_k = (may[others] & (used[None, :] + mem[others, None] <= mcap[None, :] + EPS)
                & (hosts[None, :] != ju[:, None]) & (hosts[None, :] != b))
        worst = np.where(ok_j[:, None] & ok_k, np.maximum(np.maximum(nj[:, None], nk), nb), np.inf)
        m = int(np.argmin(worst))
        if worst.flat[m] < best:
            k_u, k = (int(v) for v in np.unravel_index(m, worst.shape))
            best, pick = float(worst.flat[m]), [(t, int(ju[k_u])), (int(others[k_u]), k)]
    if pick is None:
        return None
    (t, j), (u, k) = pick
    return [(u, k), (t, j)]  # u leaves j first
