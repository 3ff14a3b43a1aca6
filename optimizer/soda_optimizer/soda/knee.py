"""Goals at the knee: among allocations of equal importance, the least CPU (a departure from the
SODA paper, 5.1 and 5.3, which take whatever grid point the RAP or microQ's fitted curve picks).

Past its saturation (the mips beyond which its output cannot grow: ``b/a`` for a transform,
``primal/a`` for a source, :meth:`~soda_optimizer.importance.Evaluator.saturation`) a PE's mips buy
no rate and so no importance. macroQ's grids and microQ's piecewise fits put goals on breakpoints,
which may lie past the knee by up to a grid unit; and a grid depends on every other job, so a job
added, removed or quarantined elsewhere would otherwise resize this job's pods by a few millicores.
"""

from __future__ import annotations

import numpy as np

from ..importance import Evaluator
from ..model import floor_mips


def at_the_knee(ev: Evaluator, goals: dict[str, float], pe_floor: float = 0.0) -> dict[str, float]:
    """Each goal above its PE's saturation (the mips beyond which its output cannot grow, and so
    no stream's value either) brought down to it, never below the PE's floor (its minimum and the
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
    y = np.where(x > ev.saturation(), np.minimum(x, np.maximum(ev.saturation(), floor)), x)
    if np.array_equal(x, y):
        return goals
    before, after = ev.importance(np.stack([x, y]))
    if after < before - 1e-9 * (1.0 + abs(before)):
        return goals  # not the default resource function's knee: keep the RAP's answer
    return {**goals, **{p: float(v) for p, v in zip(ev.pes, y) if p in goals}}
