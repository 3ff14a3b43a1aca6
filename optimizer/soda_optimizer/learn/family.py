"""A family of resource functions wider than the paper's, chosen per PE by held-out error (issue 38).

The SODA paper (section 6.1) fits ``r_o = min(A r_i m, B r_i)``: the CPU needed to saturate a PE,
``B / A``, does not depend on its input rate, its output grows linearly with its mips until then,
and its selectivity ``B`` is a constant. Real operators break all three. This module describes a PE
by two functions of the rate ``p`` it *processes* (tuples/s taken in):

- the **CPU need** ``n(p)`` in mips, non-decreasing and convex, one of

  - ``linear``: ``c1 p`` (a fixed cost per tuple; the paper's form at one input rate),
  - ``paper``: the paper's own, ``K`` mips saturate the PE whatever its input and with less it
    processes the share ``m / K`` of its input (``c0 = K``),
  - ``affine``: ``c0 + c1 p`` (a background CPU term),
  - ``quadratic``: ``c0 + c1 p + c2 p^2`` (a cost per tuple growing with the rate; a concave response
    such as ``p = k sqrt(m)``),
  - ``hinge``: ``c0 + c1 p + c2 max(0, p - k)`` (piecewise linear: the cost per tuple steps up at
    ``k``; the knot is chosen among quantiles of the rates seen),

  all with non-negative coefficients (non-negative least squares in relative error,
  :func:`scipy.optimize.nnls`);
- the **selectivity** ``s(p) = r_o / p``, ``const`` (``s``) or ``power`` (``s (p / p0)^-beta``,
  ``|beta| <= 0.9``: selectivity falling, or rising, with the rate), fitted in log space.

With ``m`` mips and an offered input rate ``r_i`` the PE processes ``p = min(r_i, n^-1(m))``, emits
``s(p) p`` and uses ``min(m, n(r_i))`` mips. Every (selectivity, need) pair is judged by K-fold
cross-validation (leave-one-out below 12 samples) on the PE's own window, by the mean held-out log
error (capped at 0.5) of the *combined* prediction, output rate and mips used (a censored sample
under the paper's need by what it bounds: the output at the rate it received not above what it
emitted, :func:`_predict`); the simplest pair
within 5% of the best wins (``linear`` before ``paper``: a PE seen saturated only, without its
offered rate, bounds the paper's fixed need from below by the allocations it had, while a cost
per tuple extrapolates; exploration, :mod:`.explore`, relies on it), except that the paper's
form with a constant selectivity wins while within 25% of the best (``_PAPER_TOL``) and its fit on
every sample has at most 0.05 more outlier weight than that simplest pair's (``_PAPER_OUTLIERS``).
The fit's ``cv_error`` is the held-out weighted median of
``|predicted / observed - 1|`` under the chosen pair, which is what the learner's confidence is
built from (:mod:`.learner`). Every fit is robust (a start without samples a factor 4.5 off the
median cost per tuple, then rounds of Huber weights on log residuals, no weight beyond 0.5);
``outlier_fraction`` is the weight share of samples more than ``outlier_threshold`` (log units) off.
``support`` is how far down its CPU-bound branch the fit was seen (:func:`_support`): where the
samples measured the processed rate, the learner trusts a fit only when they reach at least
``LearnConfig.min_support`` of it, as below them the fit extrapolates.

**Which rate is processed** (the backpressure rule; :mod:`.sample` builds the samples):

- a sample with ``r_p`` (the offered rate was measured: ``r_i`` offered, ``r_p`` taken in) uses it;
- a sample with CPU to spare (``m_used < (1 - idle_margin) m``, and no saturated sample of the
  window allocated more that processed no more: else its reading dipped, :mod:`.spare`) processed
  all it was offered;
- a saturated sample without ``r_p`` (``censored``: its ``r_i`` is only what it took in, a lower bound
  of what was offered) gets ``p`` from its output through the selectivity fitted on the samples
  whose ``p`` is known (right whether the PE blocks its upstream or drops tuples), capped at
  ``r_i``; with fewer than 2 such samples, ``p = r_i`` (the PE SDK's sockets block: what was
  received is what was processed).

**What the optimizer plans with** (:meth:`FamilyFit.function`): the fit itself, as the curves of
:class:`soda_optimizer.model.ResourceFunction` (``need`` and ``output``, piecewise linear: exact for
the linear, affine and hinge needs and a constant selectivity; a geometric grid of ratio
``2^(1/4)`` from 1/256 to 4x the largest rate seen for a quadratic need or a power selectivity,
within about 1% of the fit), so the planner's output rates and saturation follow the input rate.
Its ``a`` and ``b`` are the paper's form matched at an operating input rate ``r`` (the weighted
median of the offered rates seen, :meth:`FamilyFit.at`): ``B = s(r)`` and ``A = s(r) / n(r)``
(``A = s(r) r / n(r)`` for a source), the same output at saturation and the same CPU to reach it,
for what reads only the paper's form. The ``paper`` need is handed over as that form alone (with a
selectivity that varies, as a cost per tuple matched at the operating rate and the output curve).
Departure: the paper has no such family.

Needs ``m_used`` (the CPU series): a sample without it cannot say which regime it was in, and
:func:`fit_family` returns None when fewer than 3 samples carry it (the learner then fits the
paper's form, :mod:`.fit`). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field
from scipy.optimize import nnls

from ..model import PEKind, ResourceFunction
from .spare import dips
from .window import table

if TYPE_CHECKING:
    from .model import Sample

Need = Literal["linear", "paper", "affine", "quadratic", "hinge"]
Selectivity = Literal["const", "power"]
NEEDS: tuple[Need, ...] = ("linear", "paper", "affine", "quadratic", "hinge")
_N_PARAMS = {"linear": 1, "paper": 1, "affine": 2, "quadratic": 3, "hinge": 3}
_MAX_BETA = 0.9
_CAP = 0.5  # a held-out log error counts at most this much (one wild sample does not pick the form)
_REJECT = 0.5  # a sample this far (log units) from the robust fit gets no weight (a stall, a bad scrape)
_TOL = 1.05  # the simplest form within 5% of the best held-out error wins
# the paper's form (constant selectivity, a need that does not grow with the rate) wins while it is
# within this factor of the best: a form only as good on the samples seen extrapolates worse, at
# the allocations the planner then tries, than the form the paper measured (bench_rfl: 8% error
# with curves from near-ties against 3.4% with the paper's form)
_PAPER_TOL = 1.25
# ... unless its fit on every sample has this much more outlier weight than the simplest near-best
# form's: the samples then show where it fails (bench_rfl_shapes, a background CPU term at a
# constant input: the paper's form Confident with 37% error at 40 and 50 samples, outlier share
# 0.08 and 0.11 against affine's 0-0.07)
_PAPER_OUTLIERS = 0.05
# issue 52: a saturated sample without a measured processed rate shows where the PE saturates only
# when it processed less than this share of what it received (5% noise on the output puts one
# window in six of a PE under backpressure, which receives what it processes, below 0.95)
_BEHIND = 0.8
SPARE = 0.9


class FamilyFit(BaseModel):
    """One PE's need and selectivity functions (rates in tuples/s, mips), and how well they predict."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    need: Need
    c: tuple[float, float, float]  # c0 (mips), c1 (mips per tuple/s), c2 (quadratic: per (tuple/s)^2; hinge: per tuple/s above the knot)
    knot: float = 0.0  # hinge only: the rate where the cost per tuple steps up
    selectivity: Selectivity
    s: float = Field(gt=0)  # selectivity at p0
    beta: float = 0.0  # power only: s(p) = s (p / p0)^-beta
    p0: float = Field(gt=0)  # the reference rate (the median processed rate seen)
    rate: float = Field(gt=0)  # the operating input rate for the paper's form (weighted median offered rate)
    p_max: float = Field(gt=0)  # the largest processed rate seen
    cv_error: float = Field(ge=0)  # held-out median |predicted / observed - 1| of output rate and mips used
    cv_mean: float = Field(default=0.0, ge=0)  # the same, the weighted mean (each sample's at most 1)
    in_error: float = Field(ge=0)  # the same, in sample
    outlier_fraction: float = Field(ge=0, le=1)
    n: int = Field(ge=0)  # samples used
    n_known: int = Field(ge=0)  # of which the processed rate was known (they fit the selectivity)
    # the share of the CPU-bound branch seen: 1 - the lowest (m - n(0)) / (n(r_i) - n(0)) (the paper's
    # need: m / K) over the CPU-bound samples whose processed rate was measured (r_p, not censored)
    # and, under a need per tuple, (n(r_p) - n(0)) / (n(rate) - n(0)) over the others; 0 with none;
    # None when no sample measured it (the offered rate unknown: nothing to tell it by)
    support: float | None = None
    # issue 52: where no sample measured the processed rate (``support`` None), the samples that
    # show the PE below its saturation: with CPU to spare (its need at the rate it received), or
    # saturated while processing clearly less than it received (the fluid data plane: the share it
    # fell behind shows where it saturates); and the fit's error on them, each judged at the rate it
    # received (not by what a censored sample bounds). None: not computed (an older state)
    n_evidence: int | None = None
    n_behind: int | None = None  # of which saturated and behind their input (the paper need's CPU-bound branch)
    # saturated windows allocated below ``_BEHIND`` of the fit's need at the rate they received yet
    # not behind it: where the paper's need says the PE processes the share m / K, they show it took
    # in what it processed (backpressure: the paper's need is then judged only by what they bound).
    # Windows allocated near the need tell fluid from backpressure apart in neither direction
    n_level: int | None = None
    evidence_error: float | None = None

    # ----------------------------------------------------------------- evaluation
    def need_at(self, p: np.ndarray | float) -> np.ndarray:
        return _need(self.need, np.asarray(self.c), self.knot, np.asarray(p, dtype=float))

    def sel_at(self, p: np.ndarray | float) -> np.ndarray:
        p = np.maximum(np.asarray(p, dtype=float), 1e-12)
        return np.asarray(self.s * (p / self.p0) ** (-self.beta), dtype=float)

    def processed(self, r_i: np.ndarray | float, m: np.ndarray | float) -> np.ndarray:
        """The rate processed with offered input ``r_i`` (inf: unbounded) and ``m`` mips."""
        return _invert(self, np.asarray(r_i, dtype=float), np.asarray(m, dtype=float))

    def predict(self, r_i: np.ndarray | float, m: np.ndarray | float) -> tuple[np.ndarray, np.ndarray]:
        """Output rate and mips used at offered input ``r_i`` and ``m`` mips allocated."""
        r = np.asarray(r_i, dtype=float)
        mm = np.asarray(m, dtype=float)
        p = self.processed(r, mm)
        used = np.minimum(mm, np.where(np.isfinite(r), self.need_at(np.where(np.isfinite(r), r, 0.0)), mm))
        return self.sel_at(p) * p, used

    def at(self, kind: PEKind, rate: float | None = None) -> tuple[float, float]:
        """The paper's ``(A, B)`` that agree with this fit at input rate ``rate`` (default: :attr:`rate`)."""
        r = float(rate if rate is not None else self.rate)
        n = max(float(self.need_at(r)), 1e-9)
        s = float(self.sel_at(r))
        if kind is PEKind.source:
            return max(s * r / n, 1e-12), 1.0
        return max(s / n, 1e-12), max(s, 1e-12)


    def function(self, kind: PEKind, combine: str = "sum") -> ResourceFunction:
        """The :class:`ResourceFunction` the optimizer plans with (the module docstring)."""
        a, b = self.at(kind)
        base = ResourceFunction(a=min(a, 1e9), b=min(b, 1e9), combine=combine)  # type: ignore[arg-type]
        if self.need == "paper" and (self.selectivity == "const" or self.beta == 0):
            return base
        top = 4.0 * max(self.p_max, self.rate, self.p0)
        smooth = self.need == "quadratic" and self.c[2] > 0
        grid = top * 2.0 ** (np.arange(-32, 1) / 4.0)  # 1/256 .. 1 of top, ratio 2^(1/4)
        if self.need == "paper":  # with a selectivity that varies: its need at the operating rate, per tuple
            xs = np.array([0.0, top])
            ys = xs * float(self.c[0]) / max(self.rate, 1e-12)
        elif smooth:
            xs = np.concatenate([[0.0], grid])
        else:
            xs = np.array([0.0, top] if self.need != "hinge" or not 0 < self.knot < top else [0.0, self.knot, top])
        if self.need != "paper":
            ys = self.need_at(xs)
        ys = ys + 1e-9 * (1.0 + float(np.max(ys))) * xs / top  # a flat stretch (no cost per tuple) made invertible
        if not (np.all(np.isfinite(ys)) and np.all(np.diff(ys) > 0)):
            return base  # a need that does not grow with the rate: the paper's form (nothing to invert)
        need = tuple(zip(xs.tolist(), ys.tolist()))
        if self.selectivity == "const" or self.beta == 0:
            out: tuple[tuple[float, float], ...] = ((0.0, 0.0), (top, float(self.s * top)))
        else:
            xo = np.concatenate([[0.0], grid])
            out = tuple(zip(xo.tolist(), (self.sel_at(xo) * xo).tolist()))
            out = ((0.0, 0.0),) + out[1:]
        try:
            return ResourceFunction(a=base.a, b=base.b, combine=base.combine, need=need, output=out)
        except ValueError:  # out of the model's bounds: the paper's form
            return base


