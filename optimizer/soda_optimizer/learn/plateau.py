"""A PE busy on all its mips past a plateau (issue 52 item 2, h52g): what the planner is handed for
a PE whose output stops growing with its mips while it keeps using them all, seen without an
offered rate.

bench_rfl_shapes' memory-bound PE processes at most ``cap`` tuples/s (0.5-0.8 of its input) and
stays busy on every mips it is given past it: every window is saturated, none has CPU to spare. No
form of :mod:`.family` says a PE uses mips it cannot turn into output (its need is finite at every
rate; without two windows with CPU to spare it is not even fitted), and the paper's form
(:mod:`.fit`) fitted on ``r_o / r_i`` says it uses ``B / A`` mips at most: half its windows used up
to twice that (:func:`.trust.mips_misfit`), so it was never trusted and the planner kept the declared
function (20-50% off; bench_rfl_shapes ``--pes 6`` after 30 samples, mean over PEs: 20.5% fluid,
27.2% backpressure, constant input).

What the windows do carry, in both modes: the output against the allocation is the paper's hinge
``r_o = min(alpha m, beta)`` (the input rate does not move it at a constant input); the windows
past its kink ``K = beta / alpha`` read saturated (busy); and the output per tuple received on the
plateau is the selectivity ``s`` (under backpressure the PE receives what it processes; on the fluid
data plane it receives what it is offered, and the share it processes is not in the observation:
the cap and the selectivity are one product there, and ``s`` is the output per offered tuple,
right at the input seen). The function handed over
(:func:`plateau_function`): a need of ``K / p_cap`` mips per tuple up to ``p_cap = beta / s``
tuples/s, then steep (:data:`STEEP`: the PE burns what it is given and processes no more), the
output ``s p``. Under backpressure it is the truth (bench_rfl_shapes: need ``c p`` to the cap, busy
past it); on the fluid data plane it is right at the input rate seen, and says the PE processes no
more at a larger input (pessimistic). Handed over (:func:`.functions.choose`) with ``n_full``
effective windows, where it beats the declared function on the PE's own windows. Never Confident (:meth:`.learner.Learner._refit`): the cap's
relation to the input is not observed on the fluid data plane, and exploration cannot move it.
Its saturation is handed as not identified, so the knee (:mod:`..soda.knee`) does not trim to
the steep part. Departure: the paper has no such function. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..model import PEKind, ResourceFunction
from .fit import fit
from .model import LearnConfig, Sample
from .trust import NARROW, spare_seen

# past the plateau the need rises this many times faster per tuple (the PE burns its mips)
STEEP = 1000.0
# a window at least this factor past the kink (in mips) is on the plateau
PAST = 1.3
# the steep part begins this factor below the rate the plateau was seen at (the selectivity that
# much above it: the same output): a PE seen busy at an input rate is busy there. At the rate itself
# the need is K, and a constant input read on the fluid data plane (every window at one rate) put
# half the memory-bound PEs' plateaus above their input, using K mips there instead of all
EDGE = 1.05


def plateau(samples: Sequence[Sample], now: float, cfg: LearnConfig) -> tuple[float, float, float] | None:
    """``(s, p_cap, K)`` when the window shows a PE busy past a plateau, else None: no measured
    processed rate and fewer than ``min_branch_n_eff`` windows with CPU clearly to spare
    (:func:`.trust.spare_seen`: under backpressure a CPU-bound window sits on the need curve, and
    its reading, 5% noise, dips below 95% of its limit one window in six with nothing to contradict
    it); the hinge of the
    output in the mips (:func:`.fit.fit` on ``r_o``, the input rate set to 1) identified on both
    branches within ``max_confident_error`` and ``max_outlier_fraction``; at least
    ``min_branch_n_eff`` windows past ``PAST`` x its kink, at one received rate (within ``NARROW``)."""
    ok = [s for s in samples if s.r_o > 0 and s.r_i > 0 and s.m > 0 and s.m_used is not None]
    if len(ok) < 2 * cfg.min_branch_n_eff or any(s.r_p is not None for s in ok):
        return None
    if spare_seen(ok, cfg.min_branch_n_eff, cfg.idle_margin):
        return None  # seen with CPU to spare: the family (or the fallback's own checks) applies
    hinge = fit(PEKind.transform, [s.model_copy(update={"r_i": 1.0, "m_used": None, "r_p": None}) for s in ok], now, cfg)
    if (hinge is None or not (hinge.a_identified and hinge.b_identified) or hinge.rel_residual > cfg.max_confident_error
            or hinge.outlier_fraction > cfg.max_outlier_fraction):
        return None
    k = hinge.b / hinge.a
    top = [s.r_o / s.r_i for s in ok if s.m >= PAST * k]
    seen = np.log([s.r_i for s in ok if s.m >= PAST * k])
    if len(top) < cfg.min_branch_n_eff or float(np.ptp(seen)) >= float(np.log(NARROW)):
        # the plateau at one received rate (within NARROW): its cap under backpressure, the
        # constant input on the fluid data plane. A fluid PE whose input varies has its output
        # per tuple received vary over the plateau, and no one rate to put the cap at
        # (bench_rfl_shapes --pes 6, fluid, varying input: a memory-bound PE planned 29% off
        # with it, 27% with its declared function)
        return None
    sel = float(np.median(top)) * EDGE  # the output per tuple received on the plateau, EDGE x
    return sel, hinge.b / sel, k


def plateau_function(p: tuple[float, float, float], combine: str = "sum") -> ResourceFunction:
    """The :class:`ResourceFunction` of :func:`plateau`'s ``(s, p_cap, K)`` (the module docstring);
    ``a``, ``b`` the paper's form at ``p_cap``."""
    s, cap, k = p
    need = ((0.0, 0.0), (cap, k), (2.0 * cap, k + STEEP * k))
    return ResourceFunction(a=s / k, b=s, combine=combine, need=need, output=((0.0, 0.0), (2.0 * cap, 2.0 * s * cap)),  # type: ignore[arg-type]
                            saturation_identified=False)
