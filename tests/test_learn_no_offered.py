"""Issue 52 items 1-2 (h52g), the learner without an offered rate (the fluid data plane and
backpressure): cases traced in benchmarks/bench_rfl_shapes.py, replayed window by window. The oracle
is the truth: a fit the learner calls Confident must predict the PE's output rate and mips used
within 15% on operating points at its input (bench_rfl_shapes' error, the output's against at least
10% of its output with CPU to spare)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from soda_optimizer.learn import Learner, Signature, sample_from_observation
from soda_optimizer.learn.functions import LearningSettings, choose
from soda_optimizer.learn.model import LearnedModel
from soda_optimizer.learn.plateau import plateau
from soda_optimizer.model import PEKind, ResourceFunction
from soda_optimizer.observed import PEObservation


def _confident(model: LearnedModel | None) -> bool:
    return model is not None and model.fit is not None and model.confidence >= 0.5 and model.fit.trusted is not False


def _truth_error(model: LearnedModel, need: Callable[[float], float], s: float, r0: float, cap: float = float("inf")) -> float:
    """The mean over 40 allocations (20-150% of its need at ``r0``) of the output's and the mips
    used's relative errors of ``model`` against a PE needing ``need(p)`` mips for ``p`` tuples/s and
    emitting ``s p`` (at most ``cap`` tuples/s, busy on all its mips past it)."""
    errs = []
    for m in np.linspace(0.2, 1.5, 40) * need(r0):
        top = min(r0, cap)
        if need(top) <= m:
            p, used = top, (m if r0 > cap else need(top))
        else:
            lo, hi = 0.0, top
            for _ in range(60):
                mid = 0.5 * (lo + hi)
                lo, hi = (mid, hi) if need(mid) <= m else (lo, mid)
            p, used = lo, m
        if p <= 1e-9:
            continue
        if model.family is not None:
            p_o, p_u = (float(x) for x in model.family.predict(r0, m))
        else:  # the paper's form (the fit.py fallback)
            p_o, p_u = min(model.a * r0 * m, model.b * r0), min(m, model.b / model.a)
        errs.append(0.5 * (abs(p_o - s * p) / max(s * p, 0.1 * s * r0) + abs(p_u - used) / used))
    return float(np.mean(errs))


# bench_rfl_shapes --pes 6, backpressure, constant input, PE 19 (background-1): the 14 windows its own
# node held after 20 samples (the 6 below its background term received nothing: no sample), as
# (t, received, mips allocated, emitted, CPU reading)
_BACKGROUND_19 = [
    (0, 70.4262, 2036.92, 124.7588, 1836.74), (20, 70.4262, 2594.16, 124.6654, 1876.45),
    (40, 11.5188, 1254.46, 20.8425, 1254.46), (50, 70.4262, 2338.23, 125.1007, 1757.07),
    (70, 70.4262, 1814.71, 133.8168, 1814.71), (80, 65.0004, 1756.61, 123.7720, 1669.95),
    (110, 70.4262, 2508.92, 128.8699, 1863.79), (120, 28.2702, 1411.74, 49.6091, 1348.36),
    (130, 70.4262, 2544.30, 129.5262, 1921.64), (140, 70.4262, 2074.49, 127.2075, 1750.52),
    (160, 70.4262, 2543.85, 130.7205, 1770.23), (170, 68.5190, 1789.65, 111.3001, 1789.65),
    (180, 70.4262, 1896.33, 122.2014, 1761.37), (190, 70.4262, 2453.38, 123.6529, 1973.18),
]


def test_two_windows_that_show_a_background_term_are_not_left_out_as_outliers() -> None:
    """The one Confident fit over 15% error of bench_rfl_shapes ``--pes 6`` without an offered rate
    (h52d's run: backpressure, constant input): ``need = 1146 + 9.39 p`` at 70.4 tuples/s offered.
    Only two windows saturated well below the operating rate (11.5 and 28.3 tuples/s at 1,254 and
    1,412 mips), and the 5 interleaved folds held both out together, where no form predicts them:
    every form scored the cap there, the linear need won as the simplest, left them out as outliers
    (0.14 of the weight) and was Confident at 32% error. The affine need fits all 14 windows. Main:
    linear, Confident (0.55), 32% error."""
    c0, c, s, r0 = 1146.31, 9.3892, 1.8019, 70.426
    sig = Signature.build("transform", "bench/background-1:1", inputs=[("up", "up->pe")])
    lr = Learner()
    for t, r, m, o, mu in _BACKGROUND_19:
        smp = sample_from_observation(PEObservation(received={"up->pe": r}, emitted={"pe->down": o}, mips=mu), PEKind.transform, m, t)
        assert smp is not None and smp.censored == (mu >= 0.95 * m)
        lr.observe(sig, [smp], t)
    model = lr.get(sig.key)
    assert model is not None and model.family is not None
    err = _truth_error(model, lambda p: c0 + c * p, s, r0)
    assert not _confident(model) or err <= 0.15, (model.family.need, model.confidence, err)


def _planned_error(rf: ResourceFunction, need: Callable[[float], float], s: float, r0: float, cap: float) -> float:
    """:func:`_truth_error` of the function the planner is handed (its ``rate_out``, ``mips_used``)."""
    errs = []
    for m in np.linspace(0.2, 1.5, 40) * need(r0):
        top = min(r0, cap)
        p = top if need(top) <= m else m / (need(top) / top)  # a need per tuple: linear
        used = m if (need(top) > m or r0 > cap) else need(top)
        p_o, p_u = float(rf.rate_out(r0, m)), float(rf.mips_used(r0, m))
        errs.append(0.5 * (abs(p_o - s * p) / max(s * p, 0.1 * s * r0) + abs(p_u - used) / used))
    return float(np.mean(errs))


@pytest.mark.parametrize("mode", ["fluid", "backpressure"])
def test_a_pe_busy_past_a_plateau_is_planned_with_its_plateau_and_never_confident(mode: str) -> None:
    """bench_rfl_shapes' memory-bound PE (``--pes 6``, constant input, PE 42: ``need = 2.96 p``, at
    most 273 tuples/s of the 374 offered, busy on all its mips past it). Every window is saturated,
    none has CPU to spare: no family fit, the paper's form on ``r_o / r_i`` says it uses ``B / A``
    mips at most (half its windows used up to twice that), never trusted, and the planner kept its
    declared function (50% off; over the 6 PEs after 30 samples 20.5% mean on the fluid data plane,
    27.2% under backpressure). Its windows show the output's hinge in the mips and the busy plateau:
    the planner is handed that (:mod:`soda_optimizer.learn.plateau`), within 15%; the plateau is never
    Confident (a paper's fit that passed its checks may be, within 15%). Main: the declared function,
    57% off here."""
    c, s, r0, cap = 2.963, 1.836, 374.0, 273.0
    need = lambda p: c * p  # noqa: E731
    declared = ResourceFunction(a=2.0 * s * cap / r0 / (c * cap), b=0.5 * s * cap / r0)  # the paper's form at r0, off x2
    for seed in range(3):
        rng = np.random.default_rng(seed)
        sig = Signature.build("transform", f"bench/memory-{seed}:1", inputs=[("up", "up->pe")])
        lr = Learner()
        for i in range(30):
            m = float(rng.uniform(0.2, 1.5)) * need(r0)
            p = min(cap, m / c)
            o = s * p * float(np.exp(rng.normal(0, 0.05)))
            mu = min(m, m * float(np.exp(rng.normal(0, 0.05))))  # busy on all it has, CPU-bound or past the cap
            got = {"up->pe": r0 if mode == "fluid" else p}
            smp = sample_from_observation(PEObservation(received=got, emitted={"pe->down": o}, mips=mu), PEKind.transform, m, 10.0 * i)
            assert smp is not None
            lr.observe(sig, [smp], 10.0 * i)
            if (i + 1) % 6 == 0:
                lr.refit_all()
        model = lr.get(sig.key)
        assert model is not None and (not _confident(model) or _truth_error(model, need, s, r0, cap) <= 0.15)
        choice = choose(PEKind.transform, declared, sig, lr, LearningSettings(enabled=True))
        err = _planned_error(choice.rf, need, s, r0, cap)
        assert choice.source.startswith("learned") and err <= 0.15, (seed, choice.source, err)


# bench_rfl_shapes --pes 6, backpressure, constant input, PE 18 (background-0: need = 7,055 + 9.29 p
# mips, 423 tuples/s offered, s = 0.226): the 18 windows its own node held after 30 samples
_BACKGROUND_18 = [
    (20, 122.5405, 8193.15, 29.7105, 8193.15), (50, 414.6315, 10906.11, 90.2356, 10906.11),
    (70, 397.3062, 10745.20, 95.0433, 10568.91), (80, 166.1258, 8597.97, 41.9158, 8176.95),
    (90, 423.0522, 15777.40, 97.4331, 10962.51), (100, 310.1004, 9935.22, 65.4768, 9748.35),
    (110, 334.2518, 10159.54, 82.3842, 10159.54), (120, 423.0522, 16470.17, 93.7830, 10136.66),
    (130, 151.8247, 8465.14, 34.3486, 8293.95), (140, 423.0522, 15237.47, 105.1704, 10721.90),
    (150, 423.0522, 13255.12, 99.8498, 10544.69), (170, 353.7397, 10340.55, 82.3057, 9761.65),
    (190, 423.0522, 13227.07, 88.1469, 10778.54), (200, 423.0522, 11014.82, 92.3039, 11014.82),
    (210, 280.8705, 9663.73, 60.5765, 9663.73), (220, 226.2457, 9156.37, 49.3036, 9156.37),
    (240, 423.0522, 15992.59, 100.0088, 10864.73), (250, 423.0522, 11288.76, 98.4251, 11159.06),
]


def test_under_backpressure_the_papers_need_is_not_chosen_as_the_simpler_of_equals() -> None:
    """bench_rfl_shapes ``--pes 6`` (backpressure, constant input): what the planner was handed for
    the background shape after 30 samples was 27.8% off on mean, all of it this PE (157%). Its 6
    windows with CPU to spare, all at the one input rate, fit the paper's need (K = 10,722 mips) and
    the affine one alike; the paper's won as the simpler of the two, and was not trusted (two
    windows at 0.76 of its K took in what they processed: backpressure, where the paper's need is
    judged only by what its saturated windows bound), so the declared function stayed. The
    saturated windows, each on the need curve (``need(received) = m``), say affine. Main: the
    paper's need, the declared function handed over (70% off here)."""
    c0, c, s, r0 = 7054.98, 9.2881, 0.22647, 423.052
    need = lambda p: c0 + c * p  # noqa: E731
    sig = Signature.build("transform", "bench/background-0:1", inputs=[("up", "up->pe")])
    lr = Learner()
    for t, r, m, o, mu in _BACKGROUND_18:
        smp = sample_from_observation(PEObservation(received={"up->pe": r}, emitted={"pe->down": o}, mips=mu), PEKind.transform, m, t)
        assert smp is not None
        lr.observe(sig, [smp], t)
    model = lr.get(sig.key)
    assert model is not None and (not _confident(model) or _truth_error(model, need, s, r0) <= 0.15)
    k = need(r0)
    declared = ResourceFunction(a=2.0 * s / k, b=0.5 * s)  # the paper's form at r0, off x2
    choice = choose(PEKind.transform, declared, sig, lr, LearningSettings(enabled=True))
    errs = []
    for m in np.linspace(0.2, 1.5, 40) * k:
        p = min(r0, max(0.0, (m - c0) / c))
        if p <= 0:
            continue
        used = min(m, k)
        errs.append(0.5 * (abs(float(choice.rf.rate_out(r0, m)) - s * p) / max(s * p, 0.1 * s * r0)
                           + abs(float(choice.rf.mips_used(r0, m)) - used) / used))
    assert float(np.mean(errs)) <= 0.15, (choice.source, model.family.need if model.family else None, float(np.mean(errs)))


