"""The family of learn/family.py (issue 38): on noiseless samples of each form it recovers the
truth (oracle: the true function evaluated independently), hands the optimizer the paper's (a, b)
that agree with it at the operating rate, and a drift is answered by dropping the old window."""

from __future__ import annotations

import numpy as np
import pytest

from soda_optimizer.learn import LearnConfig, Learner, Sample, Signature
from soda_optimizer.learn.family import fit_family
from soda_optimizer.model import PEKind

NEEDS = {
    "linear": lambda p: 3.0 * p,
    "affine": lambda p: 200.0 + 2.0 * p,
    "quadratic": lambda p: 50.0 + p + 0.01 * p * p,
    "hinge": lambda p: 2.0 * p + 4.0 * max(0.0, p - 150.0),
}


def _samples(need, sel, n: int, seed: int, t0: float = 0.0) -> list[Sample]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        r = 200.0 * float(np.exp(rng.uniform(np.log(0.5), np.log(2.0))))
        m = float(rng.uniform(0.2, 1.5)) * need(r)
        lo, hi = 0.0, r
        if need(r) > m:
            for _ in range(80):
                mid = 0.5 * (lo + hi)
                lo, hi = (mid, hi) if need(mid) <= m else (lo, mid)
            p = lo
        else:
            p = r
        if p <= 0:
            continue
        out.append(Sample(r_i=r, m=m, r_o=sel(p) * p, m_used=min(m, need(p)), r_p=p, t=t0 + i))
    return out


@pytest.mark.parametrize("form", sorted(NEEDS))
def test_each_form_is_recovered_from_noiseless_samples(form: str) -> None:
    need, sel = NEEDS[form], (lambda p: 0.5 * (p / 200.0) ** -0.3)
    s = _samples(need, sel, 60, 1)
    ff = fit_family(PEKind.transform, s, np.ones(len(s)))
    assert ff is not None and ff.cv_error < (0.04 if form == "hinge" else 0.02) and ff.outlier_fraction == 0.0
    errs = []
    for t in _samples(need, sel, 30, 2):
        pr, pu = ff.predict(t.r_i, t.m)
        errs += [abs(float(pr) / t.r_o - 1.0), abs(float(pu) / (t.m_used or 1.0) - 1.0)]
    # the hinge's knot is chosen among two quantiles of the rates seen, not fitted: off near the ends
    assert float(np.median(errs)) < 0.03 and max(errs) < (0.2 if form == "hinge" else 0.03)
    a, b = ff.at(PEKind.transform)  # the paper's form at the operating rate: same output and CPU at saturation
    assert b == pytest.approx(float(ff.sel_at(ff.rate)), rel=1e-9) and b / a == pytest.approx(float(ff.need_at(ff.rate)), rel=1e-9)


def test_drift_drops_the_old_window_and_a_poor_fit_is_never_confident() -> None:
    sig = Signature.build("transform", "x:1")
    lr = Learner(LearnConfig(half_life_s=1e6))
    before = _samples(NEEDS["linear"], lambda p: 0.5, 40, 3)
    after = _samples(lambda p: 6.0 * p, lambda p: 0.5, 12, 4, t0=100.0)
    for s in before:
        lr.observe(sig, [s], s.t or 0.0)
    m = lr.get(sig.key)
    assert m is not None and m.fit is not None and m.fit.trusted and m.family is not None
    for s in after:
        lr.observe(sig, [s], s.t or 0.0)
        lr.get(sig.key)  # refitted as a macro epoch would
    m = lr.get(sig.key)
    assert m is not None and m.drifts == 1 and len(m.samples) <= 12 and m.family is not None
    assert m.family.need_at(200.0) == pytest.approx(1200.0, rel=0.05)
    # pure noise: no form predicts it, never trusted
    rng = np.random.default_rng(5)
    junk = Learner()
    for i in range(40):
        junk.observe(sig, [Sample(r_i=float(rng.uniform(10, 1000)), m=float(rng.uniform(10, 1000)), r_o=float(rng.uniform(1, 100)),
                                  m_used=float(rng.uniform(1, 9)), t=float(i))], float(i))
    j = junk.get(sig.key)
    assert j is not None and j.fit is not None and j.fit.trusted is False and j.confidence < 0.5 and j.fit.no_fit
    assert junk.lookup(sig) is None


def test_the_paper_form_wins_near_ties_at_a_nearly_constant_rate() -> None:
    """Samples of the paper's own form, r_o = min(A r m, B r), at rates within 5% of each other (what a
    PE in a steady plan sees) with 10% noise: a need that grows with the rate fits them about as well
    but extrapolates worse at the allocations the planner then tries (bench_rfl: 8% error against
    3.4%), so the paper's form is chosen while it is within _PAPER_TOL of the best held-out error
    (before: `linear` on 13 of 20 seeds)."""
    sat, sel = 100.0, 0.5  # B / A: the mips that saturate the PE at any rate
    chosen = []
    for seed in range(20):
        rng = np.random.default_rng(seed)
        s = []
        for i in range(30):
            r = 200.0 * float(rng.uniform(0.95, 1.05))
            m = float(rng.uniform(0.2, 1.5)) * sat
            p = r * min(m / sat, 1.0)
            s.append(Sample(r_i=r, m=m, r_o=sel * p * float(rng.normal(1.0, 0.1)), m_used=min(m, sat) * float(rng.normal(1.0, 0.1)),
                            r_p=p, t=float(i)))
        ff = fit_family(PEKind.transform, s, np.ones(len(s)))
        chosen.append(ff.need if ff is not None else None)
    assert chosen == ["paper"] * 20, chosen


