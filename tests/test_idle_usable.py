"""The benchmarks' "idle usable" figure counts capacity an admitted PE could turn into importance,
not room to saturation (issue 49: ~31,000 mips on 10x LSD on 2,000 nodes, whose answer equals
the saturation bound). Oracle: the importance of the answer with the idle capacity given to PEs,
evaluated directly."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks import resolution_families as F
from benchmarks.bench_resolution import idle_usable
from soda_optimizer.importance import Evaluator
from soda_optimizer.model import Job, ValueFunction
from soda_optimizer.plan import JobDecision


def _answer(s, goals):  # type: ignore[no-untyped-def]
    """An answer admitting every job of ``s`` on its first template with these goals."""
    return SimpleNamespace(decisions=[JobDecision(job=j.name, admitted=True, template=j.templates[0], rank=j.rank, revised_rank=j.rank)
                                      for j in s.jobs], goals=goals)


def _one(value: ValueFunction, needs: list[float]):  # type: ignore[no-untyped-def]
    t = F.pipeline("t", needs, [0.0] * len(needs), 1.0, value)
    return F._scenario([t], [Job(name="j", templates=("t",))], 10_000.0)


def test_a_capped_value_reached_leaves_nothing_usable():
    """A source saturating at 1,000 mips whose sink's value stops at rate 50 (500 mips): at 500
    mips, 9,500 idle, room to saturation 500, but no mips more buys importance (main: 500)."""
    s = _one(ValueFunction(kind="capped", slope=1.0, cap=50.0), [1000.0])
    assert idle_usable(s, _answer(s, {"j:p0": 500.0})) == 0.0


def test_a_linear_value_below_saturation_counts_its_room():
    s = _one(ValueFunction(kind="linear", slope=1.0), [1000.0])
    assert idle_usable(s, _answer(s, {"j:p0": 500.0})) == pytest.approx(500.0)
    assert idle_usable(s, _answer(s, {"j:p0": 1000.0})) == 0.0


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(0.05, 1.0), min_size=1, max_size=4), st.floats(1.0, 200.0))
def test_what_counts_buys_importance_and_what_does_not_buys_none(shares, cap):
    """A chain of PEs at random shares of their saturation, a capped value: raising the PEs that
    count (each by what it can take) gains importance when any count; raising every other PE as
    well gains nothing more."""
    needs = [1000.0 * (k + 1) for k in range(len(shares))]
    s = _one(ValueFunction(kind="capped", slope=1.0, cap=cap), needs)
    ev = Evaluator(s.glued({"j": "t"}))
    x = np.array([shares[int(p.split(":p")[1])] * needs[int(p.split(":p")[1])] for p in ev.pes])
    goals = dict(zip(ev.pes, x.tolist()))
    got = idle_usable(s, _answer(s, goals))
    top = np.minimum(ev.saturation(), x + (s.capacity_mips - x.sum()))
    base, full = ev.importance(x[None, :])[0], ev.importance(top[None, :])[0]
    assert (got > 0) == (full > base + 1e-9 * (1 + abs(full)))
    assert got <= float((top - x).sum()) + 1e-6


def test_of_two_pes_either_of_which_reaches_a_capped_value_one_counts():
    """Two PEs of a chain, the value capped at a rate either one raised alone reaches: one PE's
    room counts (the larger is lowered back first), not both, not none."""
    s = _one(ValueFunction(kind="capped", slope=1.0, cap=1.0), [1000.0, 2000.0])
    goals = {"j:p0": 125.0, "j:p1": 125.0}
    assert idle_usable(s, _answer(s, goals)) == pytest.approx(875.0)
