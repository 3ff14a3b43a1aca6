"""When a fit may be trusted without a measured processed rate (issue 52): the checks the learner
(:meth:`.learner.Learner._judge` and the :mod:`.fit` fallback in :meth:`.learner.Learner._refit`)
runs on a PE's window besides the held-out error and the outlier share. Without an offered rate a
saturated window only bounds the saturation from one side, so a fit is trusted once samples showed
the PE below its saturation (:func:`below_saturation`, :func:`spare_seen`, :func:`grows_with_mips`),
and not where the windows the fit leaves out or does not predict refute it (:func:`silent_misfit`,
:func:`mips_misfit`); a window at about one allocation gives a local fit (:func:`one_point`).
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ..model import PEKind
from .family import SPARE, FamilyFit
from .model import Fit, LearnConfig, Sample
from .spare import sample_dips

# issue 52: allocations within this factor are one operating point (:func:`one_point`): saturated
# windows there bound the saturation from one side only, fluid data plane or backpressure alike.
# 1.2 left bench_rfl's dac-4:pe1, seen saturated at 900 and 1,080 mips (1.2x apart, its output
# per tuple growing too little over so narrow a spread for the fallback's slope test), neither
# local nor trusted: on its default function, ~400% off, and tests/test_bench_rfl.py failed
NARROW = 1.3
# issue 52: a window that emitted nothing refutes a fit predicting more than this share of the PE's
# output with CPU to spare there (the share bench_rfl_shapes' error is floored at)
SILENT = 0.1


def below_saturation(ff: FamilyFit, cfg: LearnConfig) -> bool:
    """Issue 52: has the fit seen the PE below its saturation? With the processed rate measured, the
    support rule (``min_support`` of its CPU-bound branch); without it (``support`` None), at least
    ``min_branch_n_eff`` samples with CPU to spare or visibly behind their input
    (:attr:`.family.FamilyFit.n_evidence`), predicted within ``max_confident_error``: saturated
    samples alone bound the saturation from one side only (under backpressure a saturated PE
    receives what it processes: the paper's need is then the median allocation seen); the paper's
    need, where a saturated window allocated clearly below its ``K`` received
    what it processed (:attr:`.family.FamilyFit.n_level`), also as many windows behind their input
    (its CPU-bound branch, the share ``m / K``). Saturated windows allocated near ``K`` (at least
    ``_BEHIND`` of it) do not count against it: there the fluid data plane's share ``m / K`` and
    backpressure look alike (bench_rfl's PEs planned just below their saturation: 19 of 51 fits with
    a held-out error of 0.4-5.6% and 5-7 windows with CPU to spare were not trusted, and
    tests/test_bench_rfl.py failed)."""
    if ff.support is not None:
        return ff.support >= cfg.min_support
    if ff.n_evidence is None or ff.evidence_error is None:
        return False
    behind = ff.n_behind or 0
    level = ff.n_level if ff.n_level is not None else ff.n - ff.n_known - behind
    if ff.need == "paper" and behind < cfg.min_branch_n_eff and level >= 1:
        # saturated windows that received what they processed (backpressure) judge the paper's
        # need only by what they bound; its share m / K of the input: only a window behind its
        # input tests it (a PE seen with CPU to spare only has K measured by each window)
        return False
    return ff.n_evidence >= cfg.min_branch_n_eff and ff.evidence_error <= cfg.max_confident_error


def one_point(samples: Sequence[Sample]) -> bool:
    """Issue 52: every sample at about one allocation (within a factor :data:`NARROW`), most of them
    saturated: the planner's allocation, unchanged from one macro epoch to the next or moved a
    little (bench_rfl: 900 and 1,080 mips). A fit there holds over the allocations seen, fluid data
    plane or backpressure alike, and is pessimistic past them (its saturation the largest
    allocation seen): :attr:`.model.Fit.local`."""
    m = np.array([s.m for s in samples if s.m > 0])
    # a plain bool: numpy's does not serialise (Learner.export failed on a local fallback fit)
    return bool(m.size >= 3 and float(np.ptp(np.log(m))) < float(np.log(NARROW)) and 2 * sum(s.censored for s in samples) > len(samples))


def spare_seen(samples: Sequence[Sample], n: float, margin: float = 0.05) -> bool:
    """At least ``n`` samples with CPU clearly to spare or a measured processed rate (issue 52, the
    :mod:`.fit` fallback; one is not enough: a saturated PE's CPU reading with 3-5% noise dips
    below ``SPARE`` one window in a few hundred)."""
    dip = sample_dips(samples, margin)  # issue 52 item 2: a saturated window's reading dipped (:mod:`.spare`)
    return sum((s.m_used is not None and s.m_used < SPARE * s.m and not d) or (s.r_p is not None and not s.censored)
               for s, d in zip(samples, dip)) >= n


def silent_misfit(samples: Sequence[Sample], out: Callable[[np.ndarray, np.ndarray], np.ndarray],
                   spare: Callable[[np.ndarray], np.ndarray]) -> bool:
    """Issue 52: the windows that received tuples and emitted none (below a background CPU term a PE
    processes nothing) are left out of every fit (their output has no log), yet they refute a fit
    that says the PE emits there. True when at least 2, and a tenth of the window, are predicted
    (``out`` at the rate received and the mips allocated) above ``SILENT`` of the output with CPU to
    spare at that rate (``spare``). bench_rfl_shapes (``--pes 6``, fluid and backpressure, constant
    input): a background PE with 6 of its 20 windows silent at 398-1,054 mips, its paper-need and
    linear fits predicting 21-57% of its output there, Confident at 31-32% error."""
    sil = [(s.r_i, s.m) for s in samples if s.r_o <= 0 and s.r_i > 0 and s.m > 0]
    if len(sil) < max(2.0, 0.1 * len(samples)):
        return False
    r, m = np.array(sil, dtype=float).T
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.asarray(out(r, m), dtype=float) / np.maximum(np.asarray(spare(r), dtype=float), 1e-12)
    return bool(np.sum(ratio > SILENT) >= max(2.0, 0.1 * len(samples)))


def mips_misfit(kind: PEKind, samples: Sequence[Sample], f: Fit, cfg: LearnConfig) -> bool:
    """Issue 52, the :mod:`.fit` fallback: it fits the output alone, so its saturation ``B / A`` (a
    source's ``r_i / A``) is checked against the CPU readings: True when more than
    ``max_outlier_fraction`` of the samples used mips more than ``outlier_threshold`` (log units) from
    ``min(m, B / A)``. A memory-bound PE (at most 86.5 tuples/s, busy on all its mips past it) has
    its output fitted within 3% by the paper's form, which says it uses 779 mips at most: half its
    windows used up to 2.4x that, and the fit was Confident at 15.5% error."""
    pts = np.array([(s.r_i, s.m, s.m_used) for s in samples if s.m_used and s.m > 0 and s.r_i > 0], dtype=float).reshape(-1, 3)
    if len(pts) < 3:
        return False
    r_i, m, mu = pts.T
    cap = r_i / f.a if kind is PEKind.source else np.full(m.shape, f.b / f.a)
    off = np.abs(np.log(np.minimum(m, cap) / mu)) > cfg.outlier_threshold
    return bool(np.mean(off) > cfg.max_outlier_fraction)


def grows_with_mips(kind: PEKind, samples: Sequence[Sample], a_identified: bool) -> bool:
    """Issue 52, the :mod:`.fit` fallback: where most samples are censored (saturated, no offered
    rate), the output per input tuple (a source's output) grows with the mips over them: a slope in
    log-log of at least 1/2 and 3 standard errors (1 on the paper's CPU-bound branch, 0 under
    backpressure)."""
    pts = [(s.m, s.r_o if kind is PEKind.source else s.r_o / s.r_i) for s in samples
           if s.censored and s.m > 0 and s.r_o > 0 and s.r_i > 0]
    if len(pts) * 2 < len(samples):
        return a_identified  # mostly not censored: their input rates were offered ones, the A branch as fitted
    if len(pts) < 3:
        return False
    lm, ly = np.log(np.array(pts)).T
    if np.ptp(lm) < np.log(NARROW):  # within 1.3x: one operating point, as for :func:`one_point`
        # one operating point: fluid (behind its input) or backpressure (at B) alike, the fit says
        # the PE saturates at the allocation seen with the output seen (A x the largest m seen, or
        # B / the smallest), which holds there and is pessimistic past it (exploration probes it).
        # Not trusted (its saturation is a bound; h52 trusted it where the hinge settled on its A
        # branch), but ``Fit.local``: the planner may use it where it beats the declared function
        # (:func:`.functions.choose`)
        return False
    sxx = float(np.sum((lm - lm.mean()) ** 2))
    if sxx <= 1e-12:
        return False
    slope = float(np.sum((lm - lm.mean()) * (ly - ly.mean())) / sxx)
    res = ly - ly.mean() - slope * (lm - lm.mean())
    se = float(np.sqrt(np.sum(res * res) / max(len(pts) - 2, 1) / sxx))
    return slope >= 0.5 and slope >= 3.0 * se