# --------------------------------------------------------------------------- the functions


def _features(need: Need, p: np.ndarray, knot: float) -> np.ndarray:
    if need == "linear":
        return p[:, None]
    if need == "affine":
        return np.stack([np.ones_like(p), p], axis=1)
    if need == "quadratic":
        return np.stack([np.ones_like(p), p, p * p], axis=1)
    return np.stack([np.ones_like(p), p, np.maximum(p - knot, 0.0)], axis=1)


def _need(need: Need, c: np.ndarray, knot: float, p: np.ndarray) -> np.ndarray:
    if need == "paper":
        return np.asarray(np.full(np.shape(p), c[0]), dtype=float)
    if need == "linear":
        return np.asarray(c[1] * p, dtype=float)
    if need == "affine":
        return np.asarray(c[0] + c[1] * p, dtype=float)
    if need == "quadratic":
        return np.asarray(c[0] + c[1] * p + c[2] * p * p, dtype=float)
    return np.asarray(c[0] + c[1] * p + c[2] * np.maximum(p - knot, 0.0), dtype=float)


def _coef(need: Need, x: np.ndarray) -> np.ndarray:
    """(c0, c1, c2) from the solver's coefficients."""
    if need == "linear":
        return np.array([0.0, x[0], 0.0])
    if need == "affine":
        return np.array([x[0], x[1], 0.0])
    return np.array([x[0], x[1], x[2]])


