"""The CPU need where it is now, for a PE whose cost per tuple moves over its window (issue 52).

A family fit (:mod:`.family`) weighs its window by age (half-life ``LearnConfig.half_life_s``),
so it describes the PE as it was on average over that window. A PE whose cost per tuple moves
slowly (its tuple size cycles with the time of day: bench_rfl_shapes' ``tuplesize``, x0.67-1.5 over
30 min) is then behind: after 30 windows of a rising cost its fit lies at the window's mean,
x1.2 where the PE is now at x1.42, and what the planner is handed is 7.8-9.7% off (mean over
PEs, offered rate measured) while every other shape is within 3.5%. Each window alone is no
surprise to the drift test (a change of 0.7% a window, well inside its noise), so no window is
dropped until the fit is 25% behind.

:func:`need_now` finds the trend the fit leaves in the windows that measured the CPU need (with
CPU to spare: the reading at the rate received; saturated with the processed rate measured: the
allocation at that rate): the age-weighted least-squares line of their log residuals against
time. Where its slope is significant (:data:`T_MIN` standard errors: a stationary PE's residuals
are noise around the fit, and a line through noise passes 3 standard errors one fit in a few
hundred), the need is scaled by the line's value at the newest window, so the planner is
handed the cost the PE has now; the shape of the need (its form, the selectivity) stays the
fit's. Only the scale moves: a PE whose tuples got larger needs more CPU for each of them at every
rate. Only where the processed rate is measured (the offered rate in the observation: the fit's
``support`` is not None): without it the windows with CPU to spare are the only ones that measure
the need, a third of them at 20-150% allocations, and a line through their readings passed 3
standard errors by chance on stationary PEs (bench_rfl_shapes ``--pes 6``, the fluid data plane: 2
of 118 refits of the 20%-noise PEs; a knee PE at constant input scaled by -13%, the shape's mean
1.1% -> 2.0% after 30 samples; 20% noise, varying input, 17.1% -> 18.5%). Departure: the paper's
model is stationary between forgetting and drift.

:func:`rescaled` moves a fit's need the same way to a few windows, those that showed a drift
(:meth:`.learner.Learner._update`): the planner's guess until a fit of the window after the change
is trusted (:func:`.functions.choose`). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from .spare import dips

if TYPE_CHECKING:
    from .family import FamilyFit
    from .model import Sample

T_MIN = 3.0  # standard errors the slope needs
MIN_N = 8  # windows that measured the need, at least
_REJECT = 0.5  # a residual this far (log units) is a stall or a bad reading, not the trend's


def need_now(ff: FamilyFit, samples: Sequence[Sample], w: np.ndarray, now: float, idle_margin: float = 0.05) -> FamilyFit:
    """``ff`` with its need scaled to where the windows' trend puts it at ``now`` (the module
    docstring); ``ff`` itself when no trend is significant."""
    if ff.support is None:  # no processed rate measured (the module docstring)
        return ff
    level = _level(ff, samples, np.asarray(w, dtype=float), now, idle_margin)
    if level is None:
        return ff
    k = float(np.exp(level))
    return ff.model_copy(update={"c": (ff.c[0] * k, ff.c[1] * k, ff.c[2] * k)})


def _level(ff: FamilyFit, samples: Sequence[Sample], w: np.ndarray, now: float, idle_margin: float) -> float | None:
    """The log scale of the need at ``now`` by the trend of its residuals; None without a significant one."""
    if len(samples) < MIN_N:
        return None
    arr = np.array([(s.r_i, s.m, s.r_o, np.nan if s.m_used is None else s.m_used, np.nan if s.r_p is None else s.r_p,
                     now if s.t is None else s.t) for s in samples], dtype=float)
    r_i, m, r_o, mu, rp, t = arr.T
    ok = (r_i > 0) & (m > 0) & (r_o > 0) & np.isfinite(mu) & (mu > 0) & (w > 0)
    measured = np.isfinite(rp) & (rp > 0)
    # saturated: its CPU reading says so (unless it dipped, :mod:`.spare`), or it processed clearly
    # less than it was offered (a reading at 90-95% of its limit then is noise: counted as the need
    # at the offered rate, it put five windows 35-170% below the fit and hid the trend)
    sat = (mu >= (1.0 - idle_margin) * m) | dips(r_i, m, mu, rp, idle_margin) | (measured & (rp < (1.0 - idle_margin) * r_i))
    use = ok & (measured | ~sat)
    if int(use.sum()) < MIN_N:
        return None
    p = np.where(measured, rp, r_i)[use]
    r, mm, u, sa = r_i[use], m[use], mu[use], sat[use]
    if ff.need == "paper":  # K: the mips that saturate it at any rate; a saturated window processed the share m / K
        y, pred = np.where(sa, mm * r / p, u), np.full(p.shape, max(float(ff.c[0]), 1e-12))
    else:
        y, pred = np.where(sa, mm, u), np.maximum(ff.need_at(p), 1e-12)
    res = np.log(y / pred)
    keep = np.abs(res - np.median(res)) <= _REJECT
    x, e, ww = (t[use] - now)[keep], res[keep], w[use][keep]
    if x.size < MIN_N or np.ptp(x) <= 0:
        return None
    sw = ww.sum()
    xm, em = float(np.sum(ww * x) / sw), float(np.sum(ww * e) / sw)
    sxx = float(np.sum(ww * (x - xm) ** 2))
    if sxx <= 0:
        return None
    slope = float(np.sum(ww * (x - xm) * (e - em)) / sxx)
    fit_e = e - em - slope * (x - xm)
    n_eff = sw * sw / float(np.sum(ww * ww))
    if n_eff <= 3:
        return None
    sigma2 = float(np.sum(ww * fit_e * fit_e) / sw) * n_eff / (n_eff - 2.0)
    se = float(np.sqrt(sigma2 * np.sum(ww * ww * (x - xm) ** 2))) / sxx
    if se <= 0 or abs(slope) < T_MIN * se:
        return None
    return em - slope * xm  # the line at x = 0: now


def rescaled(ff: FamilyFit, samples: Sequence[Sample], idle_margin: float = 0.05) -> FamilyFit | None:
    """Issue 52 item 2: ``ff`` (the fit a run of surprises was judged by) with its need scaled by the
    median ratio of what ``samples`` (the run: the windows after the change) needed to what it says
    they needed; None when no window tells (a censored window under the paper's need bounds it only).
    A window with its processed rate known (measured, or with CPU to spare) needed its CPU reading at
    that rate (all its mips where saturated); a censored one (saturated, no offered rate) all its
    mips at the rate its output says it processed, through ``ff``'s selectivity. A PE whose cost per
    tuple changed (a new tuple size, a slower release) keeps its form: until a fit of the new window
    is trusted, this is the planner's best guess from three windows (:func:`.functions.choose`
    compares it with the declared function on the PE's own windows)."""
    if not samples:
        return None
    arr = np.array([(s.r_i, s.m, s.r_o, np.nan if s.m_used is None else s.m_used, np.nan if s.r_p is None else s.r_p,
                     1.0 if s.censored else 0.0) for s in samples], dtype=float)
    r_i, m, r_o, mu, rp, cens = arr.T
    ok = (r_i > 0) & (m > 0) & (r_o > 0) & np.isfinite(mu) & (mu > 0)
    measured = np.isfinite(rp) & (rp > 0)
    sat = (mu >= (1.0 - idle_margin) * m) | dips(r_i, m, mu, rp, idle_margin) | (measured & (rp < (1.0 - idle_margin) * r_i))
    known = measured | ~sat
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        from_out = ff.p0 * (r_o / (ff.s * ff.p0)) ** (1.0 / (1.0 - ff.beta))
    p = np.where(measured, rp, np.where(known, r_i, np.minimum(from_out, r_i)))
    y = np.where(sat, m, mu)
    if ff.need == "paper":  # K: a saturated window processed the share m / K of what it was offered
        tells = ok & (known | (cens <= 0))
        y, pred = np.where(sat, m * r_i / np.maximum(p, 1e-12), mu), np.full(p.shape, max(float(ff.c[0]), 1e-12))
    else:
        tells = ok & np.isfinite(p) & (p > 0)
        pred = np.maximum(ff.need_at(np.where(np.isfinite(p), p, 0.0)), 1e-12)
    if not tells.any():
        return None
    k = float(np.exp(np.median(np.log(y[tells] / pred[tells]))))
    return ff.model_copy(update={"c": (ff.c[0] * k, ff.c[1] * k, ff.c[2] * k)})
