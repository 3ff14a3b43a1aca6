"""A proven lower bound on eq. (2) and the optimality gap of a plan (issue 36; the paper reports no bound).

The bound is the optimum of a linear relaxation of the fluid model (Montana & Zinky, sections 2.2-2.5), solved with
OR-Tools' GLOP. Variables: y[f, a, s, e, c] >= 0, the jobs of flow f's cohort a (arrived in epoch a; -1: waiting at
time 0) that do step s at pool c during epoch e. Constraints, each implied by the simulator (:mod:`.sim`):

- capacity: sum of y * run time at (e, c) <= tau * capacity(e, c) * the map's highest throughput (a pool never
  serves more than its map allows, at any load);
- order: through any epoch, no more jobs have done step s + 1 than step s (a job does its steps in order; step
  s + 1 may follow in the same epoch); no more jobs do the first step than the cohort has;
- deadlines: the jobs doing step s in epoch e or later are at most n * G(e tau), those whose deadline is after the
  start of e (a job carried into an epoch was alive at its start; G is the cohort's survival, :mod:`.compiled`).

Objective. Let D(e) be the cohort's jobs dropped in epoch e and C(e) those completed; the alive ones at the end of
e are at most n G((e+1) tau), so the drops up to e are at least n (1 - G((e+1) tau)) - C(a..e), and all jobs not
completed are dropped by the horizon's end. With P^t(e) decreasing, Abel summation gives
sum_e P^t(e) D(e) = sum_e (P^t(e) - P^t(e+1)) * (drops up to e) (P^t(E) = 0), so

    bound = min sum_f u(f) sum_e (P^t(e) - P^t(e+1)) * max(0, n (1 - G((e+1) tau)) - C(a..e))     (last epoch: n - C)

over the constraints above. The holding term of eq. (2) is left out (it is >= 0), so the bound is a lower bound on
every plan's score; it is tight where nothing has to be held and the pools' maps are linear up to their capacity
(tests/flows/test_flows_bound.py checks both: never beaten by random plans, equal to a brute-force optimum on small
single-epoch instances). It is loose where the map's knee costs throughput below saturation (the relaxation lets
every pool run at its highest throughput) and where jobs are held. Size: one variable per (cohort, step, epoch,
allowed pool with capacity); above ``max_vars`` or past the time limit there is no bound (None), never a wrong one.
Identical flows are bounded as one (the relaxation of the group is that of its members, summed).

The solution is also turned into a plan (:func:`lp_policy`), which the planner compares with its other candidates.

Departures: the issue asks for the routing with backlog fractions as an LP/MILP over the piecewise-linear map; the
map's concave part cannot be represented exactly in a linear model whose throughput is a minimum of linear pieces
of the *total* load with utility-ordered shares, so this is its relaxation (the map's cap only); no MILP.
"""

from __future__ import annotations

import time
from typing import Any

from ortools.linear_solver import pywraplp
from pydantic import BaseModel, ConfigDict

from .compiled import Compiled, survival


