"""microQ against a direct MILP of its formulation (constraints 34-43) on small instances:
never above the optimum, and equal on single-segment instances."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ortools.linear_solver import pywraplp

from soda_optimizer.importance import Evaluator
from soda_optimizer.model import PE, Job, Node, PrimalInput, Scenario, Template
from soda_optimizer.plan import StageReport
from soda_optimizer.soda import microq
from soda_optimizer.soda.stages import ComponentCurve, MacroQResult


@st.composite
def instances(draw):
    n_nodes = draw(st.integers(1, 4))
    nodes = tuple(Node(name=f"n{i}", mips=float(draw(st.sampled_from([1000, 2000, 4000])))) for i in range(n_nodes))
    comps, pes_all = [], []
    for c in range(draw(st.integers(1, 3))):
        k = draw(st.integers(1, 3))
        pes = tuple(f"j:c{c}p{i}" for i in range(k))
        pes_all += pes
        n_pts = draw(st.integers(2, 6))
        steps = np.array(draw(st.lists(st.sampled_from([250.0, 500.0, 1000.0]), min_size=n_pts - 1, max_size=n_pts - 1)))
        mips = np.concatenate([[0.0], np.cumsum(steps)])
        gains = np.array(draw(st.lists(st.floats(0.0, 10.0), min_size=n_pts - 1, max_size=n_pts - 1)))
        imp = np.concatenate([[0.0], np.cumsum(gains)])
        alloc = np.zeros((n_pts, k))
        for r in range(1, n_pts):  # each increment goes to PEs in drawn proportions
            w = np.array(draw(st.lists(st.sampled_from([0.0, 1.0, 2.0]), min_size=k, max_size=k))) + 1e-3
            alloc[r] = alloc[r - 1] + steps[r - 1] * w / w.sum()
        comps.append(ComponentCurve(pes=pes, mips=mips, importance=imp, allocation=alloc))
    cands = {p: tuple(draw(st.lists(st.sampled_from([n.name for n in nodes]), min_size=1, max_size=n_nodes, unique=True))) for p in pes_all}
    names = [p.split(":")[1] for p in pes_all]
    t = Template(name="t", pes=tuple(PE(name=n, kind="source") for n in names), primal_inputs=tuple(PrimalInput(pe=n, rate=1) for n in names))
    s = Scenario(nodes=nodes, templates=(t,), jobs=(Job(name="j", templates=("t",)),))
    mq = MacroQResult((), {"j": "t"}, {}, {}, tuple(comps), 0.0, StageReport(stage="macroq", seconds=0, status="optimal"))
    return s, mq, cands


def milp(s: Scenario, mq: MacroQResult, cands) -> float | None:
    """Constraints 34-43 on the same concave fit: y binaries pick one segment per component;
    within it G_c and the paced g_p are linear; sum_n H_n f = g_p; sum_p f <= 1."""
    solver = pywraplp.Solver.CreateSolver("SCIP")
    H = {n.name: n.mips for n in s.nodes}
    load = {n: [] for n in H}
    obj = 0
    for ci, comp in enumerate(mq.components):
        x, y, A = microq.concave_fit(comp)
        if len(x) == 1:
            segs = [(x[0], x[0], y[0], 0.0, A[0], np.zeros(len(comp.pes)))]
        else:
            segs = [(x[r], x[r + 1], y[r], (y[r + 1] - y[r]) / (x[r + 1] - x[r]), A[r], (A[r + 1] - A[r]) / (x[r + 1] - x[r])) for r in range(len(x) - 1)]
        ys = [solver.BoolVar(f"y{ci}_{r}") for r in range(len(segs))]
        solver.Add(sum(ys) == 1)  # (34)
        # G_c - left end of its segment, per segment (zero unless chosen): 0 <= d_r <= len_r y_r  (35, 36)
        ds = [solver.NumVar(0, seg[1] - seg[0], f"d{ci}_{r}") for r, seg in enumerate(segs)]
        for d, yv, seg in zip(ds, ys, segs):
            solver.Add(d <= (seg[1] - seg[0]) * yv)
            obj += seg[2] * yv + seg[3] * d
        for i, p in enumerate(comp.pes):
            g = sum(seg[4][i] * yv + seg[5][i] * d for seg, yv, d in zip(segs, ys, ds))  # pacing (37)
            fs = []
            for n in cands[p]:
                v = solver.NumVar(0, 1, f"f{p}{n}")
                fs.append(H[n] * v)
                load[n].append(v)
            solver.Add(sum(fs) == g)  # (38)
    for vs in load.values():
        if vs:
            solver.Add(sum(vs) <= 1)  # (39)
    solver.Maximize(obj)
    params = pywraplp.MPSolverParameters()  # proven optimal, not within SCIP's default 1e-4 gap (an oracle)
    params.SetDoubleParam(pywraplp.MPSolverParameters.RELATIVE_MIP_GAP, 0.0)
    return solver.Objective().Value() if solver.Solve(params) == pywraplp.Solver.OPTIMAL else None


@settings(max_examples=150, deadline=None)
@given(instances())
def test_microq_matches_milp(inst):
    s, mq, cands = inst
    res = microq.solve(s, mq, cands, deadline_s=10)
    want = milp(s, mq, cands)
    if want is None:
        return  # even the first segment cannot be hosted: microQ falls back (slack), the MILP has no solution
    # microQ's segment stepping (paper 5.3.3) converges to a local optimum of the pacing problem,
    # so it may stay below the MILP (seen: 4.0 vs 4.56) but it must never claim more than the
    # formulation allows (a real bug once: a segment whose goals could not be hosted won)
    assert res.fitted is not None
    assert res.fitted <= want + 1e-3
    assert res.fitted >= 0.0
    # issue 34: the stage reports the importance of the goals it returns, never the fit's value
    ev = Evaluator(s.glued(mq.choice))
    got = float(ev.importance(np.array([[res.goals.get(p, 0.0) for p in ev.pes]]))[0])
    assert res.report.objective == pytest.approx(got, rel=1e-9, abs=1e-9)
    assert res.importance == pytest.approx(got, rel=1e-9, abs=1e-9)
    # the goals are hostable: per node, the planned goals fit the candidates
    for p, g in res.goals.items():
        assert g <= sum(n.mips for n in s.nodes if n.name in cands[p]) + 1e-6


@settings(max_examples=60, deadline=None)
@given(instances())
def test_microq_exact_when_every_curve_is_one_segment(inst):
    s, mq, cands = inst
    comps = tuple(ComponentCurve(pes=c.pes, mips=c.mips[[0, -1]], importance=c.importance[[0, -1]], allocation=c.allocation[[0, -1]])
                  for c in mq.components)
    mq = MacroQResult((), mq.choice, {}, {}, comps, 0.0, mq.report)
    res = microq.solve(s, mq, cands, deadline_s=10)
    want = milp(s, mq, cands)
    if want is not None:
        assert res.fitted == pytest.approx(want, rel=1e-6, abs=1e-3)


def test_floors_are_hosted_before_anything_above_them():
    """Admitted means every PE runs (live regression, DAC on 8 nodes: a PE paced into a full node
    was the one left at 0 mips, with no instance). Three PEs on one 1000-mips node; the segment
    held forces 1030 mips of paced goals: the 30 mips that cannot be hosted must come out of the
    PE above its floor, never out of a PE's floor."""
    t = Template(name="t", pes=tuple(PE(name=n, kind="source") for n in ("p", "q", "r")),
                 primal_inputs=tuple(PrimalInput(pe=n, rate=1) for n in ("p", "q", "r")))
    s = Scenario(nodes=(Node(name="n0", mips=1000.0),), templates=(t,), jobs=(Job(name="j", templates=("t",)),))
    c1 = ComponentCurve(pes=("j:p", "j:q"), mips=np.array([20.0, 1020.0, 2020.0]), importance=np.array([0.0, 100.0, 150.0]),
                        allocation=np.array([[10.0, 10.0], [10.0, 1010.0], [10.0, 2010.0]]))
    c2 = ComponentCurve(pes=("j:r",), mips=np.array([10.0, 1010.0]), importance=np.array([0.0, 1.0]), allocation=np.array([[10.0], [1010.0]]))
    comps = [c1, c2]
    fits = [microq.concave_fit(c) for c in comps]
    cands = {p: ("n0",) for p in ("j:p", "j:q", "j:r")}
    specs = {f"j:{n}": PE(name=n, kind="source") for n in "pqr"}
    for floor, want in ((10.0, 10.0), (0.0, 0.0)):
        value, goals, G, slack = microq._lp(comps, fits, [1, 0], cands, {"n0": 1000.0}, specs, floor=floor)
        assert sum(goals.values()) <= 1000.0 + 1e-6
        assert goals["j:p"] >= want - 1e-6 and goals["j:r"] >= want - 1e-6, goals
    # and through the stage: every PE of the job gets at least the policy floor (10 mips)
    mq = MacroQResult((), {"j": "t"}, {}, {}, (c1, c2), 0.0, StageReport(stage="macroq", seconds=0, status="optimal"))
    res = microq.solve(s, mq, cands, deadline_s=5)
    assert min(res.goals[p] for p in cands) >= 10.0 - 1e-6, res.goals