def _invert(f: FamilyFit, r_i: np.ndarray, m: np.ndarray) -> np.ndarray:
    """min(r_i, the largest p with n(p) <= m), in closed form (n is non-decreasing and convex)."""
    r_i, m = np.broadcast_arrays(r_i, m)
    c0, c1, c2 = f.c
    if f.need == "paper":  # a share m / K of the input is processed
        r = np.where(np.isfinite(r_i), r_i, f.rate)
        return np.asarray(r * np.minimum(1.0, m / max(c0, 1e-12)), dtype=float)
    x = m - c0
    with np.errstate(divide="ignore", invalid="ignore"):
        if f.need in ("linear", "affine") or (f.need == "quadratic" and c2 <= 0) or (f.need == "hinge" and c2 <= 0):
            p = np.where(c1 > 0, x / c1, np.inf) if c1 > 0 else np.full(x.shape, np.inf)
        elif f.need == "quadratic":
            p = (-c1 + np.sqrt(c1 * c1 + 4.0 * c2 * np.maximum(x, 0.0))) / (2.0 * c2)
        else:
            k = f.knot
            below = (x / c1) if c1 > 0 else np.full(x.shape, np.inf)
            above = (x + c2 * k) / (c1 + c2)
            p = np.where(x <= c1 * k, below, above)
    p = np.where(x < 0, 0.0, p)
    p = np.minimum(np.maximum(p, 0.0), r_i)
    # no cost per tuple (c1 = c2 = 0) and an unknown offered rate (a censored sample): the largest
    # rate seen, not an infinite one (whose output would be inf x a falling selectivity = nan)
    return np.asarray(np.where(np.isinf(p), f.p_max, p), dtype=float)


