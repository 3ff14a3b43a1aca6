"""pipeline.run on the examples: the Plan is internally consistent (checks that can fail)."""

from __future__ import annotations

from pathlib import Path

import pytest

from soda_operator import manifests
from soda_operator.soda import crd
from soda_optimizer import pipeline

EX = Path(__file__).resolve().parent.parent / "examples"


@pytest.mark.parametrize("example", ["small-pipeline", "alternatives", "glued"])
def test_plan_is_consistent(example: str) -> None:
    m = manifests.load([str(EX / "nodes" / "small-8.yaml"), str(EX / example)])
    scen, errors = crd.scenario_from_objects(m.nodes, m.templates, m.jobs, m.policy, source=m.source)
    assert errors == []
    plan = pipeline.run(scen)
    assert [s.stage for s in plan.stages][:2] == ["macroq", "macrow"]
    assert {d.job for d in plan.jobs} == {j.name for j in scen.jobs}
    admitted = {d.job for d in plan.jobs if d.admitted}
    assert admitted, "the examples fit on 8 nodes"
    nodes = {n.name for n in scen.nodes}
    load: dict[str, float] = {}
    for pe in plan.pes:
        assert pe.job in admitted
        assert set(pe.candidates) <= nodes
        assert set(pe.fractions) <= set(pe.candidates)
        for n, f in pe.fractions.items():
            assert 0.0 < f <= 1.0 + 1e-9
            load[n] = load.get(n, 0.0) + f
    # microW never gives a node more than its capacity
    assert all(v <= 1.0 + 1e-6 for v in load.values()), load
    # every admitted job's PEs are planned
    for d in plan.jobs:
        if d.admitted:
            assert d.template is not None
            assert any(pe.job == d.job for pe in plan.pes)


def test_no_pe_is_planned_more_than_a_rack_holds():
    """A PE's instances share one rack (macroW 6-11), so macroQ must not plan it more mips than
    the biggest rack has: DAC on 8 nodes planned 10,909 mips for a PE where racks hold 8,000, and
    macroW then rejected a rank-1 job at placement while rank-2 jobs ran. Two racks of 2 x 4000
    mips; a source that could use 20,000 mips, and one single-threaded, capped at one core."""
    from soda_optimizer.model import PE, Job, Node, Policy, PrimalInput, ResourceFunction, Scenario, Sink, Template

    nodes = tuple(Node(name=f"r{r}n{i}", mips=4000.0, mips_per_core=1000.0, rack=f"r{r}") for r in range(2) for i in range(2))
    t = Template(name="big", pes=(PE(name="src", kind="source", rf=ResourceFunction(a=1.0)),
                                  PE(name="one", kind="sink", single_threaded=True, rf=ResourceFunction(a=1.0, b=1.0))),
                 streams=(), primal_inputs=(PrimalInput(pe="src", rate=20000.0), PrimalInput(pe="one", rate=20000.0)),
                 sinks=(Sink(pe="src", weight=1.0), Sink(pe="one", weight=1.0)))
    s = Scenario(nodes=nodes, templates=(t,), jobs=(Job(name="j", templates=("big",), required=True),),
                 policy=Policy(macroq_deadline_s=2, macrow_deadline_s=2))
    plan = pipeline.run(s)
    assert [d.admitted for d in plan.jobs] == [True], plan.jobs
    goals = {p.name: p.goal_mips for p in plan.pes}
    assert 0 < goals["src"] <= 8000.0 + 1e-6 and 0 < goals["one"] <= 2000.0 + 1e-6, goals


def test_a_pe_whose_memory_no_node_has_rejects_its_job_for_memory_only():
    """Memory is a capacity: a job whose PE needs more memory than any node has is Rejected with
    reason memory and the numbers; the other job is admitted and placed, and no node holds more
    instances than its memory allows."""
    from soda_optimizer.model import PE, Job, Node, Policy, PrimalInput, Scenario, Sink, Stream, Template

    gib = 2.0**30
    nodes = tuple(Node(name=f"n{i}", mips=4000.0, memory_bytes=4 * gib, rack=f"r{i % 2}") for i in range(4))

    def tmpl(name: str, mem: float) -> Template:
        return Template(name=name, pes=(PE(name="src", kind="source", memory_bytes=mem), PE(name="snk", kind="sink", memory_bytes=mem)),
                        streams=(Stream(src="src", dst="snk"),), primal_inputs=(PrimalInput(pe="src", rate=1000.0),),
                        sinks=(Sink(pe="snk", weight=1.0),))

    s = Scenario(nodes=nodes, templates=(tmpl("small", 3 * gib), tmpl("huge", 6 * gib)),
                 jobs=(Job(name="ok", templates=("small",)), Job(name="big", templates=("huge",))),
                 policy=Policy(macroq_deadline_s=1, macrow_deadline_s=1))
    plan = pipeline.run(s)
    by = {d.job: d for d in plan.jobs}
    assert by["ok"].admitted and not by["big"].admitted
    assert by["big"].reason == "memory" and "6144Mi" in by["big"].message and "4096Mi" in by["big"].message, by["big"]
    per_node: dict[str, int] = {}
    for p in plan.pes:
        assert p.fractions, p  # admitted means every PE runs
        for n in p.fractions:
            per_node[n] = per_node.get(n, 0) + 1
    assert max(per_node.values()) == 1  # 3Gi instances on 4Gi nodes: one per node


def _dac_instances():
    from hypothesis import strategies as st

    return st.tuples(st.integers(0, 10_000), st.integers(2, 12), st.sampled_from([2, 4]), st.sampled_from([4000.0]))


from hypothesis import given, settings  # noqa: E402


@settings(max_examples=30, deadline=None)
@given(_dac_instances())
def test_random_instances_admitted_means_every_pe_has_an_instance(inst):
    """Issue 15's property on random DAC-like instances and cluster sizes: no admitted job has a PE
    without an instance (a fraction on some node), and every PE gets at least its floor. This is
    what the live DAC run broke (microQ left a PE paced into a full node at 0 mips)."""
    from soda_optimizer import workloads
    from soda_optimizer.model import Policy, floor_mips

    seed, n_nodes, per_rack, mips = inst
    pol = Policy(macroq_deadline_s=0.5, macrow_deadline_s=0.5, microq_deadline_s=0.5, microw_deadline_s=0.5)
    s = workloads.scenario(workloads.dac(seed), workloads.nodes(n_nodes, per_rack=per_rack, mips=mips), pol)
    plan = pipeline.run(s)
    if not plan.feasible:
        return
    admitted = {d.job: d.template for d in plan.jobs if d.admitted}
    for p in plan.pes:
        if p.job in admitted:
            spec = next(x for x in s.template(admitted[p.job]).pes if x.name == p.name)
            assert p.fractions, f"{p.pe} of admitted {p.job} has no instance"
            assert p.goal_mips + 1e-6 >= min(floor_mips(spec, pol.pe_floor_mips), p.macro_goal_mips), p
