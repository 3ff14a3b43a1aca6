"""macroW: candidate nodes per PE (SODA paper section 5.2).

Modules: :mod:`.problem` (units, objective), :mod:`.constraints` (4-28, one per-node legality),
:mod:`.milp` (TopLevelMILP), :mod:`.search` (BottomLevel, miniW), :mod:`.pack` (in-node packing,
the BottomLevelILP with stream affinity); :func:`solve` chains them.

Minimises  W1/N sum_n alpha_n + W2 max_n alpha_n + W3/E sum_e beta_e + W4 max_e beta_e  over the
candidate-node variables v(p, n), subject to constraints 4-28: one cluster (rack) per PE (6-11),
resource matching (12: node selector and usable nodes), floating licenses (13), relative integrity
(14-15), global risk (16), Chinese-wall colours (17-18), fairness (19: candidate mips >= phi_p g_p),
incremental change against the previous candidates (20-23), max PEs per node (24), min/max
candidates (25-26), colocation (27: solved as super-PEs, as the paper suggests) and
exlocation/isolation (28).

Small problems first (our addition, :mod:`.exact`): when the whole model is small and none of the
constraints it leaves out can bite (a fresh epoch), one CP-SAT model over every v(p, n) gets
``EXACT_SHARE`` of the deadline; an answer it proves optimal (and :func:`.constraints.violations`
passes) is packed (stage 4, which keeps the objective) and returned as ``optimal``; otherwise the
stages below run in what is left.

Stages (paper 5.2.3):
1. TopLevelMILP (OR-Tools pywraplp/SCIP by default, CP-SAT with ``toplevel="cpsat"``): one rack
   per (super-)PE, relaxed node choice: rack capacity, rack utilisation and the link terms of the
   objective (beta_e from y variables that mark the streams crossing each link). It gets
   ``TOP_SHARE`` of the deadline. The greedy rack assignment by stream traffic is always built too,
   and the better start of the two (after BottomLevel) is kept: a MILP stopped by its time limit
   was worse than the greedy on LSD at 82 nodes (3.20 vs 1.61).
2. BottomLevel per rack: candidate nodes inside the chosen rack. Departure: a constrained greedy
   (previous candidates first, then least-loaded matching nodes until fairness and the minimum
   count hold, skipping nodes that would break 13-18, 24 or 28) instead of an ILP per rack: it is
   exact for the constraints, and miniW improves the objective afterwards.
3. miniW: local search on the exact problem: 1-opt (swap one candidate node for another in the
   rack), rack moves (re-place a PE in another rack), 2-opt (exchange the racks of two PEs joined
   by a stream across a link), ordered by the traffic a PE sends over links, with random
   perturbation when no move improves, and restarts with other perturbation seeds; keeps the best
   feasible solution. ``method="miniw"`` skips the MILP (miniW alone). It runs until
   ``PACK_SHARE`` of the deadline is left (or it stalls, below).
4. In-node packing (:mod:`.pack`, our addition for the paper's 7.2 stream affinity): per rack, a
   CP-SAT model moves the single-candidate PEs between nodes for the most stream traffic inside
   nodes, with max alpha_n kept at most the current one; kept only when the objective is no worse
   and every constraint holds. ``packing=False`` skips it.

Stopping (our addition; the paper runs miniW to the deadline): miniW stops when no move has
improved the objective by ``STALL_GAIN`` (relative) within ``STALL_SHARE`` of the deadline (at
least ``STALL_MIN_S``), the stall clock runs across the
restarts, which also stop after ``STALL_RESTARTS`` in a row that improve the objective by less than
``STALL_GAIN`` (relative). The status is then ``feasible`` with "stalled" in the detail; ``deadline`` only when
the clock stopped it. ``stall=False`` keeps the old behaviour (to measure the difference).

Incremental epochs (our addition; the paper states the change constraints 20-23 but not how a
solver should start): when every PE still has feasible previous candidates, miniW starts from them;
when only some have (jobs admitted since, or a PE whose nodes went away), those keep their
candidates and the others are placed along their streams around them; in both cases miniW then
moves a candidate set only for a >= 2% gain in the objective, because every move restarts PE
instances (and no packing, which would move many). Only when neither start is feasible is the
problem solved afresh (stages 1-4).

Departure on alpha_n (constraint 4): the paper's  sum_p H_{p,n} v_{p,n} / H_n  counts every
candidate PE as if it could fill the node; we count  min(phi_p g_p, H_{p,n})  so that a light PE
weighs lightly (still linear in v).
"""

