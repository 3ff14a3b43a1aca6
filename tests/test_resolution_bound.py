"""macroQ's upper bound (issue 34): at least the best *continuous* allocation (so at least the
10-mips optimum too), whatever the deadline, and tight where the jobs' importance is concave.

Oracle: the continuous problem of one-PE jobs as a MILP (OR-Tools' SCIP), independent of macroQ's
curves and grids: per job ``x`` (admitted), mips ``m`` in ``[min x, need x]`` and importance ``t``
under every linear piece of its concave piecewise-linear importance ``w v(min(a m, rate))``
(evaluated at the kinks by :mod:`soda_optimizer.importance`); the rank waterline as macroQ's (the
promised required jobs and every job of better rank in, a subset of one rank, none worse), one
MILP per level, the best level wins. The 10-mips optimum is macroQ's fixed-unit knapsack."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from ortools.linear_solver import pywraplp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import resolution_families as F  # noqa: E402
from soda_optimizer.importance import Evaluator  # noqa: E402
from soda_optimizer.model import Job, ValueFunction  # noqa: E402
from soda_optimizer.soda import macroq  # noqa: E402


def one_pe_scenario(specs: list[tuple[float, float, float, int, bool, int]], share: float):
    """Jobs (need, min share, weight, rank, required, value kind 0-2) and a capacity of ``share`` of
    the needs' sum."""
    ts, js = [], []
    for k, (need, mshare, w, rank, req, kind) in enumerate(specs):
        vf = [ValueFunction(kind="linear"),
              ValueFunction(kind="capped", cap=F.RATE * 0.6),
              ValueFunction(kind="piecewise", points=((0.0, 0.0), (F.RATE * 0.3, 3.0), (F.RATE * 0.7, 4.0)))][kind]
        ts.append(F.pipeline(f"t{k}", [need], [round(need * mshare, 1)], w, vf))
        js.append(Job(name=f"j{k:03d}", rank=rank, required=req, templates=(f"t{k}",)))
    cap = max(1.0, share * sum(x[0] for x in specs))
    return F._scenario(ts, js, cap, node_mips=max(cap, 1.0))


def continuous_optimum(s) -> float:
    """The MILP oracle (module docstring). -inf when no level fits."""
    H = s.capacity_mips
    pr = macroq.promise(s, None)
    f: dict[str, tuple[float, float, list[tuple[float, float]]]] = {}  # job -> (min, top, pieces (slope, intercept))
    for j in s.jobs:
        ev = Evaluator(s.glued({j.name: j.templates[0]}))
        (p,) = ev.pes
        spec, nd = ev.glued.spec(p), ev.glued.graph.nodes[p]
        lo = F.minimum(s, j)
        a, rate = spec.rf.a, nd["primal_rate"]
        top = max(lo, min(rate / a, H))
        kinks = {0.0, lo, top} | {x / a for _, vf in nd["sinks"] for x in
                                  ([vf.cap] if vf.kind == "capped" else [q[0] for q in vf.points] if vf.kind == "piecewise" else [])}
        xs = np.array(sorted(x for x in kinks if 0 <= x <= top))
        ys = ev.importance(xs[:, None])
        pieces = [((y1 - y0) / (x1 - x0), y0 - (y1 - y0) / (x1 - x0) * x0) for x0, x1, y0, y1 in zip(xs, xs[1:], ys, ys[1:]) if x1 > x0]
        f[j.name] = (lo, top, pieces or [(0.0, float(ys[0]))])
    held = sum(f[j][0] for j in pr.promised)
    cands = [j.name for j in s.jobs if j.name not in pr.refused and (j.name in pr.promised or held + f[j.name][0] <= H + 1e-6)]
    free = {j: s.job(j).rank for j in cands if j not in pr.promised}
    best = -math.inf
    for r in sorted(set(free.values())) or [1]:
        forced = set(pr.promised) | {j for j, x in free.items() if x < r}
        allowed = forced | {j for j, x in free.items() if x == r}
        m = pywraplp.Solver.CreateSolver("SCIP")
        total, used = [], []
        for j in allowed:
            lo, top, pieces = f[j]
            x = m.IntVar(1 if j in forced else 0, 1, "")
            y = m.NumVar(0, top, "")
            t = m.NumVar(0, m.infinity(), "")
            m.Add(y >= lo * x)
            m.Add(y <= top * x)
            for sl, c in pieces:
                m.Add(t <= sl * y + c * x)
            total.append(t)
            used.append(y)
        m.Add(sum(used) <= H)
        m.Maximize(sum(total))
        m.SetSolverSpecificParametersAsString("limits/gap = 1e-9")
        if m.Solve() == pywraplp.Solver.OPTIMAL:
            best = max(best, m.Objective().Value())
    return best


