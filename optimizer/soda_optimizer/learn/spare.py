"""Which samples show CPU to spare (issue 52 item 2): a CPU reading below the allocation is not enough.

A PE with CPU to spare processed all it was offered, so its window tells the rate it processes
(and its selectivity) directly; every part of the learner leans on that (:mod:`.family`'s known
rates and evidence, :mod:`.fit`'s input-bound samples, :func:`.trust.spare_seen`). A saturated
PE's CPU reading is noisy: with 3-5% noise it reads below 95% of its limit about one window in
seven and below 90% one in fifty. Such a dip, taken as CPU to spare, puts a saturated window's
received rate among the processed ones: bench_rfl's ``dac-1:pe1`` (three windows at 94%) learned a
selectivity of 0.0092 (true 0.5) and stayed on its default function, ~650% off; bench_rfl_shapes'
memory-bound PE (busy on all its mips at every allocation, 10 of 60 windows read 89-95%) learned a
selectivity of 0.63 (true 1.1) and was Confident at 16-23% error.

The rule needs no noise model: a need that does not fall with the rate (the paper's and every
form of :mod:`.family`) makes saturation monotone. A window saturated at ``m_j`` mips while
processing ``p_j`` says ``need(p_j) >= m_j``; a window with CPU to spare at ``m_i`` and rate
``r_i`` says ``need(r_i) < m_i``. Both hold only if ``r_i > p_j`` or ``m_i > m_j``: a saturated
window with as many mips or more that processed no more *contradicts* the low reading (its processed
rate where measured, else what it received: at least what it processed, in the fluid data plane
and under backpressure alike). "As many" and "no more" within a factor :data:`NEAR`: at one
operating point (the planner's allocation held for a macro epoch, its input about steady) the
windows tell a dip from CPU to spare only by how many of them read saturated (``dac-1:pe1``: 25
windows at 180 mips and 190-225 tuples/s, one reading 93%). Low readings that *support* it are the
converse: as few mips or fewer, as much input or more (each, if it had CPU to spare, says this one
had too). A low reading is a dip when the windows that contradict it outnumber those that
support it, itself included, a dip supporting nothing (found in rounds: bench_rfl_shapes' memory-bound
PE had four dips at 1,200-1,430 mips holding each other up, and learned its selectivity from two of
them, Confident at 16-17% error): a PE whose cost changed (drift) has windows of both kinds that are all
true, and the older ones, as many as the newer, keep their CPU to spare until the drift test
(:meth:`.learner.Learner._drifted`) drops them; with strict dominance and one contradiction
enough, bench_rfl_shapes' drift PEs under backpressure lost their known rates two windows after the
change, their fit its trust, and the drift test (which needs a trusted fit) never ran. Departure:
the paper takes no CPU reading at all. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from .model import Sample

# two windows within this factor of each other in allocation and in rate are at one operating point
NEAR = 1.1


def dips(r_i: np.ndarray, m: np.ndarray, mu: np.ndarray, rp: np.ndarray, margin: float) -> np.ndarray:
    """Per sample, True where the CPU reading ``mu`` is below ``(1 - margin) m`` (it looks like CPU
    to spare) but more saturated samples of the same window contradict it than low ones support it
    (the module docstring). ``rp`` is the measured processed rate (nan where not measured); ``mu``
    nan: no reading."""
    r_i, m, mu, rp = (np.asarray(x, dtype=float) for x in (r_i, m, mu, rp))
    read = np.isfinite(mu) & (m > 0)
    low = read & (mu < (1.0 - margin) * m)
    sat = read & ~low
    if not low.any() or not sat.any():
        return np.zeros(m.shape, dtype=bool)
    took = np.where(np.isfinite(rp) & (rp > 0), rp, r_i)  # what a window processed, at most
    li, sj = np.flatnonzero(low), np.flatnonzero(sat)
    mi, ti = m[li][:, None], took[li][:, None]
    against = np.sum((NEAR * m[sj][None, :] >= mi) & (took[sj][None, :] <= NEAR * ti), axis=1)
    backs = (m[li][None, :] <= NEAR * mi) & (NEAR * took[li][None, :] >= ti)  # [i, k]: k supports i
    dip = np.zeros(li.size, dtype=bool)
    while True:  # a dip supports nothing: dips near each other held each other up (at most li.size rounds)
        nxt = against > np.sum(backs & ~dip[None, :], axis=1)
        if np.array_equal(nxt, dip):
            break
        dip = nxt
    out = np.zeros(m.shape, dtype=bool)
    out[li] = dip
    return out


def sample_dips(samples: Sequence[Sample], margin: float) -> np.ndarray:
    """:func:`dips` of a window of samples."""
    arr = np.array([(s.r_i, s.m, np.nan if s.m_used is None else s.m_used, np.nan if s.r_p is None else s.r_p)
                    for s in samples], dtype=float).reshape(-1, 4)
    return dips(arr[:, 0], arr[:, 1], arr[:, 2], arr[:, 3], margin)
