"""Separable resource allocation across weak components (SODA paper 5.1.3; Ibaraki and Katoh 1988).

Maximise sum_c F_c(x_c) subject to sum_c x_c <= B, 0 <= x_c <= len(F_c) - 1, where each F_c is
given on the integer grid 0..hi_c (F_c[0] is the component's value at its minimum).

- all F_c concave: the optimum takes the B largest marginal increments. We select them with a
  linear-time selection (numpy argpartition), which is what Galil and Megiddo's (and Frederickson
  and Johnson's) schemes achieve for this problem; departure: a selection over explicit increments
  instead of their implicit search, since our grids are explicit and small;
- no F_c concave: dynamic programming over components, O(C B^2) vectorised;
- mixed: Fox's greedy on the concave part (a heap, which yields the optimal value for every
  budget 0..B at once) folded as one more component into the DP of the others.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

import numpy as np


def is_concave(f: np.ndarray, tol: float = 1e-9) -> bool:
    d = np.diff(f)
    return bool(np.all(np.diff(d) <= tol * (1 + np.abs(d[1:]).max(initial=0)))) if len(d) > 1 else True


def _concave_select(funcs: Sequence[np.ndarray], budget: int) -> list[int]:
    incs = [np.diff(f) for f in funcs]
    owner = np.concatenate([np.full(len(d), c) for c, d in enumerate(incs)]) if incs else np.zeros(0, int)
    allinc = np.concatenate(incs) if incs else np.zeros(0)
    x = [0] * len(funcs)
    k = min(budget, int((allinc > 0).sum()))
    if k <= 0:
        return x
    top = np.argpartition(-allinc, k - 1)[:k]
    for c in owner[top]:
        x[int(c)] += 1
    return x


def _fox(funcs: Sequence[np.ndarray], budget: int) -> tuple[np.ndarray, list[list[int]]]:
    """Greedy (Fox) on concave functions: best value and allocation for every budget 0..B."""
    x = [0] * len(funcs)
    heap = [(-(f[1] - f[0]), c) for c, f in enumerate(funcs) if len(f) > 1]
    heapq.heapify(heap)
    values = [float(sum(f[0] for f in funcs))]
    allocs = [x.copy()]
    for _ in range(budget):
        if not heap or -heap[0][0] <= 0:
            values.append(values[-1])
            allocs.append(x.copy())
            continue
        neg, c = heapq.heappop(heap)
        x[c] += 1
        values.append(values[-1] - neg)
        allocs.append(x.copy())
        f = funcs[c]
        if x[c] + 1 < len(f):
            heapq.heappush(heap, (-(f[x[c] + 1] - f[x[c]]), c))
    return np.array(values), allocs


def _dp(funcs: Sequence[np.ndarray], budget: int) -> tuple[float, list[int]]:
    """best[u] over components; each step costs O(budget x len(f)) (f is flat beyond its end)."""
    best = np.full(budget + 1, -np.inf)
    best[0] = 0.0
    choices = []
    u = np.arange(budget + 1)
    for f in funcs:
        k = np.arange(min(len(f), budget + 1))
        src = u[:, None] - k[None, :]
        prev = np.where(src >= 0, best[np.maximum(src, 0)], -np.inf)
        tot = prev + f[k][None, :]
        arg = tot.argmax(axis=1)
        best = tot[u, arg]
        choices.append(arg)
    pos = int(np.argmax(best))
    value = float(best[pos])
    x = [0] * len(funcs)
    for c in range(len(funcs) - 1, -1, -1):
        x[c] = int(choices[c][pos])
        pos -= x[c]
    return value, x


def allocate(funcs: Sequence[np.ndarray], budget: int, concave: Sequence[bool] | None = None) -> tuple[list[int], str]:
    """Optimal integer allocation and the method used ('galil-megiddo', 'dp', 'fox+dp').
    ``concave`` may give the concavity test's results when the caller has cached them."""
    budget = max(0, int(budget))
    conc = list(concave) if concave is not None else [is_concave(f) for f in funcs]
    if all(conc):
        return _concave_select(funcs, budget), "galil-megiddo"
    if not any(conc):
        return _dp(funcs, budget)[1], "dp"
    ci = [i for i, c in enumerate(conc) if c]
    ni = [i for i, c in enumerate(conc) if not c]
    fox_vals, fox_allocs = _fox([funcs[i] for i in ci], budget)
    _, x = _dp([fox_vals] + [funcs[i] for i in ni], budget)
    out = [0] * len(funcs)
    for j, i in enumerate(ci):
        out[i] = fox_allocs[x[0]][j]
    for j, i in enumerate(ni):
        out[i] = x[j + 1]
    return out, "fox+dp"
