"""Issue 52 item 1, where the offered rate is measured: a PE whose output and CPU readings carry 20%
noise (benchmarks/bench_rfl_shapes.py's ``noise20``, varying input), rebuilt from its true behaviour
with fresh random draws. Traced: after 30 windows the fit of one such PE was 6.4% off the truth, but
its held-out error (0.156) and outlier share (0.37) were the noise's, so it was not trusted and the
planner was handed the declared function, 21.9% off (the shape's mean over PEs 10.1%, its median
3.4%). The oracle is the truth: what the planner is handed must be as close to it as a fit of such
windows can be, and never the declared function when the PE's own fit predicts its windows better."""

from __future__ import annotations

import math

import numpy as np

from soda_optimizer.learn import Learner, Signature, sample_from_observation
from soda_optimizer.learn.functions import LearningSettings, choose
from soda_optimizer.model import PEKind, ResourceFunction
from soda_optimizer.observed import PEObservation
from tests.learn_truth import error, run

PLAN = LearningSettings(enabled=True)


def _planned_error(seed: int, c: float, s: float, r0: float, guess: tuple[float, float]) -> float:
    """30 windows with 20% noise, input x0.5-2, 20-150% of the need: the error of the planner's function
    against the truth (the declared one, a user's guess, has the true a and b each off by up to x2.5).
    On main's code the fits the noise left untrusted were planned with their declared functions."""
    rng = np.random.default_rng(seed)
    lr = Learner()
    sig = Signature.build("transform", "bench/noise20:1", inputs=[("up", "up->pe")])
    for i in range(30):
        r = r0 * float(np.exp(rng.uniform(math.log(0.5), math.log(2.0))))
        m = float(rng.uniform(0.2, 1.5)) * c * r
        p, used = run(c, r, m)
        n_o, n_u = (float(np.exp(rng.normal(0.0, 0.2))) for _ in range(2))
        obs = PEObservation(received={"up->pe": p}, emitted={"pe->down": s * p * n_o}, mips=min(m, used * n_u), offered={"up->pe": r})
        sample = sample_from_observation(obs, PEKind.transform, m, 10.0 * i)
        assert sample is not None
        lr.observe(sig, [sample], 10.0 * i)
    declared = ResourceFunction(a=s / c * math.exp(guess[0]), b=s * math.exp(guess[1]))
    planned = choose(PEKind.transform, declared, sig, lr, PLAN).rf
    assert planned is not None
    return error(planned, c, s, r0, np.random.default_rng(seed + 1), 40)


def test_a_noisy_pe_seen_below_saturation_is_planned_with_its_own_fit() -> None:
    """Over 20 drawn PEs (cost, selectivity, rate, a declared function off by up to x2.5 each way):
    the median error of what the planner is handed within 7% and 9 in 10 within 15% (on main: the
    declared function, up to 78% off). Per PE it is not always so: over 40 draws the median was 3.3%
    and 2 were 10% and 19% off (a fit 30 windows of 20% noise could not pin down)."""
    rng = np.random.default_rng(52)
    errs = [_planned_error(int(rng.integers(0, 10_000)), float(rng.uniform(1.0, 10.0)), float(rng.uniform(0.2, 2.0)),
                           float(rng.uniform(50.0, 500.0)),
                           (float(rng.uniform(-math.log(2.5), math.log(2.5))), float(rng.uniform(-math.log(2.5), math.log(2.5)))))
            for _ in range(20)]
    assert float(np.median(errs)) <= 0.07, errs
    assert sum(e <= 0.15 for e in errs) >= 18, errs
