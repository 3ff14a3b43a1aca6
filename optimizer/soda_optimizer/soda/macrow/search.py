"""macroW's BottomLevel and miniW (SODA paper 5.2.3.2-5.2.3.3): candidate nodes inside the chosen
rack by a constrained greedy (departure: the paper solves an ILP per rack; the greedy is exact for
the constraints and miniW improves the objective afterwards), and the local search (1-opt, rack
moves, 2-opt across links, random perturbation) with the incremental starts from the previous
epoch's candidates.

BottomLevel's greedy puts a PE on a node of its stream partners while that node stays at most at
``Problem.fill_target`` (1, or the mean alpha_n when the candidate needs exceed the capacity, as
with the default over-allocation on a loaded cluster); before, the bound was alpha_n <= 1, which on
LSD at 30 nodes (mean alpha_n 1.45) held for few nodes, so PEs went to the least-loaded node and
only 47-66% of the traffic stayed inside nodes before the packing.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator

import networkx as nx

from .constraints import node_conflicts, violations
from .problem import Problem, Solution


def _choose_nodes(prob: Problem, i: int, rack: str, cand: list[set[str]], load: dict[str, float]) -> set[str] | None:
    """BottomLevel for one unit: candidates in ``rack`` honouring every per-node constraint."""
    u = prob.units[i]
    nodes = prob.rack_match(i, rack)
    if prob.node_rules:
        # the other units on each node of the rack, in one pass over the candidates
        occ: dict[str, list[int]] = {n: [] for n in nodes}
        for j, c in enumerate(cand):
            if j != i:
                for n in c:
                    if n in occ:
                        occ[n].append(j)
        ok = [n for n in nodes if not node_conflicts(prob, n, occ[n] + [i], new=i)]
    else:
        ok = list(nodes)
    # greedy by stream traffic (paper 5.2.3.3): prefer the nodes where this PE's stream partners
    # already are, as long as the node stays within the fill target; then the least loaded
    aff = dict.fromkeys(ok, 0.0)
    for j, t in prob.neighbours[i]:
        for n in cand[j]:
            if n in aff:
                aff[n] += t / len(cand[j])

    target = prob.fill_target

    def order(n: str) -> tuple:
        fits = load[n] + prob.weight(i, n) <= target * prob.nodes[n].mips
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
    every = sorted(prob.topo.racks)
    for i in order:
        if not _place(prob, i, [racks[i], *every], cand, load):
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


def _replace(prob: Problem, cand: list[set[str]], units: list[int], rack: str,
             load_of_cand: dict[str, float] | None = None) -> list[set[str]] | None:
    """``units`` re-placed (BottomLevel greedy) inside ``rack``; None if that is infeasible.
    ``load_of_cand``: the node loads of ``cand`` when the caller has them (saves a pass over every
    unit). Candidate sets are never changed in place, so the copy is shallow."""
    tmp = list(cand)
    if load_of_cand is None:
        for i in units:
            tmp[i] = set()
        load = _loads(prob, tmp)  # once, then kept up to date as units are placed
    else:
        load = dict(load_of_cand)
        for i in units:
            for n in tmp[i]:
                load[n] -= prob.weight(i, n)
            tmp[i] = set()
    for i in units:
        c = _choose_nodes(prob, i, rack, tmp, load)
        if c is None:
            return None
        tmp[i] = c
        for n in c:
            load[n] += prob.weight(i, n)
    return tmp


def _neighbourhood(prob: Problem, cur: Solution, i: int, rng: random.Random, racks: list[str]) -> Iterator[tuple[list[set[str]], list[int]]]:
    """The moves of unit ``i``, cheapest first, generated lazily: the search takes the first that
    improves and checks its clock between moves (the rack moves re-place whole racks). Each move
    comes with the units it changes."""
    u = prob.units[i]
    ci, ri = cur.cand[i], cur.rack(i)
    # drop a candidate that fairness and the minimum count do not need
    for n in sorted(ci):
        rest = ci - {n}
        if len(rest) >= u.min_c and sum(prob.H(i, m) for m in rest) + 1e-9 >= u.need:
            tmp = list(cur.cand)
            tmp[i] = rest
            yield tmp, [i]
    # 1-opt: swap one candidate node for another of the same rack
    if ri:
        ins = [n for n in prob.rack_match(i, ri) if n not in ci]
        pairs = [(o, n) for o in sorted(ci) for n in ins]
        rng.shuffle(pairs)
        for o, n in pairs[:48]:
            tmp = list(cur.cand)
            tmp[i] = (ci - {o}) | {n}
            yield tmp, [i]
    # re-place the PE inside its own rack given everyone else's load
    if ri:
        again = _replace(prob, cur.cand, [i], ri, cur.load)
        if again is not None:
            yield again, [i]
    # single-node candidate sets anywhere (covers moves the greedy re-placement would not pick)
    if u.min_c <= 1:
        singles = [n for n in prob.match[i] if {n} != ci and prob.H(i, n) + 1e-9 >= u.need]
        rng.shuffle(singles)
        for n in singles[:16]:
            tmp = list(cur.cand)
            tmp[i] = {n}
            yield tmp, [i]
    # rack moves, and 2-opt: the PE with its heaviest stream partner
    for r in racks:
        if r != ri:
            moved = _replace(prob, cur.cand, [i], r, cur.load)
            if moved is not None:
                yield moved, [i]
                # ejection chain: the PEs left in the old rack are re-balanced after the move
                moved_sol = Solution(prob, moved, cur, [i])
                stay = [k for k, rk in enumerate(moved_sol.racks) if k != i and ri and rk == ri]
                if ri and stay:
                    reb = _replace(prob, moved, sorted(stay, key=lambda k: -prob.units[k].goal), ri, moved_sol.load)
                    if reb is not None:
                        yield reb, [i, *stay]
    for j, _t in sorted(prob.neighbours[i], key=lambda x: -x[1])[:2]:
        for r in racks:
            if r != ri or r != cur.rack(j):
                pair = _replace(prob, cur.cand, [i, j], r, cur.load)
                if pair is not None:
                    yield pair, [i, j]


def _from_previous(prob: Problem) -> Solution | None:
    """The previous epoch's candidates, when every PE has some and they satisfy every constraint."""
    if not prob.units or any(not u.prev for u in prob.units):
        return None
    sol = Solution(prob, [set(u.prev) for u in prob.units])
    if violations(prob, _as_candidates(prob, sol)):
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
    return None if violations(prob, _as_candidates(prob, sol)) else sol


