"""CRD objects <-> Scenario: round trips, units, and one clear error per bad object."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from soda_operator.soda import crd, render
from soda_optimizer import workloads
from soda_optimizer.model import Scenario


def _roundtrip(s: Scenario) -> Scenario:
    objs = render.scenario_to_objects(s)
    by = {k: [o for o in objs if o["kind"] == k] for k in ("Node", "StreamTemplate", "StreamJob")}
    back, errors = crd.scenario_from_objects(by["Node"], by["StreamTemplate"], by["StreamJob"])
    assert errors == []
    return back


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 40))
def test_roundtrip_generated_workloads(seed, n_nodes):
    t, j = workloads.dac(seed)
    s = workloads.scenario((t, j), workloads.nodes(n_nodes))
    back = _roundtrip(s)
    assert [n.model_dump(exclude={"labels"}) for n in back.nodes] == [n.model_dump(exclude={"labels"}) for n in s.nodes]
    # owners: without the administrator's binding (SchedulingPolicy spec.owners) a job is its namespace's (issue 45)
    assert {x.name: x for x in back.jobs} == {x.name: x.model_copy(update={"owner": x.name.split("/")[0]}) for x in s.jobs}
    for a in s.templates:
        b = back.template(a.name)
        assert b.streams == a.streams and b.sinks == a.sinks and b.primal_inputs == a.primal_inputs
        for pa, pb in zip(a.pes, b.pes, strict=True):
            assert pb.model_dump(exclude={"rf"}) == pa.model_dump(exclude={"rf"}) and pb.rf == pa.rf


def test_lsd_roundtrip_keeps_glue_and_alternatives():
    s = workloads.scenario(workloads.lsd(1), workloads.nodes(3))
    back = _roundtrip(s)
    assert sum(len(j.imports) for j in back.jobs) == sum(len(j.imports) for j in s.jobs) > 0
    assert sum(len(j.templates) > 1 for j in back.jobs) == sum(len(j.templates) > 1 for j in s.jobs) > 0


def _node(name, cpu="4", mpc=None, ready=True, unschedulable=False):
    labels = {"kubesoda.io/rack": "r1", "topology.kubernetes.io/zone": "z1"}
    if mpc is not None:
        labels["kubesoda.io/mips-per-core"] = mpc
    return {"metadata": {"name": name, "labels": labels}, "spec": {"unschedulable": unschedulable},
            "status": {"allocatable": {"cpu": cpu}, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def test_node_units_and_state():
    n = crd.node_from_object(_node("a", "3500m", "2000"))
    assert n.mips == 7000 and n.rack == "r1" and n.zone == "z1" and n.usable
    assert not crd.node_from_object(_node("b", ready=False)).usable
    assert not crd.node_from_object(_node("c", unschedulable=True)).usable
    assert crd.node_from_object(_node("d")).mips == 4000  # default 1000 mips per core


def _tmpl(name="t", **spec):
    base = {"pes": [{"name": "a", "kind": "source", "minCpu": "500m", "maxCpu": 2}, {"name": "b"}],
            "streams": [{"from": "a", "to": "b"}], "primalInputs": [{"pe": "a", "rate": 10}]}
    base.update(spec)
    return {"kind": "StreamTemplate", "metadata": {"name": name, "namespace": "ns"}, "spec": base}


def _job(name, templates=("t",), **spec):
    return {"kind": "StreamJob", "metadata": {"name": name, "namespace": "ns"}, "spec": {"templates": list(templates), **spec}}


def test_pe_cpu_quantities_become_mips():
    t = crd.template_from_object(_tmpl())
    assert t.pe("a").min_mips == 500 and t.pe("a").max_mips == 2000


def test_bad_objects_are_dropped_with_one_error_each_and_others_survive():
    bad = [
        (_tmpl("bad-stream", streams=[{"from": "a", "to": "zzz"}]), "StreamTemplate", "unknown PE 'zzz'"),
        (_tmpl("bad-cpu", pes=[{"name": "a", "minCpu": "3", "maxCpu": "1"}]), "StreamTemplate", "minMips"),
        (_tmpl("bad-rate", primalInputs=[{"pe": "a", "rate": -5}]), "StreamTemplate", "greater than or equal to 0"),
        (_tmpl("bad-qty", pes=[{"name": "a", "minCpu": "lots"}]), "StreamTemplate", "not a CPU quantity"),
    ]
    jobs = [_job("good"), _job("dangling", templates=("nope",)),
            _job("orphan", imports=[{"job": "missing", "export": "x", "pe": "a"}])]
    scen, errors = crd.scenario_from_objects([_node("n")], [_tmpl()] + [b[0] for b in bad], jobs,
                                             source={"StreamJob/ns/dangling": "jobs.yaml (document 2)"})
    assert [j.name for j in scen.jobs] == ["ns/good"]
    msgs = [str(e) for e in errors]
    assert len(errors) == len(bad) + 2, msgs
    for obj, kind, text in bad:
        hit = [m for m in msgs if f"{kind} ns/{obj['metadata']['name']}" in m]
        assert len(hit) == 1 and text in hit[0], (text, hit)
    dang = next(e for e in errors if e.name == "ns/dangling")
    assert dang.field == "spec.templates[0]" and dang.source == "jobs.yaml (document 2)" and "nope" in dang.message
    assert next(e for e in errors if e.name == "ns/orphan").field == "spec.imports[0].job"


def test_import_cycle_is_an_error_not_a_crash():
    t = _tmpl(exports=[{"name": "o", "pe": "b"}])
    jobs = [_job("x", imports=[{"job": "y", "export": "o", "pe": "a"}]), _job("y", imports=[{"job": "x", "export": "o", "pe": "a"}]), _job("z")]
    scen, errors = crd.scenario_from_objects([_node("n")], [t], jobs)
    assert [j.name for j in scen.jobs] == ["ns/z"]
    assert {e.name for e in errors} == {"ns/x", "ns/y"} and all("cycle" in e.message for e in errors)


def test_previous_state_read_back_from_status_and_pods():
    job = _job("j")
    job["status"] = {"phase": "Running", "chosenTemplate": "t", "pes": [{"name": "a", "candidates": ["n1", "n2"]}]}
    pod = {"metadata": {"namespace": "ns", "labels": {"kubesoda.io/job": "j", "kubesoda.io/pe": "a"},
                        "annotations": {"kubesoda.io/node": "n1", "kubesoda.io/fraction": "0.25"}}}
    scen, errors = crd.scenario_from_objects([_node("n1"), _node("n2")], [_tmpl()], [job], pods=[pod])
    assert not errors
    assert scen.previous.candidates == {"ns/j:a": ("n1", "n2")}
    assert scen.previous.fractions == {"ns/j:a": {"n1": 0.25}}
    assert scen.job("ns/j").chosen_template == "ns/t"


def _pod(name, node, cpu=None, mem=None, init_cpu=None, phase="Running", labels=None, overhead=None):
    def res(c, m):
        req = {k: v for k, v in (("cpu", c), ("memory", m)) if v is not None}
        return {"requests": req} if req else {}

    spec = {"nodeName": node, "containers": [{"name": "a", "resources": res(cpu, mem)}, {"name": "b", "resources": res(cpu, None)}]}
    if init_cpu is not None:
        spec["initContainers"] = [{"name": "i", "resources": res(init_cpu, None)}]
    if overhead is not None:
        spec["overhead"] = {"cpu": overhead}
    return {"metadata": {"name": name, "namespace": "other", "labels": labels or {}}, "spec": spec, "status": {"phase": phase}}


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 4000), st.integers(0, 4000), st.integers(0, 500), st.integers(0, 2000))
def test_other_pods_hold_node_capacity(c1, init, over, reserve):
    """A node offers kubesoda allocatable - (the other pods' requests, as the scheduler counts them:
    max(sum of containers, largest init container) + overhead) - the policy's reserve."""
    from soda_operator.soda import state

    pods = [_pod("p", "n1", f"{c1}m", "1Gi", init_cpu=f"{init}m", overhead=f"{over}m"),
            _pod("done", "n1", "3", phase="Succeeded"),  # finished: holds nothing
            _pod("mine", "n1", "3", labels={crd.LABEL_JOB: "j"}),  # kubesoda's own: planned, not held
            _pod("unbound", "", "3")]  # not on a node yet
    foreign = state.foreign_requests(pods)
    held = (max(2 * c1, init) + over) / 1000
    assert [x[0] for x in foreign["n1"]] == ["other/p"] and abs(foreign["n1"][0][1] - held) < 1e-9
    assert foreign["n1"][0][2] == 2**30
    policy = {"metadata": {"name": "default"}, "spec": {"nodeReservedCpu": f"{reserve}m"}}
    scen, errors = crd.scenario_from_objects([_node("n1", cpu="8"), _node("n2", cpu="8")], [], [], policy, foreign=foreign)
    assert not errors
    n1, n2 = scen.nodes
    free = max(8 - held - reserve / 1000, 0.0)
    assert abs(n1.cores - free) < 1e-6 or (free == 0 and not n1.usable)
    assert abs(n2.cores - (8 - reserve / 1000)) < 1e-6


