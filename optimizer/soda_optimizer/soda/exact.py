"""macroQ's exact step where it fits (issue 34): CP-SAT over the items' own-grid curve points at
one waterline level, in exact mips (SODA paper 5.1: the allocation across weak components, with the
rank waterline of 5.1.1 and the macroQ admission paper's rank legality).

At a waterline level ``r`` the promised required jobs and every job of better revised rank are
forced, jobs of rank ``r`` optional, worse jobs out (as :mod:`.admission`). Each item (a job, or jobs
tied by imports) takes at most one (option, curve point), exactly one when it holds a forced job;
the points' exact mips add up to at most the capacity; the objective is the importance. This is a
multiple-choice knapsack, which CP-SAT proves on hundreds of one-PE jobs in well under a second; the
knapsack of :mod:`.admission` solves the same problem with costs in whole global units.

- :func:`improve`: the anytime improvement step. CP-SAT starts from the knapsack's answer (a hint)
  and returns its best solution by the deadline; macroQ keeps it only when it is better.
- :func:`level_bound`: CP-SAT's own bound of the same model over *optimistic* points (each point
  moved left by one own unit per PE, :func:`.refine._points`): every continuous allocation of the
  level is one of its solutions, so its bound bounds the level's best importance in mips, whatever
  the grid. :func:`.refine.upper_bound` takes it when it is below the LP and knapsack bounds.

Departures, on purpose: only the points where an option's curve strictly improves are variables
(a point on a plateau is never needed: the earlier point has the same importance for fewer mips);
costs are rounded *up* to 1/``SCALE`` mips and the capacity down (a solution is always feasible
in exact mips; in the bound, costs are rounded down and the capacity up, so it stays an upper
bound); models with more than ``MAX_POINTS`` points are not built (the knapsack's answer stays).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import numpy as np
from ortools.sat.python import cp_model

from .admission import Items, Option

SCALE = 1000  # integer costs: 1/1000 mips
MAX_POINTS = 60_000  # Boolean variables of one model; beyond, it is not built
WORKERS = 2
VALUE_STEPS = 1e12  # the integer objective's resolution: the largest conceivable total, in steps
REL_GAP = 1e-7  # proven when within this share of the best bound (float objectives: an exact 0 takes long)


def _records(values: np.ndarray) -> np.ndarray:
    """Indices of the points where a nondecreasing curve strictly improves (and the first)."""
    if len(values) <= 1:
        return np.arange(len(values))
    run = np.maximum.accumulate(values)
    keep = np.r_[True, values[1:] > run[:-1] + 1e-12 * (1.0 + np.abs(run[:-1]))]
    return np.nonzero(keep)[0]


def _model(items: Items, forced: set[str], allowed: set[str], H: float, optimistic: bool,
           until: float) -> tuple[cp_model.CpModel, list[tuple[cp_model.IntVar, Option, int]], float] | None:
    """The level's model: (model, [(var, option, own point)], mips held by forced minima). None when
    it has more than MAX_POINTS points, a forced item has no option, or the time runs out."""
    m = cp_model.CpModel()
    lits: list[tuple[cp_model.IntVar, Option, int]] = []
    cap_terms, cap_coefs, obj_vars, obj_coefs = [], [], [], []
    n = 0
    for gi, grp in enumerate(items.groups):
        if not grp & allowed:
            continue
        if time.monotonic() > until:
            return None
        f, a = grp & forced, grp & allowed
        opts = [o for o in items.build(gi) if f <= o.jobs <= a]
        if f and not opts:
            return None
        mine = []
        for o in opts:
            ks = _records(o.values)
            slack = o.n_pes * o.unit if (optimistic and o.exact_min) else 0.0
            mips = np.maximum(o.base + ks * o.unit - slack, o.base) if optimistic else o.base + ks * o.unit
            ok = mips <= H + 1e-6
            ks, mips = ks[ok], mips[ok]
            n += len(ks)
            if n > MAX_POINTS:
                return None
            for k, x in zip(ks.tolist(), mips.tolist()):
                v = m.new_bool_var("")
                mine.append(v)
                lits.append((v, o, int(k)))
                cap_terms.append(v)
                cap_coefs.append(math.floor(x * SCALE + 1e-6) if optimistic else math.ceil(x * SCALE - 1e-6))
                obj_vars.append(v)
                obj_coefs.append(float(o.values[k]))
        if f:
            if not mine:
                return None
            m.add_exactly_one(mine)
        elif mine:
            m.add_at_most_one(mine)
    cap = math.ceil(H * SCALE - 1e-6) if optimistic else math.floor(H * SCALE + 1e-6)
    m.add(cp_model.LinearExpr.weighted_sum(cap_terms, cap_coefs) <= cap)
    # an integer objective (CP-SAT proves those much faster than float ones): importance x k,
    # rounded up in the bound (so it stays an upper bound), to the nearest otherwise
    top = max(obj_coefs, default=0.0)
    k = VALUE_STEPS / max(top * max(1, len(items.groups)), 1e-12)
    r = math.ceil if optimistic else round
    m.maximize(cp_model.LinearExpr.weighted_sum(obj_vars, [int(r(c * k)) for c in obj_coefs]))
    return m, lits, k


def _solver(seconds: float) -> cp_model.CpSolver:
    s = cp_model.CpSolver()
    s.parameters.max_time_in_seconds = max(0.01, seconds)
    s.parameters.num_workers = WORKERS
    s.parameters.relative_gap_limit = REL_GAP
    s.parameters.cp_model_presolve = False  # measured: with presolve, no solution within 1.5 s on 50,000 points
    return s


def points(items: Items, allowed: set[str]) -> int:
    """How many variables the model of ``items`` would have (the options already built), at most."""
    return sum(len(_records(o.values)) for gi, grp in enumerate(items.groups) if grp & allowed for o in items.options[gi])


def improve(items: Items, forced: set[str], allowed: set[str], H: float, hint: list[tuple[dict[str, str], float]],
            deadline: float) -> tuple[list[tuple[Option, int]] | None, bool]:
    """(picks, proven): CP-SAT's best (option, own point) per admitted item at this level by
    ``deadline`` (None: no model, or no solution), and whether it is proven optimal on the own
    grids. ``hint``: a known solution to start from, (choice, mips) per admitted item (each on the
    matching option's last improving point at or below those mips)."""
    built = _model(items, forced, allowed, H, False, deadline)
    if built is None or time.monotonic() > deadline:
        return None, False
    m, lits, _ = built
    want = {frozenset(c.items()): x for c, x in hint}
    best_at: dict[int, tuple[int, cp_model.IntVar]] = {}
    for v, o, k in lits:
        x = want.get(frozenset(o.choice.items()))
        if x is not None and o.mips(k) <= x + 1e-6 and (id(o) not in best_at or k > best_at[id(o)][0]):
            best_at[id(o)] = (k, v)
    if best_at:
        chosen = {id(v) for _, v in best_at.values()}
        for v, _, _ in lits:
            m.add_hint(v, id(v) in chosen)
    # CP-SAT overruns its time limit a little (more under load): it gets 90% of what is left
    solver = _solver(0.9 * (deadline - time.monotonic()) - 0.02)
    st = solver.solve(m)
    if st not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None, False
    picks = [(o, k) for v, o, k in lits if solver.boolean_value(v)]
    return picks, st == cp_model.OPTIMAL


def level_bound(items: Items, forced: set[str], allowed: set[str], H: float, expired: Callable[[], bool],
                seconds: float) -> float | None:
    """CP-SAT's upper bound of the level's best importance in mips (optimistic points; see the module
    docstring), or None when the model is not built or the time is already out."""
    if expired() or seconds <= 0:
        return None
    deadline = time.monotonic() + seconds
    built = _model(items, forced, allowed, H, True, deadline)
    if built is None or expired():
        return None
    m, _, k = built
    solver = _solver(0.9 * (deadline - time.monotonic()) - 0.02)  # as in improve: CP-SAT overruns a little
    st = solver.solve(m)
    if st == cp_model.INFEASIBLE:
        return -math.inf
    if st not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None
    return float(solver.best_objective_bound) / k
