"""What macroQ does with an answer of the knapsack, in exact mips (issue 34): give back the capacity
that whole global units left unused, and bound how far the answer may be from the best.

- :func:`fill`: the knapsack charges an optional job whole global units, and an item gets its best
  own-grid point at or below its units, so some capacity stays unused. ``fill`` first admits, in
  rank order (rank legality kept), jobs not admitted whose exact minimum fits what is free, then
  gives what is still free to the admitted jobs' next points on their own grids (best importance per
  mips first). It also tries the growth alone and keeps the better (importance, then jobs): it
  never lowers the knapsack's answer, and no job whose minimum fits the free capacity is left out
  when admitting it costs nothing. :func:`polish` then gives what no grid point can use (less than
  a unit) to single PEs in exact mips.
- :func:`upper_bound`: the Lagrangian dual of the allocation over the options' curves, one budget
  constraint per waterline level: ``L(lam) = lam H + sum_items max_points (ID - lam x)`` is at
  least the best importance for every ``lam >= 0`` (weak duality), and its minimum over ``lam``
  equals the LP relaxation over the curves' concave envelopes (the minimum is found by scipy's
  bounded scalar search; any ``lam`` gives a valid bound, so an inexact search only loosens it).
  With the automatic resolution (exact minima, each job on its own grid) every curve point is moved
  left by one own unit per PE (a continuous allocation rounded up to the grid exceeds itself by
  less than that), so the bound holds for continuous allocations, any grid; with a fixed unit it
  bounds that grid's problem. It is *proven* when every curve is exact (enumerated, not greedy).
  Per level the bound is the lesser of this LP bound, :func:`relaxed_knapsack` (non-concave
  curves, a step in importance, make the LP loose) and, where the model fits and time is left,
  CP-SAT's own bound of the same optimistic points in exact mips (:mod:`.exact`; no global-unit
  rounding).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import numpy as np
from scipy.optimize import minimize_scalar

from ..importance import Evaluator
from ..model import Scenario
from . import exact
from .admission import Expired, Items, Option, item_curve, knapsack

MAX_BOUND_POINTS = 400_000  # beyond, curve points are merged in buckets (a looser, still valid bound)


def importance(picks: list[tuple[Option, int]]) -> float:
    return float(sum(o.values[x] for o, x in picks))


def used_mips(picks: list[tuple[Option, int]]) -> float:
    return float(sum(o.mips(x) for o, x in picks))


def fill(items: Items, picks: list[tuple[Option, int]], free_rank: dict[str, int], H: float,
         expired: Callable[[], bool]) -> list[tuple[Option, int]]:
    """The knapsack's picks with the unused capacity given back (see the module docstring)."""
    grown = _grow(list(picks), H - used_mips(picks), expired)
    added = _admit(items, list(picks), free_rank, H, expired)
    if len(added) == len(picks):
        return grown
    added = _grow(added, H - used_mips(added), expired)
    a, b = importance(added), importance(grown)
    tol = 1e-9 * (1.0 + abs(b))
    return added if a >= b - tol else grown


def _admit(items: Items, picks: list[tuple[Option, int]], free_rank: dict[str, int], H: float,
           expired: Callable[[], bool]) -> list[tuple[Option, int]]:
    free = H - used_mips(picks)
    taken = {items.group_of[j] for o, _ in picks for j in o.jobs}
    admitted = {j for o, _ in picks for j in o.jobs}
    out = {j for j in free_rank if j not in admitted}
    while out and not expired():
        best: tuple[tuple[int, float, float], Option] | None = None
        for gi, grp in enumerate(items.groups):
            if gi in taken or not grp & out:
                continue
            try:
                opts = items.build(gi)
            except Expired:
                continue
            for o in opts:
                if not o.jobs <= out or o.base > free + 1e-6:
                    continue
                worst = max(free_rank[j] for j in o.jobs)
                if worst > min((free_rank[j] for j in out - o.jobs), default=math.inf):
                    continue  # a better-ranked job would stay out: not rank-legal
                key = (worst, o.base, -float(o.values[0]))
                if best is None or key < best[0]:
                    best = (key, o)
        if best is None:
            break
        o = best[1]
        picks.append((o, 0))
        free -= o.base
        taken.add(items.group_of[next(iter(o.jobs))])
        out -= o.jobs
    return picks


