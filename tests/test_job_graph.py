"""The Scenario's one job import graph (issue 33, item 3): built once, shared, never in equality."""

from __future__ import annotations

import networkx as nx

from soda_optimizer.model import PE, Export, Import, Job, Node, PrimalInput, Scenario, Template


def _scenario() -> Scenario:
    t = Template(name="t", pes=(PE(name="a", kind="source"),), primal_inputs=(PrimalInput(pe="a", rate=1),),
                 exports=(Export(name="out", pe="a"),))
    jobs = (Job(name="x", templates=("t",)), Job(name="y", templates=("t",), imports=(Import(job="x", export="out", pe="a"),)),
            Job(name="z", templates=("t",), imports=(Import(job="y", export="out", pe="a"),)))
    return Scenario(nodes=(Node(name="n", mips=1000),), templates=(t,), jobs=jobs)


def test_job_graph_is_built_once_and_matches_the_imports():
    s = _scenario()
    g = s.job_graph()
    assert g is s.job_graph()
    want = nx.DiGraph([(imp.job, j.name) for j in s.jobs for imp in j.imports])
    want.add_nodes_from(j.name for j in s.jobs)
    assert set(g.nodes) == set(want.nodes) and set(g.edges) == set(want.edges)


def test_a_copy_has_its_own_graph_and_equality_ignores_caches():
    s = _scenario()
    s.job_graph()
    fewer = s.model_copy(update={"jobs": s.jobs[:1]})
    assert set(fewer.job_graph().nodes) == {"x"} and set(s.job_graph().nodes) == {"x", "y", "z"}
    same = Scenario.model_validate(s.model_dump())
    s.glued({"x": "t"})
    assert same == s
