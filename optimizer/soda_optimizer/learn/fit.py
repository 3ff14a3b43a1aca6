"""Fitting a resource function to weighted observations (SODA paper, section 6.1).

The paper picks A and B "to best fit the data"; here the fit is a robust nonlinear least squares in
log space, solved by :func:`scipy.optimize.least_squares`:

- transforms and sinks, with ``y = r_o / r_i``: ``log y = min(log A + log m, log B)`` (a hinge of
  slope 1 in ``log m``); sources: ``log r_o = min(log A + log m, log primal)``. Log space makes
  multiplicative noise additive and weighs a slow PE's samples like a fast one's;
- every sample carries a weight ``0.5 ** (age / half_life)`` (forgetting) and the loss is a robust
  one (``soft_l1`` by default) scaled by ``f_scale``, applied per sample and multiplied by its weight
  (a callable loss: scipy's own losses cannot take per-sample weights);
- a sample whose ``m_used`` is clearly below its ``m`` was input-bound: it gives two residuals,
  ``log y - log B`` and ``log y - (log A + log m_used)`` (a source's only the latter); the others
  give the hinge residual, whose active branch decides which parameter they inform;
- the hinge is not smooth, so the solver starts from several points (the previous fit, "all
  CPU-bound", "all input-bound" and breakpoints at quantiles of ``log m``) and keeps the cheapest;
- a regime never seen leaves its parameter undetermined (the data only bound it). It is then set to
  the bound the data imply, which is the pessimistic choice: B = A x (largest m seen) when every
  sample was CPU-bound (no more output than seen), A = B / (smallest m seen) when every sample
  was input-bound (no less CPU than seen); ``a_identified``/``b_identified`` say so.

Samples with a zero rate or zero mips are skipped (a PE that received nothing says nothing about A
or B); their count is in ``Fit.used``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from scipy.optimize import least_squares

from ..model import PEKind
from .model import Fit, LearnConfig, Loss, Sample
from .spare import dips
from .window import times

_LOG_BIG = 50.0  # caps |log A|, |log B| in the solver


def age_weights(samples: Sequence[Sample], now: float, half_life_s: float) -> np.ndarray:
    """0.5 ** (age / half_life) per sample (a sample without ``t`` counts as taken ``now``)."""
    t = times(samples, now)  # a window's column (issue 52 item 4, :mod:`.window`)
    return np.asarray(0.5 ** (np.maximum(now - t, 0.0) / half_life_s), dtype=float)


def _weighted_loss(kind: Loss, w: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """rho(z), rho'(z), rho''(z) of a robust loss (z = residual^2 / f_scale^2), times per-residual weights."""

    def loss(z: np.ndarray) -> np.ndarray:
        rho = np.empty((3, z.size))
        if kind == "linear":
            rho[0], rho[1], rho[2] = z, 1.0, 0.0
        elif kind == "soft_l1":
            t = 1.0 + z
            rho[0] = 2.0 * (np.sqrt(t) - 1.0)
            rho[1] = t ** -0.5
            rho[2] = -0.5 * t ** -1.5
        elif kind == "huber":
            inner = z <= 1.0
            zs = np.maximum(z, 1.0)  # the outer branch only (z > 1)
            rho[0] = np.where(inner, z, 2.0 * np.sqrt(zs) - 1.0)
            rho[1] = np.where(inner, 1.0, zs ** -0.5)
            rho[2] = np.where(inner, 0.0, -0.5 * zs ** -1.5)
        else:  # cauchy
            rho[0] = np.log1p(z)
            rho[1] = 1.0 / (1.0 + z)
            rho[2] = -1.0 / (1.0 + z) ** 2
        return rho * w

    return loss


def _wquantile(x: np.ndarray, w: np.ndarray, q: float) -> float:
    order = np.argsort(x)
    cw = np.cumsum(w[order])
    i = int(np.searchsorted(cw, q * cw[-1]))
    return float(x[order][min(i, x.size - 1)])


def _kish(w: np.ndarray) -> float:
    s2 = float(np.sum(w * w))
    return float(np.sum(w)) ** 2 / s2 if s2 > 0 else 0.0


