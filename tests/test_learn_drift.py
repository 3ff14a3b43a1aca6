"""Issue 52 item 2: drift recovered on the function the planner is handed. A PE whose cost per tuple
doubles (benchmarks/bench_rfl_shapes.py's ``drift``), observed as the fluid data plane observes it (it
receives all it is offered, no offered series: a saturated window is censored) and with the SDK's
offered rate, input x0.5-2, rebuilt from its true behaviour with fresh random draws. Traced on the
fluid data plane: the window was dropped 3 windows after the change, but the refit on the windows after
it was the paper-form fallback (fewer than 2 of them with CPU to spare) or not yet trusted, and the
planner kept the declared function, 25-128% off, for 8-13 windows (median 8)."""

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
CHANGE = 50


def _run(c: float, r: float, m: float) -> tuple[float, float]:
    """(processed, mips used) of a PE costing ``c`` mips per tuple, offered ``r``, with ``m`` mips."""
    return (r, c * r) if c * r <= m else (m / c, m)


def _error(rf: ResourceFunction, c: float, s: float, r0: float, rng: np.random.Generator) -> float:
    """bench_rfl_shapes' error on 20 fresh points (input x0.5-2 of ``r0``, 20-150% of its need): the
    mean of the output's and the mips used's relative errors against the noiseless truth."""
    errs = []
    for _ in range(20):
        r = r0 * float(np.exp(rng.uniform(math.log(0.5), math.log(2.0))))
        m = float(rng.uniform(0.2, 1.5)) * c * r
        p, used = _run(c, r, m)
        errs.append(0.5 * (abs(float(rf.rate_out(r, m)) / (s * p) - 1.0) + abs(float(rf.mips_used(r, m)) / used - 1.0)))
    return float(np.mean(errs))


@settings(max_examples=12, deadline=None, derandomize=True)
@given(seed=st.integers(0, 10_000), c=st.floats(1.0, 10.0), s=st.floats(0.2, 2.0), r0=st.floats(50.0, 500.0),
       offered=st.booleans(), guess=st.tuples(st.floats(-math.log(2.5), math.log(2.5)), st.floats(-math.log(2.5), math.log(2.5))))
def test_a_cost_that_doubles_is_planned_with_within_5_windows(seed: int, c: float, s: float, r0: float, offered: bool,
                                                              guess: tuple[float, float]) -> None:
    """50 windows at cost ``c``, then 5 at ``2c`` (5% noise, input x0.5-2, 20-150% of the need): the
    planner's function within 7% of the new truth (bench_rfl_shapes' recovery criterion), refitted
    every window as a lookup does. On main's code the declared function (the true a, b before the
    change, each off by up to x2.5) was kept for 8-13 windows on the fluid data plane."""
    rng = np.random.default_rng(seed)
    lr = Learner()
    sig = Signature.build("transform", "bench/drift:1", inputs=[("up", "up->pe")])
    declared = ResourceFunction(a=s / c * math.exp(guess[0]), b=s * math.exp(guess[1]))
    for i in range(CHANGE + 5):
        k = c if i < CHANGE else 2.0 * c
        r = r0 * float(np.exp(rng.uniform(math.log(0.5), math.log(2.0))))
        m = float(rng.uniform(0.2, 1.5)) * k * r
        p, used = _run(k, r, m)
        n_o, n_u = (float(np.exp(rng.normal(0.0, 0.05))) for _ in range(2))
        mips = min(m, used * n_u)
        obs = (PEObservation(received={"up->pe": p}, emitted={"pe->down": s * p * n_o}, mips=mips, offered={"up->pe": r}) if offered
               else PEObservation(received={"up->pe": r}, emitted={"pe->down": s * p * n_o}, mips=mips))
        sample = sample_from_observation(obs, PEKind.transform, m, 10.0 * i)
        assert sample is not None
        lr.observe(sig, [sample], 10.0 * i)
        if i % 6 == 5:
            lr.refit_all()  # a macro epoch
    model = lr.get(sig.key)
    assert model is not None and model.drifts >= 1
    planned = choose(PEKind.transform, declared, sig, lr, PLAN).rf
    assert _error(planned, 2.0 * c, s, r0, np.random.default_rng(seed + 1)) <= 0.07
