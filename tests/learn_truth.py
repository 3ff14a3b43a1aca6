"""A PE with a constant cost per tuple, as the learner's unit tests simulate it, and the error of a
function against that noiseless truth (bench_rfl_shapes' measure), shared by tests/test_learn_drift.py
and tests/test_learn_noise.py."""

from __future__ import annotations

import math

import numpy as np

from soda_optimizer.model import ResourceFunction


def run(c: float, r: float, m: float) -> tuple[float, float]:
    """(processed, mips used) of a PE costing ``c`` mips per tuple, offered ``r``, with ``m`` mips."""
    return (r, c * r) if c * r <= m else (m / c, m)


def error(rf: ResourceFunction, c: float, s: float, r0: float, rng: np.random.Generator, points: int) -> float:
    """bench_rfl_shapes' error on ``points`` fresh points (input x0.5-2 of ``r0``, 20-150% of its need):
    the mean of the output's and the mips used's relative errors against the noiseless truth (a PE
    of cost ``c`` and selectivity ``s``)."""
    errs = []
    for _ in range(points):
        r = r0 * float(np.exp(rng.uniform(math.log(0.5), math.log(2.0))))
        m = float(rng.uniform(0.2, 1.5)) * c * r
        p, used = run(c, r, m)
        errs.append(0.5 * (abs(float(rf.rate_out(r, m)) / (s * p) - 1.0) + abs(float(rf.mips_used(r, m)) / used - 1.0)))
    return float(np.mean(errs))
