"""A node's samples stored compactly (issue 52 item 4, soda_optimizer.learn.window): any sequence of
samples comes back exactly (values, serialisation, slices), the fits of a window equal the fits of
the list it holds, and the learner's memory per sample stays under a bound (tracemalloc: at 7,000 PEs
main's ~1.8 M Sample objects cost ~1.1 kB each, over the chart's 1 GiB)."""

from __future__ import annotations

import gc
import math
import tracemalloc
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from soda_optimizer.learn import LearnConfig, Learner, Sample, Signature
from soda_optimizer.learn.family import fit_family
from soda_optimizer.learn.fit import age_weights, fit
from soda_optimizer.learn.model import LearnedModel
from soda_optimizer.learn.window import SampleWindow
from soda_optimizer.model import PEKind

# what a sample may hold: any finite non-negative rate or mips (0 and -0.0 too), any finite time, None where optional
_rate = st.floats(min_value=0.0, allow_nan=False, allow_infinity=False)
samples_st = st.lists(st.builds(Sample, r_i=_rate, m=_rate, r_o=_rate, m_used=st.none() | _rate,
                                t=st.none() | st.floats(allow_nan=False, allow_infinity=False),
                                r_p=st.none() | _rate, censored=st.booleans()), max_size=40)


def _same(a: Sample, b: Sample) -> bool:
    """Equal values, and equal as stored (the sign of a zero included)."""
    return a == b and all(math.copysign(1.0, x) == math.copysign(1.0, y) for x, y in
                          ((a.r_i, b.r_i), (a.m, b.m), (a.r_o, b.r_o)))


@settings(max_examples=200, deadline=None)
@given(samples_st, st.integers(-45, 45), st.integers(-45, 45))
def test_a_window_gives_back_any_sequence_of_samples_exactly(samples: list[Sample], i: int, j: int) -> None:
    w = SampleWindow.of(samples)
    assert len(w) == len(samples) and bool(w) == bool(samples)
    assert all(_same(a, b) for a, b in zip(w, samples, strict=True))
    assert all(_same(w[k], samples[k]) for k in range(-len(samples), len(samples)))
    assert list(w[i:j]) == samples[i:j] and list(w[::-1]) == samples[::-1]
    assert w == samples and w == SampleWindow.of(list(w)) and hash(w) == hash(SampleWindow.of(list(w)))
    # a model holding it: validated from the list (or its JSON), assigned a list, serialised as the list
    m = LearnedModel(key="k", path=["x"], level="kind", kind="transform", samples=samples)
    as_list = [s.model_dump(mode="json") for s in samples]
    assert isinstance(m.samples, SampleWindow) and m.model_dump(mode="json")["samples"] == as_list
    again = LearnedModel.model_validate_json(m.model_dump_json())
    assert again == m and list(again.samples) == samples
    m.samples = samples[::-1]
    assert isinstance(m.samples, SampleWindow) and list(m.samples) == samples[::-1]
    # the learner's merge: sorted([*window, *batch], key=t or now), stable
    now = 17.0
    half = len(samples) // 2
    merged = SampleWindow.of(samples[:half]).merged(samples[half:], now)
    assert list(merged) == sorted(samples, key=lambda s: s.t if s.t is not None else now)


def _pe_samples(kind: PEKind, seed: int, n: int, censored_share: float, with_rp: bool) -> list[Sample]:
    """A PE's samples: min(a r m, b r) with noise, allocations and rates varied, some windows saturated
    and censored, CPU readings, the processed rate measured or not, a few without a time."""
    rng = np.random.default_rng(seed)
    a, b = float(np.exp(rng.uniform(-6, -2))), float(rng.uniform(0.3, 2.0))
    out = []
    for k in range(n):
        r = float(rng.uniform(20, 400))
        m = float(np.exp(rng.uniform(np.log(20), np.log(2000))))
        out_rate = min(a * m, r) if kind is PEKind.source else min(a * r * m, b * r)
        used = min(m, r / a) if kind is PEKind.source else min(m, b / a)
        cens = bool(rng.random() < censored_share and used >= 0.95 * m)
        p = min(r, a * m) if kind is PEKind.source else min(r, b / a / max(m, 1e-9) * r)
        out.append(Sample(r_i=r, m=m, r_o=out_rate * float(np.exp(rng.normal(0, 0.05))),
                          m_used=used * float(np.exp(rng.normal(0, 0.05))) if rng.random() > 0.1 else None,
                          t=None if rng.random() < 0.05 else 10.0 * k, r_p=p if with_rp else None, censored=cens))
    return out


def _dump(x: Any) -> Any:
    return None if x is None else x.model_dump(mode="json")


