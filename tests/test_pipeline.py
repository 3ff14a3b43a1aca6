"""pipeline.run on the examples: the Plan is internally consistent (checks that can fail)."""

from __future__ import annotations

from pathlib import Path

import pytest

from soda_operator import crd, manifests
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