def _nnls_fit(need: Need, p: np.ndarray, y: np.ndarray, w: np.ndarray, knot: float, rounds: int = 1,
              scale: float = 0.2) -> np.ndarray:
    """Non-negative coefficients minimising sum w ((n(p) - y) / y)^2, then ``rounds`` of robust
    reweighting: Huber weights on the log residuals (``scale``), none beyond ``_REJECT`` (a CPU
    reading that put a saturated sample among the idle ones, a stall)."""
    x = _features(need, p, knot)
    # start without the samples wildly off a cost per tuple fitted by the median (factor 4.5)
    lr = np.log(y / np.maximum(p, 1e-12))
    rw = w * (np.abs(lr - _wmedian(lr, w)) <= 1.5)
    if rw.sum() <= 0:
        rw = w
    for r in range(rounds + 1):
        sw = np.sqrt(rw) / y
        try:
            sol, _ = nnls(x * sw[:, None], sw * y, maxiter=50 * x.shape[1])
        except RuntimeError:  # nnls gave up: the least-squares solution clipped at 0
            sol = np.maximum(np.linalg.lstsq(x * sw[:, None], sw * y, rcond=None)[0], 0.0)
        if r == rounds:
            break
        res = np.abs(np.log(np.maximum(x @ sol, 1e-12) / y))
        nxt = w * np.minimum(1.0, scale / np.maximum(res, 1e-12)) * (res <= _REJECT)
        if nxt.sum() <= 0:
            break
        rw = nxt
    return _coef(need, sol)


def _sel_fit(kind: Selectivity, lp: np.ndarray, ly: np.ndarray, w: np.ndarray, scale: float = 0.2) -> tuple[float, float]:
    """(log s, beta) minimising sum w (log s - beta lp - ly)^2 (lp: log(p / p0)), robustly: a weighted
    median start, then two rounds of Huber weights (``scale`` in log units)."""
    power = kind == "power" and np.ptp(lp) >= 1e-9
    x = np.stack([np.ones_like(lp), -lp], axis=1) if power else np.ones((lp.size, 1))
    ls, beta = _wmedian(ly, w), 0.0
    for _ in range(3):
        res = np.abs(ls - beta * lp - ly)
        rw = w * np.minimum(1.0, scale / np.maximum(res, 1e-12)) * (res <= _REJECT)
        if rw.sum() <= 0:
            rw = w
        if power:
            sw = np.sqrt(rw)
            sol = np.linalg.lstsq(x * sw[:, None], ly * sw, rcond=None)[0]
            beta = float(np.clip(sol[1], -_MAX_BETA, _MAX_BETA))
        ls = float(np.sum(rw * (ly + beta * lp)) / np.sum(rw))
    return ls, beta


def _folds(n: int) -> list[np.ndarray]:
    """Held-out index sets: leave-one-out below 12 samples, else 5 interleaved folds (time order)."""
    k = n if n < 12 else 5
    idx = np.arange(n)
    return [idx[idx % k == j] for j in range(k)]


def _simplest(errors: dict[str, float], order: Sequence[str]) -> str:
    best = min(errors.values())
    return next(k for k in order if k in errors and errors[k] <= best * _TOL + 1e-4)


