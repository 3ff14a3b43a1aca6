"""Issue 52 item 1, where the offered rate is measured: a PE whose cost per tuple moves with its tuple
size (benchmarks/bench_rfl_shapes.py's ``tuplesize``: x0.67-1.5 over 30 min, a window every 10 s),
rebuilt from its true behaviour (written here, independently of the learner's model code) with fresh
random draws. The oracle is the truth now: what the planner is handed
(:func:`soda_optimizer.learn.functions.choose`) must need the mips the PE needs at the newest
window, not the mean of its window (traced: after 30 windows of a rising cost the fit said x1.2
where the PE was at x1.42, and the planner's function was 7.8-9.7% off, mean over PEs)."""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Callable

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from soda_optimizer.learn import Learner, Signature, sample_from_observation
from soda_optimizer.learn.functions import LearningSettings, choose
from soda_optimizer.model import PEKind, ResourceFunction
from soda_optimizer.observed import PEObservation

EPOCH_S = 10.0
PLAN = LearningSettings(enabled=True)


def _cycle(i: int) -> float:
    """The tuple size's factor on the cost per tuple at window ``i`` (x0.67-1.5 over 30 min)."""
    return math.exp(math.log(1.5) * math.sin(2 * math.pi * i * EPOCH_S / 1800.0))


def _run(need: Callable[[float], float], r: float, m: float) -> tuple[float, float]:
    """(processed, mips used) of a PE needing ``need(p)`` mips for ``p`` tuples/s, offered ``r``, with ``m`` mips."""
    if need(r) <= m:
        return r, need(r)
    lo, hi = 0.0, r
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if need(mid) <= m else (lo, mid)
    return lo, m


def _learn(seed: int, c: float, s: float, r0: float, n: int, varying: bool, cost: Callable[[int], float], noise: float = 0.05
           ) -> tuple[Learner, Signature]:
    """``n`` windows of a PE costing ``c x cost(i)`` mips per tuple, emitting ``s`` per tuple, offered
    ``r0`` (x0.5-2 when ``varying``) with 20-150% of its need, observed with the offered rate (the SDK's)."""
    rng = np.random.default_rng(seed)
    lr = Learner()
    sig = Signature.build("transform", f"bench/tuplesize-{seed}:1", inputs=[("up", "up->pe")])
    for i in range(n):
        r = r0 * (float(np.exp(rng.uniform(math.log(0.5), math.log(2.0)))) if varying else 1.0)
        k = c * cost(i)
        m = float(rng.uniform(0.2, 1.5)) * k * r
        p, used = _run(functools.partial(operator.mul, k), r, m)
        n_o, n_u = (float(np.exp(rng.normal(0.0, noise))) for _ in range(2))
        obs = PEObservation(received={"up->pe": p}, emitted={"pe->down": s * p * n_o}, mips=min(m, used * n_u), offered={"up->pe": r})
        sample = sample_from_observation(obs, PEKind.transform, m, i * EPOCH_S)
        assert sample is not None
        lr.observe(sig, [sample], i * EPOCH_S)
    return lr, sig


def _planned_error(lr: Learner, sig: Signature, k_now: float, s: float, r0: float, varying: bool, rng: np.random.Generator) -> float:
    """bench_rfl_shapes' error of what the planner is handed, against the PE costing ``k_now`` per
    tuple: on 40 fresh points (input ``r0``, x0.5-2 of it when ``varying``; 20-150% of its need
    there), the mean of the output's and the mips used's relative errors."""
    rf = choose(PEKind.transform, ResourceFunction(a=1.0, b=1.0), sig, lr, PLAN).rf
    assert rf is not None
    errs = []
    for _ in range(40):
        r = r0 * (float(np.exp(rng.uniform(math.log(0.5), math.log(2.0)))) if varying else 1.0)
        m = float(rng.uniform(0.2, 1.5)) * k_now * r
        p, used = _run(functools.partial(operator.mul, k_now), r, m)
        errs.append(0.5 * (abs(float(rf.rate_out(r, m)) / (s * p) - 1.0) + abs(float(rf.mips_used(r, m)) / used - 1.0)))
    return float(np.mean(errs))


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 10_000), c=st.floats(1.0, 10.0), s=st.floats(0.2, 2.0), r0=st.floats(50.0, 500.0),
       varying=st.booleans())
def test_a_cost_per_tuple_rising_with_the_tuple_size_is_planned_at_its_cost_now(seed: int, c: float, s: float, r0: float,
                                                                                  varying: bool) -> None:
    """30 windows into the cycle the PE costs x1.42 its cost at the first; what the planner is handed
    is within 5% of it (on main's code the fit of the window's mean cost, x1.2: 5.5-10% off)."""
    lr, sig = _learn(seed, c, s, r0, 30, varying, _cycle)
    assert _planned_error(lr, sig, c * _cycle(30), s, r0, varying, np.random.default_rng(seed + 1)) <= 0.05


@settings(max_examples=10, deadline=None, derandomize=True)
@given(seed=st.integers(0, 10_000), c=st.floats(1.0, 10.0), r0=st.floats(50.0, 500.0), noise=st.sampled_from([0.05, 0.2]),
       varying=st.booleans())
def test_a_stationary_cost_is_not_moved_by_a_trend_read_into_noise(seed: int, c: float, r0: float, noise: float, varying: bool) -> None:
    """A guard (it passes on main's code too, where nothing moves the fit): a PE whose cost does not
    move, with 5% or 20% noise, refitted every 6 windows over 60, is planned with its window's fit
    itself (the drift test's anchor) at every refit: no trend is read into the noise."""
    rng = np.random.default_rng(seed)
    lr = Learner()
    sig = Signature.build("transform", "bench/stationary:1", inputs=[("up", "up->pe")])
    for i in range(60):
        r = r0 * (float(np.exp(rng.uniform(math.log(0.5), math.log(2.0)))) if varying else 1.0)
        m = float(rng.uniform(0.2, 1.5)) * c * r
        p, used = _run(lambda x: c * x, r, m)
        n_o, n_u = (float(np.exp(rng.normal(0.0, noise))) for _ in range(2))
        obs = PEObservation(received={"up->pe": p}, emitted={"pe->down": p * n_o}, mips=min(m, used * n_u), offered={"up->pe": r})
        sample = sample_from_observation(obs, PEKind.transform, m, i * EPOCH_S)
        assert sample is not None
        lr.observe(sig, [sample], i * EPOCH_S)
        if (i + 1) % 6 == 0:
            model = lr.get(sig.key)
            assert model is not None and model.family is not None
            if model.fit is not None and model.fit.trusted:
                assert model.family == model.anchor
