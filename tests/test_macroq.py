"""macroQ against the brute-force oracle, plus the properties every output must have."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from oracles import admission_sets, macroq_bruteforce, rank_legal

from soda_optimizer.model import (
    PE,
    Export,
    Import,
    Job,
    Node,
    Policy,
    PrimalInput,
    ResourceFunction,
    Scenario,
    Sink,
    Stream,
    Template,
    ValueFunction,
    floor_mips,
    floor_units,
)
from soda_optimizer.soda import macroq, rap

UNIT = 1000.0


@st.composite
def scenarios(draw, max_jobs=4):
    n_t = draw(st.integers(1, 3))
    templates = []
    for t in range(n_t):
        n_pe = draw(st.integers(1, 2))
        pes = [PE(name="src", kind="source", rf=ResourceFunction(a=draw(st.sampled_from([0.005, 0.01, 0.02]))),
                  min_mips=draw(st.sampled_from([0.0, 0.0, 1000.0])))]
        streams, sink = [], "src"
        if n_pe == 2:
            pes.append(PE(name="op", rf=ResourceFunction(a=draw(st.sampled_from([0.0005, 0.001])), b=draw(st.sampled_from([0.5, 1.0]))),
                          max_mips=draw(st.sampled_from([math.inf, 2000.0]))))
            streams.append(Stream(src="src", dst="op"))
            sink = "op"
        vf = draw(st.sampled_from([ValueFunction(kind="linear"), ValueFunction(kind="capped", cap=20.0),
                                   ValueFunction(kind="piecewise", points=((0, 0), (10, 1), (30, 40)))]))
        templates.append(Template(name=f"t{t}", pes=tuple(pes), streams=tuple(streams),
                                  primal_inputs=(PrimalInput(pe="src", rate=draw(st.sampled_from([20.0, 50.0]))),),
                                  sinks=(Sink(pe=sink, weight=draw(st.sampled_from([1.0, 2.0])), value=vf),),
                                  exports=(Export(name="out", pe=sink),)))
    n_j = draw(st.integers(1, max_jobs))
    jobs = []
    for j in range(n_j):
        alts = draw(st.lists(st.sampled_from([t.name for t in templates]), min_size=1, max_size=2, unique=True))
        imports = ()
        if j > 0 and draw(st.booleans()) and draw(st.booleans()):
            imports = (Import(job="j0", export="out", pe="src"),)
            alts = alts[:1]
        jobs.append(Job(name=f"j{j}", rank=draw(st.integers(1, 3)), required=(j == 0 and draw(st.booleans())),
                        templates=tuple(alts), imports=imports))
    if any(j.imports for j in jobs):  # the exporter must export in every template: all templates do
        pass
    n_nodes = draw(st.integers(1, 3))
    nodes = tuple(Node(name=f"n{i}", mips=draw(st.sampled_from([2000.0, 3000.0]))) for i in range(n_nodes))
    return Scenario(nodes=nodes, templates=tuple(templates), jobs=tuple(jobs), policy=Policy(unit_mips=UNIT))


@settings(max_examples=60, deadline=None)
@given(scenarios())
def test_macroq_equals_bruteforce_oracle(s):
    res = macroq.solve(s, deadline_s=30)
    want, _ = macroq_bruteforce(s, UNIT)
    if res.report.status == "infeasible":
        assert want < 0, f"oracle found a feasible list with importance {want}"
        return
    assert res.importance == pytest.approx(want, rel=1e-6, abs=1e-6)


@settings(max_examples=60, deadline=None)
@given(scenarios())
def test_macroq_output_is_legal(s):
    res = macroq.solve(s, deadline_s=30)
    assert res.report.status != "infeasible"  # there is always a node here: the rule refuses, never gives up
    admitted = set(res.choice)
    promised, refused, free = admission_sets(s, UNIT)
    assert rank_legal(admitted - promised, free)
    assert promised <= admitted and not refused & admitted
    assert sum(res.goals.values()) <= s.capacity_mips + 1e-6
    for jname, tname in res.choice.items():
        assert tname in s.job(jname).candidate_templates
        for p in s.template(tname).pes:
            g = res.goals[f"{jname}:{p.name}"]
            # admitted means every PE runs: at least its minimum, the policy's floor, one unit
            assert g > 0 and floor_mips(p, s.policy.pe_floor_mips) - 1e-6 <= g <= max(p.max_mips, UNIT) + 1e-6
    for d in res.decisions:
        assert d.admitted == (d.job in admitted)
        assert d.admitted or d.reason in ("rank-waterline", "capacity", "dependency", "infeasible-required")
        assert (d.reason == "infeasible-required") == (d.job in refused)
    # importance reported = importance of the goals
    assert res.importance == pytest.approx(sum(d.importance for d in res.decisions), rel=1e-6, abs=1e-6)


@settings(max_examples=40, deadline=None)
@given(scenarios(max_jobs=3), st.integers(1, 3))
def test_more_capacity_never_lowers_importance(s, extra):
    small = macroq.solve(s, deadline_s=30)
    bigger = s.model_copy(update={"nodes": s.nodes + tuple(Node(name=f"x{i}", mips=2000.0) for i in range(extra))})
    big = macroq.solve(bigger, deadline_s=30)
    if small.report.status != "infeasible":
        assert big.importance >= small.importance - 1e-6


def test_required_jobs_that_cannot_fit_give_a_clear_error():
    t = Template(name="t", pes=(PE(name="a", kind="source", min_mips=5000),), primal_inputs=(PrimalInput(pe="a", rate=1),))
    s = Scenario(nodes=(Node(name="n", mips=4000),), templates=(t,), jobs=(Job(name="big", templates=("t",), required=True),))
    res = macroq.solve(s)
    assert res.report.status != "infeasible"
    assert "big" in res.report.detail
    assert res.decisions[0].reason == "infeasible-required"
    msg = res.decisions[0].message
    assert "5000" in msg and "4000" in msg and "short by 1000" in msg, msg


def test_revised_rank_follows_dependents():
    t = Template(name="t", pes=(PE(name="a", kind="source"),), primal_inputs=(PrimalInput(pe="a", rate=1),),
                 exports=(Export(name="o", pe="a"),))
    s = Scenario(nodes=(Node(name="n", mips=4000),), templates=(t,),
                 jobs=(Job(name="up", rank=3, templates=("t",)),
                       Job(name="down", rank=1, templates=("t",), imports=(Import(job="up", export="o", pe="a"),))))
    assert macroq.revised_ranks(s) == {"up": 1, "down": 1}


def test_rank_waterline_drops_worst_ranks_first():
    t = Template(name="t", pes=(PE(name="a", kind="source", min_mips=2000, rf=ResourceFunction(a=0.01)),),
                 primal_inputs=(PrimalInput(pe="a", rate=100),), sinks=(Sink(pe="a"),))
    jobs = tuple(Job(name=f"r{r}-{i}", rank=r, templates=("t",)) for r in (1, 2, 3) for i in range(2))
    s = Scenario(nodes=tuple(Node(name=f"n{i}", mips=2000) for i in range(4)), templates=(t,), jobs=jobs,
                 policy=Policy(unit_mips=500))
    res = macroq.solve(s)
    admitted = {d.job for d in res.decisions if d.admitted}
    assert admitted == {"r1-0", "r1-1", "r2-0", "r2-1"}
    assert {d.reason for d in res.decisions if not d.admitted} == {"rank-waterline"}


@settings(max_examples=100, deadline=None)
@given(st.lists(st.lists(st.floats(0, 5), min_size=1, max_size=5), min_size=1, max_size=4), st.integers(0, 10),
       st.booleans())
def test_separable_allocation_matches_enumeration(incs, budget, concave):
    import itertools

    funcs = [np.concatenate([[0.0], np.cumsum(sorted(d, reverse=True) if concave else d)]) for d in incs]
    x, _ = rap.allocate(funcs, budget)
    assert sum(x) <= budget
    got = sum(f[i] for f, i in zip(funcs, x))
    want = max(sum(f[i] for f, i in zip(funcs, xs)) for xs in itertools.product(*[range(len(f)) for f in funcs]) if sum(xs) <= budget)
    assert got == pytest.approx(want, abs=1e-6)  # rap ignores gains below its 1e-9 tolerance


# ------------------------------------------------------------------ the admission rule (required jobs)


@settings(max_examples=80, deadline=None)
@given(scenarios(max_jobs=3), st.integers(1, 3), st.booleans(), st.sampled_from([0.0, 0.5, 1.0, 1.5]))
def test_adding_a_job_never_takes_an_admitted_place(s, rank, required, share):
    """Adding one job (required or not) never rejects an admitted job of better rank than the
    added one, nor an admitted required job (a required job ranks as 1, the paper's assumption)."""
    before = macroq.solve(s, deadline_s=30)
    admitted = dict(before.choice)
    # what the operator reads back: admitted jobs keep their template (incumbents)
    jobs = tuple(j.model_copy(update={"chosen_template": admitted.get(j.name)}) for j in s.jobs)
    min_mips = UNIT * math.floor(share * s.capacity_mips / UNIT)  # up to all of the capacity, and beyond
    t = Template(name="tx", pes=(PE(name="src", kind="source", min_mips=min_mips, rf=ResourceFunction(a=0.005)),),
                 primal_inputs=(PrimalInput(pe="src", rate=20.0),), sinks=(Sink(pe="src", weight=2.0),))
    x = Job(name="x", rank=rank, required=required, templates=("tx",))
    after = macroq.solve(s.model_copy(update={"templates": s.templates + (t,), "jobs": jobs + (x,)}), deadline_s=30)
    assert after.report.status != "infeasible"
    for j in jobs:
        if j.name in admitted and (j.required or (not x.required and j.rank < x.rank)):
            d = next(d for d in after.decisions if d.job == j.name)
            assert d.admitted, f"{j.name} (rank {j.rank}, required {j.required}) lost its place to {x}: {d.reason} {d.message}"


def _src(name: str, min_mips: float, **kw) -> Template:
    return Template(name=name, pes=(PE(name="a", kind="source", min_mips=min_mips, rf=ResourceFunction(a=0.01), **kw),),
                    primal_inputs=(PrimalInput(pe="a", rate=100),), sinks=(Sink(pe="a"),))


def test_rule_order_incumbents_then_rank_then_creation():
    nodes = tuple(Node(name=f"n{i}", mips=4000) for i in range(2))  # 8000 mips
    ts = (_src("t3", 3000), _src("t5", 5000))
    jobs = (
        Job(name="new-rank1", rank=1, required=True, templates=("t5",), created="2026-01-02T00:00:00Z"),
        Job(name="old", rank=3, required=True, templates=("t5",), chosen_template="t5", created="2026-01-03T00:00:00Z"),
        Job(name="early", rank=2, required=True, templates=("t3",), created="2026-01-01T00:00:00Z"),
        Job(name="late", rank=2, required=True, templates=("t3",), created="2026-01-04T00:00:00Z"),
    )
    res = macroq.solve(Scenario(nodes=nodes, templates=ts, jobs=jobs, policy=Policy(unit_mips=500)))
    dec = {d.job: d for d in res.decisions}
    # old (incumbent, 5000) first, then new-rank1 (5000) does not fit, early (3000) fits, late does not
    assert {j for j, d in dec.items() if d.admitted} == {"old", "early"}
    assert dec["new-rank1"].reason == dec["late"].reason == "infeasible-required"
    assert "short by 2000 mips" in dec["new-rank1"].message and "2 required job(s) ahead" in dec["late"].message


def test_a_job_that_fits_nowhere_holds_no_rank_back():
    nodes = tuple(Node(name=f"n{i}", mips=4000) for i in range(2))
    jobs = (Job(name="huge", rank=1, templates=("big",)), Job(name="small", rank=2, templates=("t",)))
    res = macroq.solve(Scenario(nodes=nodes, templates=(_src("big", 100_000), _src("t", 1000)), jobs=jobs, policy=Policy(unit_mips=500)))
    dec = {d.job: d for d in res.decisions}
    assert dec["small"].admitted
    assert dec["huge"].reason == "capacity" and "short by 92000 mips" in dec["huge"].message


def test_unplaceable_job_is_rejected_alone():
    from soda_optimizer import pipeline

    nodes = tuple(Node(name=f"n{i}", mips=4000, labels={"disk": "hdd"}) for i in range(2))
    ts = (_src("t", 1000), _src("gpu", 1000, node_selector={"accel": "gpu"}))
    jobs = (Job(name="ok", templates=("t",)), Job(name="needs-gpu", templates=("gpu",)),
            Job(name="reader", templates=("t",)))
    plan = pipeline.run(Scenario(nodes=nodes, templates=ts, jobs=jobs))
    dec = {d.job: d for d in plan.jobs}
    assert plan.feasible
    assert dec["ok"].admitted and dec["reader"].admitted
    assert dec["needs-gpu"].reason == "placement" and "no node can host PE(s) a" in dec["needs-gpu"].message
    assert all(p.fractions for p in plan.pes if p.job in ("ok", "reader"))


# ------------------------------------------------------------------ the knapsack at scale (issue: macroQ resolution)


@st.composite
def many_jobs(draw):
    """Many one-PE jobs (more than an enumeration of subsets could handle), several ranks."""
    ts = []
    for i in range(3):
        ts.append(Template(name=f"t{i}", pes=(PE(name="src", kind="source", min_mips=draw(st.sampled_from([0.0, 200.0, 600.0])),
                                                 rf=ResourceFunction(a=draw(st.sampled_from([0.01, 0.02, 0.05])))),),
                           primal_inputs=(PrimalInput(pe="src", rate=draw(st.sampled_from([5.0, 10.0, 20.0]))),),
                           sinks=(Sink(pe="src", weight=draw(st.sampled_from([1.0, 2.0, 3.0])),
                                       value=draw(st.sampled_from([ValueFunction(kind="linear"), ValueFunction(kind="capped", cap=8.0)]))),)))
    n = draw(st.integers(12, 24))
    jobs = tuple(Job(name=f"j{k:02d}", rank=draw(st.integers(1, 3)), required=draw(st.booleans()) and k < 3,
                     templates=tuple(draw(st.lists(st.sampled_from(["t0", "t1", "t2"]), min_size=1, max_size=2, unique=True))))
                 for k in range(n))
    nodes = tuple(Node(name=f"n{i}", mips=draw(st.sampled_from([1000.0, 2000.0]))) for i in range(draw(st.integers(1, 4))))
    return Scenario(nodes=nodes, templates=tuple(ts), jobs=jobs, policy=Policy(unit_mips=100.0))


def slow_dp(s: Scenario, unit: float) -> float:
    """An independent, plain-Python knapsack per waterline level over one-PE jobs' curves computed
    one allocation at a time (no numpy vectorisation, no shared code with soda.admission)."""
    from soda_optimizer.importance import Evaluator

    promised, refused, free = admission_sets(s, unit)
    U = int(s.capacity_mips // unit + 1e-9)
    curves: dict[tuple[str, str], list[float]] = {}
    for j in s.jobs:
        for t in j.candidate_templates:
            ev = Evaluator(s.glued({j.name: t}))
            lo = floor_units(s.template(t).pes[0], unit, s.policy.pe_floor_mips)
            curves[(j.name, t)] = [float(ev.importance([[k * unit]])[0]) if k >= lo else -math.inf for k in range(U + 1)]
    best = -math.inf
    for r in sorted(set(free.values())) or [1]:
        forced = set(promised) | {j for j, x in free.items() if x < r}
        optional = {j for j, x in free.items() if x == r}
        dp = [0.0] + [-math.inf] * U
        for j in s.jobs:
            if j.name not in forced and j.name not in optional:
                continue
            item = [max(curves[(j.name, t)][k] for t in j.candidate_templates) for k in range(U + 1)]
            new = [-math.inf] * (U + 1) if j.name in forced else list(dp)
            for u in range(U + 1):
                if dp[u] == -math.inf:
                    continue
                for k in range(U + 1 - u):
                    if item[k] > -math.inf and dp[u] + item[k] > new[u + k]:
                        new[u + k] = dp[u] + item[k]
            dp = new
        best = max(best, max(dp))
    return best


@settings(max_examples=15, deadline=None)
@given(many_jobs())
def test_knapsack_equals_an_independent_slow_dp(s):
    res = macroq.solve(s, deadline_s=60)
    want = slow_dp(s, 100.0)
    assert res.importance == pytest.approx(max(want, 0.0), rel=1e-6, abs=1e-6)


def _admission_scenario(nodes: int, **pol) -> Scenario:
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks.bench_admission import NODE_MIPS, jobs

    ts, js = jobs()
    return Scenario(nodes=tuple(Node(name=f"n{i}", mips=NODE_MIPS) for i in range(nodes)), templates=tuple(ts), jobs=tuple(js),
                    policy=Policy(**pol))


@pytest.mark.parametrize("deadline", [1e-4, 0.05, 0.5])
def test_anytime_contract(deadline):
    """Whatever the deadline: every rank that fits is admitted in the first answer, the answer is
    never worse than the coarsest resolution's, and the stage returns within its deadline plus a
    margin (one knapsack or curve step)."""
    s = _admission_scenario(100)
    coarse = macroq.solve(s.model_copy(update={"policy": Policy(unit_mips=s.capacity_mips / 128)}), deadline_s=60)
    t0 = time.monotonic()
    res = macroq.solve(s, deadline_s=deadline)
    took = time.monotonic() - t0
    by_rank = {r: sum(d.admitted for d in res.decisions if d.rank == r) for r in (1, 2, 3)}
    assert by_rank == {1: 7, 2: 6, 3: 6}, (by_rank, res.report.detail)  # all 19 fit at 100 nodes
    assert res.importance >= coarse.importance - 1e-6
    assert took <= deadline + 1.0, took
    if res.report.status == "deadline":
        assert "unit" in res.report.detail and "waterline" in res.report.detail