def fit_family(kind: PEKind, samples: Sequence[Sample], w_age: np.ndarray, *, idle_margin: float = 0.05,
               outlier_threshold: float = 0.3, f_scale: float = 0.1) -> FamilyFit | None:
    """The family fit of ``samples`` (age weights ``w_age``); None with fewer than 3 usable samples
    (positive rates and mips, and a CPU reading) or fewer than 2 whose processed rate is known (one
    regime only: the learner fits the paper's form and its bounds, :mod:`.fit`)."""
    if len(samples) < 3:
        return None
    arr = table(samples)[:, [0, 1, 2, 3, 5, 6]]  # r_i, m, r_o, m_used, r_p, censored (issue 52 item 4: a window's array as is)
    r_i, m, r_o, mu, rp, cens = arr.T
    w = np.asarray(w_age, dtype=float)
    ok = (r_i > 0) & (m > 0) & (r_o > 0) & np.isfinite(mu) & (mu > 0) & (w > 0)
    if int(ok.sum()) < 3:
        return None
    r_i, m, r_o, mu, rp, cens, w = r_i[ok], m[ok], r_o[ok], mu[ok], rp[ok], cens[ok], w[ok]
    sat = mu >= (1.0 - idle_margin) * m
    # issue 52 item 2: a low CPU reading that a saturated window contradicts is a dip, not CPU to
    # spare (:mod:`.spare`): saturated, and its received rate only a lower bound of the offered one
    dip = dips(r_i, m, mu, rp, idle_margin)
    sat |= dip
    cens = np.where(dip & ~(np.isfinite(rp) & (rp > 0)), 1.0, cens)
    # the mips the processed rate needed: a saturated PE used all it had (its CPU limit, exact), an
    # idle one what its CPU series says (noisy)
    y_need = np.where(sat, m, mu)
    measured = np.isfinite(rp) & (rp > 0)
    p_seen = np.where(measured, rp, r_i)
    known = measured | ~sat  # with CPU to spare, it processed all it was offered
    if int(known.sum()) < 2:
        return None
    n = r_i.size
    folds = _folds(n)
    rate = _wmedian(r_i, w)
    ki = np.flatnonzero(known)
    p0 = float(np.median(p_seen[ki]))
    lsel = np.log(r_o / p_seen)
    sel_x = np.log(p_seen / p0)
    sel_forms: list[Selectivity] = ["const"]
    if ki.size >= 8 and np.ptp(sel_x[ki]) >= 0.1:
        sel_forms.append("power")

    def processed(ls_: float, beta_: float) -> np.ndarray:
        """The processed rates: seen where known, else from the output through the selectivity."""
        inv = p0 * (r_o / (np.exp(ls_) * p0)) ** (1.0 / (1.0 - beta_))
        return np.where(known, p_seen, np.minimum(inv, r_i))

    def train_sel(form: Selectivity, idx: np.ndarray) -> tuple[float, float]:
        kk = idx[known[idx]]
        kk = kk if kk.size >= 2 else idx
        return _sel_fit(form, sel_x[kk], lsel[kk], w[kk])

    def solve(form: Need, knot: float, q: np.ndarray, k_est: np.ndarray, idx: np.ndarray, weights: np.ndarray,
              rounds: int = 2) -> np.ndarray:
        if form == "paper":
            return np.array([float(np.exp(_wmedian(np.log(k_est[idx]), weights))), 0.0, 0.0])
        return _nnls_fit(form, q[idx], y_need[idx], weights, knot, rounds, 2.0 * f_scale)

    def make(sel: Selectivity, form: Need, knot: float, ps: float, c: np.ndarray, lsel_: float, beta_: float,
             p_max: float) -> FamilyFit:
        real = (float(c[0]), float(c[1]) / ps, float(c[2]) / (ps * ps if form == "quadratic" else ps))
        return FamilyFit(need=form, c=real, knot=knot * ps, selectivity=sel, s=float(np.exp(lsel_)), beta=beta_, p0=p0,
                         rate=rate, p_max=p_max, cv_error=0.0, in_error=0.0, outlier_fraction=0.0, n=int(n),
                         n_known=int(known.sum()))

    r_eval = np.where(cens > 0, np.inf, r_i)
    behind = sat & ~known & (processed(*train_sel("const", np.arange(n))) < _BEHIND * r_i)
    # every (selectivity, need) pair, judged by the held-out error of the whole prediction (output
    # rate and mips used); in each fold the processed rates come from that fold's selectivity
    cands: list[tuple[float, int, Selectivity, Need, float, float]] = []
    # issue 52: the samples every form is judged on at the rate it received (not only by what they
    # bound: a censored sample not behind its input, under the paper's need, :func:`_predict`)
    strict = ~((cens > 0) & ~behind)
    held_by: dict[tuple[Selectivity, Need, float], np.ndarray] = {}
    rank = 0
    for sel in sel_forms:
        fold_sel = [train_sel(sel, np.setdiff1d(np.arange(n), hold)) for hold in folds]
        fold_p = [processed(*fs) for fs in fold_sel]
        ls_all, beta_all = train_sel(sel, np.arange(n))
        p_all = processed(ls_all, beta_all)
        ps = float(np.median(p_all))
        forms: list[tuple[Need, float]] = [("linear", 0.0), ("paper", 0.0)]
        if n >= 4:
            forms.append(("affine", 0.0))
        if n >= 6 and np.ptp(p_all / ps) > 0.1:
            forms.append(("quadratic", 0.0))
            for qq in (0.33, 0.67):
                forms.append(("hinge", float(np.quantile(p_all / ps, qq))))
        for form, knot in forms:
            held, score = np.full(n, _CAP), np.full(n, _CAP)
            for hold, (lsf, bf), pf in zip(folds, fold_sel, fold_p):
                tr = np.setdiff1d(np.arange(n), hold)
                if tr.size < _N_PARAMS[form]:
                    continue
                qf = pf / ps
                c = solve(form, knot, qf, np.where(sat, m * r_i / pf, mu), tr, w[tr])
                ff = make(sel, form, knot, ps, c, lsf, bf, float(pf.max()))
                held[hold] = _pair_error(ff, r_eval[hold], m[hold], r_o[hold], mu[hold], r_i[hold])
                score[hold] = _pair_log_error(ff, r_eval[hold], m[hold], r_o[hold], mu[hold], r_i[hold])
            held_by[(sel, form, knot)] = held
            ws = w * strict
            cands.append((float(np.sum(w * score) / np.sum(w)), rank, sel, form, knot,
                          float(np.sum(ws * score) / np.sum(ws)) if ws.sum() > 0 else _CAP))
            rank += 1
    best = min(c[0] for c in cands)
    near = [c for c in cands if c[0] <= best * _TOL + 1e-4]
    paper = [c for c in cands if c[3] == "paper" and c[2] == "const" and c[0] <= best * _PAPER_TOL + 1e-4]
    # issue 52: saturated samples that received what they processed (backpressure, no offered rate)
    bounded = not measured.any() and bool((sat & ~known).any()) and not behind.any()
    if not strict.all() and strict.any():
        # issue 52: a censored sample that is not behind its input cannot refute the paper's need
        # (it scores 0 there whatever K is) while it tests every other form: the paper's need is
        # compared with the simplest near-best other form on the samples both are judged on. Scored
        # on all, it won as soon as such samples outnumbered the noise of the others' fit on them
        # (bench_rfl_shapes, backpressure: windows whose CPU reading dipped, censored once
        # :mod:`.spare` tells them apart, made it win for a background CPU term, 48% off)
        others = [c for c in cands if c[3] != "paper"]
        top = min(c[0] for c in others)
        simple_o = min((c for c in others if c[0] <= top * _TOL + 1e-4), key=lambda c: c[1])
        pj = [c for c in cands if c[3] == "paper"]
        # (h52g) with ``bounded`` samples the paper's need wins only where it is better, not as the
        # simpler of equals: bench_rfl_shapes --pes 6, backpressure, constant input, PE 18 (a
        # background term of ~7,000 mips): its 6 windows with CPU to spare, all at the one input
        # rate, fitted the paper's need and the affine one alike; the paper's won as the simpler,
        # was not trusted (two windows at 0.76 of its K took in what they processed), and the
        # planner kept the declared function, 157% off (the affine fit: 2% off)
        fair = [c for c in pj if (not bounded and c[1] < simple_o[1] and c[5] <= simple_o[5] * _TOL + 1e-4)
                or c[5] * _TOL < simple_o[5]]
        near = [min(fair, key=lambda c: (c[5], c[1]))] if fair else [simple_o]
        paper = [c for c in pj if c[2] == "const" and c[5] <= simple_o[5] * _PAPER_TOL + 1e-4]
    if bounded:
        # issue 52: saturated samples that received what they processed (backpressure, no offered
        # rate) only bound the paper's fixed need from below: it gets no preference over the forms
        # their CPU-bound windows test (need(p) = m)
        paper = []
    simple = min(near, key=lambda c: c[1])

    def final(sel_: Selectivity, form_: Need, knot_: float) -> tuple[FamilyFit, float]:
        """The fit on every sample (two rounds of reweighting) and its outlier share."""
        ls_, beta_ = train_sel(sel_, np.arange(n))
        p_ = processed(ls_, beta_)
        ps_ = float(np.median(p_))
        c_ = solve(form_, knot_, p_ / ps_, np.where(sat, m * r_i / p_, mu), np.arange(n), w, 3)
        f_ = make(sel_, form_, knot_, ps_, c_, ls_, beta_, float(p_.max()))
        pr, pu = _predict(f_, r_eval, m, r_i, r_o)
        lo = np.abs(np.log(np.maximum(pr, 1e-12) / r_o))
        lu = np.abs(np.log(np.maximum(pu, 1e-12) / mu))
        return f_, float(np.sum(w[(lo > outlier_threshold) | (lu > outlier_threshold)]) / np.sum(w))

    _, _, sel_form, need_form, knot_q, _ = paper[0] if paper else simple
    out, out_frac = final(sel_form, need_form, knot_q)
    if paper and paper[0] is not simple and out_frac > _PAPER_OUTLIERS:
        alt, alt_frac = final(simple[2], simple[3], simple[4])
        if out_frac > alt_frac + _PAPER_OUTLIERS:
            (_, _, sel_form, need_form, knot_q, _), out, out_frac = simple, alt, alt_frac
    if not measured.any() and need_form != "paper" and out_frac > _PAPER_OUTLIERS:
        (_, _, sel_form, need_form, knot_q, _), out, out_frac = _fewer_outliers(cands, (sel_form, need_form, knot_q), out, out_frac, final)
    held_best = held_by[(sel_form, need_form, knot_q)]
    sup = _support(out, r_i, m, rp, cens, sat, idle_margin)
    ev_n, ev_behind, ev_level, ev_err = _evidence(out, r_i, m, r_o, mu, sat, processed(*train_sel(sel_form, np.arange(n))), known, w)
    return out.model_copy(update={"support": sup, "n_evidence": ev_n, "n_behind": ev_behind, "n_level": ev_level, "evidence_error": ev_err,
                                  "cv_error": _wmedian(held_best, w),
                                  "cv_mean": float(np.sum(w * np.minimum(held_best, 1.0)) / np.sum(w)),
                                  "in_error": _wmedian(_pair_error(out, r_eval, m, r_o, mu, r_i), w), "outlier_fraction": out_frac})


