"""Component curves I_c (SODA paper 5.1.3; the NSDP of Ibaraki and Katoh): a weak component's best
importance, and the PE allocation reaching it, for every number of atomic units above its minimum.

Departures from the paper, on purpose:
- exact, by enumerating every discrete allocation vector, when that fits ``EXACT_LIMIT`` vectors;
  otherwise a greedy marginal scheme over unit bundles (single PEs, doubling bundles, and a bundle
  for the whole component so that serial bottlenecks with zero single-unit gain still progress).
  The greedy curve is a lower bound of the true one; this is the paper's "partially greedy scheme"
  used always for large components rather than only under time pressure; it stops at the deadline;
- discrete bounds use ceil for minima and floor for maxima (the paper floors minima and ceils
  maxima), so the discrete solution always honours the continuous m_p <= g_p <= M_p; and every PE
  gets at least one unit and the policy's floor (admitted means every PE runs: the paper lets a PE
  of an admitted job get 0);
- a PE never gets more than its saturation mips (b/a, or primal/a for sources): its output cannot
  grow past it, so the extra is left for others.
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass

import numpy as np

from ..importance import Evaluator
from ..model import floor_units
from . import rap

EXACT_LIMIT = 20000  # allocation vectors enumerated exactly per component


@dataclass
class Curve:
    """I_c: a weak component's best importance for each number of units above its minimum."""

    pes: tuple[str, ...]
    lo: np.ndarray  # per PE minimum units
    values: np.ndarray  # I_c(lo_sum + k), k = 0..len-1, nondecreasing
    allocs: np.ndarray  # (len x P) units
    unit: float = 0.0  # mips per unit of this curve
    complete: bool = True  # False: the greedy stopped at the deadline (a lower bound beyond its end)

    def __post_init__(self) -> None:
        self.concave = rap.is_concave(self.values)


def bounds(ev: Evaluator, unit: float, floor: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    specs = [ev.glued.spec(p) for p in ev.pes]
    lo = np.array([floor_units(s, unit, floor) for s in specs], dtype=int)
    mx = np.array([math.floor(s.max_mips / unit + 1e-9) if math.isfinite(s.max_mips) else 1 << 30 for s in specs])
    sat = np.ceil(ev.saturation() / unit - 1e-9).astype(int)
    hi = np.maximum(lo, np.minimum(mx, sat))
    return lo, hi


def component_curve(ev: Evaluator, unit: float, max_units: int, deadline: float | None = None, floor: float = 0.0) -> Curve:
    """Best importance of the component for each number of units (paper's I_c), with allocations;
    every PE gets at least :func:`~soda_optimizer.model.floor_units` (its minimum, ``floor`` mips,
    one unit)."""
    lo, hi = bounds(ev, unit, floor)
    span = np.minimum(hi - lo, max(0, max_units - int(lo.sum())))
    total = int(min(span.sum(), max(0, max_units - int(lo.sum()))))
    n_vec = float(np.prod((span + 1).astype(float)))
    if n_vec <= EXACT_LIMIT:
        grids = np.array(list(itertools.product(*[range(int(s) + 1) for s in span])), dtype=int).reshape(-1, len(span))
        grids = grids[grids.sum(axis=1) <= total]
        vals = ev.importance((grids + lo) * unit)
        sums = grids.sum(axis=1)
        values = np.full(total + 1, -np.inf)
        allocs = np.zeros((total + 1, len(span)), dtype=int)
        for k in range(total + 1):
            mask = sums == k
            if mask.any():
                j = int(np.argmax(np.where(mask, vals, -np.inf)))
                values[k], allocs[k] = vals[j], grids[j]
        for k in range(1, total + 1):  # nondecreasing: with more units you may leave some idle
            if values[k - 1] >= values[k]:
                values[k], allocs[k] = values[k - 1], allocs[k - 1]
        return Curve(tuple(ev.pes), lo, values, allocs + lo, unit)
    # greedy marginal over bundles; a move of k units leaves the k-1 totals before it at the
    # previous solution (the curve is filled in from the breakpoints at the end)
    x = np.zeros(len(span), dtype=int)
    cur = float(ev.importance((x + lo) * unit)[0])
    at: list[int] = [0]  # totals where the solution changes
    vals_l: list[float] = [cur]
    allocs_l: list[np.ndarray] = [x.copy()]
    used = 0
    complete = True
    while used < total:
        if deadline is not None and time.monotonic() > deadline:
            complete = False
            break
        room = np.minimum(span - x, total - used)
        # moves: 1, 2, 4, ... units on one PE, and one unit on every PE that has room
        ps = np.nonzero(room > 0)[0]
        pows = [2 ** np.arange(int(np.log2(room[p])) + 1) for p in ps]
        rows = np.repeat(ps, [len(k) for k in pows]) if len(ps) else np.zeros(0, dtype=int)
        free = span - x > 0
        bundle = free.sum() > 1 and int(free.sum()) <= total - used
        mv_arr = np.zeros((len(rows) + int(bundle), len(span)), dtype=int)
        if len(rows):
            mv_arr[np.arange(len(rows)), rows] = np.concatenate(pows)
        if bundle:
            mv_arr[-1] = free.astype(int)
        if not len(mv_arr):
            break
        vals = ev.importance((x + mv_arr + lo) * unit)
        gain = (vals - cur) / mv_arr.sum(axis=1)
        j = int(np.argmax(gain))
        if gain[j] <= 1e-12:
            break
        x = x + mv_arr[j]
        used += int(mv_arr[j].sum())
        cur = float(vals[j])
        at.append(used)
        vals_l.append(cur)
        allocs_l.append(x.copy())
    # entry k of the curve: the last breakpoint at or below k
    idx = np.searchsorted(np.array(at), np.arange(used + 1), side="right") - 1
    values = np.array(vals_l)[idx]
    allocs = np.array(allocs_l)[idx]
    return Curve(tuple(ev.pes), lo, values, allocs + lo, unit, complete)
