"""The allocation-policy seam: every registered policy returns a sound Plan from the same
Scenario, and replans from it; the managers run before any policy."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from soda_operator import manifests
from soda_operator.soda import crd
from soda_optimizer import pipeline, policy, steps
from soda_optimizer.model import Policy

EX = Path(__file__).resolve().parent.parent / "examples"


def scenario(*examples: str, **pol):
    m = manifests.load([str(EX / "nodes" / "small-8.yaml"), *[str(EX / e) for e in examples]])
    scen, errors = crd.scenario_from_objects(m.nodes, m.templates, m.jobs, m.policy, source=m.source)
    assert errors == []
    return scen.model_copy(update={"policy": scen.policy.model_copy(update=pol)})


def sound(scen, plan):
    usable = {n.name: n for n in scen.usable_nodes()}
    admitted = {d.job for d in plan.jobs if d.admitted}
    assert admitted
    load: dict[str, float] = {}
    for pe in plan.pes:
        assert pe.job in admitted
        # candidates are macroW's (a micro epoch keeps them, gone nodes included); fractions live
        assert set(pe.fractions) <= set(pe.candidates) & set(usable), pe
        for n, f in pe.fractions.items():
            load[n] = load.get(n, 0.0) + f
        assert sum(f * usable[n].mips for n, f in pe.fractions.items()) <= pe.goal_mips + 1.0
    assert all(v <= 1.0 + 1e-6 for v in load.values()), load


def test_registry_has_soda_and_the_baselines():
    assert policy.names() == ["rand", "rr", "soda", "spread"]
    for name in policy.names():
        assert isinstance(policy.get(name), policy.AllocationPolicy)
    with pytest.raises(KeyError, match="no allocation policy 'nope' .known: rand, rr, soda, spread"):
        policy.get("nope")


@pytest.mark.parametrize("name", ["soda", "rr", "rand", "spread"])
def test_every_policy_plans_and_replans_soundly(name):
    scen = scenario("small-pipeline", "glued", placement=name, macroq_deadline_s=1, macrow_deadline_s=1)
    plan = pipeline.run(scen)
    assert plan.policy == name and plan.feasible
    sound(scen, plan)
    # a micro epoch after losing half of the nodes: same admission, fractions only on live nodes
    fewer = scen.model_copy(update={"nodes": scen.nodes[:4]})
    again = pipeline.rerun(fewer, plan)
    assert [d.job for d in again.jobs if d.admitted] == [d.job for d in plan.jobs if d.admitted]
    sound(fewer, again)


def test_same_admission_whatever_the_placement():
    plans = {n: pipeline.run(scenario("small-pipeline", "glued", "alternatives", placement=n, macroq_deadline_s=1,
                                      macrow_deadline_s=1, unit_mips=250)) for n in ("soda", "rr", "spread")}
    admitted = {n: sorted((d.job, d.template) for d in p.jobs if d.admitted) for n, p in plans.items()}
    assert admitted["soda"] == admitted["rr"] == admitted["spread"]


def test_simple_weight_manager_weights_sinks_only():
    scen = scenario("small-pipeline", weight_manager="simple")
    out = steps.prepare(scen)
    job = out.jobs[0]
    t = out.template(job.templates[0])
    assert all(job.weight_overrides[s.id] == 0.0 for s in t.streams)
    assert all(job.weight_overrides[f"sink:{k.pe}"] == 1.0 for k in t.sinks)
    glued = out.glued({job.name: t.name})
    assert all(d["weight"] == 0.0 for _, _, d in glued.graph.edges(data=True))
    assert steps.prepare(scenario("small-pipeline")) == scenario("small-pipeline")  # static changes nothing


@pytest.mark.parametrize("field,value", [("rank_manager", "oracle"), ("weight_manager", "oracle"), ("weight_manager", "merit")])
def test_managers_without_implementation_are_refused(field, value):
    with pytest.raises(ValidationError, match=field):
        Policy(**{field: value})


def test_policy_object_with_unimplemented_manager_names_the_field():
    with pytest.raises(crd.TranslationError) as e:
        crd.policy_from_object({"spec": {"rankManager": "oracle"}})
    assert e.value.field == "spec.rankManager"  # as the SchedulingPolicy spells it (issue 45)


def test_rank_overrides_come_after_the_rank_manager_and_spare_required_jobs():
    """The administrator's override wins over the job's own rank (and a rank manager's), for the
    jobs it names only; a required job keeps rank 1."""
    base = scenario("small-pipeline")
    j = base.jobs[0].model_copy(update={"required": False})
    extra = j.model_copy(update={"name": "default/other", "rank": 1, "required": True})
    s = base.model_copy(update={"jobs": (j, extra),
                                "policy": base.policy.model_copy(update={"rank_overrides": {j.name: 4, "default/other": 5, "nobody/x": 2}})})
    out = steps.prepare(s)
    assert [(x.name, x.rank) for x in out.jobs] == [(j.name, 4), ("default/other", 1)]
    plan = pipeline.run(s.model_copy(update={"jobs": (j,)}))
    assert plan.jobs[0].rank == 4


def test_learned_functions_are_the_first_step_offline_and_live():
    """``steps.prepare(scenario, functions)``: the learned functions go in first, then the managers;
    ``pipeline.run``/``rerun`` pass them through, so planning with them equals planning the Scenario
    they were applied to (what the operator did before pipeline.run), and differs from planning without."""
    from soda_optimizer.learn.functions import Choice, apply_functions
    from soda_optimizer.model import ResourceFunction, pe_id

    scen = scenario("small-pipeline", weight_manager="simple", macroq_deadline_s=1, macrow_deadline_s=1)
    tname = scen.jobs[0].templates[0]
    learned = ResourceFunction(a=0.0001, b=1.0)  # parse saturates at 10,000 mips where it declares 500
    functions = {pe_id(tname, "parse"): Choice(rf=learned, source="learned:flowspec")}
    assert steps.prepare(scen, None).model_dump() == steps.prepare(scen, {}).model_dump() == steps.prepare(scen).model_dump()
    out = steps.prepare(scen, functions)
    assert out.template(tname).pe("parse").rf == learned
    assert out.model_dump() == steps.prepare(apply_functions(scen, functions)).model_dump()
    assert out.jobs[0].weight_overrides  # the weight manager still ran after the step

    def view(plan):
        return [(p.pe, round(p.goal_mips, 3), p.candidates) for p in plan.pes], [(d.job, d.admitted, d.template) for d in plan.jobs]

    plan = pipeline.run(scen, functions=functions)
    assert view(plan) == view(pipeline.run(apply_functions(scen, functions)))
    assert view(plan) != view(pipeline.run(scen))  # the learned function changes the goals
    again = pipeline.rerun(scen, plan, functions=functions)
    assert view(again) == view(pipeline.rerun(apply_functions(scen, functions), plan))
