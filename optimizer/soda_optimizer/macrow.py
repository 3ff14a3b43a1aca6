"""macroW: candidate nodes per PE (SODA paper section 5.2).

Minimises  W1/N sum_n alpha_n + W2 max_n alpha_n + W3/E sum_e beta_e + W4 max_e beta_e  over the
candidate-node variables v(p, n), subject to constraints 4-28: one cluster (rack) per PE (6-11),
resource matching (12: node selector and usable nodes), floating licenses (13), relative integrity
(14-15), global risk (16), Chinese-wall colours (17-18), fairness (19: candidate mips >= phi_p g_p),
incremental change against the previous candidates (20-23), max PEs per node (24), min/max
candidates (25-26), colocation (27: solved as super-PEs, as the paper suggests) and
exlocation/isolation (28).

Stages (paper 5.2.3):
1. TopLevelMILP (OR-Tools pywraplp/SCIP): one rack per (super-)PE, relaxed node choice: rack
   capacity, rack utilisation and the link terms of the objective (beta_e from y variables that
   mark the streams crossing each link). It gets a share of the deadline; if it fails or times out
   without a solution, a greedy rack assignment by stream traffic takes its place.
2. BottomLevel per rack: candidate nodes inside the chosen rack. Departure: a constrained greedy
   (previous candidates first, then least-loaded matching nodes until fairness and the minimum
   count hold, skipping nodes that would break 13-18, 24 or 28) instead of an ILP per rack: it is
   exact for the constraints, and miniW improves the objective afterwards.
3. miniW: local search on the exact problem: 1-opt (swap one candidate node for another in the
   rack), rack moves (re-place a PE in another rack), 2-opt (exchange the racks of two PEs joined
   by a stream across a link), ordered by the traffic a PE sends over links, with random
   perturbation when no move improves; runs to the deadline and keeps the best feasible solution.
   ``method="miniw"`` skips the MILP (miniW alone).

Incremental epochs (our addition; the paper states the change constraints 20-23 but not how a
solver should start): when every PE still has feasible previous candidates, miniW starts from them;
when only some have (jobs admitted since, or a PE whose nodes went away), those keep their
candidates and the others are placed along their streams around them; in both cases miniW then
moves a candidate set only for a >= 2% gain in the objective, because every move restarts PE
instances. Only when neither start is feasible is the problem solved afresh (stages 1-3).

Departure on alpha_n (constraint 4): the paper's  sum_p H_{p,n} v_{p,n} / H_n  counts every
candidate PE as if it could fill the node; we count  min(phi_p g_p, H_{p,n})  so that a light PE
weighs lightly (still linear in v).
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field

import networkx as nx
from ortools.linear_solver import pywraplp

from . import topology as topo_mod
from .graph import glue
from .model import PE, Node, Scenario
from .plan import StageReport
from .stages import MacroQResult, MacroWResult


@dataclass
class Unit:
    """A super-PE: PEs colocated together (constraint 27) share one candidate set."""

    name: str
    members: tuple[str, ...]
    goal: float
    specs: tuple[PE, ...]
    phi: float
    min_c: int
    max_c: int | None
    max_change: int | None
    prev: frozenset[str] = field(default_factory=frozenset)
    need: float = 0.0  # candidate mips required by (19)

    @property
    def single_threaded(self) -> bool:
        return any(s.single_threaded for s in self.specs)

    @property
    def isolated(self) -> bool:
        return any(s.isolated for s in self.specs)


class Problem:
    def __init__(self, scenario: Scenario, macroq: MacroQResult):
        self.s = scenario
        pol = scenario.policy
        self.pol = pol
        self.topo = topo_mod.build(scenario)
        self.nodes: dict[str, Node] = {n.name: n for n in scenario.usable_nodes()}
        glued = glue(scenario, macroq.choice)
        g = glued.graph
        uf = nx.Graph()
        uf.add_nodes_from(g.nodes)
        for job in macroq.choice:
            for a, b in scenario.job(job).colocate:
                uf.add_edge(f"{job}:{a}", f"{job}:{b}")
        self.units: list[Unit] = []
        self.unit_of: dict[str, int] = {}
        for comp in sorted(nx.connected_components(uf), key=lambda c: min(c)):
            members = tuple(sorted(comp))
            specs = tuple(g.nodes[p]["spec"] for p in members)
            goal = sum(macroq.goals.get(p, 0.0) for p in members)
            prev_sets = [frozenset(scenario.previous.candidates.get(p, ())) for p in members]
            mc = [s.max_candidates for s in specs if s.max_candidates is not None]
            mch = [s.max_change for s in specs if s.max_change is not None]
            u = Unit(
                name=members[0],
                members=members,
                goal=goal,
                specs=specs,
                phi=max([s.fairness for s in specs if s.fairness > 0] or [pol.overallocation]),
                min_c=max(s.min_candidates for s in specs),
                max_c=min(mc) if mc else None,
                max_change=min(mch) if mch else None,
                prev=prev_sets[0] if prev_sets else frozenset(),
            )
            explicit = any(s.fairness > 0 for s in specs)
            u.need = u.phi * u.goal
            if not explicit:  # the policy's default over-allocation is capped by the biggest rack
                best_rack = max((sum(self.nodes[n].mips for n in ns) for ns in self.topo.racks.values()), default=0.0)
                u.need = max(u.goal, min(u.need, best_rack))
            for p in members:
                self.unit_of[p] = len(self.units)
            self.units.append(u)
        # streams between units with their traffic
        self.traffic: dict[tuple[int, int], float] = {}
        for (a, b), t in macroq.stream_rates.items():
            ua, ub = self.unit_of.get(a), self.unit_of.get(b)
            if ua is None or ub is None or ua == ub:
                continue
            key = (min(ua, ub), max(ua, ub))
            self.traffic[key] = self.traffic.get(key, 0.0) + t
        self.neighbours: dict[int, list[tuple[int, float]]] = {i: [] for i in range(len(self.units))}
        for (ia, ib), t in self.traffic.items():
            self.neighbours[ia].append((ib, t))
            self.neighbours[ib].append((ia, t))
        # exlocation (28) between units
        self.exl: dict[int, set[int]] = {i: set() for i in range(len(self.units))}
        for job in macroq.choice:
            for a, b in scenario.job(job).exlocate:
                ua, ub = self.unit_of[f"{job}:{a}"], self.unit_of[f"{job}:{b}"]
                self.exl[ua].add(ub)
                self.exl[ub].add(ua)
        for i, u in enumerate(self.units):
            if u.isolated:
                for j in range(len(self.units)):
                    if j != i:
                        self.exl[i].add(j)
                        self.exl[j].add(i)
        # resource matching (12)
        self.match: list[list[str]] = []
        for u in self.units:
            sel: dict[str, str] = {}
            for sp in u.specs:
                sel.update(sp.node_selector)
            self.match.append([n for n, node in self.nodes.items() if all(node.labels.get(k) == v for k, v in sel.items())])
        self.integrity = [max(s.integrity for s in u.specs) for u in self.units]
        self.integrity_lo = [min(s.integrity for s in u.specs) for u in self.units]
        self.colors = [{s.color for s in u.specs if s.color} for u in self.units]
        self.risk = [sum(s.risk for s in u.specs) for u in self.units]
        self.licenses = [{lic for s in u.specs for lic in s.licenses} for u in self.units]

    def H(self, i: int, n: str) -> float:
        node = self.nodes[n]
        return min(node.mips, node.mips_per_core) if self.units[i].single_threaded else node.mips

    def weight(self, i: int, n: str) -> float:
        u = self.units[i]
        return min(u.need, self.H(i, n))


# ------------------------------------------------------------------------------------ solution


class Solution:
    def __init__(self, prob: Problem, cand: list[set[str]]):
        self.p = prob
        self.cand = cand

    def copy(self) -> Solution:
        return Solution(self.p, [set(c) for c in self.cand])

    def rack(self, i: int) -> str | None:
        c = self.cand[i]
        return self.p.nodes[next(iter(c))].rack if c else None

    def objective(self) -> float:
        p, pol = self.p, self.p.pol
        load = dict.fromkeys(p.nodes, 0.0)
        for i, c in enumerate(self.cand):
            for n in c:
                load[n] += p.weight(i, n)
        alpha = [load[n] / p.nodes[n].mips for n in p.nodes]
        racks = {i: self.rack(i) for i in range(len(self.cand))}
        beta = [0.0] * len(p.topo.links)
        for (a, b), t in p.traffic.items():
            ra, rb = racks[a], racks[b]
            if ra and rb and ra != rb:
                for e in p.topo.crossed(ra, rb):
                    beta[e] += t
        beta = [x / lk.capacity for x, lk in zip(beta, p.topo.links)]
        obj = pol.w1 * sum(alpha) / max(1, len(alpha)) + pol.w2 * max(alpha, default=0.0)
        if beta:
            obj += pol.w3 * sum(beta) / len(beta) + pol.w4 * max(beta)
        return obj


def check(scenario: Scenario, macroq: MacroQResult, candidates: dict[str, tuple[str, ...]]) -> list[str]:
    """Every constraint (4-28) a candidate assignment violates; empty when feasible."""
    prob = Problem(scenario, macroq)
    return _violations(prob, candidates)


def _violations(prob: Problem, candidates: dict[str, tuple[str, ...]]) -> list[str]:
    errs: list[str] = []
    pol = prob.pol
    per_node: dict[str, list[int]] = {}
    cand_u: list[set[str]] = []
    for i, u in enumerate(prob.units):
        sets = [frozenset(candidates.get(p, ())) for p in u.members]
        if len(set(sets)) > 1:
            errs.append(f"(27) colocated PEs {list(u.members)} have different candidate nodes")
        c = set(sets[0])
        cand_u.append(c)
        bad = c - set(prob.match[i])
        if bad:
            errs.append(f"(12) {u.name}: nodes {sorted(bad)} are not resource-matched or not usable")
        racks = {prob.nodes[n].rack for n in c if n in prob.nodes}
        if len(racks) > 1:
            errs.append(f"(6) {u.name}: candidates span racks {sorted(racks)}")
        if len(c) < u.min_c:
            errs.append(f"(25) {u.name}: {len(c)} candidates < minimum {u.min_c}")
        if u.max_c is not None and len(c) > u.max_c:
            errs.append(f"(26) {u.name}: {len(c)} candidates > maximum {u.max_c}")
        cap = sum(prob.H(i, n) for n in c if n in prob.nodes)
        if cap + 1e-6 < u.need:
            errs.append(f"(19) {u.name}: candidate mips {cap:.0f} < phi x goal {u.need:.0f}")
        if u.max_change is not None and u.prev and len(c ^ u.prev) > u.max_change:
            errs.append(f"(23) {u.name}: {len(c ^ u.prev)} candidate changes > {u.max_change}")
        for n in c:
            per_node.setdefault(n, []).append(i)
    if pol.max_candidate_change is not None:
        tot = sum(len(c ^ u.prev) for c, u in zip(cand_u, prob.units) if u.prev)
        if tot > pol.max_candidate_change:
            errs.append(f"(22) {tot} candidate changes > {pol.max_candidate_change}")
    for lic, count in pol.licenses.items():
        used = sum(len(c) for c, ls in zip(cand_u, prob.licenses) if lic in ls)
        if used > count:
            errs.append(f"(13) license {lic}: {used} tokens > {count}")
    for lic in {x for ls in prob.licenses for x in ls} - set(pol.licenses):
        errs.append(f"(13) license {lic}: no tokens configured")
    if pol.global_risk_limit is not None:
        risk = sum(prob.risk[i] * prob.nodes[n].risk for i, c in enumerate(cand_u) for n in c if n in prob.nodes)
        if risk > pol.global_risk_limit + 1e-9:
            errs.append(f"(16) global risk {risk:.2f} > {pol.global_risk_limit}")
    for n, us in per_node.items():
        node = prob.nodes.get(n)
        if node is None:
            continue
        if node.max_pes is not None and len(us) > node.max_pes:
            errs.append(f"(24) node {n}: {len(us)} PEs > {node.max_pes}")
        if node.integrity_range is not None and us:
            spread = max(prob.integrity[i] for i in us) - min(prob.integrity_lo[i] for i in us)
            if spread > node.integrity_range:
                errs.append(f"(14-15) node {n}: integrity spread {spread} > {node.integrity_range}")
        pairs = node.incompatible_colors if node.incompatible_colors is not None else pol.incompatible_colors
        cols = {c for i in us for c in prob.colors[i]}
        for a, b in pairs:
            if a in cols and b in cols:
                errs.append(f"(17-18) node {n}: incompatible colours {a} and {b}")
        for ka in us:
            for kb in us:
                if ka < kb and kb in prob.exl[ka]:
                    errs.append(f"(28) node {n}: exlocated {prob.units[ka].name} and {prob.units[kb].name}")
    return errs


# ------------------------------------------------------------------------------------ stages


def _top_level_milp(prob: Problem, time_limit: float) -> dict[int, str] | None:
    """TopLevelMILP: one rack per unit, rack capacity, link and rack-utilisation objective."""
    racks = sorted(prob.topo.racks)
    if len(racks) <= 1:
        return {i: racks[0] for i in range(len(prob.units))} if racks else None
    solver = pywraplp.Solver.CreateSolver("SCIP")
    if solver is None:
        return None
    solver.SetTimeLimit(int(max(0.05, time_limit) * 1000))
    cap = {r: sum(prob.nodes[n].mips for n in prob.topo.racks[r]) for r in racks}
    w: dict[tuple[int, str], pywraplp.Variable] = {}
    for i in range(len(prob.units)):
        ok = [r for r in racks if len([n for n in prob.match[i] if prob.nodes[n].rack == r]) >= prob.units[i].min_c]
        if not ok:
            return None
        for r in ok:
            w[i, r] = solver.BoolVar(f"w{i}_{r}")
        solver.Add(sum(w[i, r] for r in ok) == 1)
    umax = solver.NumVar(0, solver.infinity(), "umax")
    util_terms = []
    for r in racks:
        load = sum(prob.units[i].goal * w[i, r] for i in range(len(prob.units)) if (i, r) in w)
        solver.Add(load <= cap[r])
        solver.Add(load <= umax * cap[r])
        util_terms.append(load * (1.0 / cap[r]))
    links = prob.topo.links
    bmax = solver.NumVar(0, solver.infinity(), "bmax")
    beta_terms = []
    for e, lk in enumerate(links):
        flows = []
        for (a, b), t in prob.traffic.items():
            side_a = sum(w[a, r] for r in lk.below if (a, r) in w)
            side_b = sum(w[b, r] for r in lk.below if (b, r) in w)
            y = solver.NumVar(0, 1, f"y{a}_{b}_{e}")
            solver.Add(y >= side_a - side_b)
            solver.Add(y >= side_b - side_a)
            flows.append(t * y)
        beta = sum(flows) * (1.0 / lk.capacity) if flows else 0
        beta_terms.append(beta)
        if flows:
            solver.Add(beta <= bmax)
    pol = prob.pol
    obj = pol.w2 * umax + pol.w1 * sum(util_terms) * (1.0 / len(racks))
    if links:
        obj += pol.w4 * bmax + pol.w3 * sum(beta_terms) * (1.0 / len(links))
    solver.Minimize(obj)
    st = solver.Solve()
    if st not in (pywraplp.Solver.OPTIMAL, pywraplp.Solver.FEASIBLE):
        return None
    return {i: r for (i, r), v in w.items() if v.solution_value() > 0.5}


def _greedy_racks(prob: Problem) -> dict[int, str]:
    racks = sorted(prob.topo.racks)
    free = {r: sum(prob.nodes[n].mips for n in prob.topo.racks[r]) for r in racks}
    out: dict[int, str] = {}
    traffic_of = {i: sum(t for _, t in prob.neighbours[i]) for i in range(len(prob.units))}
    order = sorted(range(len(prob.units)), key=lambda i: (-traffic_of[i], -prob.units[i].goal, i))
    for i in order:
        u = prob.units[i]
        prev_rack = prob.nodes[next(iter(u.prev))].rack if u.prev and next(iter(u.prev)) in prob.nodes else None
        ok = [r for r in racks if len([n for n in prob.match[i] if prob.nodes[n].rack == r]) >= u.min_c]
        if not ok:
            ok = racks

        def score(r: str, i: int = i, prev_rack: str | None = prev_rack, u: Unit = u) -> tuple:
            aff = sum(t for j, t in prob.neighbours[i] if out.get(j) == r)
            return (free[r] >= u.goal, r == prev_rack, aff, free[r])

        r = max(ok, key=score)
        out[i] = r
        free[r] -= u.goal
    return out


def _choose_nodes(prob: Problem, i: int, rack: str, cand: list[set[str]], load: dict[str, float]) -> set[str] | None:
    """BottomLevel for one unit: candidates in ``rack`` honouring every per-node constraint."""
    u = prob.units[i]
    pol = prob.pol
    nodes = [n for n in prob.match[i] if prob.nodes[n].rack == rack]

    def allowed(n: str) -> bool:
        node = prob.nodes[n]
        others = [j for j, c in enumerate(cand) if n in c and j != i]
        if node.max_pes is not None and len(others) + 1 > node.max_pes:
            return False
        if any(j in prob.exl[i] for j in others):
            return False
        if node.integrity_range is not None and others:
            lo = min([prob.integrity_lo[j] for j in others] + [prob.integrity_lo[i]])
            hi = max([prob.integrity[j] for j in others] + [prob.integrity[i]])
            if hi - lo > node.integrity_range:
                return False
        pairs = node.incompatible_colors if node.incompatible_colors is not None else pol.incompatible_colors
        if pairs and prob.colors[i]:
            cols = {c for j in others for c in prob.colors[j]}
            for a, b in pairs:
                if (a in prob.colors[i] and b in cols) or (b in prob.colors[i] and a in cols):
                    return False
        return True

    ok = [n for n in nodes if allowed(n)]
    # greedy by stream traffic (paper 5.2.3.3): prefer the nodes where this PE's stream partners
    # already are, as long as the node stays within its capacity; then the least loaded
    aff = dict.fromkeys(ok, 0.0)
    for j, t in prob.neighbours[i]:
        for n in cand[j]:
            if n in aff:
                aff[n] += t / len(cand[j])

    def order(n: str) -> tuple:
        fits = load[n] + prob.weight(i, n) <= prob.nodes[n].mips
        return (n not in u.prev, not fits, -aff[n] if fits else 0.0, load[n] / prob.nodes[n].mips, n)

    ok.sort(key=order)
    chosen: set[str] = set()
    capsum = 0.0
    need = u.need
    for n in ok:
        if len(chosen) >= u.min_c and capsum + 1e-9 >= need:
            break
        if u.max_c is not None and len(chosen) >= u.max_c:
            break
        chosen.add(n)
        capsum += prob.H(i, n)
    if len(chosen) < u.min_c or capsum + 1e-9 < need:
        return None
    return chosen


def _stream_graph(prob: Problem) -> nx.Graph:
    """Units joined by their streams, weighted by traffic."""
    g = nx.Graph()
    g.add_nodes_from(range(len(prob.units)))
    g.add_weighted_edges_from((a, b, t) for (a, b), t in prob.traffic.items())
    return g


def _place(prob: Problem, i: int, racks: list[str], cand: list[set[str]], load: dict[str, float]) -> bool:
    """BottomLevel for unit ``i`` in the first of ``racks`` (in order, repeats ignored) where it
    fits; records its candidates in ``cand`` and their weight in ``load``."""
    for r in dict.fromkeys(racks):
        c = _choose_nodes(prob, i, r, cand, load)
        if c is not None:
            cand[i] = c
            for n in c:
                load[n] += prob.weight(i, n)
            return True
    return False


def _build(prob: Problem, racks: dict[int, str]) -> Solution | None:
    cand: list[set[str]] = [set() for _ in prob.units]
    load = dict.fromkeys(prob.nodes, 0.0)
    # place PEs along their streams (heaviest first), so partners see each other's nodes
    g = _stream_graph(prob)
    order: list[int] = []
    for comp in sorted(nx.connected_components(g), key=lambda c: -sum(prob.units[k].goal for k in c)):
        root = max(comp, key=lambda k: (sum(t for _, t in prob.neighbours[k]), -k))
        order.extend(nx.dfs_preorder_nodes(g, root))
    for i in order:
        if not _place(prob, i, [racks[i], *sorted(prob.topo.racks)], cand, load):
            return None
    return Solution(prob, cand)


def _as_candidates(prob: Problem, sol: Solution) -> dict[str, tuple[str, ...]]:
    return {p: tuple(sorted(sol.cand[i])) for i, u in enumerate(prob.units) for p in u.members}


def _loads(prob: Problem, cand: list[set[str]]) -> dict[str, float]:
    load = dict.fromkeys(prob.nodes, 0.0)
    for k, c in enumerate(cand):
        for n in c:
            load[n] += prob.weight(k, n)
    return load


def _replace(prob: Problem, cand: list[set[str]], units: list[int], rack: str) -> list[set[str]] | None:
    """``units`` re-placed (BottomLevel greedy) inside ``rack``; None if that is infeasible."""
    tmp = [set(c) for c in cand]
    for i in units:
        tmp[i] = set()
    for i in units:
        c = _choose_nodes(prob, i, rack, tmp, _loads(prob, tmp))
        if c is None:
            return None
        tmp[i] = c
    return tmp


def _neighbourhood(prob: Problem, cur: Solution, i: int, rng: random.Random, racks: list[str]) -> list[list[set[str]]]:
    u, trials = prob.units[i], []
    ci, ri = cur.cand[i], cur.rack(i)
    # drop a candidate that fairness and the minimum count do not need
    for n in sorted(ci):
        rest = ci - {n}
        if len(rest) >= u.min_c and sum(prob.H(i, m) for m in rest) + 1e-9 >= u.need:
            tmp = [set(c) for c in cur.cand]
            tmp[i] = rest
            trials.append(tmp)
    # 1-opt: swap one candidate node for another of the same rack
    if ri:
        ins = [n for n in prob.topo.racks[ri] if n not in ci and n in prob.match[i]]
        pairs = [(o, n) for o in sorted(ci) for n in ins]
        rng.shuffle(pairs)
        for o, n in pairs[:48]:
            tmp = [set(c) for c in cur.cand]
            tmp[i] = (ci - {o}) | {n}
            trials.append(tmp)
    # re-place the PE inside its own rack given everyone else's load
    if ri:
        again = _replace(prob, cur.cand, [i], ri)
        if again is not None:
            trials.append(again)
    # single-node candidate sets anywhere (covers moves the greedy re-placement would not pick)
    if u.min_c <= 1:
        singles = [n for n in prob.match[i] if {n} != ci and prob.H(i, n) + 1e-9 >= u.need]
        rng.shuffle(singles)
        for n in singles[:16]:
            tmp = [set(c) for c in cur.cand]
            tmp[i] = {n}
            trials.append(tmp)
    # rack moves, and 2-opt: the PE with its heaviest stream partner
    for r in racks:
        if r != ri:
            moved = _replace(prob, cur.cand, [i], r)
            if moved is not None:
                trials.append(moved)
                # ejection chain: the PEs left in the old rack are re-balanced after the move
                stay = [k for k in range(len(prob.units)) if k != i and ri and Solution(prob, moved).rack(k) == ri]
                if ri and stay:
                    reb = _replace(prob, moved, sorted(stay, key=lambda k: -prob.units[k].goal), ri)
                    if reb is not None:
                        trials.append(reb)
    for j, _t in sorted(prob.neighbours[i], key=lambda x: -x[1])[:2]:
        for r in racks:
            if r != ri or r != cur.rack(j):
                pair = _replace(prob, cur.cand, [i, j], r)
                if pair is not None:
                    trials.append(pair)
    return trials


def _from_previous(prob: Problem) -> Solution | None:
    """The previous epoch's candidates, when every PE has some and they satisfy every constraint."""
    if not prob.units or any(not u.prev for u in prob.units):
        return None
    sol = Solution(prob, [set(u.prev) for u in prob.units])
    if _violations(prob, _as_candidates(prob, sol)):
        return None
    return sol


