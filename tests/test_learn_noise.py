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
from hypothesis import given, settings
from hypothesis import strategies as st

from soda_optimizer.learn import Learner, Signature, sample_from_observation
from soda_optimizer.learn.functions import LearningSettings, choose
from soda_optimizer.model import PEKind, ResourceFunction
from soda_optimizer.observed import PEObservation

PLAN = LearningSettings(enabled=True)


def _run(c: float, r: float, m: float) -> tuple[float, float]:
    """(processed, mips used) of a PE costing ``c`` mips per tuple, offered ``r``, with ``m`` mips."""
    return (r, c * r) if c * r <= m else (m / c, m)


def _error(rf: ResourceFunction, c: float, s: float, r0: float, rng: np.random.Generator) -> float:
    """bench_rfl_shapes' error on 40 fresh points (input x0.5-2 of ``r0``, 20-150% of its need): the
    mean of the output's and the mips used's relative errors against the noiseless truth."""
    errs = []
    for _ in range(40):
        r = r0 * float(np.exp(rng.uniform(math.log(0.5), math.log(2.0))))
        m = float(rng.uniform(0.2, 1.5)) * c * r
        p, used = _run(c, r, m)
        errs.append(0.5 * (abs(float(rf.rate_out(r, m)) / (s * p) - 1.0) + abs(float(rf.mips_used(r, m)) / used - 1.0)))
    return float(np.mean(errs))


@settings(max_examples=25, deadline=None, derandomize=True)
@given(seed=st.integers(0, 10_000), c=st.floats(1.0, 10.0), s=st.floats(0.2, 2.0), r0=st.floats(50.0, 500.0),
       guess=st.tuples(st.floats(-math.log(2.5), math.log(2.5)), st.floats(-math.log(2.5), math.log(2.5))))
def test_a_noisy_pe_seen_below_saturation_is_planned_with_its_own_fit(seed: int, c: float, s: float, r0: float,
                                                                       guess: tuple[float, float]) -> None:
    """30 windows with 20% noise, input x0.5-2, 20-150% of the need: the planner's function within
    10% of the truth (the declared one, a user's guess, has the true a and b each off by up to x2.5).
    On main's code the fits the noise left untrusted were planned with their declared functions."""
    rng = np.random.default_rng(seed)
    lr = Learner()
    sig = Signature.build("transform", "bench/noise20:1", inputs=[("up", "up->pe")])
    for i in range(30):
        r = r0 * float(np.exp(rng.uniform(math.log(0.5), math.log(2.0))))
        m = float(rng.uniform(0.2, 1.5)) * c * r
        p, used = _run(c, r, m)
        n_o, n_u = (float(np.exp(rng.normal(0.0, 0.2))) for _ in range(2))
        obs = PEObservation(received={"up->pe": p}, emitted={"pe->down": s * p * n_o}, mips=min(m, used * n_u), offered={"up->pe": r})
        sample = sample_from_observation(obs, PEKind.transform, m, 10.0 * i)
        assert sample is not None
        lr.observe(sig, [sample], 10.0 * i)
    declared = ResourceFunction(a=s / c * math.exp(guess[0]), b=s * math.exp(guess[1]))
    planned = choose(PEKind.transform, declared, sig, lr, PLAN).rf
    assert planned is not None
    assert _error(planned, c, s, r0, np.random.default_rng(seed + 1)) <= 0.1