def test_hosted_is_a_max_flow_of_the_goals_over_the_candidates():
    from soda_optimizer.soda.microq import hosted

    nodes = {"n0": 100.0, "n1": 100.0}
    # a fits on n0, b on n0 or n1: both fit (b moves to n1)
    assert hosted({"a": 100.0, "b": 80.0}, {"a": ("n0",), "b": ("n0", "n1")}, nodes) == {"a": 100.0, "b": 80.0}
    # both only on n0: 150 of 180 fit, and the max flow hosts exactly that much in all
    got = hosted({"a": 100.0, "b": 80.0}, {"a": ("n0",), "b": ("n0",)}, nodes)
    assert sum(got.values()) == pytest.approx(100.0) and all(got[p] <= g for p, g in {"a": 100.0, "b": 80.0}.items())
    assert hosted({"a": 50.0}, {"a": ()}, nodes) == {"a": 0.0}


def test_micro_goals_never_worth_less_than_macroq_goals_as_hosted():
    """DAC on 9 nodes, nearly full: the LP on the concave fit gave 5,325 where macroQ's goals, as the
    candidates host them, give 5,414 (and a plain placement of macroQ's goals 5,517); microQ keeps
    the better of the two, judged by the true importance."""
    from soda_optimizer import pipeline, workloads
    from soda_optimizer.importance import Evaluator
    from soda_optimizer.model import floor_mips
    from soda_optimizer.soda.microq import hosted

    t, j = workloads.dac(0)
    s = workloads.scenario((t, j), workloads.nodes(9))
    plan = pipeline.run(s)
    mq, _ = plan.state
    ev = Evaluator(s.glued(mq.choice))
    cands = {p.pe: p.candidates for p in plan.pes}
    h = hosted({p: float(mq.goals.get(p, 0.0)) for p in ev.pes}, cands, {n.name: n.mips for n in s.usable_nodes()})
    as_hosted = float(ev.importance(np.array([[h.get(p, 0.0) for p in ev.pes]]))[0])
    micro_goals = {p: next(x.goal_mips for x in plan.pes if x.pe == p) for p in ev.pes}
    micro = float(ev.importance(np.array([[micro_goals[p] for p in ev.pes]]))[0])
    # macroQ's goals as hosted are an alternative only where they keep every PE at its floor (a PE the
    # candidates host below it cannot run): macroW's time-limited candidates leave that to chance, so
    # on some runs (1 in 3-6 here) some PE is hosted at 0 and the alternative does not exist
    glued = s.glued(mq.choice)
    floors = {p: floor_mips(glued.spec(p), s.policy.pe_floor_mips) for p in ev.pes}
    if all(h.get(p, 0.0) >= min(float(mq.goals.get(p, 0.0)), floors[p]) - 1e-3 for p in ev.pes):
        assert micro >= as_hosted * (1 - 1e-6)  # (the old microQ: 5,325)
    assert all(micro_goals[p] >= min(float(mq.goals.get(p, 0.0)), floors[p]) - 1e-3 for p in ev.pes), micro_goals


def test_the_stage_objective_is_the_plan_importance_when_macroq_goals_are_kept():
    """Issue 34: microQ's reported importance exceeded the fine optimum while its detail said macroQ's
    goals were kept and the Plan's importance was the lower figure. The fit's value was reported as
    the stage's objective; the objective is now the importance of the goals the stage returns (the
    Plan's), at most the Plan's bound; the fit's value is in the detail."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks import resolution_families as F
    from soda_optimizer.soda import Soda

    kept = 0
    for seed in (0, 1):
        s = F.span(n_jobs=12, capacity=3000.0, n_tiny=3, seed=seed)
        plan = Soda().plan(s, deadline_s=8)
        uq = next(x for x in plan.stages if x.stage == "microq")
        assert uq.objective == pytest.approx(plan.importance, rel=1e-9, abs=1e-9), uq.detail
        assert plan.bound is not None and uq.objective <= plan.bound * (1 + 1e-9)
        kept += "macroQ's goals" in uq.detail
    assert kept, "no instance where macroQ's goals were kept: the test checks nothing of the issue"