def _extend_previous(prob: Problem) -> Solution | None:
    """Jobs came (or a PE lost its nodes) since the previous epoch: keep every previous candidate set
    that is still usable and large enough, and place only the other PEs, along their streams (next to
    the rack of an already placed partner, else in the rack with the most free mips). None when no PE
    has previous candidates or the result violates a constraint (the caller then solves afresh)."""
    cand: list[set[str]] = []
    for u in prob.units:
        kept = {n for n in u.prev if n in prob.nodes}
        cand.append(kept if u.prev and len(kept) >= u.min_c else set())
    if not any(cand) or all(cand):
        return None
    load = _loads(prob, cand)
    free = {r: sum(prob.nodes[n].mips for n in ns) for r, ns in prob.topo.racks.items()}
    for n, x in load.items():
        free[prob.nodes[n].rack] -= x
    g = _stream_graph(prob)
    todo = {i for i, c in enumerate(cand) if not c}
    order: list[int] = []
    for comp in sorted(nx.connected_components(g), key=lambda c: -sum(prob.units[k].goal for k in c)):
        if not comp & todo:
            continue
        # grow outwards from what is placed (or from the component's heaviest PE), by hops
        sources = {k for k in comp if k not in todo} or {max(comp, key=lambda k: (sum(t for _, t in prob.neighbours[k]), -k))}
        hops = nx.multi_source_dijkstra_path_length(g, sources, weight=lambda *_: 1)
        order.extend(sorted(comp & todo, key=lambda k: (hops.get(k, len(comp)), -prob.units[k].goal, k)))
    for i in order:
        partner_racks = sorted(((t, prob.nodes[next(iter(cand[j]))].rack) for j, t in prob.neighbours[i] if cand[j]), reverse=True)
        if not _place(prob, i, [r for _, r in partner_racks] + sorted(free, key=lambda r: -free[r]), cand, load):
            return None
        for n in cand[i]:
            free[prob.nodes[n].rack] -= prob.weight(i, n)
    sol = Solution(prob, cand)
    return None if _violations(prob, _as_candidates(prob, sol)) else sol