class Bound(BaseModel):
    """A lower bound on eq. (2) for a problem, and what it cost."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    value: float  #: no plan scores below this (eq. (2), lower is better)
    #: the relaxation's solution for the fresh cohorts: (flow, cohort) -> per step, per epoch from the cohort's,
    #: the (pool, jobs) served there (what :func:`lp_policy` turns into a plan)
    served: dict[tuple[int, int], list[list[list[tuple[int, float]]]]] = {}
    variables: int
    constraints: int
    solve_s: float


def cohorts(cp: Compiled) -> list[tuple[int, int, float, int, int | None]]:
    """(flow, cohort, jobs, first step, pool it waits at or None): fresh arrivals and the jobs waiting at time 0."""
    out: list[tuple[int, int, float, int, int | None]] = []
    for f in range(cp.n_flows):
        for e in range(cp.n_epochs):
            n = float(cp.rates[f, e]) * cp.tau
            if n > 0:
                out.append((f, e, n, 0, None))
    fidx, pidx = cp.problem.flow_index(), cp.problem.pool_index()
    for w in cp.problem.waiting:
        out.append((fidx[w.flow], -1, w.jobs, w.step, pidx[w.pool] if w.pool is not None else None))
    return out


def no_service_cost(cp: Compiled, f: int, a: int, n: float) -> float:
    """The bound's cost of a cohort none of whose jobs completes (the objective's constant part)."""
    E, tau = cp.n_epochs, cp.tau
    lo, hi = cp.window(f, a)
    a0 = max(a, 0)
    tot = cp.weight(E - 1) * n
    for e in range(a0, E - 1):
        tot += (cp.weight(e) - cp.weight(e + 1)) * n * (1.0 - survival((e + 1) * tau, lo, hi))
    return cp.flow_utility[f] * tot


def lp_bound(cp: Compiled, time_limit_s: float | None = None, max_vars: int = 60_000) -> Bound | None:
    """The LP bound of the module docstring (None: too large, out of time, or not solved to optimality)."""
    t0 = time.monotonic()
    E, tau = cp.n_epochs, cp.tau
    co = cohorts(cp)
    if len(co) * max(1, E // 2) > max_vars:  # at least one variable per cohort and epoch it may run in, roughly
        return None
    n_vars = 0
    for f, a, _n, first, pool in co:
        for s in range(first, cp.n_steps[f]):
            pools = (pool,) if (pool is not None and s == first) else cp.allowed[f][s]
            n_vars += sum(1 for e in range(max(a, 0), E) for c in pools if cp.caps[e, c] > 0)
    if n_vars > max_vars:
        return None
    solver = pywraplp.Solver.CreateSolver("GLOP")
    if solver is None:
        return None
    inf = solver.infinity()
    cap_rows: dict[tuple[int, int], pywraplp.Constraint] = {}
    maxthr = [pts[-1][1] for pts in cp.maps]

    def cap_row(e: int, c: int) -> pywraplp.Constraint:
        r = cap_rows.get((e, c))
        if r is None:
            r = cap_rows[(e, c)] = solver.Constraint(-inf, tau * float(cp.caps[e, c]) * maxthr[c])
        return r

    obj = solver.Objective()
    const = 0.0
    handles: list[tuple[int, int, list[list[list[pywraplp.Variable]]], list[list[list[int]]]]] = []
    for f, a, n, first, pool in co:
        if time_limit_s is not None and time.monotonic() - t0 >= time_limit_s:
            return None  # building the model took the time: no bound, rather than a late one
        lo, hi = cp.window(f, a)
        a0 = max(a, 0)
        u = cp.flow_utility[f]
        const += no_service_cost(cp, f, a, n)
        S = cp.n_steps[f]
        # ys[s - first][e - a0]: the variables of step s in epoch e (over pools)
        ys: list[list[list[pywraplp.Variable]]] = []
        pools_of: list[list[list[int]]] = []
        for s in range(first, S):
            pools = (pool,) if (pool is not None and s == first) else cp.allowed[f][s]
            row = []
            prow = []
            for e in range(a0, E):
                vs = []
                cs = []
                for c in pools:
                    if cp.caps[e, c] > 0:
                        v = solver.NumVar(0.0, inf, "")
                        cap_row(e, c).SetCoefficient(v, cp.run_time[f][s])
                        vs.append(v)
                        cs.append(c)
                row.append(vs)
                prow.append(cs)
            ys.append(row)
            pools_of.append(prow)
        if a >= 0:
            handles.append((f, a, ys, pools_of))
        # the first step: at most the cohort's jobs
        r0 = solver.Constraint(-inf, n)
        for vs in ys[0]:
            for v in vs:
                r0.SetCoefficient(v, 1.0)
        # order: cumulative step s + 1 <= cumulative step s, through every epoch
        for i in range(1, len(ys)):
            for k in range(E - a0):
                r = solver.Constraint(-inf, 0.0)
                for kk in range(k + 1):
                    for v in ys[i][kk]:
                        r.SetCoefficient(v, 1.0)
                    for v in ys[i - 1][kk]:
                        r.SetCoefficient(v, -1.0)
        # deadlines: jobs doing a step in epoch e or later were alive at e's start
        for i in range(len(ys)):
            for k in range(1 if a >= 0 else 0, E - a0):
                r = solver.Constraint(-inf, n * survival((a0 + k) * tau, lo, hi))
                for kk in range(k, E - a0):
                    for v in ys[i][kk]:
                        r.SetCoefficient(v, 1.0)
        # drops: d_e >= n (1 - G((e+1) tau)) - C(a0..e), cost u (P^t(e) - P^t(e+1)); the last epoch's part of
        # n - C is in the constant, its -C here
        last = ys[-1]
        for k in range(E - a0):
            e = a0 + k
            if e == E - 1:
                coef = -u * cp.weight(E - 1)
                for kk in range(k + 1):
                    for v in last[kk]:
                        obj.SetCoefficient(v, obj.GetCoefficient(v) + coef)
                continue
            wdiff = u * (cp.weight(e) - cp.weight(e + 1))
            need = n * (1.0 - survival((e + 1) * tau, lo, hi))
            # wdiff * max(0, need - C) = wdiff * need - wdiff * min(need, C): with m <= need, m <= C, cost -wdiff m
            m = solver.NumVar(0.0, need, "")
            r = solver.Constraint(-inf, 0.0)
            r.SetCoefficient(m, 1.0)
            for kk in range(k + 1):
                for v in last[kk]:
                    r.SetCoefficient(v, -1.0)
            obj.SetCoefficient(m, -wdiff)
            const += 0.0  # wdiff * need is in no_service_cost
    obj.SetMinimization()
    if time_limit_s is not None:
        left = time_limit_s - (time.monotonic() - t0)
        if left <= 0:
            return None
        solver.SetTimeLimit(max(1, int(left * 1000)))
    status = solver.Solve()
    if status != pywraplp.Solver.OPTIMAL:
        return None
    val = const + obj.Value()
    val -= 1e-7 * (1.0 + abs(val))  # the solver's tolerance, on the safe side
    served = {
        (f, a): [[[(c, max(0.0, v.solution_value())) for c, v in zip(cs, vs)] for cs, vs in zip(prow, row)]
                 for prow, row in zip(pools_of, ys)]
        for f, a, ys, pools_of in handles
    }
    return Bound(value=max(0.0, val), served=served, variables=solver.NumVariables(),
                 constraints=solver.NumConstraints(), solve_s=time.monotonic() - t0)


def lp_policy(cp: Compiled, bound: Bound, base: dict[tuple[int, int, int, int], Any]) -> dict[tuple[int, int, int, int], Any]:
    """The relaxation's solution as a plan (the search's LP seed): for each fresh cohort, step and epoch, the jobs
    that reach the step's decision then (done with the step before, through that epoch, less those that already did
    this step) go to each pool in the share the LP serves there, wait in backlog for what the LP serves later, and are
    refused otherwise; ``base`` (a complete plan) for everything else (the jobs waiting at time 0)."""
    out = dict(base)
    E = cp.n_epochs
    for (f, a), steps in bound.served.items():
        n = float(cp.rates[f, a]) * cp.tau
        prev_cum = [n] * (E - a)  # cumulative jobs done with the step before, through each epoch
        for s, per_epoch in enumerate(steps):
            tot = [sum(v for _, v in cell) for cell in per_epoch]
            done_before = 0.0
            cum = []
            for k, cell in enumerate(per_epoch):
                e = a + k
                avail = prev_cum[k] - done_before
                later = sum(tot[k + 1:])
                if avail > 1e-9:
                    pools = tuple(sorted((c, min(1.0, v / avail)) for c, v in cell if v > 1e-9))
                    used = sum(p for _, p in pools)
                    if used > 1.0:
                        pools = tuple((c, p / used) for c, p in pools)
                        used = 1.0
                    bl = min(1.0 - used, later / avail) if e < E - 1 else 0.0
                    out[(e, f, a, s)] = (pools, bl)
                elif (e, f, a, s) not in out:
                    out[(e, f, a, s)] = ((), 1.0 if e < E - 1 else 0.0)
                done_before += tot[k]
                cum.append(done_before)
            prev_cum = cum
    return out


def gap(score: float, bound: float) -> float:
    """(score - bound) / score: the share of a plan's score that a better plan might still save (0: optimal)."""
    if score <= 0:
        return 0.0
    return max(0.0, (score - bound) / score)


__all__ = ["Bound", "gap", "lp_bound", "lp_policy", "no_service_cost"]