def test_policy_managers_budgets_and_merit_from_the_object():
    """The SchedulingPolicy's manager fields reach the model: what the operator charged
    (status.budgetSpent) adds to spec.budgets.spent; merit windows in camelCase; a window that
    covers no hour is refused with the field named; every field is in the CRD's schema."""
    import pytest

    from soda_operator import schema

    obj = {"apiVersion": "kubesoda.io/v1alpha1", "kind": "SchedulingPolicy", "metadata": {"name": "default"},
           "spec": {"rankManager": "budget", "weightManager": "budget",
                    "budgets": {"allocated": {"a": 100.0, "b": 50.0}, "spent": {"a": 10.0}, "default": 5, "compare": "absolute"},
                    "merit": {"weights": {"rank": 1, "owner": 2}, "bucket": 2.5, "ownerPriority": {"a": 1},
                              "windows": [{"days": [6, 7], "startHour": 22, "endHour": 6, "weights": {"age": -0.5}}]}},
           "status": {"budgetSpent": {"a": 5.0, "c": 7.0}}}
    assert schema.problem(obj) is None
    pol, _ = crd.policy_from_object(obj)
    assert (pol.rank_manager, pol.weight_manager) == ("budget", "budget")
    assert pol.budgets.spent == {"a": 15.0, "c": 7.0} and pol.budgets.allocated == {"a": 100.0, "b": 50.0}
    assert pol.budgets.default == 5 and pol.budgets.compare == "absolute"
    w = pol.merit.windows[0]
    assert (w.days, w.start_hour, w.end_hour, w.weights.age, w.weights.rank) == ((6, 7), 22, 6, -0.5, 1.0)
    assert pol.merit.bucket == 2.5 and pol.merit.owner_priority == {"a": 1} and pol.merit.weights.owner == 2
    bad = {**obj, "spec": {**obj["spec"], "merit": {"windows": [{"startHour": 3, "endHour": 3, "weights": {}}]}}}
    with pytest.raises(crd.TranslationError) as e:
        crd.policy_from_object(bad)
    assert e.value.field.startswith("spec.merit.windows") and "empty" in e.value.message
    assert schema.problem({**obj, "spec": {"rankManager": "oracle"}}) is not None  # the CRD's enum refuses it