def _mini_w(prob: Problem, start: Solution, deadline: float, seed: int = 0, max_stale: int = 30, min_gain: float = 0.0) -> tuple[Solution, int]:
    """Local search from ``start``: first-improvement over the neighbourhood of each PE, PEs in
    decreasing order of the traffic they send across links; a random rack move perturbs the
    solution when a whole pass finds nothing; stops at the deadline or after ``max_stale``
    fruitless perturbations. Returns the best feasible solution seen."""
    rng = random.Random(seed)
    best = start.copy()
    best_obj = best.objective()
    cur, cur_obj = best.copy(), best_obj
    moves, stale = 0, 0
    racks = sorted(prob.topo.racks)
    while time.monotonic() < deadline and stale <= max_stale:
        improved = False
        link_traffic = {i: sum(t for j, t in prob.neighbours[i] if cur.rack(j) != cur.rack(i)) for i in range(len(prob.units))}
        for i in sorted(range(len(prob.units)), key=lambda i: (-link_traffic[i], -prob.units[i].goal)):
            if time.monotonic() > deadline:
                break
            for tmp in _neighbourhood(prob, cur, i, rng, racks):
                moves += 1
                sol = Solution(prob, tmp)
                obj = sol.objective()
                if obj < cur_obj - 1e-12 - min_gain * abs(cur_obj) and not _violations(prob, _as_candidates(prob, sol)):
                    cur, cur_obj, improved = sol, obj, True
                    break
        if cur_obj < best_obj - 1e-12:
            best, best_obj, stale = cur.copy(), cur_obj, 0
        if not improved:
            stale += 1
            if not prob.units or min_gain > 0:
                break
            i = rng.randrange(len(prob.units))
            kick = _replace(prob, cur.cand, [i], rng.choice(racks))
            if kick is not None:
                sol = Solution(prob, kick)
                if not _violations(prob, _as_candidates(prob, sol)):
                    cur, cur_obj = sol, sol.objective()
    return best, moves