from __future__ import annotations

import time

from ...model import Scenario
from ...plan import StageReport
from ..stages import MacroQResult, MacroWResult
from . import exact
from .constraints import check, violations
from .milp import _component_racks, _greedy_racks, _rack_bound, _rack_objective, _top_level_cpsat, _top_level_milp
from .pack import pack_nodes
from .problem import Problem, Solution, Unit
from .search import _as_candidates, _build, _choose_nodes, _extend_previous, _from_previous, _mini_w

MILP_MAX_VARS = 40_000  # unit x rack variables; beyond, building the model alone outlasts any deadline
STALL_SHARE = 0.05  # miniW stops after this share of the deadline without a better solution
STALL_MIN_S = 0.25
STALL_RESTARTS = 2  # restarts in a row that gain less than STALL_GAIN end the search
STALL_GAIN = 1e-3
TOP_SHARE = 0.3  # of the deadline, for the TopLevelMILP
TOP_SKIP_GAP = 0.005  # a greedy start this close (relative) to the TopLevelMILP's lower bound: no MILP
PACK_SHARE = 0.25  # of the deadline, kept for the in-node packing after miniW
EXACT_SHARE = 0.25  # of the deadline, for the exact model of a small problem (.exact)


def solve(scenario: Scenario, macroq: MacroQResult, deadline_s: float | None = None, method: str = "milp",
          stall: bool = True, toplevel: str = "scip", packing: bool = True) -> MacroWResult:
    t0 = time.monotonic()
    budget = deadline_s if deadline_s is not None else scenario.policy.macrow_deadline_s
    deadline = t0 + budget
    stall_s = max(STALL_MIN_S, STALL_SHARE * budget) if stall else None
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
        best, moves = _mini_w(prob, start, deadline, min_gain=min_gain, stall_s=stall_s, stall_gain=STALL_GAIN)
        cands = _as_candidates(prob, best)
        return MacroWResult(cands, best.objective(), report("feasible" if time.monotonic() < deadline else "deadline", best.objective(),
                                                             f"{stage}, miniW {moves} moves"))
    tried = ""  # what the exact model of a small problem did, when it ran and gave no answer
    if method == "milp" and exact.applies(prob):
        sol = exact.solve(prob, EXACT_SHARE * budget)
        if sol is not None:
            how = "no packing"
            if packing:  # the stream affinity among the optimal answers (the packing keeps the objective and every constraint)
                sol, how = pack_nodes(prob, sol, min(deadline, time.monotonic() + PACK_SHARE * budget))
            cands = _as_candidates(prob, sol)
            if not violations(prob, cands):
                obj = sol.objective()
                nv = sum(len(prob.match[i]) for i in range(len(prob.units)))
                return MacroWResult(cands, obj, report("optimal", obj, f"exact (CP-SAT, {len(prob.units)} units, {nv} unit-node "
                                                                      f"variables: proven optimal to the model's rounding), {how}"))
        tried = "exact model not proven in its share; "
    # the two greedy rack assignments (by stream traffic, unit by unit; by whole stream components)
    # are always built; the better start of them and the MILP's (after BottomLevel) is kept
    greedies = {"greedy racks": _greedy_racks(prob), "whole components": _component_racks(prob)}
    if len(prob.topo.racks) > 1:
        hint = min(greedies.values(), key=lambda g: _rack_objective(prob, g))
        top_gap = _rack_objective(prob, hint) / max(_rack_bound(prob), 1e-12) - 1.0
    else:
        hint, top_gap = greedies["greedy racks"], 0.0
    if method == "milp" and top_gap <= TOP_SKIP_GAP:
        stage = f"greedy (racks within {100 * top_gap:.2f}% of the TopLevelMILP's bound: MILP skipped)"
    elif method == "milp" and len(prob.units) * len(prob.topo.racks) > MILP_MAX_VARS:
        stage = f"greedy ({len(prob.units)} units x {len(prob.topo.racks)} racks: too large for the TopLevelMILP)"
    elif method == "milp":
        # CP-SAT starts from the better greedy (without, it found none in time on LSD); SCIP does
        # better without that hint (measured, docs/macrow.md), and the greedies are compared below anyway
        racks = (_top_level_cpsat(prob, TOP_SHARE * budget, hint) if toplevel == "cpsat"
                 else _top_level_milp(prob, TOP_SHARE * budget))
        stage = f"toplevel-{toplevel}" if racks else f"greedy ({toplevel} gave no solution)"
    start = _build(prob, racks) if racks is not None else None
    # the MILP stopped by its time limit can be worse than a greedy: keep the best start
    better = None
    for name, g in greedies.items():
        alt = _build(prob, g)
        if alt is not None and (start is None or alt.objective() < start.objective() - 1e-12):
            start, better = alt, name
    if better is not None:
        stage = stage + f" ({better} were better)" if racks is not None else stage.replace("greedy", better, 1)
    if start is None:
        # name the constraint: try each unit alone
        # name the constraint and the PEs that no rack can host even alone (the pipeline rejects
        # their jobs and plans the others again)
        why = "(19/25) some PE cannot get enough candidate capacity"
        alone: list[str] = []
        each: dict[str, str] = {}
        most_memory = max((n.memory_bytes for n in prob.nodes.values()), default=0.0)
        for i, u in enumerate(prob.units):
            if not any(_choose_nodes(prob, i, r, [set() for _ in prob.units], dict.fromkeys(prob.nodes, 0.0)) for r in prob.topo.racks):
                if prob.memory[i] > most_memory:
                    w = (f"(memory) {u.name}: each instance needs {prob.memory[i] / 2**20:.0f}Mi of memory, the most any usable "
                         f"node has free is {most_memory / 2**20:.0f}Mi")
                else:
                    w = f"(12/19/25) {u.name}: no rack has {u.min_c} matching nodes with {u.need:.0f} mips"
                if not alone:
                    why = w
                alone.extend(u.members)
                each.update(dict.fromkeys(u.members, w))
        return MacroWResult({}, None, report("infeasible", None, why), violated=why, unplaceable=tuple(alone), why=each)
    t_top = time.monotonic() - t0  # TopLevel and BottomLevel (the start)
    progress: dict = {}  # the stall clock, shared by the restarts
    search_end = deadline - (PACK_SHARE * budget if packing else 0.0)
    best, moves = _mini_w(prob, start, search_end, stall_s=stall_s, stall_gain=STALL_GAIN, progress=progress)
    flat = 0  # restarts in a row without a real gain
    for seed in range(1, 8):  # restarts with other perturbation seeds while time remains
        if time.monotonic() >= search_end:
            break
        if stall_s is not None and (flat >= STALL_RESTARTS or time.monotonic() - progress["at"] > stall_s):
            stage += ", stalled"
            break
        again, m = _mini_w(prob, best, search_end, seed=seed, stall_s=stall_s, stall_gain=STALL_GAIN, progress=progress)
        moves += m
        gain = (best.objective() - again.objective()) / max(abs(best.objective()), 1e-12)
        flat = flat + 1 if gain < STALL_GAIN else 0
        if again.objective() < best.objective() - 1e-12:
            best = again
    t_search = time.monotonic() - t0 - t_top
    if packing:
        best, how = pack_nodes(prob, best, min(deadline, time.monotonic() + PACK_SHARE * budget))
        stage += f", {how}"
    stage += f" (start {t_top:.2f} s, miniW {t_search:.2f} s, packing {time.monotonic() - t0 - t_top - t_search:.2f} s)"
    cands = _as_candidates(prob, best)
    errs = violations(prob, cands)
    if errs:
        return MacroWResult(cands, best.objective(), report("infeasible", best.objective(), "; ".join(errs[:3])), violated=errs[0])
    status = "deadline" if time.monotonic() >= deadline else "feasible"
    return MacroWResult(cands, best.objective(), report(status, best.objective(), f"{tried}{stage}, miniW {moves} moves"))


__all__ = ["Problem", "Solution", "Unit", "check", "solve"]