# bench_rfl_shapes --pes 6, backpressure, varying input, PE 26 (noise20-2: need = 8.27 p mips, s =
# 1.441, input 198 tuples/s x0.5-2, 20% noise on the output and the CPU reading): its 30 windows
_NOISE20_26 = [
    (0, 168.419, 1393.4, 242.674, 1393.4), (10, 287.501, 3414.5, 308.060, 2168.5), (20, 39.760, 329.0, 58.442, 266.4),
    (30, 223.908, 1852.5, 343.663, 1501.7), (40, 111.692, 924.1, 123.362, 663.6), (50, 128.816, 1353.7, 146.452, 1208.8),
    (60, 131.703, 1354.3, 174.404, 943.2), (70, 151.382, 1252.5, 248.417, 942.6), (80, 145.017, 1199.8, 225.690, 1199.8),
    (90, 368.869, 3528.4, 580.925, 3002.2), (100, 302.854, 3538.7, 506.602, 3207.2), (110, 89.086, 737.1, 103.116, 737.1),
    (120, 239.730, 1983.4, 361.773, 1949.1), (130, 173.074, 1431.9, 206.858, 1431.9), (140, 393.582, 4438.7, 619.448, 3757.9),
    (150, 257.468, 2316.0, 355.177, 1992.9), (160, 344.132, 3348.3, 365.501, 2208.9), (170, 168.399, 1520.8, 285.905, 1520.8),
    (180, 111.213, 920.1, 179.931, 920.1), (190, 138.460, 1259.0, 155.668, 939.7), (200, 208.303, 1723.4, 221.639, 1489.2),
    (210, 129.303, 1069.8, 158.036, 1069.8), (220, 119.837, 1179.4, 195.246, 1046.9), (230, 99.447, 1178.3, 112.851, 1004.9),
    (240, 393.512, 3475.4, 714.421, 3201.7), (250, 35.078, 290.2, 38.854, 290.2), (260, 239.328, 2892.3, 366.332, 2654.6),
    (270, 133.487, 1104.4, 200.902, 1104.4), (280, 380.626, 4665.3, 586.195, 3171.0), (290, 139.337, 1152.8, 180.403, 1006.8),
]


