"""Goals at the knee: among allocations of equal importance, the least CPU (a departure from the
SODA paper, 5.1 and 5.3, which take whatever grid point the RAP or microQ's fitted curve picks).

Past its saturation (the mips beyond which its output cannot grow: ``b/a`` for a transform,
``primal/a`` for a source, :meth:`~soda_optimizer.importance.Evaluator.saturation`) a PE's mips buy
no rate and so no importance. macroQ's grids and microQ's piecewise fits put goals on breakpoints,
which may lie past the knee by up to a grid unit; and a grid depends on every other job, so a job
added, removed or quarantined elsewhere would otherwise resize this job's pods by a few millicores.

Issue 52 item 3: only a saturation that is known is trimmed to: a declared function's, or a learned
one whose model located it (:attr:`~soda_optimizer.model.ResourceFunction.saturation_identified`).
A learned PE seen at one allocation has its believed saturation at that allocation, a lower bound
of the true one; trimmed to it, it never gets the mips that would show more (bench_rfl: 28 of 51
learned PEs ended exactly at their believed saturation with 17k of 72k mips unallocated). Its goal
is left where the stage put it. What the knee frees goes back to admitted PEs that can use it in
macroQ (:func:`.refine.polish`, issue 49). The property a quarantined job's neighbours rely on
(their goals do not move with the grid) holds for every PE whose saturation is identified; a PE
whose saturation is not identified is between two states of knowledge anyway (exploration, or the
next sample past it, identifies it).

The counterpart, :func:`with_headroom` (issue 52 item 3, microQ): among equally important answers,
macroQ's goal for a PE whose saturation is *not* identified. microQ's concave fit drops every segment
where more mips buy nothing under the believed functions, so it takes such a PE down from macroQ's
goal to the believed saturation (or its floor) and leaves the difference idle (bench_rfl, seed 0:
microQ's goals 12,300 mips below macroQ's, 7,400 of them on unidentified PEs: dac-1:pe1 1,080 ->
180). What it believes is a lower bound there, so the capacity no other PE can use goes back to
them, up to macroQ's goal, as far as their candidate nodes host it.
"""

from __future__ import annotations

import numpy as np
from ortools.graph.python import min_cost_flow

from ..importance import Evaluator
from ..model import floor_mips


def at_the_knee(ev: Evaluator, goals: dict[str, float], pe_floor: float = 0.0) -> dict[str, float]:
    """Each goal above its PE's saturation (the mips beyond which its output cannot grow, and so
    no stream's value either), where that saturation is identified (the module docstring),
    brought down to it, never below the PE's floor (its minimum and the
    policy's ``pe_floor_mips``, :func:`~soda_optimizer.model.floor_mips`) nor raised. The importance is
    the same (checked); the capacity a grid point past the knee held is left free. Departure from
    the paper, which takes whatever grid point the RAP picks: among equally important answers the
    least CPU, so a job's goals do not move with the grid (a grid depends on every other job: a job
    added, removed or quarantined elsewhere would otherwise resize this one's pods by a few
    millicores)."""
    if not ev.pes:
        return goals
    x = np.array([goals.get(p, 0.0) for p in ev.pes], dtype=float)
    floor = np.array([floor_mips(ev.glued.spec(p), pe_floor) for p in ev.pes], dtype=float)
    known = np.array([ev.glued.spec(p).rf.saturation_identified for p in ev.pes], dtype=bool)  # issue 52 item 3
    sat = ev.saturation()
    y = np.where(known & (x > sat), np.minimum(x, np.maximum(sat, floor)), x)
    if np.array_equal(x, y):
        return goals
    before, after = ev.importance(np.stack([x, y]))
    if after < before - 1e-9 * (1.0 + abs(before)):
        return goals  # not the default resource function's knee: keep the RAP's answer
    return {**goals, **{p: float(v) for p, v in zip(ev.pes, y) if p in goals}}


def with_headroom(ev: Evaluator, goals: dict[str, float], macro_goals: dict[str, float],
                  candidates: dict[str, tuple[str, ...]], nodes: dict[str, float], scale: float = 1000.0) -> dict[str, float]:
    """``goals`` with each PE whose saturation is not identified raised toward its macroQ goal, by
    the capacity its candidate nodes have left once every PE's goal is hosted (a min-cost flow:
    each PE's goal first, at a cost no headroom outweighs, then its headroom); never lowered, never
    past macroQ's goal, and only when the importance does not fall (checked). Unchanged when no PE
    qualifies (declared functions, identified saturations: :func:`at_the_knee`'s)."""
    extra = {p: float(macro_goals.get(p, 0.0)) - float(goals.get(p, 0.0)) for p in ev.pes
             if not ev.glued.spec(p).rf.saturation_identified}
    extra = {p: x for p, x in extra.items() if x * scale >= 1 and any(n in nodes for n in candidates.get(p, ()))}
    if not extra:
        return goals
    flow = min_cost_flow.SimpleMinCostFlow()
    src, sink = 0, 1
    pes = sorted(set(goals) | set(extra))
    pi = {p: 2 + i for i, p in enumerate(pes)}
    names = sorted(nodes)
    ni = {n: 2 + len(pes) + i for i, n in enumerate(names)}
    base_arc, extra_arc = {}, {}
    for p in pes:
        want = int(float(goals.get(p, 0.0)) * scale)
        if want > 0:
            base_arc[p] = flow.add_arc_with_capacity_and_unit_cost(src, pi[p], want, -1000)
        if p in extra:
            extra_arc[p] = flow.add_arc_with_capacity_and_unit_cost(src, pi[p], int(extra[p] * scale), -1)
        for n in candidates.get(p, ()):
            if n in ni:
                flow.add_arc_with_capacity_and_unit_cost(pi[p], ni[n], want + int(extra.get(p, 0.0) * scale), 0)
    for n in names:
        flow.add_arc_with_capacity_and_unit_cost(ni[n], sink, int(nodes[n] * scale), 0)
    total = sum(flow.capacity(a) for a in list(base_arc.values()) + list(extra_arc.values()))
    flow.add_arc_with_capacity_and_unit_cost(src, sink, total, 0)  # what is not hosted
    flow.set_node_supply(src, total)
    flow.set_node_supply(sink, -total)
    if flow.solve() != flow.OPTIMAL:
        return goals
    if any(flow.flow(a) < flow.capacity(a) for a in base_arc.values()):
        return goals  # the goals themselves are not all hosted: nothing is left over
    raised = {**goals, **{p: float(goals.get(p, 0.0)) + flow.flow(a) / scale for p, a in extra_arc.items() if flow.flow(a) > 0}}
    if raised == goals:
        return goals
    before, after = ev.importance(np.stack([np.array([goals.get(p, 0.0) for p in ev.pes], dtype=float),
                                            np.array([raised.get(p, 0.0) for p in ev.pes], dtype=float)]))
    if after < before - 1e-9 * (1.0 + abs(before)):
        return goals
    return raised
