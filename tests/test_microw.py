"""microW: exact whenever the LP says the goals are reachable; every output satisfies its constraints."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from ortools.linear_solver import pywraplp

from soda_optimizer.model import PE, Job, Node, Policy, PreviousState, PrimalInput, Scenario, Template
from soda_optimizer.soda import microw


def lp_reachable(s: Scenario, goals, cands, cap) -> bool:
    """LP oracle: can sum_n H_n f(p,n) = g_p with sum_p f(p,n) <= 1 and f <= legal cap?"""
    solver = pywraplp.Solver.CreateSolver("GLOP")
    H = {n.name: n.mips for n in s.usable_nodes()}
    per_node: dict[str, list] = {n: [] for n in H}
    for p, g in goals.items():
        ct = solver.Constraint(g, g)
        for n in cands[p]:
            if n in H:
                v = solver.NumVar(0, cap(p, n), "")
                ct.SetCoefficient(v, H[n])
                per_node[n].append(v)
    for vs in per_node.values():
        c = solver.Constraint(0, 1)
        for v in vs:
            c.SetCoefficient(v, 1)
    return solver.Solve() == pywraplp.Solver.OPTIMAL


@st.composite
def instances(draw, limits=False):
    n_nodes = draw(st.integers(1, 5))
    mib = 2.0**20
    nodes = tuple(
        Node(name=f"n{i}", mips=draw(st.sampled_from([1000.0, 2000.0, 4000.0])), ready=draw(st.sampled_from([True, True, True, False])),
             memory_bytes=draw(st.sampled_from([float("inf"), 128 * mib, 200 * mib])) if limits else float("inf"))
        for i in range(n_nodes)
    )
    n_pe = draw(st.integers(1, 6))
    pes = tuple(PE(name=f"p{i}", single_threaded=draw(st.booleans()), kind="source",
                   memory_bytes=draw(st.sampled_from([64 * mib, 100 * mib])) if limits else 64 * mib) for i in range(n_pe))
    t = Template(name="t", pes=pes, primal_inputs=tuple(PrimalInput(pe=p.name, rate=1) for p in pes))
    goals = {f"j:p{i}": float(draw(st.sampled_from([0, 300, 800, 1500, 2500]))) for i in range(n_pe)}
    cands = {p: tuple(draw(st.lists(st.sampled_from([n.name for n in nodes]), min_size=1, max_size=n_nodes, unique=True))) for p in goals}
    prev = {}
    for p in goals:
        if draw(st.booleans()):
            n = draw(st.sampled_from([x.name for x in nodes]))
            prev[p] = {n: draw(st.sampled_from([0.1, 0.25, 0.5]))}
    pol = Policy()
    if limits:
        pol = Policy(micro_max_change=draw(st.sampled_from([None, 500.0, 2000.0])),
                     micro_max_change_per_pe=draw(st.sampled_from([None, 300.0, 1000.0])),
                     micro_max_touched_nodes=draw(st.sampled_from([None, 1, 2])))
    s = Scenario(nodes=nodes, templates=(t,), jobs=(Job(name="j", templates=("t",)),), policy=pol,
                 previous=PreviousState(fractions=prev))
    return s, goals, cands


@settings(max_examples=150, deadline=None)
@given(instances())
def test_exact_when_lp_says_reachable(inst):
    s, goals, cands = inst
    res = microw.solve(s, goals, cands, deadline_s=10)
    assert microw.check(s, goals, cands, res) == []
    st_ = microw._State(s, goals, cands)
    if lp_reachable(s, goals, cands, st_.cap):
        assert res.deviation <= 1e-6 * max(1.0, sum(goals.values())), res


@settings(max_examples=150, deadline=None)
@given(instances(limits=True))
def test_churn_limits_and_constraints_hold(inst):
    s, goals, cands = inst
    res = microw.solve(s, goals, cands, deadline_s=10)
    assert microw.check(s, goals, cands, res) == []


def test_max_instances_caps_the_nodes_of_a_pe():
    t = Template(name="t", pes=(PE(name="a", kind="source", max_instances=2),), primal_inputs=(PrimalInput(pe="a", rate=1),))
    s = Scenario(nodes=tuple(Node(name=f"n{i}", mips=1000) for i in range(4)), templates=(t,), jobs=(Job(name="j", templates=("t",)),))
    goals = {"j:a": 3500.0}
    cands = {"j:a": ("n0", "n1", "n2", "n3")}
    res = microw.solve(s, goals, cands, deadline_s=10)
    assert len(res.fractions["j:a"]) == 2  # 2000 of its 3500 mips: two nodes, no more
    assert microw.check(s, goals, cands, res) == []
    unbounded = microw.solve(s.model_copy(update={"templates": (t.model_copy(update={"pes": (t.pes[0].model_copy(update={"max_instances": None}),)}),)}),
                             goals, cands, deadline_s=10)
    assert len(unbounded.fractions["j:a"]) == 4


def test_memory_one_instance_per_node_where_only_one_fits():
    """Memory is rigid: three PEs of 100Mi on nodes of 150Mi get one node each, although each node
    has the CPU for all three; previous fractions that no longer fit the memory are shed."""
    mib = 2.0**20
    t = Template(name="t", pes=tuple(PE(name=x, kind="source", memory_bytes=100 * mib) for x in "abc"),
                 primal_inputs=tuple(PrimalInput(pe=x, rate=1) for x in "abc"))
    nodes = tuple(Node(name=f"n{i}", mips=4000, memory_bytes=150 * mib) for i in range(3))
    prev = PreviousState(fractions={"j:a": {"n0": 0.2}, "j:b": {"n0": 0.2}})  # two on n0: over its memory now
    s = Scenario(nodes=nodes, templates=(t,), jobs=(Job(name="j", templates=("t",)),), previous=prev)
    goals = {f"j:{x}": 800.0 for x in "abc"}
    cands = {p: ("n0", "n1", "n2") for p in goals}
    res = microw.solve(s, goals, cands, deadline_s=10)
    assert microw.check(s, goals, cands, res) == []
    on = sorted(n for fs in res.fractions.values() for n in fs)
    assert on == ["n0", "n1", "n2"], res.fractions
    assert res.deviation < 1e-6
    roomy = s.model_copy(update={"nodes": tuple(n.model_copy(update={"memory_bytes": 400 * mib}) for n in nodes)})
    bad = microw.MicroWResult(fractions={p: {"n0": 0.2} for p in goals}, deviation=0.0, report=res.report)
    assert microw.check(roomy, goals, cands, bad) == []
    assert any("memory" in e for e in microw.check(s, goals, cands, bad))