def _fewer_outliers(cands: list[tuple[float, int, Selectivity, Need, float, float]], chosen: tuple[Selectivity, Need, float],
                   out: FamilyFit, out_frac: float, final: Callable[[Selectivity, Need, float], tuple[FamilyFit, float]]
                   ) -> tuple[tuple[float, int, Selectivity, Need, float, float], FamilyFit, float]:
    """Issue 52 item 1: without a measured processed rate, the chosen form (not the paper's need)
    gives way to a form as good held out (within ``_TOL``) whose fit on every sample has at least
    ``_PAPER_OUTLIERS`` less outlier weight (the fewest; the simplest of equals), as the paper's form
    does to the simplest (``_PAPER_OUTLIERS``). Held out, the few windows that show a background CPU
    term may all fall in one fold, where no form predicts them: bench_rfl_shapes (``--pes 6``,
    backpressure, constant input) had a background PE whose only two windows saturated well below its
    operating rate (11.5 and 28.3 tuples/s at 1,254 and 1,412 mips) in fold 3 of 5: every form scored
    the cap there, the linear need won as the simplest, its fit on all 14 windows left those two out
    as outliers (0.14 of the weight, within ``max_outlier_fraction``) and it was Confident at 32%
    error, while the affine need fitted all 14 (1,144 + 9.7 p mips, the truth about 1,146 + 9.4 p).
    The paper's need is left out: a censored window is judged under it by what it bounds."""
    mine = next(c for c in cands if c[2:5] == chosen)
    best = (mine, out, out_frac)
    for c in sorted(cands, key=lambda c: c[1]):
        if c[3] == "paper" or c is mine or c[0] > mine[0] * _TOL + 1e-4:
            continue
        alt, alt_frac = final(c[2], c[3], c[4])
        if alt_frac + _PAPER_OUTLIERS <= out_frac and alt_frac < best[2]:
            best = (c, alt, alt_frac)
    return best