def test_a_background_cpu_term_is_never_confident_and_wrong() -> None:
    """The issue's done criterion as a property: a fit with more than 15% error against the truth is
    never Confident. PEs with a background CPU term (need = c0 + c p, c0 1.5-2x c r0: bench_rfl_shapes'
    ``background`` where it dominates) at a constant input, allocations 20-150% of the need at it, 5%
    noise, the offered rate measured; below c0 a PE emits nothing and gives no sample, so its
    CPU-bound windows are few and may all lie just below its saturation, where the paper's form and
    the truth agree. From 20 samples on. Error as bench_rfl_shapes measures it, on fresh points: the
    output relative to at least 10% of the output with CPU to spare, and the mips used. Before
    _PAPER_OUTLIERS: 2 PEs at 40 samples, the paper's form Confident with 30% error; before
    LearnConfig.min_support (a Confident fit has seen its CPU-bound branch): 7 PEs at 20 or 30
    samples (5 paper, 2 affine, 17-54% error). The well-identified fits stay Confident (204 of these
    PEs at 50 samples, with and without it)."""
    def run(need, r: float, m: float) -> tuple[float, float]:
        if need(r) <= m:
            return r, need(r)
        lo, hi = 0.0, r
        for _ in range(60):
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if need(mid) <= m else (lo, mid)
        return lo, min(m, need(lo))

    wrong, confident = [], 0
    for seed in range(300):
        rng = np.random.default_rng(100 + seed)
        r0 = float(np.exp(rng.uniform(np.log(50), np.log(500))))
        c = float(np.exp(rng.uniform(0.0, np.log(10))))
        c0 = float(rng.uniform(1.5, 2.0)) * c * r0  # the background term dominant: few CPU-bound windows
        s = float(rng.uniform(0.2, 2.0))
        need = lambda p, c0=c0, c=c: c0 + c * p  # noqa: E731
        sig = Signature.build("transform", f"bg/{seed}:1")
        lr = Learner()
        for i in range(50):
            m = float(rng.uniform(0.2, 1.5)) * need(r0)
            p, used = run(need, r0, m)
            n_o, n_u = (float(np.exp(rng.normal(0, 0.05))) for _ in range(2))
            if p <= 0:
                continue
            lr.observe(sig, [Sample(r_i=r0, r_p=p, m=m, r_o=s * p * n_o, m_used=min(m, used * n_u), t=10.0 * i)], 10.0 * i)
            if i + 1 in (20, 30, 40, 50):
                model = lr.get(sig.key)
                if model is None or model.family is None or model.fit is None or not model.fit.trusted or model.confidence < 0.5:
                    continue
                confident += i + 1 == 50
                ms = np.random.default_rng(10_000 + seed).uniform(0.2, 1.5, 40) * need(r0)  # fresh points apart
                truth = np.array([run(need, r0, x) for x in ms])
                ok = truth[:, 0] > 0
                po, pu = model.family.predict(np.full(40, r0), ms)
                t_o, t_u = s * truth[:, 0], truth[:, 1]
                err = 0.5 * (np.abs(po - t_o) / np.maximum(t_o, 0.1 * s * r0) + np.abs(pu - t_u) / np.maximum(t_u, 1e-9))
                e = float(np.mean(err[ok]))
                if e > 0.15:
                    wrong.append((seed, i + 1, model.family.need, round(e, 3)))
    assert wrong == [] and confident >= 200, (wrong, confident)


def test_support_is_how_far_down_the_cpu_bound_branch_the_samples_reach() -> None:
    """FamilyFit.support against its definition, computed here from the samples: with the processed
    rate measured, 1 - the lowest m / n(r_i) over the CPU-bound samples (a linear need, n(0) = 0)
    and n(r_p) / n(rate) over the others; None without a measured processed rate (the rule does not
    apply); a PE with CPU to spare at one rate only has seen none of its branch."""
    need = NEEDS["linear"]
    s = _samples(need, lambda p: 0.5, 40, 11)
    ff = fit_family(PEKind.transform, s, np.ones(len(s)))
    assert ff is not None and ff.need == "linear" and ff.support is not None
    lo = min(min(x.m / float(ff.need_at(x.r_i)) for x in s if x.r_p is not None and x.r_p < 0.95 * x.r_i),
             min(float(ff.need_at(x.r_p)) / float(ff.need_at(ff.rate)) for x in s if x.r_p is not None and x.r_p >= 0.95 * x.r_i))
    assert ff.support == pytest.approx(1.0 - lo, abs=0.02)
    blind = [x.model_copy(update={"r_p": None}) for x in s if x.r_p is not None and x.r_p >= 0.95 * x.r_i]  # no offered rate
    fb = fit_family(PEKind.transform, blind, np.ones(len(blind)))
    assert fb is not None and fb.support is None
    idle = [Sample(r_i=200.0, r_p=200.0, m=900.0 * (1 + 0.01 * i), r_o=100.0, m_used=600.0, t=float(i)) for i in range(12)]
    fi = fit_family(PEKind.transform, idle, np.ones(len(idle)))
    assert fi is not None and fi.support == 0.0
    lr = Learner()
    sig = Signature.build("transform", "idle:1")
    lr.observe(sig, idle, 20.0)
    model = lr.get(sig.key)
    assert model is not None and model.fit is not None and not model.fit.trusted  # its CPU-bound branch never seen