def solve(scenario: Scenario, macroq: MacroQResult, deadline_s: float | None = None, method: str = "milp") -> MacroWResult:
    t0 = time.monotonic()
    budget = deadline_s if deadline_s is not None else scenario.policy.macrow_deadline_s
    deadline = t0 + budget
    prob = Problem(scenario, macroq)

    def report(status: str, obj: float | None, detail: str) -> StageReport:
        return StageReport(stage="macrow", seconds=time.monotonic() - t0, status=status, objective=obj, detail=detail)  # type: ignore

    if not prob.units:
        return MacroWResult({}, 0.0, report("optimal", 0.0, "nothing to place"))
    if not prob.nodes:
        return MacroWResult({}, None, report("infeasible", None, "no usable nodes"), violated="(12) no usable node")
    stage = "miniw"
    racks = None
    start = _from_previous(prob)
    stage = "previous epoch"
    if start is None:
        start = _extend_previous(prob)
        stage = "previous epoch + new PEs placed along their streams"
    min_gain = 0.0
    if start is not None:
        # miniW's initialisation from the previous epoch's solution: where it is still feasible
        # the candidates stay, and miniW moves them only for a clear (2%) gain (stability: every
        # move of a candidate set restarts PE instances); PEs that are new (jobs admitted since)
        # are placed next to their stream partners without moving the others
        min_gain = 0.02
        best, moves = _mini_w(prob, start, deadline, min_gain=min_gain)
        cands = _as_candidates(prob, best)
        return MacroWResult(cands, best.objective(), report("feasible" if time.monotonic() < deadline else "deadline", best.objective(),
                                                             f"{stage}, miniW {moves} moves"))
    if method == "milp":
        racks = _top_level_milp(prob, 0.4 * budget)
        stage = "toplevel-milp" if racks else "greedy (MILP gave no solution)"
    if racks is None:
        racks = _greedy_racks(prob)
    start = _build(prob, racks)
    if start is None and method == "milp":
        start = _build(prob, _greedy_racks(prob))
        stage += ", greedy racks"
    if start is None:
        # name the constraint: try each unit alone
        # name the constraint and the PEs that no rack can host even alone (the pipeline rejects
        # their jobs and plans the others again)
        why = "(19/25) some PE cannot get enough candidate capacity"
        alone: list[str] = []
        for i, u in enumerate(prob.units):
            if not any(_choose_nodes(prob, i, r, [set() for _ in prob.units], dict.fromkeys(prob.nodes, 0.0)) for r in prob.topo.racks):
                if not alone:
                    why = f"(12/19/25) {u.name}: no rack has {u.min_c} matching nodes with {u.need:.0f} mips"
                alone.extend(u.members)
        return MacroWResult({}, None, report("infeasible", None, why), violated=why, unplaceable=tuple(alone))
    best, moves = _mini_w(prob, start, deadline)
    for seed in range(1, 8):  # restarts with other perturbation seeds while time remains
        if time.monotonic() >= deadline:
            break
        again, m = _mini_w(prob, best, deadline, seed=seed)
        moves += m
        if again.objective() < best.objective() - 1e-12:
            best = again
    cands = _as_candidates(prob, best)
    errs = _violations(prob, cands)
    if errs:
        return MacroWResult(cands, best.objective(), report("infeasible", best.objective(), "; ".join(errs[:3])), violated=errs[0])
    status = "deadline" if time.monotonic() >= deadline else "feasible"
    return MacroWResult(cands, best.objective(), report(status, best.objective(), f"{stage}, miniW {moves} moves"))


__all__ = ["Problem", "Solution", "check", "solve"]
