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
"""

from __future__ import annotations

import numpy as np

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
