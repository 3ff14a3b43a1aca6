"""microQ: PE mips goals that account for the candidate nodes (SODA paper section 5.3).

Input: macroQ's component importance curves (with the PE allocation at each point), macroW's
candidate nodes v(p, n), and the live node set. Steps, as in paper Fig. 12:
1. a concave piecewise-linear fit I_c of each component curve: its upper concave envelope, whose
   breakpoints eps_{r,c} and slopes sigma_{r,c} define the segments (segments of slope <= 0 are
   dropped: more mips there buy nothing);
2. pacing constraints R_{c,p,r}: within segment r the PEs of c get the mips macroQ gave them at
   the segment's left breakpoint plus a fixed share of the increment, interpolated linearly
   between the allocations at the two breakpoints;
3. the preprocessor: the "blurred" component/node problem (constraints 44-46) as a min-cost flow
   (OR-Tools SimpleMinCostFlow): source -> component arcs per segment (capacity = segment length,
   cost = -slope), component -> node arcs where some PE of the component has the node as candidate,
   node -> sink arcs of capacity H_n. Its flow gives each component's starting segment;
4. the iterative LP (OR-Tools GLOP): with each component held in its current segment, maximise
   sum_c I_c(G_c) under pacing (37), g_p = sum_n H_n f_{p,n} (38), sum_p f_{p,n} <= 1 (39) and
   m_p <= g_p <= M_p (40); a component that ends at its segment's right end moves up a segment,
   one at its left end moves down; repeat until no component moves, a segment assignment repeats,
   or the deadline passes; the best solution seen is kept.

The stage's ``objective`` is the importance of the goals it returns (the Plan's importance), never
the LP's value over the concave fit (an upper envelope, which can exceed the best importance any
plan reaches: issue 34); that value is ``MicroQResult.fitted`` and is named in the detail.

Departures: (38) gets a penalised slack (a PE whose paced goal its candidates cannot host gets
what they can host, instead of making the whole LP infeasible, e.g. right after a node failure);
the goals returned are the hosted mips sum_n H_n f_{p,n}. And the LP optimises the concave fit,
an upper envelope of the true importance: where macroQ's own goals can still be hosted by the
candidates (a max flow, :func:`hostable`) and truly yield more importance than the LP's goals, they
are kept (seen live: DAC on 9 nodes, the LP's goals gave 5,325 where macroQ's gave 5,526, and the
plain RR/RAND placements of macroQ's goals beat SODA's).
"""

from __future__ import annotations

import time

import numpy as np
from ortools.graph.python import max_flow, min_cost_flow
from ortools.linear_solver import pywraplp

from ..importance import Evaluator
from ..model import Scenario, floor_mips
from ..plan import StageReport
from .knee import at_the_knee, with_headroom
from .stages import ComponentCurve, MacroQResult, MicroQResult

PENALTY = 1e3  # per mips of slack in (38), above any importance slope per mips we expect
FLOOR_PENALTY = 1e5  # per mips a PE's hosted goal falls below its floor: floors are hosted first