job = st.tuples(st.floats(50, 1000), st.sampled_from([0.0, 0.25, 0.5]), st.floats(0.5, 5), st.integers(1, 3),
                st.booleans(), st.integers(0, 2))


@settings(max_examples=25, deadline=None)
@given(st.lists(job, min_size=2, max_size=8), st.floats(0.2, 1.1), st.sampled_from([0.02, 30.0]))
def test_the_bound_is_at_least_the_continuous_optimum(specs, share, deadline):
    """At any deadline (0.02 s: the coarse pass alone, whose curves grow PEs in steps of several
    units; 30 s: every pass and the exact step) the bound holds for continuous allocations, and so
    for the 10-mips grid's."""
    specs = [(round(n, 1), ms, round(w, 3), r, req and k < 3, kind) for k, (n, ms, w, r, req, kind) in enumerate(specs)]
    s = one_pe_scenario(specs, share)
    want = continuous_optimum(s)
    res = macroq.solve(F.with_unit(s, None), deadline_s=deadline)
    fine = macroq.solve(F.with_unit(s, 10.0), deadline_s=60)
    b = res.report.bound
    assert b is not None
    if not any(d.reason == "infeasible-required" for d in fine.decisions):  # a grid that refuses a required job has more room
        assert want >= fine.importance - 1e-6 * (1 + fine.importance)  # the oracle: a grid allocation is a continuous one
    assert b >= want * (1 - 1e-7) - 1e-6, (b, want, res.report.detail)


@settings(max_examples=8, deadline=None)
@given(st.integers(0, 10**6), st.sampled_from([0.05, 30.0]))
def test_the_bound_holds_on_two_pe_jobs(seed, deadline):
    """PE needs over four orders of magnitude, one or two PEs (non-concave curves: the grid slack
    stays): the bound is at least the 10-mips optimum, at any deadline."""
    s = F.span(n_jobs=14, capacity=3000.0, n_tiny=4, seed=seed)
    res = macroq.solve(F.with_unit(s, None), deadline_s=deadline)
    fine = macroq.solve(F.with_unit(s, 10.0), deadline_s=60)
    assert res.report.bound is not None, res.report.detail
    if res.bound_proven:
        assert res.report.bound >= fine.importance * (1 - 1e-9), res.report.detail
    else:  # an estimate (issue 49): never raised to the answer, never a gap of 0
        assert res.gap is None or res.gap > 0, res.report.detail


def test_the_bound_is_tight_on_hundreds_of_one_pe_jobs():
    """Issue 34's 500-job family at test size: the bound is within 0.5% of the continuous optimum
    (it was 2%: every point moved one 10-mips unit left per job); the answer within 0.5% of it."""
    s = F.one_pe(n_jobs=150, n_required=6, capacity=30000.0, seed=2)
    want = continuous_optimum(s)
    res = macroq.solve(F.with_unit(s, None), deadline_s=5)
    b = res.report.bound
    assert b is not None and want * (1 - 1e-7) <= b <= 1.005 * want, (b, want, res.report.detail)
    assert res.importance >= 0.995 * want, (res.importance, want, res.report.detail)