def _grow(picks: list[tuple[Option, int]], free: float, expired: Callable[[], bool]) -> list[tuple[Option, int]]:
    """Greedy: the move (one option to a later own point) with the best importance per mips that
    fits what is free, until none gains."""
    picks = list(picks)
    for _ in range(100_000):
        if free <= 0 or expired():
            break
        best = (0.0, -1, -1)
        for i, (o, x) in enumerate(picks):
            room = int(math.floor(free / o.unit + 1e-9))
            top = min(len(o.values) - 1, x + room)
            if top <= x:
                continue
            gain = o.values[x + 1:top + 1] - o.values[x]
            ratio = gain / (np.arange(1, top - x + 1) * o.unit)
            k = int(np.argmax(ratio))
            if gain[k] > 1e-12 * (1.0 + abs(o.values[x])) and ratio[k] > best[0]:
                best = (float(ratio[k]), i, x + 1 + k)
        if best[1] < 0:
            break
        o, x = picks[best[1]]
        free -= (best[2] - x) * o.unit
        picks[best[1]] = (o, best[2])
    return picks


def upper_bound(items: Items, promised: set[str], free_rank: dict[str, int], H: float,
                expired: Callable[[], bool] = lambda: False, until: float | None = None) -> tuple[float, bool]:
    """(bound, proven): at least the best importance of any rank-legal admission with these
    options over ``H`` mips (see the module docstring). Per level, the lesser of the LP bound and,
    while ``expired()`` is not, the knapsack with costs rounded down (:func:`relaxed_knapsack`) and,
    with ``until`` (a time) and a model that fits, CP-SAT's bound (:func:`.exact.level_bound`)."""
    levels = sorted(set(free_rank.values())) or [1]
    best = 0.0 if not promised else -math.inf
    proven = True
    for r in levels:
        forced = set(promised) | {j for j, x in free_rank.items() if x < r}
        allowed = forced | {j for j, x in free_rank.items() if x == r}
        xs: list[np.ndarray] = []
        vs: list[np.ndarray] = []
        ids: list[np.ndarray] = []
        base_forced = 0.0
        ok_level = True
        for gi, grp in enumerate(items.groups):
            if not grp & allowed:
                continue
            f, a = grp & forced, grp & allowed
            opts = [o for o in items.build(gi) if f <= o.jobs <= a]
            if f and not opts:
                ok_level = False
                break
            px, pv = _points(opts, not f)
            if f:
                base_forced += float(px.min())
            proven = proven and all(c.exact and c.complete for o in opts for c in o.curves)
            xs.append(px)
            vs.append(pv)
            ids.append(np.full(len(px), len(ids)))
        if not ok_level or base_forced > H + 1e-6:
            continue
        if not xs:
            best = max(best, 0.0)
            continue
        X, V, ID = np.concatenate(xs), np.concatenate(vs), np.concatenate(ids)
        X, V, ID = _merge(X, V, ID)
        starts = np.r_[0, np.nonzero(np.diff(ID))[0] + 1]

        def lagrangian(lam: float, X: np.ndarray = X, V: np.ndarray = V, starts: np.ndarray = starts) -> float:
            return float(lam * H + np.maximum.reduceat(V - lam * X, starts).sum())

        # past the steepest slope between two points of an item, every item takes its least point
        same = ID[1:] == ID[:-1]
        dx, dv = np.diff(X)[same], np.diff(V)[same]
        steep = dv[dx > 1e-12] / dx[dx > 1e-12]
        hi = 2.0 * float(max(steep.max(initial=0.0), 1e-12))
        res = minimize_scalar(lagrangian, bounds=(0.0, hi), method="bounded", options={"xatol": hi * 1e-9})
        val = min(lagrangian(0.0), lagrangian(hi), float(res.fun))
        if val > best:  # only a level that could raise the bound is worth the knapsack
            dp = relaxed_knapsack(items, forced, allowed, H, expired)
            val = min(val, dp) if dp is not None else val
            if val > best and until is not None:  # CP-SAT's bound of the same relaxation in exact mips
                cb = exact.level_bound(items, forced, allowed, H, expired, min(until - time.monotonic(), 2.0))
                val = min(val, cb * (1 + 1e-9) + 1e-9) if cb is not None else val
            best = max(best, val)
    return (best if math.isfinite(best) else 0.0), proven