def _support(f: FamilyFit, r_i: np.ndarray, m: np.ndarray, rp: np.ndarray, cens: np.ndarray, sat: np.ndarray,
             idle_margin: float) -> float | None:
    """:attr:`FamilyFit.support`: how far down its CPU-bound branch the fit was seen. With the offered
    rate measured, a CPU-bound sample shows the share of its input a PE processed at its allocation
    (and, under a need per tuple, a sample with CPU to spare at a rate below the operating rate the
    need there); a fit seen only just below its saturation has not seen the branch the planner uses
    when it allocates less, where forms that agree near saturation part (a background CPU term:
    below it the PE emits nothing, and no sample is taken there)."""
    known = np.isfinite(rp) & (rp > 0) & (cens <= 0)
    if not known.any():
        return None
    bound = known & (sat | (rp < (1.0 - idle_margin) * r_i))
    if f.need == "paper":  # the share m / K of its input: only a CPU-bound sample shows it
        lo = m[bound] / max(f.c[0], 1e-12)
    else:  # a need per tuple: a sample with CPU to spare at a lower rate checked n(p) there too
        n0 = float(f.need_at(0.0))
        idle = known & ~bound
        lo = np.concatenate([(m[bound] - n0) / np.maximum(f.need_at(r_i[bound]) - n0, 1e-12),
                             (f.need_at(rp[idle]) - n0) / max(float(f.need_at(f.rate)) - n0, 1e-12)])
    return float(np.clip(1.0 - float(np.min(lo)), 0.0, 1.0)) if lo.size else 0.0


def _evidence(f: FamilyFit, r_i: np.ndarray, m: np.ndarray, r_o: np.ndarray, mu: np.ndarray, sat: np.ndarray,
              p: np.ndarray, known: np.ndarray, w: np.ndarray) -> tuple[int, int, int, float | None]:
    """:attr:`FamilyFit.n_evidence` and :attr:`FamilyFit.evidence_error` (issue 52): the samples below
    saturation, with CPU clearly to spare (``m_used < SPARE m``: a saturated PE's CPU reading
    dips below 95% of its limit one window in twenty with 3% noise) or saturated with a processed rate (``p``, from the output
    through the selectivity where it was not measured) below ``_BEHIND`` of what they received, and the
    weighted median of the fit's error on them, output and mips used, at the rate they received.
    Under backpressure a saturated PE receives what it processes, so only the samples with CPU to
    spare count: a fit from saturated samples alone has its saturation bounded from one side only.
    Also :attr:`FamilyFit.n_level`: the saturated windows that processed what they received though
    allocated below ``_BEHIND`` of the fit's need at that rate."""
    behind = sat & (p < _BEHIND * r_i) & ~known
    level = sat & ~known & ~behind & (m < _BEHIND * f.need_at(r_i))
    ev = (~sat & (mu < SPARE * m)) | behind  # ``sat`` holds the dips (:mod:`.spare`)
    if not ev.any():
        return 0, 0, int(level.sum()), None
    err = _pair_error(f, r_i[ev], m[ev], r_o[ev], mu[ev], r_i[ev])
    return int(ev.sum()), int(behind.sum()), int(level.sum()), _wmedian(err, w[ev])


