"""BottomLevelILP as in-node packing (SODA paper 5.2.3.2, with section 7.2's stream affinity): per
rack, a CP-SAT model re-assigns the units that have one candidate node so that as much stream
traffic as possible stays inside nodes, without making the paper's objective worse.

Why: inside a rack the objective (5.2.1) sees only the node utilisations alpha_n, and with the
link terms settled by the rack choice their sum is fixed (on nodes of equal mips), so only
max alpha_n matters; which node of
the rack a PE shares with its stream partners is free. The paper reports the share of traffic kept
inside nodes (7.2, over 70% for LSD at 30 nodes) but does not put it in the objective; its
BottomLevelILPs and miniW get it from their stream-ordered greedy. Ours is explicit:

    maximise   sum over streams s = (a, b) inside the rack of  t_s y_s
    subject to y_s -> (x(a, n) -> x(b, n)) for every node n     (both ends on one node)
               sum_n x(i, n) = 1                               (one candidate node per moved unit)
               sum_i weight(i, n) x(i, n) + fixed_n <= M H_n   (alpha_n <= M, the current max)
               max PEs per node (24) and exlocation (28)

where M is the solution's current max alpha_n, so max alpha_n cannot grow; the other per-node and
global constraints (13-18, 20-23) are checked afterwards with :func:`violations`, and a rack whose
new assignment breaks one, or raises the paper's objective, keeps its old one. Streams to units
with several candidates (kept fixed) count t / |candidates| per shared node. CP-SAT starts from the
current assignment (a hint), so a time-limited solve never returns less in-node traffic. The model
is exact (every node of the rack allowed) up to ``FULL_DOMAIN`` unit x node pairs; on larger racks
a unit may go only to its own node and its stream partners' nodes, 2 hops out (a neighbourhood,
not the exact problem; measured 10x smaller and much faster to solve).

Departures: the paper's BottomLevelILP minimises the first two objective terms with fresh node
choices for every PE of the rack; this one keeps those terms bounded by the current solution and
maximises the in-node traffic, and moves only units with one candidate node (the usual case:
a PE whose candidate capacity phi g_p fits in one node).
"""

from __future__ import annotations

import math
import time

from ortools.sat.python import cp_model

from .constraints import violations
from .problem import Problem, Solution
from .search import _as_candidates

WEIGHT_SCALE = 100  # weight (mips) units per mips in the capacity constraint
TRAFFIC_RANGE = 10**6  # the heaviest stream's coefficient in the CP-SAT objective
FULL_DOMAIN = 1000  # units x nodes of a rack up to which every unit may go to every node (exact);
# beyond, a unit may go to its own node and its stream partners' nodes (2 hops): a tenth of the model
# (LSD, 30 nodes: 0.61 -> 0.98 in-node in 0.3 s, where every node reaches 0.73 in 0.6 s)
WORKERS = 2  # CP-SAT's large-neighbourhood search needs at least 2 workers


def in_node_traffic(prob: Problem, cand: list[set[str]]) -> float:
    """Stream traffic expected inside nodes: each stream's traffic times the chance that both ends
    are on one node when each end is spread evenly over its candidates."""
    out = 0.0
    for (a, b), t in prob.traffic.items():
        ca, cb = cand[a], cand[b]
        if ca and cb:
            out += t * len(ca & cb) / (len(ca) * len(cb))
    return out


