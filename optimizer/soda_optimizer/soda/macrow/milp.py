"""TopLevelMILP (SODA paper 5.2.3.1): one rack per unit, rack capacity, rack utilisation and the
link terms of the objective, with two interchangeable solvers: :func:`_top_level_milp`
(pywraplp/SCIP, the default: better on LSD at 30 and 50 nodes) and :func:`_top_level_cpsat`
(OR-Tools CP-SAT, ``macrow.solve(..., toplevel="cpsat")``: better on LSD at 82 nodes with a 5 s
deadline, faster on DAC); and the greedy rack assignment by stream traffic, which the caller
always builds too and uses when it gives the better start (or the solver has none in time).

Departure (CP-SAT): CP-SAT needs integer coefficients, so the objective is scaled by ``CP_SCALE``
and rounded (goals are rounded up in the capacity constraint, which stays sound); it starts from
the greedy rack assignment as a hint. docs/macrow.md compares the two on LSD.
"""

from __future__ import annotations

import math

import networkx as nx
from ortools.linear_solver import pywraplp
from ortools.sat.python import cp_model

from .problem import Problem, Unit


def _top_level_milp(prob: Problem, time_limit: float, hint: dict[int, str] | None = None) -> dict[int, str] | None:
    """TopLevelMILP: one rack per unit, rack capacity, link and rack-utilisation objective.
    ``hint``: a rack assignment SCIP starts from."""
    racks = sorted(prob.topo.racks)
    if len(racks) <= 1:
        return {i: racks[0] for i in range(len(prob.units))} if racks else None
    solver = pywraplp.Solver.CreateSolver("SCIP")
    if solver is None:
        return None
    solver.SetTimeLimit(int(max(0.05, time_limit) * 1000))
    # built with the solver's low-level API (coefficients one by one): the natural API's Python
    # expressions took longer than the solve on LSD (0.7 s of 1.3 s at 30 nodes)
    inf = solver.infinity()
    pol = prob.pol
    cap = {r: sum(prob.nodes[n].mips for n in prob.topo.racks[r]) for r in racks}
    objective = solver.Objective()
    w: dict[tuple[int, str], pywraplp.Variable] = {}
    for i in range(len(prob.units)):
        ok = [r for r in racks if len(prob.rack_match(i, r)) >= prob.units[i].min_c]
        if not ok:
            return None
        one = solver.Constraint(1, 1)
        for r in ok:
            v = w[i, r] = solver.BoolVar(f"w{i}_{r}")
            one.SetCoefficient(v, 1)
            objective.SetCoefficient(v, pol.w1 * prob.units[i].goal / (cap[r] * len(racks)))
    umax = solver.NumVar(0, inf, "umax")
    objective.SetCoefficient(umax, pol.w2)
    for r in racks:
        within = solver.Constraint(-inf, cap[r])
        below_max = solver.Constraint(-inf, 0)  # load <= umax cap
        below_max.SetCoefficient(umax, -cap[r])
        for i in range(len(prob.units)):
            if (i, r) in w:
                within.SetCoefficient(w[i, r], prob.units[i].goal)
                below_max.SetCoefficient(w[i, r], prob.units[i].goal)
    links = prob.topo.links
    if links:
        bmax = solver.NumVar(0, inf, "bmax")
        objective.SetCoefficient(bmax, pol.w4)
        for e, lk in enumerate(links):
            beta = solver.Constraint(-inf, 0)  # sum t y / K_e <= bmax
            beta.SetCoefficient(bmax, -1)
            for (a, b), t in prob.traffic.items():
                y = solver.NumVar(0, 1, f"y{a}_{b}_{e}")
                for sign in (1, -1):  # y >= side_a - side_b and y >= side_b - side_a
                    ct = solver.Constraint(0, inf)
                    ct.SetCoefficient(y, 1)
                    for r in lk.below:
                        if (a, r) in w:
                            ct.SetCoefficient(w[a, r], -sign)
                        if (b, r) in w:
                            ct.SetCoefficient(w[b, r], sign)
                beta.SetCoefficient(y, t / lk.capacity)
                objective.SetCoefficient(y, pol.w3 * t / (lk.capacity * len(links)))
    objective.SetMinimization()
    if hint:
        solver.SetHint(list(w.values()), [1.0 if hint.get(i) == r else 0.0 for (i, r) in w])
    st = solver.Solve()
    if st not in (pywraplp.Solver.OPTIMAL, pywraplp.Solver.FEASIBLE):
        return None
    return {i: r for (i, r), v in w.items() if v.solution_value() > 0.5}


CP_SCALE = 100_000  # objective units per 1.0 of the paper's objective in the CP-SAT model
CP_WEIGHT_SCALE = 100  # W1-W4 times this, rounded, as integer weights
CP_WORKERS = 2  # CP-SAT's portfolio needs at least 2 workers to run its large-neighbourhood search