def test_a_fit_untrusted_for_its_noise_alone_is_planned_where_it_beats_the_declared_function() -> None:
    """bench_rfl_shapes ``--pes 6`` (backpressure, varying input, after 30 samples): the noise20
    shape's planned function was 16.6% off on mean. This PE's linear fit is 1.7% off the truth,
    but its windows with CPU to spare are judged one by one, and with 20% noise on each reading
    their error (0.15) is the noise's: not below saturation, not trusted, and the planner kept the
    declared function (b off x0.46: 36% off). Handed over where it beats the declared function on
    the PE's own windows, never Confident. Main: the declared function (38% off here)."""
    c, s, r0 = 8.27356, 1.44133, 197.678
    sig = Signature.build("transform", "bench/noise20-2:1", inputs=[("up", "up->pe")])
    lr = Learner()
    for t, r, m, o, mu in _NOISE20_26:
        smp = sample_from_observation(PEObservation(received={"up->pe": r}, emitted={"pe->down": o}, mips=mu), PEKind.transform, m, t)
        assert smp is not None
        lr.observe(sig, [smp], t)
    model = lr.get(sig.key)
    assert model is not None and (not _confident(model) or _truth_error(model, lambda p: c * p, s, r0) <= 0.15)
    declared = ResourceFunction(a=s / (c * r0), b=0.4607 * s)
    choice = choose(PEKind.transform, declared, sig, lr, LearningSettings(enabled=True))
    errs = []
    for r in r0 * np.exp(np.linspace(np.log(0.5), np.log(2.0), 7)):
        for m in np.linspace(0.2, 1.5, 14) * c * r:
            p = min(r, m / c)
            used = min(m, c * r)
            errs.append(0.5 * (abs(float(choice.rf.rate_out(r, m)) - s * p) / (s * p) + abs(float(choice.rf.mips_used(r, m)) - used) / used))
    assert float(np.mean(errs)) <= 0.15, (choice.source, float(np.mean(errs)))


