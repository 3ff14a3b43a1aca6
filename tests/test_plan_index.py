"""A job's status from a plan indexed once (status.PlanIndex, Learning.statuses_of) equals the status
from a scan of the whole plan per job (the oracle: what status.planned and Learning.status_of did
before, re-stated here), for every job of a plan the optimizer makes."""

from __future__ import annotations

from typing import Any

from soda_operator.soda import status
from soda_operator.soda.learning import Learning
from soda_optimizer import workloads
from soda_optimizer.learn.functions import Choice
from soda_optimizer.model import ResourceFunction
from soda_optimizer.soda import Soda


def scan_pes(plan: Any, job: str) -> list[str]:
    return [pe.name for pe in plan.pes if pe.job == job]


def plan_and_scenario() -> tuple[Any, Any]:
    scen = workloads.scenario(workloads.lsd(), workloads.nodes(30))
    return Soda().plan(scen, deadline_s=5.0), scen


def test_indexed_statuses_equal_a_scan_per_job() -> None:
    plan, _ = plan_and_scenario()
    index = status.PlanIndex.of(plan)
    assert len(index.decisions) == len(plan.jobs) > 10
    for dec in plan.jobs:
        pes = scan_pes(plan, dec.job)
        assert [p.name for p in index.pes.get(dec.job, [])] == pes
        inst = {pe: [{"node": "n", "fraction": 0.5, "pod": f"{pe}-0"}] for pe in pes[1:]}  # the first PE has no instance
        phases = {f"{pe}-0": "Running" for pe in pes}
        assert status.planned(plan, dec.job, 1, inst, phases, index=index) == status.planned(plan, dec.job, 1, inst, phases)
    assert status.planned(plan, "nobody/none", 1, {}, index=index)["reason"] == "NotPlanned"


def test_statuses_of_equals_the_prefix_scan_per_job() -> None:
    plan, scen = plan_and_scenario()
    lrn = Learning.__new__(Learning)  # only its functions are read
    lrn.functions = {f"{t.name}:{pe.name}": Choice(rf=ResourceFunction(a=1.0 + i, b=2.0 + i), source="declared")
                     for i, t in enumerate(scen.templates) for pe in t.pes}
    every = lrn.statuses_of(plan)
    for dec in plan.jobs:
        want = {} if not dec.template else {k[len(dec.template) + 1:]: {"a": c.rf.a, "b": c.rf.b, "source": c.source}
                                             for k, c in lrn.functions.items() if k.startswith(f"{dec.template}:")}
        assert every.get(dec.job, {}) == want == lrn.status_of(plan, dec.job)
    assert any(every.values())
