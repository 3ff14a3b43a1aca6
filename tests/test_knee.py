"""Goals at the knee (soda/knee.py): equal importance with the least CPU, so a job's goals do not
move with grids that depend on other jobs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from soda_optimizer import pipeline
from soda_optimizer.importance import Evaluator
from soda_optimizer.model import (
    PE,
    Job,
    Node,
    PrimalInput,
    ResourceFunction,
    Scenario,
    Sink,
    Stream,
    Template,
    floor_mips,
)
from soda_optimizer.soda.knee import at_the_knee

ROOT = Path(__file__).resolve().parents[1]


def _chain(a: tuple[float, float, float], b: tuple[float, float], rate: float, mins: tuple[float, float, float]) -> Scenario:
    t = Template(name="ns/t", pes=(PE(name="s", kind="source", min_mips=mins[0], rf=ResourceFunction(a=a[0])),
                                   PE(name="x", min_mips=mins[1], rf=ResourceFunction(a=a[1], b=b[0])),
                                   PE(name="k", kind="sink", min_mips=mins[2], rf=ResourceFunction(a=a[2], b=b[1]))),
                 streams=(Stream(src="s", dst="x"), Stream(src="x", dst="k")), sinks=(Sink(pe="k"),),
                 primal_inputs=(PrimalInput(pe="s", rate=rate),))
    return Scenario(nodes=(Node(name="n0", mips=1e6),), templates=(t,), jobs=(Job(name="ns/j", templates=("ns/t",)),))


@settings(max_examples=60, deadline=None)
@given(st.tuples(*[st.floats(1e-3, 1.0)] * 3), st.tuples(*[st.floats(0.1, 2.0)] * 2), st.floats(1.0, 500.0),
       st.tuples(*[st.sampled_from([0.0, 50.0, 5000.0])] * 3), st.lists(st.floats(0.0, 20000.0), min_size=3, max_size=3))
def test_the_knee_keeps_importance_and_never_adds_cpu(a, b, rate, mins, raw):
    ev = Evaluator(_chain(a, b, rate, mins).glued({"ns/j": "ns/t"}))
    goals = {p: max(g, ev.glued.spec(p).min_mips) for p, g in zip(ev.pes, raw)}
    out = at_the_knee(ev, goals, pe_floor=10.0)
    x = np.array([[goals[p] for p in ev.pes], [out[p] for p in ev.pes]])
    before, after = ev.importance(x)
    assert after >= before - 1e-9 * (1 + abs(before))
    floor = {p: floor_mips(ev.glued.spec(p), 10.0) for p in ev.pes}
    assert all(out[p] <= goals[p] + 1e-12 and out[p] >= min(goals[p], floor[p]) - 1e-12 for p in ev.pes)
    # past the knee nothing is left: each goal is at most its saturation or its minimum
    sat = dict(zip(ev.pes, ev.saturation()))
    assert all(out[p] <= max(sat[p], floor[p]) + 1e-9 for p in ev.pes)


@settings(max_examples=60, deadline=None)
@given(st.tuples(*[st.floats(1e-3, 1.0)] * 3), st.tuples(*[st.floats(0.1, 2.0)] * 2), st.floats(1.0, 500.0),
       st.lists(st.floats(0.0, 20000.0), min_size=3, max_size=3), st.tuples(*[st.booleans()] * 3))
def test_the_knee_trims_only_identified_saturations(a, b, rate, raw, known):
    """Issue 52 item 3: a goal past a saturation that is not identified (a learned function whose
    model saw the PE at one allocation only) stays where the stage put it; the others are trimmed
    as before. On main every goal past its saturation was trimmed."""
    scen = _chain(a, b, rate, (0.0, 0.0, 0.0))
    t = scen.templates[0]
    pes = tuple(p.model_copy(update={"rf": p.rf.model_copy(update={"saturation_identified": k})}) for p, k in zip(t.pes, known))
    scen = scen.model_copy(update={"templates": (t.model_copy(update={"pes": pes}),)})
    ev = Evaluator(scen.glued({"ns/j": "ns/t"}))
    goals = dict(zip(ev.pes, raw))
    out = at_the_knee(ev, goals, pe_floor=10.0)
    sat = dict(zip(ev.pes, ev.saturation()))
    flag = {p: ev.glued.spec(p).rf.saturation_identified for p in ev.pes}
    x = np.array([[goals[p] for p in ev.pes], [out[p] for p in ev.pes]])
    before, after = ev.importance(x)
    assert after >= before - 1e-9 * (1 + abs(before))
    assert all(out[p] == goals[p] for p in ev.pes if not flag[p])
    if out != goals:  # trimmed (the importance kept): every identified goal at most its saturation or floor
        assert all(out[p] <= max(sat[p], 10.0) + 1e-9 for p in ev.pes if flag[p])


def test_a_job_keeps_its_goals_when_another_is_held_instead_of_planned():
    """The small pipeline's goals with a tenant's job planned beside it equal its goals when that
    job is left out (quarantined) and its pod held as another workload's: the e2e guard test's
    picture, offline. Before the knee they moved by up to 5 mips (806.875 vs 801.895)."""
    from soda_operator import manifests
    from soda_operator.soda import crd, state

    tenant = """apiVersion: kubesoda.io/v1alpha1
kind: StreamTemplate
metadata: {name: small, namespace: tenant}
spec:
  pes:
  - {name: a, kind: source, minCpu: 200m, maxCpu: 200m, resourceFunction: {a: 0.01}}
  sinks: [{pe: a, weight: 1}]
  primalInputs: [{pe: a, rate: 1}]
---
apiVersion: kubesoda.io/v1alpha1
kind: StreamJob
metadata: {name: tenant-job, namespace: tenant}
spec: {templates: [small], rank: 2}
"""
    ex = ROOT / "examples"
    m = manifests.load([str(ex / "nodes" / "small-8.yaml"), str(ex / "small-pipeline")])
    objs = list(yaml.safe_load_all(tenant))
    both, errors = crd.scenario_from_objects(m.nodes, m.templates + [o for o in objs if o["kind"] == "StreamTemplate"],
                                             m.jobs + [o for o in objs if o["kind"] == "StreamJob"])
    assert not errors
    planned = pipeline.run(both)
    where = next(n for p in planned.pes if p.job == "tenant/tenant-job" for n in p.fractions)
    held = [{"metadata": {"name": "tenant-job-a", "namespace": "tenant"},
             "spec": {"nodeName": where, "containers": [{"name": "pe", "resources": {"requests": {"cpu": "200m"}}}]},
             "status": {"phase": "Running"}}]
    alone, errors = crd.scenario_from_objects(m.nodes, m.templates, m.jobs, foreign=state.foreign_requests(held))
    assert not errors
    without = pipeline.run(alone)
    goals = {p.pe: round(p.goal_mips, 6) for p in planned.pes if p.job == "default/clicks"}
    assert goals == {p.pe: round(p.goal_mips, 6) for p in without.pes if p.job == "default/clicks"}
