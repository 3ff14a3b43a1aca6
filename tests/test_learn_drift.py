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

from soda_optimizer.learn import Learner, Signature, sample_from_observation
from soda_optimizer.learn.functions import LearningSettings, choose
from soda_optimizer.model import PEKind, ResourceFunction
from soda_optimizer.observed import PEObservation
from tests.learn_truth import error, run

PLAN = LearningSettings(enabled=True)
CHANGE = 50


def _planned_error(seed: int, c: float, s: float, r0: float, offered: bool, guess: tuple[float, float]) -> float:
    """50 windows at cost ``c``, then 5 at ``2c`` (5% noise, input x0.5-2, 20-150% of the need): the
    error of the planner's function against the new truth (bench_rfl_shapes' recovery measure),
    refitted every macro epoch as a lookup does. On main's code the declared function (the true a, b
    before the change, each off by up to x2.5) was kept for 8-13 windows on the fluid data plane."""
    rng = np.random.default_rng(seed)
    lr = Learner()
    sig = Signature.build("transform", "bench/drift:1", inputs=[("up", "up->pe")])
    declared = ResourceFunction(a=s / c * math.exp(guess[0]), b=s * math.exp(guess[1]))
    for i in range(CHANGE + 5):
        k = c if i < CHANGE else 2.0 * c
        r = r0 * float(np.exp(rng.uniform(math.log(0.5), math.log(2.0))))
        m = float(rng.uniform(0.2, 1.5)) * k * r
        p, used = run(k, r, m)
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
    assert model is not None
    planned = choose(PEKind.transform, declared, sig, lr, PLAN).rf
    return error(planned, 2.0 * c, s, r0, np.random.default_rng(seed + 1), 20)


def test_a_cost_that_doubles_is_planned_with_within_5_windows() -> None:
    """The done-means is a median (issue 52: recovery within 6 samples median): over 16 drawn PEs,
    half in each observation mode, the median error 5 windows after the change within 7% (bench_rfl_shapes'
    criterion) and 3 in 4 of them within it. Per PE it is not always so: over 30 draws the errors
    after 5 windows had median 1.7%, and 4 of them 10-25% (a change the noise hid for a window or two)."""
    rng = np.random.default_rng(52)
    errs = [_planned_error(int(rng.integers(0, 10_000)), float(rng.uniform(1.0, 10.0)), float(rng.uniform(0.2, 2.0)),
                           float(rng.uniform(50.0, 500.0)), i % 2 == 0,
                           (float(rng.uniform(-math.log(2.5), math.log(2.5))), float(rng.uniform(-math.log(2.5), math.log(2.5)))))
            for i in range(16)]
    assert float(np.median(errs)) <= 0.07, errs
    assert sum(e <= 0.07 for e in errs) >= 12, errs
