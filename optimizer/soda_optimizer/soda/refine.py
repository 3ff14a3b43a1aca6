"""What macroQ does with an answer of the knapsack, in exact mips (issue 34): give back the capacity
that whole global units left unused, and bound how far the answer may be from the best.

- :func:`fill`: the knapsack charges an optional job whole global units, and an item gets its best
  own-grid point at or below its units, so some capacity stays unused. ``fill`` first admits, in
  rank order (rank legality kept), jobs not admitted whose exact minimum fits what is free, then
  gives what is still free to the admitted jobs' next points on their own grids (best importance per
  mips first). It also tries the growth alone and keeps the better (importance, then jobs): it
  never lowers the knapsack's answer, and no job whose minimum fits the free capacity is left out
  when admitting it costs nothing. :func:`polish` then gives what no grid point can use (less than
  a unit) to single PEs in exact mips, and :func:`admit_freed` admits, at their minimum, jobs
  that fit what the knee (:mod:`.knee`) frees of grid points past a PE's saturation.
- :func:`upper_bound`: the Lagrangian dual of the allocation over the options' curves, one budget
  constraint per waterline level: ``L(lam) = lam H + sum_items max_points (ID - lam x)`` is at
  least the best importance for every ``lam >= 0`` (weak duality), and its minimum over ``lam``
  equals the LP relaxation over the curves' concave envelopes (the minimum is found by scipy's
  bounded scalar search; any ``lam`` gives a valid bound, so an inexact search only loosens it).
  An option's curve is the max-plus convolution of its components', so its term splits into one
  per component (:func:`_level_lp`). With the automatic resolution (exact minima, each job on its
  own grid) a component's points are moved left by one own step per PE (a continuous allocation
  rounded up to the grid exceeds itself by less than that), so the bound holds for continuous
  allocations, any grid; with a fixed unit it bounds that grid's problem. Issue 34: that slack
  (one 10-mips unit per job) made the bound 2% loose on hundreds of small jobs; a one-PE
  component whose importance is provably concave (:func:`_concave_points`) is given the exact
  breakpoints of its continuous function instead, with no slack. It is *proven* when every point
  is exact (enumerated or those breakpoints, not greedy). Per level the bound is the lesser of
  this LP bound, :func:`relaxed_knapsack` (non-concave curves, a step in importance, make the LP
  loose) and, where the model fits and time is left, CP-SAT's own bound of the same optimistic
  points in exact mips (:mod:`.exact`; no global-unit rounding); those two only over curves that
  are their grid's optimum and not coarse (a greedy, cut or coarse curve understates, and so
  would they).
- :func:`lagrange`: the primal side of the same LP: at the least price whose best points fit,
  those points (a few numpy passes; on concave curves the LP optimum less one item's fraction),
  the exact step's starting point.

About 530 lines: the give-back and the bound share the items' options and their points (the
LP's primal side, :func:`lagrange`, is the bound's dual read the other way); splitting them would
split one relaxation over two modules.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable

import networkx as nx
import numpy as np
from scipy.optimize import minimize_scalar

from ..importance import Evaluator, value
from ..model import Scenario
from . import exact
from .admission import Expired, Items, Option, item_curve, knapsack
from .curves import Curve

MAX_BOUND_POINTS = 400_000  # beyond, curve points are merged in buckets (a looser, still valid bound)


def importance(picks: list[tuple[Option, int]]) -> float:
    return float(sum(o.values[x] for o, x in picks))


def used_mips(picks: list[tuple[Option, int]]) -> float:
    return float(sum(o.mips(x) for o, x in picks))


def fill(items: Items, picks: list[tuple[Option, int]], free_rank: dict[str, int], H: float,
         expired: Callable[[], bool], admit_all: bool = False) -> list[tuple[Option, int]]:
    """The knapsack's picks with the unused capacity given back (see the module docstring).
    ``admit_all``: admitting the jobs that fit ignores ``expired`` (the first answer: a deadline
    never costs a job that fits its place)."""
    grown = _grow(list(picks), H - used_mips(picks), expired)
    added = _admit(items, list(picks), free_rank, H, (lambda: False) if admit_all else expired)
    if len(added) == len(picks):
        return grown
    added = _grow(added, H - used_mips(added), expired)
    a, b = importance(added), importance(grown)
    tol = 1e-9 * (1.0 + abs(b))
    return added if a >= b - tol else grown


def lagrange(items: Items, forced: set[str], allowed: set[str], H: float,
             expired: Callable[[], bool], dual: list[float] | None = None) -> list[tuple[Option, int]] | None:
    """The Lagrangian (LP) rounding at one waterline level: for the least price ``lam`` at which
    every item's best point by ``importance - lam mips`` (forced items: an allowed option; optional
    ones: also nothing) fits ``H`` mips together, those points (bisection on ``lam``). Where the
    curves are concave this is the LP optimum of the concave envelopes less at most one item's
    fraction, found in a few numpy passes; :func:`fill` then gives back what it leaves. None when
    the forced minima do not fit or ``expired()``. ``dual``: gets the Lagrangian bound at the prices
    found (at least any choice of one point per item within ``H``: how far the rounding may be)."""
    xs: list[np.ndarray] = []
    vs: list[np.ndarray] = []
    ids: list[np.ndarray] = []
    opt_of: list[Option | None] = []  # per point: its option (None: nothing) and own point, as arrays
    which: list[np.ndarray] = []
    owns: list[np.ndarray] = []
    n_items = n_pts = 0
    for gi, grp in enumerate(items.groups):
        if not grp & allowed:
            continue
        if expired():
            return None
        f, a = grp & forced, grp & allowed
        opts = [o for o in items.build(gi) if f <= o.jobs <= a]
        if f and not opts:
            return None
        n0 = n_pts
        if not f:
            xs.append(np.zeros(1))
            vs.append(np.zeros(1))
            which.append(np.full(1, len(opt_of)))
            owns.append(np.zeros(1, dtype=np.int64))
            opt_of.append(None)
            n_pts += 1
        for o in opts:
            ks = exact._records(o.values)
            xs.append(o.base + ks * o.unit)
            vs.append(o.values[ks].astype(float))
            which.append(np.full(len(ks), len(opt_of)))
            owns.append(ks)
            opt_of.append(o)
            n_pts += len(ks)
        ids.append(np.full(n_pts - n0, n_items))  # this item's points (issue 49: a sum over all before was quadratic)
        n_items += 1
    if not n_items:
        return []
    X, V, ID = np.concatenate(xs), np.concatenate(vs), np.concatenate(ids)
    order = np.lexsort((X, ID))  # per item, least mips first (ties: the cheaper point)
    X, V, ID = X[order], V[order], ID[order]
    starts = np.r_[0, np.nonzero(np.diff(ID))[0] + 1]

    def choose(lam: float) -> np.ndarray:
        score = V - lam * X
        top = np.maximum.reduceat(score, starts)
        hit = score >= np.repeat(top, np.diff(np.r_[starts, len(X)])) - 1e-12 * (1.0 + np.abs(score))
        first = np.nonzero(hit)[0]
        ids = ID[first]  # nondecreasing (sorted by item): each item's first hit
        return first[np.r_[True, ids[1:] != ids[:-1]]]

    def bound(lam: float) -> float:  # L(lam): at least the best choice of one point per item within H (any lam >= 0)
        return float(lam * H + np.maximum.reduceat(V - lam * X, starts).sum())

    lo_pick = choose(0.0)
    if X[lo_pick].sum() <= H + 1e-6:
        pick = lo_pick
        if dual is not None:
            dual.append(bound(0.0))
    else:
        same = ID[1:] == ID[:-1]
        dx, dv = np.diff(X)[same], np.diff(V)[same]
        hi = 2.0 * float(max((dv[dx > 1e-12] / dx[dx > 1e-12]).max(initial=0.0), 1e-12)) + 1.0
        pick = choose(hi)
        if X[pick].sum() > H + 1e-6:
            return None
        lo = 0.0
        for _ in range(60):
            if expired():
                break
            mid = 0.5 * (lo + hi)
            p = choose(mid)
            if X[p].sum() <= H + 1e-6:
                hi, pick = mid, p
            else:
                lo = mid
        if dual is not None:
            dual.append(min(bound(lo), bound(hi)))
    W, K = np.concatenate(which)[order[pick]], np.concatenate(owns)[order[pick]]
    return [(o, int(k)) for o, k in ((opt_of[int(w)], k) for w, k in zip(W, K)) if o is not None]


def admit_freed(items: Items, picks: list[tuple[Option, int]], free_rank: dict[str, int], H: float,
                freed: float) -> list[Option]:
    """The options :func:`_admit` adds (at their minimum) when ``freed`` mips are free (what the
    knee left over; :func:`.knee.at_the_knee`)."""
    if freed <= 1e-6:
        return []
    out = _admit(items, list(picks), free_rank, H, lambda: False, free=freed)
    return [o for o, _ in out[len(picks):]]


def _admit(items: Items, picks: list[tuple[Option, int]], free_rank: dict[str, int], H: float,
           expired: Callable[[], bool], free: float | None = None) -> list[tuple[Option, int]]:
    """Admit, at their minimum and while they fit, the options of jobs not admitted, least key
    (worst revised rank, minimum, -importance) first, rank legality kept: an option is legal when
    no job left out has a better revised rank than its worst one (the other jobs of the option
    aside). Issue 49: the same choices as a scan of every option per admission, without the scan
    (it took seconds on 3,000 jobs): one-job options are legal only at the best rank left out, and
    of those only the cheapest that is still available can fit; options of several jobs (import
    groups) are few and scanned."""
    free = H - used_mips(picks) if free is None else free
    taken = {items.group_of[j] for o, _ in picks for j in o.jobs}
    admitted = {j for o, _ in picks for j in o.jobs}
    out = {j for j in free_rank if j not in admitted}
    single: dict[int, list[tuple[float, float, int, Option]]] = {}  # rank -> (minimum, -importance, group, option)
    multi: list[tuple[tuple[int, float, float], int, Option]] = []
    for gi, grp in enumerate(items.groups):
        if gi in taken or not grp & out:
            continue
        try:
            opts = items.build(gi)
        except Expired:
            continue
        for o in opts:
            if not o.jobs <= out:
                continue
            worst = max(free_rank[j] for j in o.jobs)
            if len(o.jobs) == 1:
                single.setdefault(worst, []).append((o.base, -float(o.values[0]), gi, o))
            else:
                multi.append(((worst, o.base, -float(o.values[0])), gi, o))
    for lst in single.values():
        lst.sort(key=lambda t: (t[0], t[1], t[2]))
    multi.sort(key=lambda t: (t[0], t[1]))
    at = dict.fromkeys(single, 0)  # per rank: the first entry not yet passed over
    count: dict[int, int] = {}
    for j in out:
        count[free_rank[j]] = count.get(free_rank[j], 0) + 1

    def available(gi: int, o: Option) -> bool:
        return gi not in taken and o.jobs <= out

    while out and not expired():
        r1 = min(r for r, c in count.items() if c > 0)
        best: tuple[tuple[int, float, float], int, Option] | None = None
        lst = single.get(r1, [])
        while at.get(r1, 0) < len(lst) and not available(lst[at[r1]][2], lst[at[r1]][3]):
            at[r1] += 1
        if at.get(r1, 0) < len(lst):
            base, negv, gi, o = lst[at[r1]]
            if base <= free + 1e-6:
                best = ((r1, base, negv), gi, o)
        for key, gi, o in multi:
            if best is not None and key >= best[0]:
                break
            if not available(gi, o) or o.base > free + 1e-6:
                continue
            # legal: every job left out of better rank than its worst is one of its own
            if sum(c for r, c in count.items() if r < key[0]) > sum(free_rank[j] < key[0] for j in o.jobs):
                continue
            best = (key, gi, o)
            break
        if best is None:
            break
        _, gi, o = best
        picks.append((o, 0))
        free -= o.base
        taken.add(gi)
        out -= o.jobs
        for j in o.jobs:
            count[free_rank[j]] -= 1
        count = {r: c for r, c in count.items() if c > 0}
        if not count:
            break
    return picks


def _grow(picks: list[tuple[Option, int]], free: float, expired: Callable[[], bool]) -> list[tuple[Option, int]]:
    """Greedy: the move (one option to a later own point) with the best importance per mips that
    fits what is free, until none gains. Lazy (issue 49: a scan of every pick per move took seconds
    on hundreds of jobs, so the deadline cut the first answer's give-back and left capacity idle):
    what is free only shrinks, so a pick's best ratio only falls; a heap holds each pick's last
    ratio, and the top is recomputed before it is taken (the same moves as a full scan)."""
    picks = list(picks)
    heap: list[tuple[float, int]] = []
    for i, (o, x) in enumerate(picks):
        mv = _move(o, x, free)
        if mv is not None:
            heap.append((-mv[0], i))
    heapq.heapify(heap)
    for _ in range(1_000_000):
        if free <= 0 or not heap or expired():
            break
        _, i = heapq.heappop(heap)
        o, x = picks[i]
        mv = _move(o, x, free)
        if mv is None:
            continue
        if heap and mv[0] < -heap[0][0] * (1 - 1e-12):
            heapq.heappush(heap, (-mv[0], i))  # another pick is better now
            continue
        free -= (mv[1] - x) * o.unit
        picks[i] = (o, mv[1])
        nxt = _move(o, mv[1], free)
        if nxt is not None:
            heapq.heappush(heap, (-nxt[0], i))
    return picks


def _move(o: Option, x: int, free: float) -> tuple[float, int] | None:
    """The best (importance per mips, own point) past ``x`` that fits ``free`` mips, if it gains."""
    room = int(math.floor(free / o.unit + 1e-9))
    top = min(len(o.values) - 1, x + room)
    if top <= x:
        return None
    gain = o.values[x + 1:top + 1] - o.values[x]
    ratio = gain / (np.arange(1, top - x + 1) * o.unit)
    k = int(np.argmax(ratio))
    if gain[k] <= 1e-12 * (1.0 + abs(o.values[x])) or ratio[k] <= 0:
        return None
    return float(ratio[k]), x + 1 + k


def upper_bound(items: Items, promised: set[str], free_rank: dict[str, int], H: float,
                expired: Callable[[], bool] = lambda: False, until: float | None = None,
                max_units: int | None = None, stop: Callable[[], bool] | None = None) -> tuple[float, bool]:
    """(bound, proven): at least the best importance of any rank-legal admission with these
    options over ``H`` mips (see the module docstring). Per level, the lesser of the LP bound and,
    while ``expired()`` is not, the knapsack with costs rounded down (:func:`relaxed_knapsack`) and,
    with ``until`` (a time) and a model that fits, CP-SAT's bound (:func:`.exact.level_bound`).
    ``stop``: checked before each level; raises :class:`.admission.Expired` when it says so (issue
    49: the LP over 500 fine curves took 1.8 s past a 5 s deadline under load; no bound is better
    than a late one)."""
    levels = sorted(set(free_rank.values())) or [1]
    best = 0.0 if not promised else -math.inf
    proven = True
    exact_pts: dict[tuple[int, int], tuple[np.ndarray, np.ndarray] | None] = {}  # (option, component) -> breakpoints
    for r in levels:
        if stop is not None and stop():
            raise Expired
        forced = set(promised) | {j for j, x in free_rank.items() if x < r}
        allowed = forced | {j for j, x in free_rank.items() if x == r}
        got = _level_lp(items, forced, allowed, H, exact_pts)
        if got is None:
            continue
        val, exact_level, curves_ok = got
        proven = proven and exact_level
        # only a level that could raise the bound is worth the knapsack; not over coarse curves
        # (their PEs grow in steps of several units: its optimistic points assume one), nor, when
        # the LP is proven, over curves that are not each grid's optimum up to every PE's cap (a
        # cut curve understates, and so would the knapsack); when the LP is an estimate (greedy
        # curves, a PE's maximum between grid points) the lesser estimate is kept
        if val > best and (curves_ok or not exact_level) and not expired() and not items.coarse:
            # (not on a global grid of more than ``max_units`` units: it stops only between items)
            dp = relaxed_knapsack(items, forced, allowed, H, expired) if max_units is None or H / items.g <= max_units else None
            val = min(val, dp) if dp is not None else val
            if val > best and until is not None:  # CP-SAT's bound of the same relaxation in exact mips
                cb = exact.level_bound(items, forced, allowed, H, expired, min(until - time.monotonic(), 2.0))
                val = min(val, cb * (1 + 1e-9) + 1e-9) if cb is not None else val
        best = max(best, val)
    return (best if math.isfinite(best) else 0.0), proven


def _level_lp(items: Items, forced: set[str], allowed: set[str], H: float,
              exact_pts: dict[tuple[int, int], tuple[np.ndarray, np.ndarray] | None]) -> tuple[float, bool, bool] | None:
    """(LP bound, every point exact, every curve its grid's optimum) of one waterline level, or
    None when its forced minima do not
    fit. The Lagrangian is separable over an option's components (its curve is their max-plus
    convolution): ``L(lam) = lam H + sum_items max(0 if optional, max_options sum_components
    max_points (v - lam x))``. A component's points are its own-grid points moved left by one own
    unit per PE, or, for a one-PE component whose importance is provably concave, the exact
    breakpoints of that continuous function (:func:`_concave_points`: no grid slack at all)."""
    cx: list[np.ndarray] = []  # per component: points
    cv: list[np.ndarray] = []
    opt_of_comp: list[int] = []  # component -> option (running index)
    item_of_opt: list[int] = []  # option -> item
    base_forced = 0.0
    exact_level = True  # every point used is exact (the LP is proven)
    curves_ok = True  # every curve is its grid's optimum (the knapsacks over them bound too)
    n_items = 0
    for gi, grp in enumerate(items.groups):
        if not grp & allowed:
            continue
        f, a = grp & forced, grp & allowed
        opts = [o for o in items.build(gi) if f <= o.jobs <= a]
        if f and not opts:
            return None
        if not f:  # nothing: one option, one component, the point (0, 0)
            cx.append(np.zeros(1))
            cv.append(np.zeros(1))
            opt_of_comp.append(len(item_of_opt))
            item_of_opt.append(n_items)
        least = math.inf
        for o in opts:
            lo = 0.0
            for ci, c in enumerate(o.curves):
                key = (id(o), ci)
                if key not in exact_pts:
                    exact_pts[key] = _concave_points(items, o, c, H)
                pts = exact_pts[key]
                curves_ok = curves_ok and c.exact and c.complete and c.ceiling is None
                if pts is None:
                    # a PE's maximum between grid points: the ceiling raises the last point, but
                    # an allocation with that PE past its grid and the others low is not covered
                    exact_level = exact_level and c.exact and c.complete and c.ceiling is None
                    pts = _shifted(o, c, items._step(c.unit, len(c.pes)))
                cx.append(pts[0])
                cv.append(pts[1])
                lo += float(pts[0].min())
                opt_of_comp.append(len(item_of_opt))
            item_of_opt.append(n_items)
            least = min(least, lo)
        if f:
            base_forced += least
        n_items += 1
    if base_forced > H + 1e-6:
        return None
    if not cx:
        return 0.0, exact_level, curves_ok
    X, V = np.concatenate(cx), np.concatenate(cv)
    CID = np.repeat(np.arange(len(cx)), [len(x) for x in cx])
    X, V, CID = _merge(X, V, CID)
    # past the steepest slope between two points of a component, every one takes its least point
    same = CID[1:] == CID[:-1]
    dx, dv = np.diff(X)[same], np.diff(V)[same]
    steep = dv[dx > 1e-12] / dx[dx > 1e-12]
    hi = 2.0 * float(max(steep.max(initial=0.0), 1e-12))
    X, V, CID = _undominated(X, V, CID)
    starts = np.r_[0, np.nonzero(np.diff(CID))[0] + 1]
    ooc = np.asarray(opt_of_comp)  # components are in option order, options in item order
    o_starts = np.r_[0, np.nonzero(np.diff(ooc))[0] + 1]
    ioo = np.asarray(item_of_opt)
    i_starts = np.r_[0, np.nonzero(np.diff(ioo))[0] + 1]

    def lagrangian(lam: float) -> float:
        per_comp = np.maximum.reduceat(V - lam * X, starts)
        per_opt = np.add.reduceat(per_comp, o_starts)
        return float(lam * H + np.maximum.reduceat(per_opt, i_starts).sum())

    res = minimize_scalar(lagrangian, bounds=(0.0, hi), method="bounded", options={"xatol": hi * 1e-9})
    return min(lagrangian(0.0), lagrangian(hi), float(res.fun)), exact_level, curves_ok


def _shifted(o: Option, c: Curve, step: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """A component's own-grid points, each moved left by one own step per PE with exact minima (not
    below its minimum): a continuous allocation rounded up to the grid exceeds itself by less. A
    coarse curve's PEs grow in ``step`` units (:func:`.curves.component_curve`), so its step is
    that many units."""
    slack = len(c.pes) * step * c.unit if o.exact_min else 0.0
    x = np.maximum(c.base_mips + np.arange(len(c.values), dtype=float) * c.unit - slack, c.base_mips)
    v = c.values.astype(float)
    if c.ceiling is not None and o.exact_min:  # a PE's maximum between grid points: past the last point, the ceiling
        v = v.copy()
        v[-1] = max(v[-1], c.ceiling)
    return x, v


def _concave_points(items: Items, o: Option, c: Curve, H: float) -> tuple[np.ndarray, np.ndarray] | None:
    """The exact breakpoints (mips, importance) of a one-PE component's continuous importance from
    its minimum up to what it can use, when that function is provably concave: no streams, output
    ``min(a m, primal)`` (concave in ``m``), every sink's value function concave and nondecreasing
    (zero, linear, capped; piecewise with nonincreasing nonnegative slopes) and weight >= 0; the
    kinks are where ``a m`` reaches the primal rate, a cap or a point. None otherwise (or with a
    fixed unit, whose problem is the grid's)."""
    if len(c.pes) != 1 or not o.exact_min:
        return None
    p = c.pes[0]
    glued = items.s.glued(o.choice)
    g = glued.graph
    if g.in_degree(p) or g.out_degree(p):
        return None
    nd = g.nodes[p]
    a, primal = float(nd["spec"].rf.a), float(nd["primal_rate"])
    kinks = [primal / a]
    for w, vf in nd["sinks"]:
        if w < 0:
            return None
        if vf.kind == "capped":
            kinks.append(float(vf.cap) / a)
        elif vf.kind == "piecewise":
            px = np.array([q[0] for q in vf.points], dtype=float)
            py = np.array([q[1] for q in vf.points], dtype=float)
            slopes = np.diff(py) / np.diff(px)
            if (slopes < 0).any() or (np.diff(slopes) > 1e-12 * (1.0 + np.abs(slopes[1:]))).any():
                return None
            kinks.extend((px / a).tolist())
    base = c.base_mips
    top = max(base, min(float(nd["spec"].max_mips), H, primal / a))
    xs = np.array(sorted({base, top} | {x for x in kinks if base < x < top}), dtype=float)
    out = np.minimum(a * xs, primal)  # as Evaluator.outputs for a PE without inputs
    return xs, sum((w * value(vf, out) for w, vf in nd["sinks"] if w > 0), np.zeros(len(xs)))


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
    same = ID[1:] == ID[:-1]
    if not np.all((ID[1:] > ID[:-1]) | (same & (X[1:] >= X[:-1]))):  # sorted already (the usual case): as is
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


def _undominated(X: np.ndarray, V: np.ndarray, ID: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The points (sorted by ``ID``, then ``X``) that no earlier point of the same ``ID`` dominates
    (at most its mips, at least its importance): ``max (V - lam X)`` per ``ID`` is the same for
    every ``lam >= 0``, to the bit (rounding is monotone). Issue 49: the first answer's coarse
    curves hold their value for hundreds of points; 99% of the bound's 240,000 points on 10x LSD
    were dominated, and the Lagrangian is evaluated some 40 times per level."""
    if len(X) < 2:
        return X, V, ID
    first = np.r_[True, ID[1:] != ID[:-1]]
    if np.all(first[1:] | (V[1:] >= V[:-1])):  # nondecreasing within each ID (the usual case): where it rises
        keep = first | np.r_[False, V[1:] > V[:-1]]
        return X[keep], V[keep], ID[keep]
    _, rank = np.unique(V, return_inverse=True)  # equal importance, equal rank
    rank = rank.astype(np.int64).ravel()
    width = int(rank.max()) + 2
    key = np.maximum.accumulate(ID.astype(np.int64) * width + rank + 1)  # within an ID: its best rank so far, + 1
    prev = np.r_[-1, key[:-1] - ID[1:].astype(np.int64) * width - 1]  # the best rank before each point, same ID (< 0: none)
    keep = np.r_[True, ID[1:] != ID[:-1]] | (prev < rank)
    return X[keep], V[keep], ID[keep]


def timer(deadline: float) -> Callable[[], bool]:
    return lambda: time.monotonic() > deadline


def polish(scenario: Scenario, choice: dict[str, str], goals: dict[str, float], H: float, expired: Callable[[], bool],
           max_pes: int = 1000, ev: Evaluator | None = None, rounds: int = 8) -> tuple[dict[str, float], float | None]:
    """What a grid leaves over (less than one unit of some grid), given to single PEs in exact mips
    while it buys importance: each round moves the unsaturated PE whose move (all that is free,
    capped at its maximum and saturation) gains most, at most ``rounds`` rounds (a round ends with
    what is left at 0 or one more PE at its cap). Returns the goals and their importance (None:
    nothing was tried).

    A PE's gain depends on its weak component only, so the first gains take one allocation per
    position within a component (row k moves the k-th PE of every component at once, each
    component's importance read apart, :meth:`.Evaluator.importance_parts`). Then a lazy greedy
    (issue 49: every round re-evaluated every PE, 36 rounds over LSD's 737 PEs were a quarter of
    its first answer): the gains wait in a priority queue; a move re-evaluates its own component
    (on that component's Evaluator); a gain computed when more was free is re-evaluated only when
    it comes first, since with nondecreasing value functions a smaller move gains no more. The
    same moves as trying each PE alone every round; with a value function that falls, every
    round does that (:func:`_polish_rounds`)."""
    ev = ev or Evaluator(scenario.glued(choice))
    if not ev.pes or len(ev.pes) > max_pes:
        return goals, None
    x = np.array([goals[p] for p in ev.pes], dtype=float)
    specs = ev.specs
    cap = np.minimum(np.array([s.max_mips for s in specs], dtype=float), ev.saturation())
    room = np.maximum(cap - x, 0.0)
    part = np.zeros(len(ev.pes), dtype=np.int64)
    pos = np.zeros(len(ev.pes), dtype=np.int64)
    comps = [sorted(ev.index[p] for p in comp) for comp in nx.weakly_connected_components(ev.graph)]
    for ci, idx in enumerate(comps):
        part[idx] = ci
        pos[idx] = np.arange(len(idx))
    rows_n = max(len(c) for c in comps)
    base = ev.importance_parts(x[None, :], part, len(comps))[0]
    free = H - float(x.sum())
    if not _monotone(ev):
        x = _polish_rounds(ev, x, room, part, pos, rows_n, base, free, expired, rounds)
        return {p: float(v) for p, v in zip(ev.pes, x)}, float(ev.importance(x[None, :])[0])
    cur = float(base.sum())
    cand = np.nonzero(room > 1e-9)[0]
    heap: list[tuple[float, int, int, float]] = []  # (-gain, PE, its component's version, the move)
    if free > 1e-6 and len(cand) and not expired():
        add = np.minimum(room[cand], free)
        rows = np.repeat(x[None, :], rows_n, axis=0)
        rows[pos[cand], cand] += add
        gain = ev.importance_parts(rows, part, len(comps))[pos[cand], part[cand]] - base[part[cand]]
        heap = [(-float(g), int(q), 0, float(a)) for g, q, a in zip(gain, cand, add)]
        heapq.heapify(heap)
    version = [0] * len(comps)
    subs: dict[int, Evaluator] = {}

    def gains(ci: int, qs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The gain of moving each PE of ``qs`` (of component ``ci``) by all it can take, now."""
        if ci not in subs:
            subs[ci] = Evaluator(ev.glued, [ev.pes[i] for i in comps[ci]])
        a = np.minimum(room[qs], free)
        rows = np.repeat(x[comps[ci]][None, :], len(qs) + 1, axis=0)
        rows[np.arange(1, len(qs) + 1), pos[qs]] += a
        v = subs[ci].importance(rows)
        return v[1:] - v[0], a

    moves = 0
    while heap and moves < rounds and free > 1e-6 and not expired():
        neg, q, ver, a = heapq.heappop(heap)
        ci = int(part[q])
        if ver != version[ci] or room[q] <= 1e-9:
            continue  # a move in its component re-queued it
        if a != min(room[q], free):  # computed when more was free: an upper bound, re-evaluated
            g, a_now = gains(ci, np.array([q]))
            heapq.heappush(heap, (-float(g[0]), q, ver, float(a_now[0])))
            continue
        if -neg <= 1e-12 * (1.0 + abs(cur)):
            break  # the best gain, and every other is at most its upper bound
        x[q] += a
        free -= a
        room[q] -= a
        cur -= neg
        moves += 1
        version[ci] += 1
        qs = np.array([i for i in comps[ci] if room[i] > 1e-9], dtype=np.int64)
        if len(qs) and free > 1e-6:
            g, a_now = gains(ci, qs)
            for gi, qi, ai in zip(g.tolist(), qs.tolist(), a_now.tolist()):
                heapq.heappush(heap, (-gi, qi, version[ci], ai))
    cur = float(ev.importance(x[None, :])[0])  # as every other answer's importance is summed
    return {p: float(v) for p, v in zip(ev.pes, x)}, cur


def _monotone(ev: Evaluator) -> bool:
    """Whether every value function of ``ev``'s graph is nondecreasing (importance then is in every
    PE's mips: a smaller move never gains more)."""
    from .saturation import nondecreasing

    g = ev.graph
    return (all(nondecreasing(d["value"]) for _, _, d in g.edges(data=True))
            and all(nondecreasing(vf) for p in ev.pes for _, vf in g.nodes[p]["sinks"]))


def _polish_rounds(ev: Evaluator, x: np.ndarray, room: np.ndarray, part: np.ndarray, pos: np.ndarray, rows_n: int,
                   base: np.ndarray, free: float, expired: Callable[[], bool], rounds: int) -> np.ndarray:
    """:func:`polish` evaluating every PE every round (a value function falls: a stale gain is no
    bound)."""
    n = len(base)
    cur = float(base.sum())
    for _ in range(max(1, rounds)):
        cand = np.nonzero(room > 1e-9)[0]
        if free <= 1e-6 or not len(cand) or expired():
            break
        add = np.minimum(room[cand], free)
        rows = np.repeat(x[None, :], rows_n, axis=0)
        rows[pos[cand], cand] += add
        parts = ev.importance_parts(rows, part, n)
        gain = parts[pos[cand], part[cand]] - base[part[cand]]
        j = int(np.argmax(gain))
        if gain[j] <= 1e-12 * (1.0 + abs(cur)):
            break
        q = int(cand[j])
        x[q] += float(add[j])
        base[part[q]] = parts[pos[q], part[q]]
        cur = float(base.sum())
        free -= float(add[j])
        room[q] -= float(add[j])
    return x