@settings(max_examples=25, deadline=None)
@given(c=st.floats(1.0, 10.0), s=st.floats(0.2, 2.0), r0=st.floats(50.0, 500.0), noise=st.floats(0.0, 0.05),
       fluid=st.booleans(), seed=st.integers(0, 2**16))
def test_a_pe_with_cpu_to_spare_past_its_need_has_no_plateau(c: float, s: float, r0: float, noise: float, fluid: bool,
                                                             seed: int) -> None:
    """The converse, a property: a PE with a fixed cost per tuple, which uses only what its input
    needs past its saturation (CPU to spare there), never gets the busy plateau
    (:mod:`soda_optimizer.learn.plateau`), on the fluid data plane or under backpressure."""
    rng = np.random.default_rng(seed)
    sig = Signature.build("transform", "acme/knee:1", inputs=[("up", "up->pe")])
    lr = Learner()
    for i in range(30):
        m = float(rng.uniform(0.2, 1.5)) * c * r0
        p = min(r0, m / c)
        got = {"up->pe": r0 if fluid else p}
        ob = PEObservation(received=got, emitted={"pe->down": s * p * float(np.exp(rng.normal(0, noise)))},
                           mips=min(m, c * p * float(np.exp(rng.normal(0, noise)))))
        smp = sample_from_observation(ob, PEKind.transform, m, 10.0 * i)
        assert smp is not None
        lr.observe(sig, [smp], 10.0 * i)
    model = lr.get(sig.key)
    assert model is not None and model.fit is not None and model.fit.plateau is None
    assert plateau(model.samples, 290.0, lr.config) is None  # whether the fit is trusted or not
