"""Importance: vectorised evaluation equals a naive per-allocation loop; cycles converge."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from soda_optimizer import workloads
from soda_optimizer.graph import glue
from soda_optimizer.importance import Evaluator, value
from soda_optimizer.model import (
    PE,
    Job,
    Node,
    PrimalInput,
    ResourceFunction,
    Scenario,
    Sink,
    Stream,
    Template,
    ValueFunction,
)


def naive(ev: Evaluator, alloc: np.ndarray) -> float:
    """Scalar reference: rates in topological order, then weighted values."""
    g = ev.graph
    out: dict[str, float] = {}
    for p in nx.topological_sort(g):
        d = g.nodes[p]
        m = float(alloc[ev.index[p]])
        ins = [out[u] * g.edges[u, p]["selectivity"] for u in g.predecessors(p)]
        spec = d["spec"]
        if not ins:
            out[p] = min(spec.rf.a * m, d["primal_rate"])
        else:
            r = {"sum": sum, "min": min, "max": max}[spec.rf.combine](ins) + d["primal_rate"]
            out[p] = min(spec.rf.a * r * m, spec.rf.b * r)
    total = 0.0
    for u, v, e in g.edges(data=True):
        total += e["weight"] * float(value(e["value"], np.array([out[u] * e["selectivity"]]))[0])
    for p, d in g.nodes(data=True):
        for w, vf in d["sinks"]:
            total += w * float(value(vf, np.array([out[p]]))[0])
    return total


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 16))
def test_vectorised_matches_naive_loop(seed, k):
    t, j = workloads.dac(seed)
    s = workloads.scenario((t, j), workloads.nodes(4))
    ev = Evaluator(glue(s, {x.name: x.templates[0] for x in s.jobs}))
    rng = np.random.default_rng(seed)
    alloc = rng.uniform(0, 5000, size=(k, len(ev.pes)))
    got = ev.importance(alloc)
    want = [naive(ev, row) for row in alloc]
    assert got == pytest.approx(want, rel=1e-9, abs=1e-9)
    assert ev.importance_cached(alloc) == pytest.approx(got)  # the cache returns the same numbers


def test_value_functions():
    r = np.array([0.0, 5.0, 20.0, 100.0])
    assert list(value(ValueFunction(kind="capped", slope=2, cap=10), r)) == [0, 10, 20, 20]
    pw = ValueFunction(kind="piecewise", points=((0, 0), (10, 1), (30, 40)))
    assert list(value(pw, r)) == [0, 0.5, 20.5, 40]


def test_cycle_converges_to_the_fixed_point():
    # a -> b -> c -> b (feedback with selectivity 0.5): b's input r = 10 + 0.5 r_b_out
    t = Template(
        name="t",
        allow_cycles=True,
        pes=(PE(name="a", kind="source", rf=ResourceFunction(a=1.0)), PE(name="b", rf=ResourceFunction(a=1.0, b=1.0)),
             PE(name="c", rf=ResourceFunction(a=1.0, b=1.0))),
        streams=(Stream(src="a", dst="b"), Stream(src="b", dst="c"), Stream(src="c", dst="b", selectivity=0.5)),
        primal_inputs=(PrimalInput(pe="a", rate=10),),
        sinks=(Sink(pe="c"),),
    )
    s = Scenario(nodes=(Node(name="n", mips=1000),), templates=(t,), jobs=(Job(name="j", templates=("t",)),))
    ev = Evaluator(glue(s, {"j": "t"}))
    assert ev.cyclic
    out = ev.outputs(np.array([[100.0, 100.0, 100.0]]))[0]
    # fixed point: b = 10 + 0.5 c, c = b  ->  b = c = 20
    assert out[ev.index["j:b"]] == pytest.approx(20, rel=1e-6)
    assert ev.importance(np.array([[100.0, 100.0, 100.0]]))[0] == pytest.approx(20, rel=1e-6)