def relaxed_knapsack(items: Items, forced: set[str], allowed: set[str], H: float, expired: Callable[[], bool]) -> float | None:
    """The knapsack of one waterline level with every item's cost rounded down to whole global
    units (its value at K units: its best point below K + 1 units): every true admission fits it,
    so its optimum bounds the true one from above. None when ``expired()`` first."""
    curves, shifts = [], 0.0
    for gi, grp in enumerate(items.groups):
        if not grp & allowed:
            continue
        V, N, pick, shift = item_curve(items.build(gi), frozenset(grp & forced), frozenset(grp & allowed), items.g, optimistic=True)
        curves.append((V, N, pick))
        shifts += shift
    U = int(math.floor((H - shifts) / items.g + 1e-9))
    if U < 0:
        return None
    got = knapsack(curves, U, expired)
    return None if got is None else got[0]


def _points(opts: list[Option], optional: bool) -> tuple[np.ndarray, np.ndarray]:
    """An item's (mips, importance) points for the bound: its options' curve points, and (0, 0)
    for an optional item. With exact minima each point moves left by one own unit per PE (not below
    the minimum): a continuous allocation rounded up to the grid exceeds itself by less than that."""
    xs, vs = [np.zeros(1)] if optional else [], [np.zeros(1)] if optional else []
    for o in opts:
        slack = o.n_pes * o.unit if o.exact_min else 0.0
        xs.append(np.maximum(o.base + np.arange(len(o.values), dtype=float) * o.unit - slack, o.base))
        vs.append(o.values.astype(float))
    return np.concatenate(xs), np.concatenate(vs)


def _merge(X: np.ndarray, V: np.ndarray, ID: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """At most MAX_BOUND_POINTS points: per item, buckets of consecutive points sorted by mips
    become one point (the bucket's least mips, its greatest importance): an upper relaxation."""
    order = np.lexsort((X, ID))
    X, V, ID = X[order], V[order], ID[order]
    if len(X) <= MAX_BOUND_POINTS:
        return X, V, ID
    b = math.ceil(len(X) / MAX_BOUND_POINTS)
    starts = np.r_[0, np.nonzero(np.diff(ID))[0] + 1]
    pos = np.arange(len(X)) - np.repeat(starts, np.diff(np.r_[starts, len(X)]))
    key = ID.astype(np.int64) * (len(X) + 1) + pos // b
    heads = np.r_[0, np.nonzero(np.diff(key))[0] + 1]
    return X[heads], np.maximum.reduceat(V, heads), ID[heads]


def timer(deadline: float) -> Callable[[], bool]:
    return lambda: time.monotonic() > deadline


def polish(scenario: Scenario, choice: dict[str, str], goals: dict[str, float], H: float, expired: Callable[[], bool],
           max_pes: int = 1000) -> tuple[dict[str, float], float | None]:
    """What a grid leaves over (less than one unit of some grid), given to single PEs in exact mips
    while it buys importance: each round tries every unsaturated PE with all of it (capped at its
    maximum and saturation). Returns the goals and their importance (None: nothing was tried)."""
    ev = Evaluator(scenario.glued(choice))
    if not ev.pes or len(ev.pes) > max_pes:
        return goals, None
    x = np.array([goals[p] for p in ev.pes], dtype=float)
    specs = [ev.glued.spec(p) for p in ev.pes]
    cap = np.minimum(np.array([s.max_mips for s in specs], dtype=float), ev.saturation())
    room = np.maximum(cap - x, 0.0)
    cur = float(ev.importance(x[None, :])[0])
    free = H - float(x.sum())
    for _ in range(8):
        cand = np.nonzero(room > 1e-9)[0]
        if free <= 1e-6 or not len(cand) or expired():
            break
        add = np.minimum(room[cand], free)
        rows = np.repeat(x[None, :], len(cand), axis=0)
        rows[np.arange(len(cand)), cand] += add
        vals = ev.importance(rows)
        j = int(np.argmax(vals))
        if vals[j] <= cur + 1e-12 * (1.0 + abs(cur)):
            break
        x, cur = rows[j], float(vals[j])
        free -= float(add[j])
        room[cand[j]] -= float(add[j])
    return {p: float(v) for p, v in zip(ev.pes, x)}, cur