def concave_fit(curve: ComponentCurve) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Upper concave envelope: breakpoints x (mips), values y, allocations (rows) at them."""
    x, y = curve.mips.astype(float), curve.importance.astype(float)
    hull: list[int] = []
    for i in range(len(x)):
        while len(hull) >= 2:
            a, b = hull[-2], hull[-1]
            if (y[b] - y[a]) * (x[i] - x[a]) <= (y[i] - y[a]) * (x[b] - x[a]) + 1e-12:
                hull.pop()
            else:
                break
        hull.append(i)
    # cut where the slope stops being positive
    keep = [hull[0]]
    for i in hull[1:]:
        if y[i] > y[keep[-1]] + 1e-12:
            keep.append(i)
        else:
            break
    idx = np.array(keep)
    return x[idx], y[idx], curve.allocation[idx]


def solve(
    scenario: Scenario,
    macroq: MacroQResult,
    candidates: dict[str, tuple[str, ...]],
    deadline_s: float | None = None,
) -> MicroQResult:
    t0 = time.monotonic()
    deadline = t0 + (deadline_s if deadline_s is not None else scenario.policy.microq_deadline_s)
    nodes = {n.name: n.mips for n in scenario.usable_nodes()}
    glued = scenario.glued(macroq.choice)
    specs = {p: glued.spec(p) for p in glued.graph.nodes}
    comps = [c for c in macroq.components if c.pes]
    fits = [concave_fit(c) for c in comps]
    if not comps:
        return MicroQResult({}, 0.0, StageReport(stage="microq", seconds=time.monotonic() - t0, status="optimal", objective=0.0))
    seg = _preprocess(comps, fits, candidates, nodes)
    best: tuple[float, dict[str, float]] | None = None
    best_score = -float("inf")
    seen: set[tuple[int, ...]] = set()
    status = "optimal"
    while True:
        key = tuple(seg)
        if key in seen:
            break
        seen.add(key)
        # GLOP first; on a numerically hard LP (tiny slopes next to the slack penalty) it may
        # give up without a status we can use, then SCIP's LP solver takes over
        floor = scenario.policy.pe_floor_mips
        sol = (_lp(comps, fits, seg, candidates, nodes, specs, floor=floor)
               or _lp(comps, fits, seg, candidates, nodes, specs, "SCIP", floor=floor))
        if sol is None:
            status = "fallback"
            break
        value, goals, G, slack = sol
        # compare with the slack penalty: a segment that forces more mips than the candidates can
        # host must not win on the fitted importance it cannot deliver
        score = value - PENALTY * slack
        if best is None or score > best_score + 1e-9:
            best, best_score = (value, goals), score
        moved = False
        for c, (x, _, _) in enumerate(fits):
            r = seg[c]
            if r + 1 < len(x) - 1 and G[c] >= x[r + 1] - 1e-6:
                seg[c] += 1
                moved = True
            elif r > 0 and G[c] <= x[r] + 1e-6:
                seg[c] -= 1
                moved = True
        if not moved:
            break
        if time.monotonic() > deadline:
            status = "deadline"
            break
    if best is None:  # LP failed: keep macroQ's goals
        goals = dict(macroq.goals)
        return MicroQResult(goals, macroq.importance, StageReport(stage="microq", seconds=time.monotonic() - t0, status="fallback", detail="LP failed; macroQ goals kept"))
    # report the importance the goals really produce (the fit is an upper envelope)
    glued = scenario.glued(macroq.choice)
    ev = Evaluator(glued)
    # a fitted curve's breakpoint past a PE's knee buys nothing: the least CPU of equal importance
    # (knee.at_the_knee), so the goals do not move with the grid the curves were built on
    best = (best[0], at_the_knee(ev, best[1], scenario.policy.pe_floor_mips))
    true_imp = float(ev.importance(np.array([[best[1].get(p, 0.0) for p in ev.pes]]))[0])
    detail = f"{len(seen)} LP iterations"
    mq = at_the_knee(ev, hosted({p: float(macroq.goals.get(p, 0.0)) for p in ev.pes}, candidates, nodes), scenario.policy.pe_floor_mips)
    mq_imp = float(ev.importance(np.array([[mq.get(p, 0.0) for p in ev.pes]]))[0])
    floors_ok = all(mq.get(p, 0.0) >= min(float(macroq.goals.get(p, 0.0)), floor_mips(specs[p], scenario.policy.pe_floor_mips)) - 1e-3
                    for p in ev.pes if p in specs)
    if floors_ok and mq_imp > true_imp * (1 + 1e-6) + 1e-9:
        short = sum(float(macroq.goals.get(p, 0.0)) - mq.get(p, 0.0) for p in ev.pes)
        detail += (f"; macroQ's goals as the candidates host them ({short:.0f} mips short) kept: they yield {mq_imp:.6g} > the LP's "
                   f"{true_imp:.6g}")
        mq, mq_imp, note = _headroom(ev, mq, mq_imp, macroq, candidates, nodes)
        detail += note
        return MicroQResult(mq, mq_imp, StageReport(stage="microq", seconds=time.monotonic() - t0, status=status,  # type: ignore
                                                    objective=mq_imp, detail=detail + f"; the LP's concave fit: {best[0]:.6g}"),
                            fitted=best[0])
    goals, true_imp, note = _headroom(ev, best[1], true_imp, macroq, candidates, nodes)
    detail += note
    return MicroQResult(
        goals,
        true_imp,
        StageReport(stage="microq", seconds=time.monotonic() - t0, status=status, objective=true_imp,  # type: ignore
                    detail=detail + f"; the LP's concave fit: {best[0]:.6g}"),
        fitted=best[0],
    )


def _headroom(ev: Evaluator, goals: dict[str, float], imp: float, macroq: MacroQResult, candidates: dict[str, tuple[str, ...]],
              nodes: dict[str, float]) -> tuple[dict[str, float], float, str]:
    """The goals with :func:`.knee.with_headroom` (unidentified saturations back toward macroQ's
    goals in the capacity left over), their importance (never lower) and a note for the detail."""
    raised = with_headroom(ev, goals, macroq.goals, candidates, nodes)
    if raised is goals:
        return goals, imp, ""
    back = sum(raised.values()) - sum(goals.values())
    imp = max(imp, float(ev.importance(np.array([[raised.get(p, 0.0) for p in ev.pes]]))[0]))
    return raised, imp, f"; {back:.0f} mips of headroom back to PEs whose saturation is not identified"


def hosted(goals: dict[str, float], candidates: dict[str, tuple[str, ...]], nodes: dict[str, float], scale: float = 1000.0) -> dict[str, float]:
    """How much of each PE's goal its candidate nodes host together: a max flow source -> PE (its
    goal) -> candidate -> node (H_n) -> sink, in 1/``scale`` mips. Equal to ``goals`` when they fit."""
    want = {p: int(g * scale) for p, g in goals.items() if g > 0}
    out = {p: 0.0 for p in goals}
    if not want:
        return out
    mf = max_flow.SimpleMaxFlow()
    pes = sorted(want)
    names = sorted(nodes)
    pi = {p: 2 + i for i, p in enumerate(pes)}
    ni = {n: 2 + len(pes) + i for i, n in enumerate(names)}
    arc = {p: mf.add_arc_with_capacity(0, pi[p], want[p]) for p in pes}
    for p in pes:
        for n in candidates.get(p, ()):
            if n in ni:
                mf.add_arc_with_capacity(pi[p], ni[n], want[p])
    for n in names:
        mf.add_arc_with_capacity(ni[n], 1, int(nodes[n] * scale))
    if mf.solve(0, 1) != mf.OPTIMAL:
        return out
    for p in pes:
        out[p] = goals[p] if mf.flow(arc[p]) >= want[p] else mf.flow(arc[p]) / scale
    return out


def _preprocess(comps, fits, candidates, nodes) -> list[int]:
    """Min-cost flow on the blurred problem (constraints 44-46): the starting segment per component."""
    smcf = min_cost_flow.SimpleMinCostFlow()
    src, sink = 0, 1
    comp_id = {c: 2 + c for c in range(len(comps))}
    node_names = sorted(nodes)
    node_id = {n: 2 + len(comps) + i for i, n in enumerate(node_names)}
    scale = 1e6 / max(1e-12, max((np.max(np.diff(y) / np.diff(x)) if len(x) > 1 else 0.0) for x, y, _ in fits) or 1.0)
    for c, (x, y, _) in enumerate(fits):
        if x[0] > 0:
            smcf.add_arc_with_capacity_and_unit_cost(src, comp_id[c], int(round(x[0])), -int(2e6))
        for r in range(len(x) - 1):
            slope = (y[r + 1] - y[r]) / (x[r + 1] - x[r])
            smcf.add_arc_with_capacity_and_unit_cost(src, comp_id[c], int(round(x[r + 1] - x[r])), -int(round(slope * scale)))
        hosts = {n for p in comps[c].pes for n in candidates.get(p, ()) if n in nodes}
        for n in hosts:
            smcf.add_arc_with_capacity_and_unit_cost(comp_id[c], node_id[n], int(nodes[n]), 0)
    for n in node_names:
        smcf.add_arc_with_capacity_and_unit_cost(node_id[n], sink, int(nodes[n]), 0)
    # max flow at min cost, by offering everything at the source and a free bypass arc
    total = int(sum(nodes.values()))
    smcf.add_arc_with_capacity_and_unit_cost(src, sink, total, 0)
    smcf.set_node_supply(src, total)
    smcf.set_node_supply(sink, -total)
    seg = [0] * len(comps)
    if smcf.solve() != smcf.OPTIMAL:
        return seg
    flow_to = np.zeros(len(comps))
    for a in range(smcf.num_arcs()):
        if smcf.tail(a) == src and smcf.head(a) != sink:
            flow_to[smcf.head(a) - 2] += smcf.flow(a)
    for c, (x, _, _) in enumerate(fits):
        r = int(np.searchsorted(x, flow_to[c], side="left")) - 1
        seg[c] = min(max(r, 0), max(len(x) - 2, 0))
    return seg


def _lp(comps, fits, seg, candidates, nodes, specs, backend: str = "GLOP", floor: float = 0.0):
    solver = pywraplp.Solver.CreateSolver(backend)
    inf = solver.infinity()
    f: dict[tuple[str, str], pywraplp.Variable] = {}
    per_node: dict[str, list] = {n: [] for n in nodes}
    obj = solver.Objective()
    G = []
    slacks: list = []
    floor_slacks: list = []
    goal_expr: dict[str, list] = {}
    for c, (curve, (x, y, A)) in enumerate(zip(comps, fits)):
        r = seg[c]
        if len(x) == 1:
            g = solver.NumVar(x[0], x[0], f"G{c}")
            slope, base_x, base_y, rate = 0.0, x[0], y[0], np.zeros(len(curve.pes))
            base_a = A[0]
        else:
            g = solver.NumVar(x[r], x[r + 1], f"G{c}")
            slope = (y[r + 1] - y[r]) / (x[r + 1] - x[r])
            base_x, base_y, base_a = x[r], y[r], A[r]
            rate = (A[r + 1] - A[r]) / (x[r + 1] - x[r])
        G.append((g, base_x, base_y, slope))
        obj.SetCoefficient(g, slope)
        for i, p in enumerate(curve.pes):
            terms = []
            for n in candidates.get(p, ()):
                if n in nodes:
                    v = solver.NumVar(0, 1, f"f_{p}_{n}")
                    f[(p, n)] = v
                    per_node[n].append(v)
                    terms.append((v, nodes[n]))
            slack = solver.NumVar(0, inf, f"s_{p}")
            slacks.append(slack)
            obj.SetCoefficient(slack, -PENALTY)
            # pacing (37) + hosting (38): sum_n H_n f + s = base_a + rate (G - base_x)
            ct = solver.Constraint(base_a[i] - rate[i] * base_x, base_a[i] - rate[i] * base_x)
            for v, h in terms:
                ct.SetCoefficient(v, h)
            ct.SetCoefficient(slack, 1.0)
            ct.SetCoefficient(g, -rate[i])
            spec = specs.get(p)
            # admitted means every PE runs: the hosted goal reaches the PE's floor (its minimum or
            # the policy's floor, as macroQ's curve gives it at its first point) before any PE's
            # goal above its floor is hosted; what the candidates cannot host of it is a slack
            # priced higher still
            want = min(floor_mips(spec, floor), float(A[0][i])) if spec is not None else 0.0
            if want > 0:
                short = solver.NumVar(0, inf, f"u_{p}")
                floor_slacks.append(short)
                obj.SetCoefficient(short, -FLOOR_PENALTY)
                cf = solver.Constraint(want, inf)
                for v, h in terms:
                    cf.SetCoefficient(v, h)
                cf.SetCoefficient(short, 1.0)
            if spec is not None and np.isfinite(spec.max_mips):
                cm = solver.Constraint(-inf, spec.max_mips)
                for v, h in terms:
                    cm.SetCoefficient(v, h)
            goal_expr[p] = terms
    for _n, vs in per_node.items():
        if vs:
            ct = solver.Constraint(0, 1)
            for v in vs:
                ct.SetCoefficient(v, 1.0)
    obj.SetMaximization()
    if solver.Solve() not in (pywraplp.Solver.OPTIMAL, pywraplp.Solver.FEASIBLE):
        return None
    Gv = [g.solution_value() for g, *_ in G]
    value = sum(by + s * (gv - bx) for (g, bx, by, s), gv in zip(G, Gv))
    goals = {p: float(sum(v.solution_value() * h for v, h in terms)) for p, terms in goal_expr.items()}
    return value, goals, Gv, sum(v.solution_value() for v in slacks) + 100 * sum(v.solution_value() for v in floor_slacks)