@settings(max_examples=25, deadline=None)
@given(st.sampled_from(list(PEKind)), st.integers(0, 10_000), st.integers(3, 60), st.floats(0, 1), st.booleans())
def test_the_fits_of_a_window_equal_the_fits_of_its_list(kind: PEKind, seed: int, n: int, cens: float, with_rp: bool) -> None:
    samples = _pe_samples(kind, seed, n, cens, with_rp)
    w = SampleWindow.of(samples)
    cfg = LearnConfig()
    now = 10.0 * n
    assert np.array_equal(age_weights(w, now, cfg.half_life_s), age_weights(samples, now, cfg.half_life_s))
    wt = age_weights(samples, now, cfg.half_life_s)
    assert _dump(fit_family(kind, w, wt)) == _dump(fit_family(kind, samples, wt))
    assert _dump(fit(kind, w, now, cfg)) == _dump(fit(kind, samples, now, cfg))
    # the learner's whole refit (family, fallback, trust checks) on a model holding the window and
    # on one holding the plain list (model_copy does not validate: the list stays a list)
    lrn = Learner(cfg)
    held = LearnedModel(key="k", path=["x"], level="kind", kind=kind, samples=samples, updated_at=now, stale=True, observed=n)
    plain = held.model_copy(update={"samples": list(samples)})
    assert type(plain.samples) is list
    lrn._refit(held)
    lrn._refit(plain)
    assert _dump(held.fit) == _dump(plain.fit) and _dump(held.family) == _dump(plain.family)


PES = 40
WINDOW = 256
BYTES_PER_SAMPLE = 120  # a window's row is 56 bytes; main's Sample objects ~1,100
TRACKED_PER_SAMPLE = 0.1  # objects the cyclic collector walks, per sample held (main: more than 1; here ~13 a PE, its models)


def test_the_learners_memory_per_sample_is_bounded() -> None:
    """``PES`` distinct PEs (3 signature nodes each, as in benchmarks/bench_learning_scale.py) with a
    full window of ``WINDOW`` samples: the learner's memory (tracemalloc, what it holds once built)
    and the objects the garbage collector tracks, per sample held."""
    sigs = [Signature.build(PEKind.transform, f"bench.example/op{j}:1", args=[str(j)], inputs=[("primal", "primal")],
                            namespace="bench") for j in range(PES)]
    rng = np.random.default_rng(0)
    gc.collect()
    n_objects = len(gc.get_objects())
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        lrn = Learner()
        for k in range(0, WINDOW, 16):  # 16 micro epochs' samples a call, as a warm operator holds them
            for sig in sigs:
                batch = [Sample(r_i=float(r), m=float(m), r_o=float(r) * 0.5, m_used=float(m) * 0.9, t=10.0 * (k + i), r_p=float(r))
                         for i, (r, m) in enumerate(rng.uniform(10, 100, size=(16, 2)))]
                lrn.observe(sig, batch, 10.0 * (k + 15))
            del batch
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    own = [m for m in lrn.models.values() if m.level.value == "flowspec"]
    assert len(own) == PES and all(len(m.samples) == WINDOW for m in own)
    per_sample = held / (PES * WINDOW)
    tracked = (len(gc.get_objects()) - n_objects) / (PES * WINDOW)
    print(f"{per_sample:.1f} bytes, {tracked:.3f} tracked objects per sample held")
    assert per_sample < BYTES_PER_SAMPLE, f"{per_sample:.0f} bytes per sample held"
    assert tracked < TRACKED_PER_SAMPLE, f"{tracked:.2f} tracked objects per sample held"


def test_an_older_status_window_is_restored_into_a_window() -> None:
    """A ResourceProfile written before issue 38 carries its window as a list of samples
    (operator/soda_operator/soda/learning.py, model_from_profile): restored exactly, and refitted."""
    from soda_operator.soda.learning import model_from_profile

    samples = _pe_samples(PEKind.transform, 7, 30, 0.5, True)
    old = [{"ri": s.r_i, "m": s.m, "ro": s.r_o, **({"mUsed": s.m_used} if s.m_used is not None else {}),
            **({"t": s.t} if s.t is not None else {}), **({"rp": s.r_p} if s.r_p is not None else {}),
            **({"censored": True} if s.censored else {})} for s in samples]
    obj = {"metadata": {"name": "transform"}, "spec": {"pinned": False},
           "status": {"key": "transform", "path": ["transform"], "kind": "transform", "level": "kind", "samples": 30, "window": old}}
    lrn = Learner()
    m = lrn.add_model(model_from_profile(obj))
    assert isinstance(m.samples, SampleWindow) and list(m.samples) == samples and m.stale
    assert lrn.get("transform") is m and m.fit is not None  # refitted on read, from the window
    assert lrn.export_model("transform")["samples"] == [s.model_dump(mode="json") for s in samples]