def _rack_model(prob: Problem, sol: Solution, rack: str, cap_alpha: float, scale_t: float):
    """The CP-SAT model of one rack, or None when no unit of the rack can move."""
    cand = sol.cand
    racks = sol.racks
    nodes = prob.topo.racks[rack]
    in_rack = [i for i, r in enumerate(racks) if r == rack]
    movable = [i for i in in_rack if len(cand[i]) == 1 and prob.units[i].min_c <= 1]
    if len(movable) < 2:
        return None
    mov = set(movable)
    fixed_load = dict.fromkeys(nodes, 0.0)
    fixed_on: dict[str, list[int]] = {n: [] for n in nodes}
    for i in in_rack:
        if i not in mov:
            for n in cand[i]:
                fixed_load[n] += prob.weight(i, n)
                fixed_on[n].append(i)
    narrow = len(movable) * len(nodes) > FULL_DOMAIN
    m = cp_model.CpModel()
    x: dict[tuple[int, str], cp_model.IntVar] = {}
    for i in movable:
        ok = [n for n in prob.rack_match(i, rack) if prob.H(i, n) + 1e-9 >= prob.units[i].need
              and not any(j in prob.exl[i] for j in fixed_on[n])]
        if next(iter(cand[i])) not in ok:
            ok.append(next(iter(cand[i])))
        if narrow:
            # its node, the nodes of its partners and of their partners
            near = set(cand[i])
            for j, _ in prob.neighbours[i]:
                near |= cand[j]
                for h, _ in prob.neighbours[j]:
                    near |= cand[h]
            ok = [n for n in ok if n in near]
        for n in ok:
            x[i, n] = m.new_bool_var(f"x{i}_{n}")
            m.add_hint(x[i, n], n in cand[i])
        m.add_exactly_one(x[i, n] for n in ok)
    for n in nodes:
        here = [i for i in movable if (i, n) in x]
        if not here:
            continue
        terms = [(math.ceil(prob.weight(i, n) * WEIGHT_SCALE), x[i, n]) for i in here]
        now = sum(c for (c, _), i in zip(terms, here) if n in cand[i])  # keeps the hint feasible
        bound = math.floor((cap_alpha * prob.nodes[n].mips - fixed_load[n]) * WEIGHT_SCALE)
        m.add(sum(c * v for c, v in terms) <= max(now, bound))
        max_pes = prob.nodes[n].max_pes
        if max_pes is not None:
            m.add(sum(v for _, v in terms) <= max(0, max_pes - len(fixed_on[n])))
    for i in movable:
        for j in prob.exl[i]:
            if j in mov and i < j:
                for n in prob.topo.racks[rack]:
                    if (i, n) in x and (j, n) in x:
                        m.add_at_most_one(x[i, n], x[j, n])
    obj = []
    for (a, b), t in prob.traffic.items():
        coef = round(t * scale_t)
        if coef <= 0 or racks[a] != rack or racks[b] != rack:
            continue
        if a in mov and b in mov:
            y = m.new_bool_var(f"y{a}_{b}")
            for n in nodes:
                xa, xb = x.get((a, n)), x.get((b, n))
                if xa is None and xb is None:
                    continue
                if xa is None or xb is None:
                    only = xa if xb is None else xb
                    assert only is not None
                    m.add_implication(y, only.Not())
                    continue
                m.add_implication(xa, xb).only_enforce_if(y)
            m.add_hint(y, cand[a] == cand[b])
            obj.append(coef * y)
        elif a in mov or b in mov:
            i, j = (a, b) if a in mov else (b, a)
            share = coef / len(cand[j])
            obj.extend(round(share) * x[i, n] for n in cand[j] if (i, n) in x)
    if not obj:
        return None
    m.maximize(sum(obj))
    return m, x


def pack_nodes(prob: Problem, sol: Solution, deadline: float) -> tuple[Solution, str]:
    """``sol`` with the single-candidate units of each rack re-assigned to nodes for the most
    in-node stream traffic (see the module docstring), racks with the most traffic cut between
    nodes first, until ``deadline``. Never returns a solution with a worse objective or a
    violated constraint: it returns ``sol`` itself when nothing better is found."""
    if not prob.traffic or time.monotonic() >= deadline:
        return sol, "packing skipped"
    top = max(prob.traffic.values())
    scale_t = TRAFFIC_RANGE / top if top > 0 else 0.0
    cap_alpha = max((sol.load[n] / node.mips for n, node in prob.nodes.items()), default=0.0)
    base_obj = sol.objective()
    before = in_node_traffic(prob, sol.cand)
    # racks by the traffic between their nodes (what packing can win)
    cut: dict[str, float] = {}
    for (a, b), t in prob.traffic.items():
        ra, rb = sol.racks[a], sol.racks[b]
        if ra is not None and ra == rb and sol.cand[a] != sol.cand[b]:
            cut[ra] = cut.get(ra, 0.0) + t
    order = sorted(cut, key=lambda r: -cut[r])
    cur = sol
    steps: list[tuple[list[int], list[set[str]]]] = []  # per packed rack: the units moved, their new candidates
    for k, rack in enumerate(order):
        left = deadline - time.monotonic()
        if left <= 0.02:
            break
        built = _rack_model(prob, cur, rack, cap_alpha, scale_t)
        if built is None:
            continue
        m, x = built
        solver = cp_model.CpSolver()
        solver.parameters.max_time_in_seconds = max(0.01, (deadline - time.monotonic()) / (len(order) - k))
        solver.parameters.num_workers = WORKERS
        st = solver.solve(m)
        if st not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            continue
        tmp = list(cur.cand)
        changed = []
        for (i, n), v in x.items():
            if solver.value(v) and n not in tmp[i]:
                tmp[i] = {n}
                changed.append(i)
        if not changed:
            continue
        new = Solution(prob, tmp, cur, changed)
        if new.objective() <= base_obj + 1e-9 * max(1.0, abs(base_obj)) and in_node_traffic(prob, tmp) > in_node_traffic(prob, cur.cand):
            cur = new
            steps.append((changed, [tmp[i] for i in changed]))
    if not steps:
        return sol, "packing found nothing better"
    if violations(prob, _as_candidates(prob, cur)):
        # a constraint the model does not hold (13-18, 20-23) broke: keep only the racks that pass
        cur = sol
        for changed, new_c in steps:
            tmp = list(cur.cand)
            for i, c in zip(changed, new_c):
                tmp[i] = c
            trial = Solution(prob, tmp, cur, changed)
            if not violations(prob, _as_candidates(prob, trial)) and trial.objective() <= base_obj + 1e-9 * max(1.0, abs(base_obj)):
                cur = trial
        if cur is sol:
            return sol, "packing broke a constraint in every rack: kept the search's solution"
    tot = sum(prob.traffic.values())
    return cur, f"packing: in-node traffic {before / tot:.2f} -> {in_node_traffic(prob, cur.cand) / tot:.2f}"
