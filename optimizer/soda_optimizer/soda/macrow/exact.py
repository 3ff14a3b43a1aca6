"""macroW solved exactly on small problems (SODA paper 5.2.1, the whole model at once; our addition).

The paper splits macroW (TopLevelMILP over racks, BottomLevel per rack, miniW) because the whole
model is too large for real time on a big cluster. On a small one (a what-if of one job on a few
racks, issue 49: `kubesoda plan` of `examples/alternatives` on 8 nodes ran its heuristics for
1-1.6 s and could only say `feasible`) the whole model is small: this module states it as one
CP-SAT model and returns a solution that CP-SAT proves optimal, or None.

The model: v(p, n) for every unit (super-PE, 27) and resource-matched node (12), w(p, r) one rack
per unit (6-11) with v(p, n) <= w(p, rack of n); candidate mips >= phi_p g_p (19); min and max
candidates (25-26); the memory of the units with a candidate on a node within its memory (rigid,
as microW counts it: any candidate may hold an instance); the objective W1/N sum alpha_n + W2 max alpha_n + W3/E sum beta_e + W4 max
beta_e with alpha_n as :mod:`.problem` counts it (its departure on constraint 4) and beta_e the
traffic of the streams whose ends are on the two sides of link e.

Scope: only problems none of whose other constraints can bite (:func:`applies`: no per-node rule
14-15, 17-18, 24, 28, no licenses 13, no global risk 16, no previous candidates 20-23); the caller
checks the answer with :func:`.constraints.violations` anyway. Departure: CP-SAT needs integers, so
every coefficient is scaled (``SCALE`` objective units per 1.0) and rounded; "optimal" holds to
that rounding (at most one unit per term, well below 1e-4 of any objective the tests see), and the
answer's objective is recomputed exactly by :class:`.problem.Solution`. One CP-SAT worker: the
same answer every run.
"""

from __future__ import annotations

import math

from ortools.sat.python import cp_model

from .problem import Problem, Solution

MAX_VARS = 64  # v(p, n) variables; above, macroW.solve's heuristics (CP-SAT's proof outgrows a share of the deadline:
# 10 units x 16 identical nodes was not proven in 0.5 s; 6 x 8 in 0.05 s median, 3 x 8 (the what-if) in 0.004 s)
SCALE = 10**8  # objective units per 1.0 of the paper's objective
UTIL_SCALE = 10**5  # alpha_n and beta_e in units of 1 / UTIL_SCALE for the max terms


def applies(prob: Problem) -> bool:
    """Whether the exact model holds every constraint that can bite on ``prob``, and is small."""
    pol = prob.pol
    if prob.node_rules or pol.global_risk_limit is not None or any(prob.licenses):
        return False
    if any(u.prev for u in prob.units):
        return False  # incremental epochs keep their candidates (macroW.solve's previous-epoch start)
    return 0 < sum(len(prob.match[i]) for i in range(len(prob.units))) <= MAX_VARS


def solve(prob: Problem, time_limit: float) -> Solution | None:
    """The proven-optimal candidate sets of ``prob`` within ``time_limit`` seconds, or None (not
    proven in time, or infeasible: the caller's heuristics then say why)."""
    racks = sorted(prob.topo.racks)
    m = cp_model.CpModel()
    v: dict[tuple[int, str], cp_model.IntVar] = {}
    w: dict[tuple[int, str], cp_model.IntVar] = {}
    for i, u in enumerate(prob.units):
        for r in racks:
            nodes = prob.rack_match(i, r)
            if len(nodes) < u.min_c or sum(prob.H(i, n) for n in nodes) + 1e-6 < u.need:
                continue
            w[i, r] = m.new_bool_var(f"w{i}_{r}")
            for n in nodes:
                v[i, n] = m.new_bool_var(f"v{i}_{n}")
                m.add_implication(v[i, n], w[i, r])
            mine = [v[i, n] for n in nodes]
            # (19) in integer mips, the need rounded down by at most 1e-6 as violations() allows
            m.add(sum(round(prob.H(i, n) * 1000) * v[i, n] for n in nodes) >= math.ceil(u.need * 1000 - 1e-3) * w[i, r])
            m.add(sum(mine) >= u.min_c * w[i, r])  # (25)
            if u.max_c is not None:
                m.add(sum(mine) <= u.max_c)  # (26)
        own = [w[i, r] for r in racks if (i, r) in w]
        if not own:
            return None
        m.add_exactly_one(own)
    # memory (rigid, our addition as in microW): every candidate may hold an instance, so the units with a
    # candidate on a node fit its memory together (the heuristics spread such units by load; the optimum,
    # indifferent to where light PEs share a node, must not put two 10Gi instances on a 16Gi node)
    for n, node in prob.nodes.items():
        held = [(prob.memory[i], var) for (i, nn), var in v.items() if nn == n and prob.memory[i] > 0]
        if len(held) > 1 and math.isfinite(node.memory_bytes) and sum(mb for mb, _ in held) > node.memory_bytes:
            m.add(sum(math.ceil(mb / 2**20) * var for mb, var in held) <= int(node.memory_bytes // 2**20))
    pol = prob.pol
    obj: list = []
    n_nodes = max(1, len(prob.nodes))
    amax = m.new_int_var(0, 1000 * UTIL_SCALE, "amax")
    for n, node in prob.nodes.items():
        terms = [(i, var) for (i, nn), var in v.items() if nn == n]
        if not terms:
            continue
        m.add(sum(math.ceil(UTIL_SCALE * prob.weight(i, n) / node.mips) * var for i, var in terms) <= amax)
        obj.extend(round(SCALE * pol.w1 * prob.weight(i, n) / (node.mips * n_nodes)) * var for i, var in terms)
    obj.append(round(SCALE * pol.w2 / UTIL_SCALE) * amax)
    links = prob.topo.links
    if links:
        bmax = m.new_int_var(0, 10**6 * UTIL_SCALE, "bmax")
        for lk in links:
            flows = []
            for (a, b), t in prob.traffic.items():
                side_a = [w[a, r] for r in lk.below if (a, r) in w]
                side_b = [w[b, r] for r in lk.below if (b, r) in w]
                if not side_a and not side_b:
                    continue
                y = m.new_bool_var("")
                m.add(y >= sum(side_a) - sum(side_b))
                m.add(y >= sum(side_b) - sum(side_a))
                flows.append((t / lk.capacity, y))
            if flows:
                m.add(sum(math.ceil(UTIL_SCALE * c) * y for c, y in flows) <= bmax)
                obj.extend(round(SCALE * pol.w3 * c / len(links)) * y for c, y in flows)
        obj.append(round(SCALE * pol.w4 / UTIL_SCALE) * bmax)
    # ties: the fewest candidates (one objective unit each, 1e-8: within the rounding); a PE whose candidates weigh
    # nothing (goal 0) otherwise got any number of them
    obj.extend(v.values())
    m.minimize(sum(obj))
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(0.01, time_limit)
    solver.parameters.num_workers = 1
    if solver.solve(m) != cp_model.OPTIMAL:
        return None
    cand = [{n for (j, n), var in v.items() if j == i and solver.value(var)} for i in range(len(prob.units))]
    return Solution(prob, cand)
