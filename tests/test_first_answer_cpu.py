"""macroQ's first answer with less CPU (issue 49, h49e): each shortcut gives the same numbers as the
plain computation it replaces, checked against slow oracles written out here (no timing: the
seconds are in ``benchmarks/bench_first_answer.py``)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from soda_optimizer.soda import admission

NEG = -math.inf


def slow_convolve(a: list[float], b: list[float]) -> tuple[list[float], list[int]]:
    """Plain Python: the best of exactly k units (k - i on ``a``, i on ``b``), the first i of equals."""
    n = len(a) + len(b) - 1
    vals, args = [NEG] * n, [0] * n
    for k in range(n):
        for i in range(len(b)):
            if 0 <= k - i < len(a) and a[k - i] + b[i] > vals[k]:
                vals[k], args[k] = a[k - i] + b[i], i
    return vals, args


@st.composite
def step_curve(draw, monotone: bool = True) -> np.ndarray:
    """A curve of integer values (exact ties), rising at a few points (a coarse curve's shape), or any
    values when not ``monotone``."""
    n = draw(st.integers(1, 30))
    rises = draw(st.lists(st.integers(0, 4), min_size=n, max_size=n))
    keep = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    if monotone:
        return np.cumsum([r if k else 0 for r, k in zip(rises, keep)]).astype(float)
    return np.array([float(r) for r in rises])


@settings(max_examples=300, deadline=None)
@given(st.lists(step_curve(), min_size=2, max_size=4))
def test_convolving_breakpoints_gives_the_dense_values_and_arguments(curves):
    """:func:`admission._convolve_breakpoints` (pairs of the points where the curves rise) returns
    what the dense convolution does, value and first argument of equals, for every k."""
    acc = curves[0]
    for c in curves[1:]:
        got = admission._convolve_breakpoints(acc, c, 10**12)
        assert got is not None  # nondecreasing: it applies
        want_v, want_a = slow_convolve(list(acc), list(c))
        assert got[0].tolist() == want_v
        assert got[1].tolist() == want_a
        acc = got[0]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(step_curve(), step_curve(monotone=False)), min_size=2, max_size=3))
def test_convolve_equals_the_slow_convolution(curves):
    """:func:`admission.convolve`, whichever path each step takes (breakpoints, dense blocks),
    against plain Python, also on curves that fall (the breakpoints do not apply to them)."""
    got_v, got_steps = admission.convolve([SimpleNamespace(values=c) for c in curves])
    acc = list(curves[0])
    for c, arg in zip(curves[1:], got_steps):
        acc, want_a = slow_convolve(acc, list(c))
        assert arg.tolist() == want_a
    assert got_v.tolist() == acc


def test_the_dense_convolution_in_blocks_equals_one_block(monkeypatch):
    """Blocks of rows smaller than the convolution give the same arrays (curves that fall, so the
    breakpoints do not apply)."""
    rng = np.random.default_rng(5)
    curves = [SimpleNamespace(values=rng.integers(0, 9, size=k).astype(float)) for k in (40, 23, 17)]
    whole = admission.convolve(curves)
    monkeypatch.setattr(admission, "KNAPSACK_BLOCK", 23 * 3)  # three rows a block
    blocks = admission.convolve(curves)
    assert whole[0].tolist() == blocks[0].tolist()
    assert all(a.tolist() == b.tolist() for a, b in zip(whole[1], blocks[1]))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 6), st.integers(-3, 9)), min_size=1, max_size=40),
       st.floats(0.0, 5.0))
def test_the_bound_drops_only_dominated_points(pts, lam):
    """:func:`refine._undominated` keeps, per component, a point no earlier one dominates, and the
    Lagrangian's term ``max (V - lam X)`` of every component is the same, to the bit, for any
    ``lam >= 0`` (a slow scan over all points is the oracle)."""
    from soda_optimizer.soda import refine

    ID = np.array([p[0] for p in pts], dtype=np.int64)
    X = np.array([float(p[1]) for p in pts])
    V = np.array([float(p[2]) for p in pts])
    order = np.lexsort((X, ID))
    X, V, ID = X[order], V[order], ID[order]
    x2, v2, id2 = refine._undominated(X, V, ID)
    for c in set(ID.tolist()):
        full = [(x, v) for x, v, i in zip(X, V, ID) if i == c]
        kept = [(x, v) for x, v, i in zip(x2, v2, id2) if i == c]
        assert max(v - lam * x for x, v in full) == max(v - lam * x for x, v in kept)
        # nothing kept is dominated by an earlier point, and everything dropped is
        assert all(not any(xe <= x and ve >= v for xe, ve in kept[:k]) for k, (x, v) in enumerate(kept))
        assert all(any(xk <= x and vk >= v for xk, vk in kept) for x, v in full)


def test_each_component_curve_of_the_first_pass_is_built_once_and_used(monkeypatch):
    """An option whose components have different own units was built twice on main (each curve on
    its own unit, then again on the finest): on LSD, 37 of the first pass's 187 curves were thrown
    away. Now every curve built is one an option uses, and the options are the same as the two-step
    way's (each component on the finest own unit of its option, :func:`admission.own_unit`)."""
    from soda_optimizer import workloads
    from soda_optimizer.importance import Evaluator
    from soda_optimizer.model import Policy

    s = workloads.scenario(workloads.lsd(), workloads.nodes(30), Policy())
    built: list[object] = []
    real = admission.component_curve

    def counted(*a, **k):
        c = real(*a, **k)
        built.append(c)
        return c

    monkeypatch.setattr(admission, "component_curve", counted)
    g = s.capacity_mips / 128
    items = admission.Items(s, g, per_job=True, deadline=math.inf, jobs=[j.name for j in s.jobs], coarse=True)
    multi = 0
    for gi in range(len(items.groups)):
        for o in items.build(gi):
            glued = s.glued(o.choice)
            comps = glued.components()
            want = min(admission.own_unit(Evaluator(glued, sorted(c)), g) for c in comps)
            assert all(c.unit == want for c in o.curves)
            multi += len(comps) > 1
    used = {id(c) for c in items.used_curves()}
    assert multi > 0
    assert all(id(c) in used for c in built)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 100_000), st.integers(2, 64))
def test_the_spread_levels_are_numpy_linspace_rounded(span, per):
    """The hybrid curve's coarse levels (:func:`curves._spread`, plain Python) are the rounded
    integers of ``np.linspace`` as before, each once, sorted."""
    from soda_optimizer.soda import curves

    want = sorted({int(round(x)) for x in np.linspace(0, span, min(per, span + 1))})
    assert curves._spread(span, per) == want