def _mini_w(prob: Problem, start: Solution, deadline: float, seed: int = 0, max_stale: int = 30, min_gain: float = 0.0,
            stall_s: float | None = None, stall_gain: float = 1e-3, progress: dict | None = None) -> tuple[Solution, int]:
    """Local search from ``start``: first-improvement over the neighbourhood of each PE, PEs in
    decreasing order of the traffic they send across links; a random rack move perturbs the
    solution when a whole pass finds nothing; stops at the deadline, after ``max_stale``
    fruitless perturbations, or once ``stall_s`` seconds have passed without a move that improves
    the objective by ``stall_gain`` (relative) or more since the last such time. Returns the best
    feasible solution seen. ``progress`` ({"at": time, "obj": objective} of the last such move)
    carries the stall clock across restarts."""
    rng = random.Random(seed)
    best = start.copy()
    best_obj = best.objective()
    cur, cur_obj = best.copy(), best_obj
    moves, stale = 0, 0
    racks = sorted(prob.topo.racks)
    progress = progress if progress is not None else {}
    last_gain, ref_obj = progress.setdefault("at", time.monotonic()), progress.setdefault("obj", best_obj)

    def stalled() -> bool:
        return stall_s is not None and time.monotonic() - last_gain > stall_s

    while time.monotonic() < deadline and stale <= max_stale and not stalled():
        improved = False
        link_traffic = {i: sum(t for j, t in prob.neighbours[i] if cur.rack(j) != cur.rack(i)) for i in range(len(prob.units))}
        for i in sorted(range(len(prob.units)), key=lambda i: (-link_traffic[i], -prob.units[i].goal)):
            if time.monotonic() > deadline or stalled():
                break
            for tmp, changed in _neighbourhood(prob, cur, i, rng, racks):
                if time.monotonic() > deadline:
                    break
                moves += 1
                sol = Solution(prob, tmp, cur, changed)
                obj = sol.objective()
                if obj < cur_obj - 1e-12 - min_gain * abs(cur_obj) and not violations(prob, _as_candidates(prob, sol)):
                    cur, cur_obj, improved = sol, obj, True
                    if ref_obj - cur_obj >= stall_gain * abs(ref_obj):
                        last_gain, ref_obj = time.monotonic(), cur_obj
                        progress.update(at=last_gain, obj=ref_obj)
                    break
        if cur_obj < best_obj - 1e-12:
            best, best_obj, stale = cur.copy(), cur_obj, 0
        if not improved:
            stale += 1
            if not prob.units or min_gain > 0:
                break
            i = rng.randrange(len(prob.units))
            kick = _replace(prob, cur.cand, [i], rng.choice(racks), cur.load)
            if kick is not None:
                sol = Solution(prob, kick, cur, [i])
                if not violations(prob, _as_candidates(prob, sol)):
                    cur, cur_obj = sol, sol.objective()
    return best, moves
