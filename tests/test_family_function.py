"""A family fit handed to the optimizer (issue 38): the ResourceFunction of :meth:`FamilyFit.function`
predicts what the fit predicts (output rate and mips used) over the rates and allocations it was
fitted on, for every need form and both selectivities; the paper need is handed over as the paper's
form, which agrees with the fit exactly."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from soda_optimizer.learn.family import FamilyFit
from soda_optimizer.model import PEKind


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(["linear", "affine", "quadratic", "hinge"]), st.floats(0.0, 500.0), st.floats(0.01, 10.0), st.floats(0.0, 0.05),
       st.floats(0.2, 0.8), st.sampled_from(["const", "power"]), st.floats(-0.9, 0.9), st.floats(10.0, 1000.0),
       st.sampled_from([PEKind.transform, PEKind.source]), st.integers(0, 1000))
def test_function_predicts_what_the_fit_predicts(need, c0, c1, c2, kq, sel, beta, rate, kind, seed):
    c = (0.0 if need == "linear" else c0, c1, c2 if need in ("quadratic", "hinge") else 0.0)
    if need == "hinge":
        c = (c[0], c[1], c[1] * 2.0)
    f = FamilyFit(need=need, c=c, knot=kq * rate, selectivity=sel, s=0.7, beta=beta if sel == "power" else 0.0, p0=rate, rate=rate,
                  p_max=2.0 * rate, cv_error=0.0, in_error=0.0, outlier_fraction=0.0, n=20, n_known=20)
    rf = f.function(kind)
    assert rf.curved
    rng = np.random.default_rng(seed)
    r = rate * np.exp(rng.uniform(np.log(0.5), np.log(2.0), 200))
    m = rng.uniform(0.2, 1.5, 200) * f.need_at(r)
    po, pu = f.predict(r, m)
    ro, ru = rf.rate_out(r, m, kind is PEKind.source), rf.mips_used(r, m, kind is PEKind.source)
    # a quadratic need (and a power selectivity) is a grid of chords (ratio 2^(1/4)): within 1% of the need, and of the output
    # relative to 10% of what the PE emits at that input with CPU to spare (just above a background
    # term the output is a few tuples/s: any error is a large share of it), where the grid is: from
    # 1/256 of 4x the largest rate seen (below, one chord from 0)
    full = f.predict(r, np.full(r.shape, np.inf))[0]
    tol = 0.01 if need == "quadratic" or sel == "power" else 1e-6  # power: a grid of chords too
    on_grid = f.processed(r, m) >= 4.0 * max(f.p_max, f.rate, f.p0) / 256
    assert np.max((np.abs(ro - po) / np.maximum(po, 0.1 * full))[on_grid], initial=0.0) < tol + 1e-6
    assert np.abs(ru / pu - 1.0).max() < tol
    assert rf.saturation(r) == pytest.approx(f.need_at(r), rel=tol)


def test_the_paper_need_is_handed_over_as_the_paper_form():
    f = FamilyFit(need="paper", c=(400.0, 0.0, 0.0), selectivity="const", s=0.5, p0=100.0, rate=100.0, p_max=200.0, cv_error=0.0,
                  in_error=0.0, outlier_fraction=0.0, n=20, n_known=20)
    rf = f.function(PEKind.transform)
    assert not rf.curved
    r, m = np.array([50.0, 100.0, 200.0]), np.array([100.0, 400.0, 800.0])
    assert rf.rate_out(r, m) == pytest.approx(f.predict(r, m)[0], rel=1e-9)


def test_an_unknown_offered_rate_without_a_cost_per_tuple_predicts_a_finite_rate():
    """A censored sample (offered rate unknown: inf) of a fit with no cost per tuple and a falling
    selectivity: the largest rate seen, not inf x 0 = nan (nan held-out errors would pick forms)."""
    f = FamilyFit(need="affine", c=(300.0, 0.0, 0.0), selectivity="power", s=0.5, beta=0.5, p0=100.0, rate=100.0, p_max=250.0,
                  cv_error=0.0, in_error=0.0, outlier_fraction=0.0, n=20, n_known=20)
    out, used = f.predict(np.array([np.inf, 100.0]), np.array([400.0, 400.0]))
    assert np.all(np.isfinite(out)) and out[0] == pytest.approx(float(f.sel_at(250.0)) * 250.0)


def test_the_paper_need_with_a_falling_selectivity_keeps_its_output_curve():
    """At the operating rate (all the samples of a constant input say), what the fit predicts."""
    f = FamilyFit(need="paper", c=(400.0, 0.0, 0.0), selectivity="power", s=0.5, beta=0.5, p0=100.0, rate=100.0, p_max=200.0,
                  cv_error=0.0, in_error=0.0, outlier_fraction=0.0, n=20, n_known=20)
    rf = f.function(PEKind.transform)
    assert rf.curved
    m = np.array([80.0, 200.0, 399.0, 800.0])
    r = np.full(m.shape, 100.0)
    assert rf.rate_out(r, m) == pytest.approx(f.predict(r, m)[0], rel=0.01)
    assert rf.mips_used(r, m) == pytest.approx(f.predict(r, m)[1], rel=1e-6)