def fit(kind: PEKind, samples: Sequence[Sample], now: float, config: LearnConfig,
        previous: tuple[float, float] | None = None) -> Fit | None:
    """Fit A (and B for transforms and sinks) to ``samples``; None when no sample is usable."""
    if not samples:
        return None
    r_i = np.array([s.r_i for s in samples], dtype=float)
    m = np.array([s.m for s in samples], dtype=float)
    r_o = np.array([s.r_o for s in samples], dtype=float)
    mu = np.array([np.nan if s.m_used is None else s.m_used for s in samples], dtype=float)
    rp = np.array([np.nan if s.r_p is None else s.r_p for s in samples], dtype=float)
    w = age_weights(samples, now, config.half_life_s)
    ok = (r_i > 0) & (m > 0) & (r_o > 0) & (w > 0)
    if not ok.any():
        return None
    r_i, m, r_o, mu, rp, w = r_i[ok], m[ok], r_o[ok], mu[ok], rp[ok], w[ok]
    source = kind is PEKind.source
    lm = np.log(m)
    ly = np.log(r_o) if source else np.log(r_o / r_i)
    lp = np.log(r_i)  # a source's cap
    idle = np.isfinite(mu) & (mu > 0) & (mu < (1.0 - config.idle_margin) * m)
    idle &= ~dips(r_i, m, mu, rp, config.idle_margin)  # issue 52 item 2: a dip of a saturated PE's reading (:mod:`.spare`)
    lmu = np.log(np.where(idle, mu, 1.0))
    hinge = ~idle
    ih, ii = np.flatnonzero(hinge), np.flatnonzero(idle)

    def residuals(theta: np.ndarray) -> np.ndarray:
        ta = theta[0]
        cap = lp[ih] if source else theta[1]
        parts = [ly[ih] - np.minimum(ta + lm[ih], cap), ly[ii] - (ta + lmu[ii])]
        if not source:
            parts.append(ly[ii] - theta[1])
        return np.concatenate(parts)

    def jacobian(theta: np.ndarray) -> np.ndarray:
        ta = theta[0]
        cap = lp[ih] if source else np.full(ih.size, theta[1])
        on_a = (ta + lm[ih]) < cap
        n = ih.size + ii.size + (0 if source else ii.size)
        jac = np.zeros((n, 1 if source else 2))
        jac[: ih.size, 0] = -on_a.astype(float)
        jac[ih.size: ih.size + ii.size, 0] = -1.0
        if not source:
            jac[: ih.size, 1] = -(~on_a).astype(float)
            jac[ih.size + ii.size:, 1] = -1.0
        return jac

    rw = np.concatenate([w[ih], w[ii]] + ([] if source else [w[ii]]))
    loss = _weighted_loss(config.loss, rw)
    starts = _starts(source, ly, lm, lmu, idle, w, previous)
    best = None
    for x0 in starts:
        x0 = np.clip(x0, -_LOG_BIG + 1, _LOG_BIG - 1)
        res = least_squares(residuals, x0, jac=jacobian, loss=loss, f_scale=config.f_scale,
                            bounds=(-_LOG_BIG, _LOG_BIG), method="trf", x_scale=1.0, max_nfev=200)
        if best is None or res.cost < best.cost:
            best = res
    assert best is not None
    ta = float(best.x[0])
    tb = 0.0 if source else float(best.x[1])

    # which samples inform which parameter, at the fit
    cap = lp if source else np.full(lm.size, tb)
    gap = (ta + lm) - cap  # > 0: the B (or primal) branch is active
    on_a = idle | (gap < -config.kink_margin)
    on_b = (idle & (not source)) | (~idle & (gap > config.kink_margin))
    n_a, n_b = _kish(w[on_a]), (0.0 if source else _kish(w[on_b]))
    a_id, b_id = n_a >= config.min_branch_n_eff, (not source) and n_b >= config.min_branch_n_eff
    if not source and not a_id and b_id:
        ta = tb - float(lm.min())  # saturated already at the smallest m seen
    elif not source and a_id and not b_id:
        tb = ta + float(lm.max())  # still CPU-bound at the largest m seen
    elif source and not a_id:
        ta = float(np.max(ly - (np.where(idle, lmu, lm))))  # A >= r_o / m on every input-bound sample

    pred = np.minimum(ta + lm, lp if source else tb)
    res = ly - pred
    rel = np.abs(np.exp(-res) - 1.0)  # |predicted / observed - 1|
    rel_res = _wquantile(rel, w, 0.5)
    out_frac = float(np.sum(w[np.abs(res) > config.outlier_threshold]) / np.sum(w))
    n_eff = _kish(w)
    conf = min(1.0, n_eff / config.n_full) * max(0.0, 1.0 - rel_res / config.max_rel_residual)
    return Fit(a=float(np.exp(ta)), b=float(np.exp(tb)), a_identified=bool(a_id), b_identified=bool(b_id),
               n_eff=n_eff, n_eff_a=n_a, n_eff_b=n_b, rel_residual=rel_res, outlier_fraction=out_frac,
               confidence=float(min(1.0, max(0.0, conf))), used=int(ok.sum()))


def _starts(source: bool, ly: np.ndarray, lm: np.ndarray, lmu: np.ndarray, idle: np.ndarray, w: np.ndarray,
            previous: tuple[float, float] | None) -> list[np.ndarray]:
    """Starting points for the solver (log A[, log B])."""
    la = np.where(idle, ly - lmu, ly - lm)  # log A if the sample were on the A branch
    starts: list[np.ndarray] = []
    if previous is not None:
        pa, pb = np.log(max(previous[0], 1e-300)), np.log(max(previous[1], 1e-300))
        starts.append(np.array([pa] if source else [pa, pb]))
    if source:
        starts.append(np.array([_wquantile(la, w, 0.5)]))
        starts.append(np.array([_wquantile(la, w, 0.9)]))
        return starts
    spread = float(lm.max() - lm.min())
    starts.append(np.array([_wquantile(la, w, 0.5), float(ly.max()) + spread + 1.0]))  # all CPU-bound
    lb = _wquantile(ly, w, 0.5)
    starts.append(np.array([lb - float(lm.min()) + 1.0, lb]))  # all input-bound
    for q in (0.25, 0.5, 0.75):
        c = _wquantile(lm, w, q)
        lo, hi = (lm <= c) & ~idle, (lm >= c) | idle
        if lo.any() and hi.any():
            starts.append(np.array([_wquantile(la[lo], w[lo], 0.5), _wquantile(ly[hi], w[hi], 0.5)]))
    return starts