def test_template_translation_is_remembered_per_generation_only():
    """Issue 53: a template whose spec the API server has not changed is not translated again each
    epoch (a status write moves its resourceVersion, not its generation), and one whose spec changed
    (a new generation) is."""
    s = workloads.scenario(workloads.lsd(1), workloads.nodes(3))
    objs = render.scenario_to_objects(s)
    t = next(o for o in objs if o["kind"] == "StreamTemplate")
    jobs = [o for o in objs if o["kind"] == "StreamJob" and t["metadata"]["name"] in o["spec"]["templates"]][:1]
    t["metadata"].update(uid="u-1", resourceVersion="7", generation=1)
    a, _ = crd.scenario_from_objects([], [t], jobs)
    b, _ = crd.scenario_from_objects([], [{**t, "metadata": {**t["metadata"], "resourceVersion": "9"}}], jobs)
    assert a.templates[0] is b.templates[0]  # the same frozen object: not translated again
    changed = {**t, "metadata": {**t["metadata"], "resourceVersion": "8", "generation": 2},
               "spec": {**t["spec"], "pes": [{**t["spec"]["pes"][0], "memory": "1Gi"}, *t["spec"]["pes"][1:]]}}
    c, _ = crd.scenario_from_objects([], [changed], jobs)
    assert c.templates[0].pes[0].memory_bytes == 2**30 != a.templates[0].pes[0].memory_bytes
    files, _ = crd.scenario_from_objects([], [{**t, "metadata": {"name": t["metadata"]["name"], "namespace": t["metadata"]["namespace"]}}], jobs)
    assert files.templates[0] is not a.templates[0] and files.templates[0] == a.templates[0]  # no uid: translated afresh