def _predict(f: FamilyFit, r_i: np.ndarray, m: np.ndarray, seen: np.ndarray, r_o: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Output rate and mips used of samples at offered ``r_i`` (inf: censored, the offered rate
    unknown) and ``m`` mips, for judging them against their observed output ``r_o``.

    A censored sample was offered *at least* what it received (``seen``), an unknown rate. With a
    need per tuple it processed ``n^-1(m)`` whatever that rate was (it used all its mips), which is
    what ``predict`` at an unbounded rate gives. The paper's need processes the share ``m / K`` of
    what it is offered: its output grows without bound with the offered rate, so the sample only
    says that the output at ``seen`` is not above ``r_o`` (the offered rate that matches exists);
    it is judged by how far the output at ``seen`` lies above ``r_o`` (0 below: consistent), and
    its mips used as all it had (``predict`` at an unbounded rate): a ``K`` learned from
    saturated samples only bounds the need from below, and a probe past it (:mod:`.explore`)
    is a new operating point, not a misfit (judged by ``min(m, K)``, bench_rfl's explore arm
    dropped the window of 10 PEs as drifted, 32 nodes in all, on one seed). Judged at a fixed operating rate instead (what ``predict``
    does with an unbounded rate, for the planner), every sample received at another rate (an
    upstream that changed its allocation) was a misfit: bench_rfl's PEs whose input moved x14
    over the window had a third to a half of their samples counted as outliers and lost trust."""
    pr, pu = f.predict(r_i, m)
    cens = np.isinf(r_i)
    if not cens.any():
        return pr, pu
    # issue 52: a censored sample that fell behind what it received was not held back: it took in
    # all it was offered (the fluid data plane), so it is judged at that rate, as a sample with
    # CPU to spare is (:func:`behind`). Judged only by what it bounds, the paper's need with a K
    # too large scored 0 on every such window: in held-out error (bench_rfl_shapes, fluid: a
    # concave PE at 6.6% error against 0.7%) and in the drift test (a PE whose cost per tuple
    # changes with the tuple size, Confident at 19% error, held-out 3%, its drift never seen)
    lo, lu = f.predict(seen, m)
    beh = cens & behind(f, seen, r_o)
    pr, pu = np.where(beh, lo, pr), np.where(beh, lu, pu)
    if f.need != "paper":
        return pr, pu
    return np.where(cens & ~beh, np.maximum(lo, r_o), pr), pu


def behind(f: FamilyFit, seen: np.ndarray, r_o: np.ndarray) -> np.ndarray:
    """Per sample, whether its output ``r_o`` says it processed less than ``_BEHIND`` of what it
    received (``seen``): the processed rate from the output through the fit's selectivity."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        p = f.p0 * (np.asarray(r_o, dtype=float) / (f.s * f.p0)) ** (1.0 / (1.0 - f.beta))
    return np.asarray(p < _BEHIND * np.asarray(seen, dtype=float), dtype=bool)


def _pair_error(f: FamilyFit, r_i: np.ndarray, m: np.ndarray, r_o: np.ndarray, mu: np.ndarray, seen: np.ndarray) -> np.ndarray:
    """Per sample, the mean of |predicted / observed - 1| of the output rate and the mips used."""
    pr, pu = _predict(f, r_i, m, seen, r_o)
    return np.asarray(0.5 * (np.abs(pr / r_o - 1.0) + np.abs(pu / mu - 1.0)), dtype=float)


def _pair_log_error(f: FamilyFit, r_i: np.ndarray, m: np.ndarray, r_o: np.ndarray, mu: np.ndarray, seen: np.ndarray) -> np.ndarray:
    """Per sample, the mean of |log(predicted / observed)| of the output rate and the mips used, each
    at most ``_CAP``: what the forms are chosen by (a stall or a bad scrape costs a bounded amount)."""
    pr, pu = _predict(f, r_i, m, seen, r_o)
    lo = np.minimum(np.abs(np.log(np.maximum(pr, 1e-12) / r_o)), _CAP)
    lu = np.minimum(np.abs(np.log(np.maximum(pu, 1e-12) / mu)), _CAP)
    return np.asarray(0.5 * (lo + lu), dtype=float)


def _wmedian(x: np.ndarray, w: np.ndarray) -> float:
    order = np.argsort(x)
    cw = np.cumsum(w[order])
    i = int(np.searchsorted(cw, 0.5 * cw[-1]))
    return float(x[order][min(i, x.size - 1)])
