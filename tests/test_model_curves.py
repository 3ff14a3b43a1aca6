"""Resource functions with curves (issue 38): the optimizer plans with the learned shape.

- the Evaluator's rates with curves equal an independent scalar reference (the PE processes what
  its mips buy, found by bisection on its need, and emits its output curve of that);
- the paper's form is a special case: sources given the curves equal to ``min(a m, primal)`` plan
  the same Plan; paper-form Scenarios (section 7.1, LSD) plan the same Plan whether the Evaluator
  takes the paper-form path or a reference written from the paper's formula;
- a learned rate-dependent need reaches the planner: a PE whose input is twice its operating rate
  gets the mips its need says at that rate (the paper's form matched at the operating rate gives
  half);
- bad curves are refused naming the field.
"""

from __future__ import annotations

import sys
from pathlib import Path

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from soda_optimizer import importance, pipeline, workloads
from soda_optimizer.graph import glue
from soda_optimizer.importance import Evaluator
from soda_optimizer.learn import Learner, Sample, Signature
from soda_optimizer.learn.functions import LearningSettings, choose
from soda_optimizer.model import (
    PE,
    Job,
    Node,
    PEKind,
    Policy,
    PrimalInput,
    ResourceFunction,
    Scenario,
    Sink,
    Stream,
    Template,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


# --------------------------------------------------------------------------- an independent reference


def _lin(points, x: float) -> float:
    """Piecewise linear through points, extended by the last segment (scalar, no numpy.interp)."""
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    (x0, y0), (x1, y1) = points[-2], points[-1]
    return y1 + (y1 - y0) / (x1 - x0) * (x - x1)


def _ref_out(rf: ResourceFunction, r: float, m: float, source: bool) -> float:
    if not rf.need:
        return min(rf.a * m, r) if source else min(rf.a * r * m, rf.b * r)
    if _lin(rf.need, r) <= m:
        p = r
    elif _lin(rf.need, 0.0) > m:
        p = 0.0
    else:
        lo, hi = 0.0, r
        for _ in range(200):
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if _lin(rf.need, mid) <= m else (lo, mid)
        p = lo
    return _lin(rf.output, p) if rf.output else rf.b * p


def _ref_outputs(ev: Evaluator, alloc: np.ndarray) -> dict[str, float]:
    g = ev.graph
    out: dict[str, float] = {}
    for p in nx.topological_sort(g):
        d = g.nodes[p]
        ins = [out[u] * g.edges[u, p]["selectivity"] for u in g.predecessors(p)]
        rf = d["spec"].rf
        r = ({"sum": sum, "min": min, "max": max}[rf.combine](ins) if ins else 0.0) + d["primal_rate"]
        out[p] = _ref_out(rf, r, float(alloc[ev.index[p]]), not ins)
    return out


@st.composite
def curve(draw: st.DrawFn) -> ResourceFunction:
    """A convex need (background CPU, growing costs per tuple) and a non-decreasing output."""
    k = draw(st.integers(1, 4))
    xs = np.cumsum([0.0] + [draw(st.floats(5.0, 200.0)) for _ in range(k)])
    slopes = np.cumsum([draw(st.floats(0.05, 3.0)) for _ in range(k)])  # non-decreasing: convex
    ys = draw(st.floats(0.0, 300.0)) + np.concatenate([[0.0], np.cumsum(slopes * np.diff(xs))])
    ox = np.cumsum([0.0] + [draw(st.floats(5.0, 200.0)) for _ in range(draw(st.integers(1, 3)))])
    oy = np.cumsum([0.0] + [draw(st.floats(0.0, 2.0)) * dx for dx in np.diff(ox)])
    output = tuple(zip(ox.tolist(), oy.tolist())) if draw(st.booleans()) else ()
    return ResourceFunction(a=0.01, b=draw(st.floats(0.2, 2.0)), need=tuple(zip(xs.tolist(), ys.tolist())), output=output)


@settings(max_examples=40, deadline=None)
@given(st.lists(curve(), min_size=3, max_size=3), st.lists(st.booleans(), min_size=3, max_size=3), st.integers(0, 10_000))
def test_curved_rates_equal_an_independent_reference(rfs, paper, seed):
    rfs = [ResourceFunction(a=0.002, b=0.8) if pp else rf for rf, pp in zip(rfs, paper)]
    t = Template(name="t", pes=(PE(name="s", kind="source", rf=rfs[0]), PE(name="x", rf=rfs[1]), PE(name="k", kind="sink", rf=rfs[2])),
                 streams=(Stream(src="s", dst="x", selectivity=0.7), Stream(src="x", dst="k")),
                 primal_inputs=(PrimalInput(pe="s", rate=120.0),), sinks=(Sink(pe="k"),))
    s = Scenario(nodes=(Node(name="n", mips=10_000),), templates=(t,), jobs=(Job(name="j", templates=("t",)),))
    ev = Evaluator(glue(s, {"j": "t"}))
    alloc = np.random.default_rng(seed).uniform(0, 1500, size=(8, 3))
    got = ev.outputs(alloc)
    for row, g in zip(alloc, got):
        want = _ref_outputs(ev, row)
        assert g == pytest.approx([want[p] for p in ev.pes], rel=1e-6, abs=1e-6)
    # saturation: past it a PE's output no longer grows, whatever its producers get
    big = np.full((1, 3), 1e7)
    sat = ev.saturation()
    at_sat = np.minimum(big, sat)
    assert ev.outputs(at_sat)[0] == pytest.approx(ev.outputs(big)[0], rel=1e-6, abs=1e-6)


def test_bad_curves_name_the_field():
    with pytest.raises(ValidationError, match="'need': must be convex"):
        ResourceFunction(need=((0, 0), (10, 10), (20, 12)))
    with pytest.raises(ValidationError, match="'output'"):
        ResourceFunction(need=((0, 0), (10, 10)), output=((0, 5), (10, 1)))
    with pytest.raises(ValidationError, match="'output' needs 'need'"):
        ResourceFunction(output=((0, 0), (10, 10)))
    with pytest.raises(ValidationError, match="from rate 0"):
        ResourceFunction(need=((1, 0), (10, 10)))


# --------------------------------------------------------------------------- the paper's form, a special case


def _key(plan) -> tuple:
    return (sorted((d.job, d.admitted) for d in plan.jobs), sorted((p.pe, round(p.macro_goal_mips, 6), round(p.goal_mips, 6)) for p in plan.pes),
            round(plan.importance, 6))


def _paper_outputs(self: Evaluator, alloc: np.ndarray) -> np.ndarray:
    """The paper's formula, as the Evaluator computed it before curves existed (the reference)."""
    alloc = np.atleast_2d(np.asarray(alloc, dtype=float))
    out = np.zeros_like(alloc)
    for _ in range(self.max_iter if self.cyclic else 1):
        prev = out.copy()
        for i in self.order:
            ins, m = self._in[i], alloc[:, i]
            if not ins:
                out[:, i] = np.minimum(self._a[i] * m, self._primal[i])
                continue
            rates = np.stack([out[:, s] * sel for s, sel in ins], axis=1)
            c = self._combine[i]
            r_i = (rates.sum(axis=1) if c == "sum" else rates.min(axis=1) if c == "min" else rates.max(axis=1)) + self._primal[i]
            out[:, i] = np.minimum(self._a[i] * r_i * m, self._b[i] * r_i)
        if not self.cyclic or np.max(np.abs(out - prev), initial=0.0) <= self.tol:
            break
    return out


def _paper_saturation(self: Evaluator) -> np.ndarray:
    src = np.array([not ins for ins in self._in])
    return np.where(src, self._primal / self._a, self._b / self._a)


def _scenarios() -> list[Scenario]:
    from benchmarks import resolution_families as F

    s71 = F.sec71(25)
    s71 = s71.model_copy(update={"policy": s71.policy.model_copy(update={"resolution_units": 200})})
    t, j = workloads.lsd(0)
    lsd = workloads.scenario((t[:30], [x for x in j if all(y in {tt.name for tt in t[:30]} for y in x.templates) and not x.imports][:20]),
                             workloads.nodes(8), Policy(resolution_units=200))
    return [s71, lsd]


@pytest.mark.parametrize("which", [0, 1], ids=["sec7.1", "lsd"])
def test_paper_form_plans_the_same_plan(which, monkeypatch):
    scen = _scenarios()[which]
    assert not any(p.rf.curved for t in scen.templates for p in t.pes)
    now = pipeline.run(scen, 60.0)
    with monkeypatch.context() as mp:
        mp.setattr(importance.Evaluator, "outputs", _paper_outputs)
        mp.setattr(importance.Evaluator, "saturation", _paper_saturation)
        ref = pipeline.run(scen, 60.0)
    assert _key(now) == _key(ref)
    assert any(d.admitted for d in now.jobs)
    # sources given the curves that equal the paper's min(a m, primal): the same plan again
    curved = scen.model_copy(update={"templates": tuple(
        t.model_copy(update={"pes": tuple(p.model_copy(update={"rf": p.rf.model_copy(update={"b": 1.0, "need": ((0.0, 0.0), (1.0, 1.0 / p.rf.a))})})
                                          if p.name in {x.pe for x in t.primal_inputs} and not any(s.dst == p.name for s in t.streams) else p
                                          for p in t.pes)}) for t in scen.templates)})
    assert any(p.rf.curved for t in curved.templates for p in t.pes)
    assert _key(pipeline.run(curved, 60.0))[0] == _key(now)[0]


# --------------------------------------------------------------------------- the learned shape reaches the planner


def test_a_learned_rate_dependent_need_is_what_the_planner_uses():
    """A transform costs 2 mips per tuple/s (need 2 p, selectivity 0.5), learned at input rates
    around 100 tuples/s; it then receives 200. The planner with the learned curves gives it ~400
    mips (its need at 200); the paper's form matched at the operating rate saturates at ~200."""
    lr = Learner()
    sig = Signature.build("transform", "bench/x:1", inputs=[("up", "up->x")])
    rng = np.random.default_rng(0)
    for i in range(40):
        r = 100.0 * float(np.exp(rng.uniform(np.log(0.5), np.log(2.0))))
        m = float(rng.uniform(0.3, 1.5)) * 2.0 * r
        p = min(r, m / 2.0)
        lr.observe(sig, [Sample(r_i=r, m=m, r_o=0.5 * p, m_used=min(m, 2.0 * p), r_p=p, t=10.0 * i)], 10.0 * i)
    c = choose(PEKind.transform, None, sig, lr, LearningSettings(enabled=True))
    assert c.source.startswith("learned") and c.rf.curved
    assert float(c.rf.saturation(200.0)) == pytest.approx(400.0, rel=0.05)
    paper = ResourceFunction(a=c.rf.a, b=c.rf.b)

    def plan_with(rf: ResourceFunction) -> float:
        t = Template(name="t", pes=(PE(name="s", kind="source", rf=ResourceFunction(a=1.0)), PE(name="x", rf=rf),
                                    PE(name="k", kind="sink", rf=ResourceFunction(a=1.0, b=1.0))),
                     streams=(Stream(src="s", dst="x"), Stream(src="x", dst="k")),
                     primal_inputs=(PrimalInput(pe="s", rate=200.0),), sinks=(Sink(pe="k"),))
        s = Scenario(nodes=(Node(name="n", mips=4000.0),), templates=(t,), jobs=(Job(name="j", templates=("t",)),),
                     policy=Policy(unit_mips=10.0))
        plan = pipeline.run(s, 30.0)
        return next(p.macro_goal_mips for p in plan.pes if p.name == "x")

    assert plan_with(c.rf) == pytest.approx(400.0, rel=0.06)
    assert plan_with(paper) < 300.0  # the paper's form at the operating rate: the PE starves at 200 tuples/s