def _top_level_cpsat(prob: Problem, time_limit: float, hint: dict[int, str] | None = None) -> dict[int, str] | None:
    """TopLevelMILP as a CP-SAT model (the same variables and constraints as
    :func:`_top_level_milp`, integer-scaled): w(i, r) one rack per unit; rack load within capacity;
    umax >= each rack's utilisation; y(s, e) >= |side_a - side_b| marks stream s crossing link e;
    bmax >= each link's utilisation. ``hint``: a rack assignment to start from."""
    racks = sorted(prob.topo.racks)
    if len(racks) <= 1:
        return {i: racks[0] for i in range(len(prob.units))} if racks else None
    m = cp_model.CpModel()
    sc = CP_SCALE
    cap = {r: sum(prob.nodes[n].mips for n in prob.topo.racks[r]) for r in racks}
    w: dict[tuple[int, str], cp_model.IntVar] = {}
    for i in range(len(prob.units)):
        ok = [r for r in racks if len(prob.rack_match(i, r)) >= prob.units[i].min_c]
        if not ok:
            return None
        for r in ok:
            w[i, r] = m.new_bool_var(f"w{i}_{r}")
        m.add_exactly_one(w[i, r] for r in ok)
    pol = prob.pol
    ws = CP_WEIGHT_SCALE  # the weights W1-W4 as integers
    obj: list = []
    umax = m.new_int_var(0, sc * 1000, "umax")  # max rack utilisation, in 1/sc
    umax_hint = bmax_hint = 0  # the hint's values, so that the hint is complete (CP-SAT then starts from it)
    for r in racks:
        terms = [i for (i, rr) in w if rr == r]
        m.add(sum(math.ceil(prob.units[i].goal) * w[i, r] for i in terms) <= int(cap[r]))
        m.add(sum(math.ceil(prob.units[i].goal * sc) * w[i, r] for i in terms) <= umax * math.ceil(cap[r]))
        if hint:
            used = sum(math.ceil(prob.units[i].goal * sc) for i in terms if hint.get(i) == r)
            umax_hint = max(umax_hint, -(-used // math.ceil(cap[r])))
        obj.extend(round(ws * pol.w1 * prob.units[i].goal * sc / (cap[r] * len(racks))) * w[i, r] for i in terms)
    obj.append(round(ws * pol.w2) * umax)
    links = prob.topo.links
    if links:
        bmax = m.new_int_var(0, sc * 10**6, "bmax")  # max link utilisation, in 1/sc
        for e, lk in enumerate(links):
            flows = []
            crossing: list[bool] = []
            for (a, b), t in prob.traffic.items():
                side_a = [w[a, r] for r in lk.below if (a, r) in w]
                side_b = [w[b, r] for r in lk.below if (b, r) in w]
                if not side_a and not side_b:
                    continue
                y = m.new_bool_var(f"y{a}_{b}_{e}")
                m.add(y >= sum(side_a) - sum(side_b))
                m.add(y >= sum(side_b) - sum(side_a))
                flows.append((t * sc / lk.capacity, y))
                h = hint or {}
                crossing.append((h.get(a) in lk.below) != (h.get(b) in lk.below))
                if hint:
                    m.add_hint(y, crossing[-1])
            if flows:
                m.add(sum(math.ceil(c) * y for c, y in flows) <= bmax)
                if hint:
                    bmax_hint = max(bmax_hint, sum(math.ceil(c) for (c, _), cross in zip(flows, crossing) if cross))
                obj.extend(round(ws * pol.w3 * c / len(links)) * y for c, y in flows)
        obj.append(round(ws * pol.w4) * bmax)
        if hint:
            m.add_hint(bmax, bmax_hint)
    if hint:
        m.add_hint(umax, umax_hint)
    m.minimize(sum(obj))
    if hint:
        for (i, r), v in w.items():
            m.add_hint(v, hint.get(i) == r)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(0.05, time_limit)
    solver.parameters.num_workers = CP_WORKERS
    st = solver.solve(m)
    if st not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None
    return {i: r for (i, r), v in w.items() if solver.value(v)}


def _greedy_racks(prob: Problem) -> dict[int, str]:
    """One rack per unit, heaviest traffic first: a rack with room for the unit's goal, its previous
    rack, then the rack where most of its stream traffic already is, then the most free mips. Only
    the previous rack, the partners' racks and the freest rack can win, so only those are scored
    (at 2000 nodes x 7,370 PEs scoring every rack was 1.5M tuples)."""
    racks = sorted(prob.topo.racks)
    free = {r: sum(prob.nodes[n].mips for n in prob.topo.racks[r]) for r in racks}
    out: dict[int, str] = {}
    traffic_of = {i: sum(t for _, t in prob.neighbours[i]) for i in range(len(prob.units))}
    order = sorted(range(len(prob.units)), key=lambda i: (-traffic_of[i], -prob.units[i].goal, i))
    usable: dict[tuple, list[str]] = {}  # per (node selector, min candidates): racks with enough matching nodes
    for i in order:
        u = prob.units[i]
        prev_rack = prob.nodes[next(iter(u.prev))].rack if u.prev and next(iter(u.prev)) in prob.nodes else None
        key = (prob._sel[i], u.min_c)
        ok = usable.get(key)
        if ok is None:
            ok = usable[key] = [r for r in racks if len(prob.rack_match(i, r)) >= u.min_c] or racks
        aff: dict[str, float] = {}
        for j, t in prob.neighbours[i]:
            rj = out.get(j)
            if rj is not None:
                aff[rj] = aff.get(rj, 0.0) + t
        okset = ok if len(ok) < 16 else set(ok)
        shortlist = {r for r in aff if r in okset}
        if prev_rack in okset:
            shortlist.add(prev_rack)  # type: ignore[arg-type]
        fitting = [r for r in ok if free[r] >= u.goal]
        shortlist.add(max(fitting or ok, key=free.__getitem__))

        def score(r: str, prev_rack: str | None = prev_rack, u: Unit = u, aff: dict[str, float] = aff) -> tuple:
            return (free[r] >= u.goal, r == prev_rack, aff.get(r, 0.0), free[r], r)

        r = max(shortlist, key=score)
        out[i] = r
        free[r] -= u.goal
    return out


def _component_racks(prob: Problem) -> dict[int, str]:
    """One rack per unit, whole stream components at a time (our addition, beside the TopLevelMILP):
    the components of the units' stream graph (a job, or jobs joined by glue), largest goal first,
    each into the freest rack where all of it fits and every unit has its minimum of matching nodes
    (a longest-processing-time packing, so racks come out balanced and no stream crosses a link);
    a component that fits no rack whole is placed unit by unit, heaviest first, in the freest rack
    each can use. On LSD at 20-82 nodes this start is at or below SCIP's after its 3 s
    (docs/macrow.md), in 0.1 s."""
    racks = sorted(prob.topo.racks)
    free = {r: sum(prob.nodes[n].mips for n in prob.topo.racks[r]) for r in racks}
    g = nx.Graph()
    g.add_nodes_from(range(len(prob.units)))
    g.add_edges_from(prob.traffic)
    usable: dict[tuple, list[str]] = {}  # per (node selector, min candidates): racks with enough matching nodes

    def ok(i: int) -> list[str]:
        key = (prob._sel[i], prob.units[i].min_c)
        got = usable.get(key)
        if got is None:
            got = usable[key] = [r for r in racks if len(prob.rack_match(i, r)) >= prob.units[i].min_c] or racks
        return got

    out: dict[int, str] = {}
    comps = [sorted(c) for c in nx.connected_components(g)]
    comps.sort(key=lambda c: (-sum(prob.units[i].goal for i in c), c[0]))
    for comp in comps:
        need = sum(prob.units[i].goal for i in comp)
        allowed = set(racks).intersection(*(ok(i) for i in comp))
        fitting = [r for r in racks if r in allowed and free[r] >= need]
        if fitting:
            r = max(fitting, key=lambda r: (free[r], r))
            out.update(dict.fromkeys(comp, r))
            free[r] -= need
            continue
        for i in sorted(comp, key=lambda i: (-prob.units[i].goal, i)):
            r = max(ok(i), key=lambda r: (free[r], r))
            out[i] = r
            free[r] -= prob.units[i].goal
    return out


def _rack_objective(prob: Problem, racks_of: dict[int, str]) -> float:
    """The TopLevelMILP's objective of a rack assignment: W1 x mean rack utilisation (each unit's goal
    over its rack's mips and the rack count) + W2 x the largest + W3 x mean link utilisation + W4 x the largest."""
    pol, racks = prob.pol, sorted(prob.topo.racks)
    cap = {r: sum(prob.nodes[n].mips for n in prob.topo.racks[r]) for r in racks}
    load = dict.fromkeys(racks, 0.0)
    for i, r in racks_of.items():
        load[r] += prob.units[i].goal
    obj = pol.w1 * sum(load[r] / cap[r] for r in racks) / len(racks) + pol.w2 * max(load[r] / cap[r] for r in racks)
    links = prob.topo.links
    if links:
        beta = [0.0] * len(links)
        for (a, b), t in prob.traffic.items():
            for e in prob.topo.crossed(racks_of[a], racks_of[b]):
                beta[e] += t / links[e].capacity
        obj += pol.w3 * sum(beta) / len(links) + pol.w4 * max(beta)
    return obj


def _rack_bound(prob: Problem) -> float:
    """A lower bound of the TopLevelMILP's objective: every goal on the largest rack for the W1 term,
    the largest rack utilisation at least the overall one (W2), no stream across a link (W3, W4)."""
    racks = sorted(prob.topo.racks)
    cap = {r: sum(prob.nodes[n].mips for n in prob.topo.racks[r]) for r in racks}
    goal = sum(u.goal for u in prob.units)
    return prob.pol.w1 * goal / (max(cap.values()) * len(racks)) + prob.pol.w2 * goal / sum(cap.values())