def step_scenario():
    """Issue 49's step: a two-PE job (source -> sink) whose value jumps from 0 to 100,000 at 9,001 tuples/s, which
    the greedy curves of fine grids never reach (their PEs gain nothing alone), beside a one-PE job worth 1,500."""
    from soda_optimizer import workloads
    from soda_optimizer.model import PE, Policy, PrimalInput, ResourceFunction, Scenario, Sink, Stream, Template

    src = PE(name="src", kind="source", rf=ResourceFunction(a=1.0, b=1.0))
    snk = PE(name="snk", kind="sink", rf=ResourceFunction(a=1 / 3000.0, b=1.0))
    step = ValueFunction(kind="piecewise", points=((0, 0), (9000, 0), (9001, 100000)))
    t = Template(name="d/step", pes=(src, snk), streams=(Stream(src="src", dst="snk"),), sinks=(Sink(pe="snk", value=step),),
                 primal_inputs=(PrimalInput(pe="src", rate=10000),))
    lin = Template(name="d/lin", pes=(PE(name="s", kind="source", rf=ResourceFunction(a=0.1, b=1.0)),),
                   sinks=(Sink(pe="s", value=ValueFunction(kind="capped", slope=1.0, cap=1500)),), primal_inputs=(PrimalInput(pe="s", rate=1e6),))
    return Scenario(nodes=tuple(workloads.nodes(6, mips=8000.0)), templates=(t, lin),
                    jobs=(Job(name="d/step", templates=("d/step",)), Job(name="d/lin", templates=("d/lin",))), policy=Policy())


def test_an_estimated_bound_is_marked_and_never_raised_to_the_answer(monkeypatch):
    """Issue 49: main's greedy curves estimated 1,500 here while the 10-mips optimum is over 100,000, raised it to the
    answer and published "bound = answer, gap 0". The curves of a two-PE job are now exact and the answer reaches the
    saturation bound, so the bound is proven (and at least the oracle's best). Where curves are still not exact (here:
    the exact enumeration limited to EXACT_LIMIT vectors, and capacity short of saturating both jobs) the plan, its
    macroQ stage and the JSON say the bound is an estimate and give no gap (unknown) wherever the answer reaches it."""
    from soda_optimizer import pipeline
    from soda_optimizer.soda import curves

    s = step_scenario()
    # the oracle: the project's Evaluator at a hand-made allocation (9,100 + 3,100 mips to the step, 15,000 to the
    # other job: 27,200 of 48,000) scores over 101,000; no other allocation can pass 101,500 (both values' tops)
    ev = Evaluator(s.glued({"d/step": "d/step", "d/lin": "d/lin"}))
    mips = {"src": 9100.0, "snk": 3100.0, "s": 15000.0}
    best = float(ev.importance(np.array([[mips[p.split("/")[-1].split(":")[-1]] for p in ev.pes]]))[0])
    assert best > 101_000, (ev.pes, best)
    plan = pipeline.run(s, 30.0)
    mq = plan.stages[0]
    assert mq.stage == "macroq" and mq.bound_proven and plan.bound is not None and plan.bound >= best, mq.detail
    monkeypatch.setattr(curves, "BIG_EXACT_LIMIT", curves.EXACT_LIMIT)
    plan = pipeline.run(F.two_pe_step(20000.0), 30.0)
    mq = plan.stages[0]
    assert mq.stage == "macroq" and not mq.bound_proven and not plan.bound_proven, mq.detail
    assert plan.gap is None or plan.gap > 0, (plan.bound, plan.importance, plan.gap)
    assert mq.gap is None or mq.gap > 0
    assert "estimated" in mq.detail and "gap 0%" not in mq.detail
    doc = plan.model_dump(mode="json", exclude={"state"})
    assert doc["bound_proven"] is False


@settings(max_examples=10, deadline=None)
@given(st.lists(job, min_size=1, max_size=5), st.floats(0.2, 1.1))
def test_a_proven_bound_is_never_below_the_optimum(specs, share):
    """Wherever a bound is published as proven, it is at least the continuous optimum (the MILP oracle)."""
    specs = [(round(n, 1), ms, round(w, 3), r, req and k < 2, kind) for k, (n, ms, w, r, req, kind) in enumerate(specs)]
    s = one_pe_scenario(specs, share)
    res = macroq.solve(F.with_unit(s, None), deadline_s=30)
    if res.bound_proven:
        assert res.bound is not None and res.bound >= continuous_optimum(s) * (1 - 1e-7) - 1e-6, res.report.detail
