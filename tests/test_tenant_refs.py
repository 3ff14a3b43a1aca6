"""The namespace is a boundary, offline (issue 45): import cycles found without enumerating them,
cross-namespace imports only with the exporter's consent, owners bound to namespaces by the
administrator (:mod:`soda_operator.soda.refs`, :func:`soda_operator.soda.crd.effective_owner`)."""

from __future__ import annotations

import networkx as nx
from hypothesis import given, settings
from hypothesis import strategies as st

from soda_operator.soda import crd, desired
from soda_optimizer import pipeline


def _node(name="n", cpu="4"):
    return {"metadata": {"name": name, "labels": {"kubesoda.io/rack": "r1", "topology.kubernetes.io/zone": "z1"}},
            "status": {"allocatable": {"cpu": cpu}, "conditions": [{"type": "Ready", "status": "True"}]}}


def _tmpl(name="t", ns="ns", cpu=None, **spec):
    pe = {"name": "a", "kind": "source", **({"minCpu": cpu, "maxCpu": cpu} if cpu else {})}
    base = {"pes": [pe, {"name": "b"}], "streams": [{"from": "a", "to": "b", "weight": 1, "value": {"kind": "linear"}}],
            "primalInputs": [{"pe": "a", "rate": 10}], "sinks": [{"pe": "b", "weight": 1}]}
    base.update(spec)
    return {"kind": "StreamTemplate", "metadata": {"name": name, "namespace": ns}, "spec": base}


def _job(name, ns="ns", templates=("t",), created="2026-01-01T00:00:00Z", **spec):
    return {"kind": "StreamJob", "metadata": {"name": name, "namespace": ns, "creationTimestamp": created},
            "spec": {"templates": list(templates), **spec}}


def _imp(job, export="o", pe="a"):
    return {"job": job, "export": export, "pe": pe}


EXPORTING = _tmpl(exports=[{"name": "o", "pe": "b"}])


# ------------------------------------------------------------------------------------ cycles


@st.composite
def import_graphs(draw):
    """n <= 7 jobs, each importing a set of the others (itself included: a self-loop)."""
    n = draw(st.integers(1, 7))
    return n, [draw(st.lists(st.integers(0, n - 1), unique=True, max_size=n)) for _ in range(n)]


@settings(max_examples=150, deadline=None)
@given(import_graphs())
def test_dropped_jobs_are_exactly_those_on_a_cycle_and_their_importers(graph):
    """Oracle: the jobs on some simple cycle (nx.simple_cycles, fine on 7 nodes) get the cycle
    error; the jobs downstream of them (importing from one, directly or not) are dropped as
    importers of a dropped job; every other job is planned."""
    n, imports = graph
    jobs = [_job(f"j{i}", imports=[_imp(f"j{k}") for k in imps]) for i, imps in enumerate(imports)]
    scen, errors = crd.scenario_from_objects([_node()], [EXPORTING], jobs)
    g = nx.DiGraph()
    g.add_nodes_from(range(n))
    g.add_edges_from((k, i) for i, imps in enumerate(imports) for k in imps)  # exporter -> importer
    on_cycle = {f"ns/j{v}" for c in nx.simple_cycles(g) for v in c}
    downstream = {f"ns/j{d}" for v in on_cycle for d in nx.descendants(g, int(v.split("j")[-1]))} - on_cycle
    assert {e.name for e in errors if "cycle" in e.message} == on_cycle
    assert {e.name for e in errors} == on_cycle | downstream
    assert len(errors) == len({e.name for e in errors})  # one error per job
    assert all(e.field.startswith("spec.imports") for e in errors)
    assert {j.name for j in scen.jobs} == {f"ns/j{i}" for i in range(n)} - on_cycle - downstream


def test_sixty_jobs_importing_each_other_are_refused_and_the_rest_planned():
    """60 jobs each importing the other 59: main enumerated every simple cycle (more than 10^80
    of them) and never finished; strongly connected components answer at once."""
    names = [f"k{i}" for i in range(60)]
    jobs = [_job(n, imports=[_imp(m) for m in names if m != n]) for n in names] + [_job("alone")]
    scen, errors = crd.scenario_from_objects([_node()], [EXPORTING], jobs)
    assert [j.name for j in scen.jobs] == ["ns/alone"]
    assert sorted(e.name for e in errors) == sorted(f"ns/{n}" for n in names)
    e = errors[0]
    assert e.field == "spec.imports" and e.message.startswith("jobs import each other in a cycle: ns/")
    assert "60 jobs import each other" in e.message or e.message.count(" -> ") <= 5
    assert len(e.message) < 600  # a short sample, not the cycle list


def test_a_long_chain_to_a_missing_job_drops_every_link_once():
    """Each job imports the next; the last imports a job that does not exist: all are dropped,
    each with one error naming its import (main re-scanned every job once per dropped job)."""
    n = 3000
    jobs = [_job(f"c{i}", imports=[_imp(f"c{i + 1}" if i < n - 1 else "gone")]) for i in range(n)] + [_job("free")]
    scen, errors = crd.scenario_from_objects([_node()], [EXPORTING], jobs)
    assert [j.name for j in scen.jobs] == ["ns/free"]
    assert len(errors) == n and all(e.field == "spec.imports[0].job" for e in errors)


# ------------------------------------------------------------------------------------ consent


def _cross(allowed=None, **exp):
    export = {"name": "features", "pe": "b", **({"allowedNamespaces": allowed} if allowed is not None else {}), **exp}
    healthy_t = _tmpl("feat", "healthy", exports=[export])
    spy_t = _tmpl("spy", "tenant")
    return [healthy_t, spy_t], [_job("features", "healthy", ("feat",)),
                                _job("spy", "tenant", ("spy",), imports=[_imp("healthy/features", "features", "a")])]


def test_cross_namespace_import_without_consent_is_refused_and_the_exporter_unchanged():
    tmpls, jobs = _cross()
    scen, errors = crd.scenario_from_objects([_node()], tmpls, jobs)
    alone, none = crd.scenario_from_objects([_node()], tmpls[:1], jobs[:1])
    assert not none and [j.name for j in scen.jobs] == ["healthy/features"]
    (e,) = errors
    assert (e.kind, e.name, e.field, e.reason) == ("StreamJob", "tenant/spy", "spec.imports[0].job", "ImportNotAllowed")
    assert "allowedNamespaces" in e.message and "tenant" in e.message
    assert scen.jobs == alone.jobs and scen.templates == alone.templates
    # the exporter's pods send its export to nobody (KUBESODA_OUTPUTS of its PE b)
    outs = desired.outputs(scen, "healthy/features", tmpls[0], "b", {"healthy/features", "tenant/spy"})
    assert "spy" not in outs and "import:" not in outs


def test_cross_namespace_import_with_consent_is_glued():
    for allowed in (["tenant"], ["other", "*"]):
        tmpls, jobs = _cross(allowed)
        scen, errors = crd.scenario_from_objects([_node()], tmpls, jobs)
        assert not errors and {j.name for j in scen.jobs} == {"healthy/features", "tenant/spy"}
        outs = desired.outputs(scen, "healthy/features", tmpls[0], "b", {"healthy/features", "tenant/spy"})
        assert "import:healthy/features/features=a.spy.tenant.svc:9000" in outs


def test_a_refused_import_tells_nothing_about_the_other_namespace():
    """Missing job, missing export, no consent: one answer (no probing another namespace's jobs)."""
    tmpls, jobs = _cross()
    msgs = set()
    for ref, export in (("healthy/features", "features"), ("healthy/nobody", "features"), ("healthy/features", "nothing")):
        jobs[1]["spec"]["imports"] = [_imp(ref, export, "a")]
        _, errors = crd.scenario_from_objects([_node()], tmpls, jobs)
        (e,) = errors
        assert e.reason == "ImportNotAllowed" and e.field == "spec.imports[0].job"
        msgs.add(e.message.replace(ref, "REF").replace(export, "EXPORT"))
    assert len(msgs) == 1, msgs


def test_consent_must_hold_in_every_template_that_offers_the_export():
    tmpls, jobs = _cross(["tenant"])
    other = _tmpl("feat2", "healthy", exports=[{"name": "features", "pe": "b"}])  # an alternative that does not consent
    jobs[0]["spec"]["templates"] = ["feat", "feat2"]
    scen, errors = crd.scenario_from_objects([_node()], [*tmpls, other], jobs)
    assert [e.name for e in errors] == ["tenant/spy"] and errors[0].reason == "ImportNotAllowed"


def test_same_namespace_imports_need_no_consent():
    scen, errors = crd.scenario_from_objects([_node()], [EXPORTING], [_job("x"), _job("y", imports=[_imp("x")])])
    assert not errors and len(scen.jobs) == 2


# ------------------------------------------------------------------------------------ owners


def _policy(**spec):
    return {"kind": "SchedulingPolicy", "metadata": {"name": "default"}, "spec": spec}


def test_effective_owner_is_the_administrators_binding():
    owners = {"team": ("team-a", "team-b")}
    assert crd.effective_owner("tenant", "vip", owners) == "tenant"  # unbound: its own name, whatever it writes
    assert crd.effective_owner("tenant", "", {}) == "tenant"
    assert crd.effective_owner("team", "team-b", owners) == "team-b"
    assert crd.effective_owner("team", "vip", owners) == "team-a"
    scen, errors = crd.scenario_from_objects([_node()], [_tmpl(ns="team")], [_job("j", "team", owner="team-b")],
                                             policy=_policy(owners={"team": ["team-a", "team-b"]}))
    assert not errors and scen.jobs[0].owner == "team-b"


def test_a_malformed_binding_is_the_policys_error_and_binds_nobody_to_another():
    scen, errors = crd.scenario_from_objects([_node()], [_tmpl(ns="tenant")], [_job("j", "tenant", owner="vip")],
                                             policy=_policy(owners={"tenant": []}))
    assert [(e.kind, e.field) for e in errors] == [("SchedulingPolicy", "spec.owners[tenant]")]
    assert scen.jobs[0].owner == "tenant"


def _contest(policy):
    """One node of 4 cores; two jobs of 3 cores each: only one fits. The healthy namespace's job
    is older (the tie-break); the tenant's claims owner vip."""
    tmpls = [_tmpl("w", "healthy", cpu="3"), _tmpl("w", "tenant", cpu="3")]
    jobs = [_job("good", "healthy", ("w",), created="2026-01-01T00:00:00Z"),
            _job("mine", "tenant", ("w",), created="2026-01-02T00:00:00Z", owner="vip")]
    scen, errors = crd.scenario_from_objects([_node()], tmpls, jobs, policy=policy)
    assert not errors
    assert {j.name: j.owner for j in scen.jobs} == {"healthy/good": "healthy", "tenant/mine": "tenant"}
    plan = pipeline.run(scen)
    return {d.job: d for d in plan.jobs}


def test_a_tenants_owner_vip_does_not_rank_it_above_another_namespace_under_merit():
    dec = _contest(_policy(rankManager="merit", merit={"weights": {"rank": 0, "owner": 1}, "ownerPriority": {"vip": -100}}))
    assert dec["healthy/good"].admitted and not dec["tenant/mine"].admitted
    assert dec["tenant/mine"].rank >= dec["healthy/good"].rank


def test_a_tenants_owner_vip_does_not_use_vips_budget():
    dec = _contest(_policy(rankManager="budget", budgets={"allocated": {"vip": 1e9, "healthy": 1000}}))
    assert dec["healthy/good"].admitted and not dec["tenant/mine"].admitted
    assert dec["tenant/mine"].rank > dec["healthy/good"].rank


def test_a_tenants_owner_vip_is_never_charged_to_vip():
    """The operator's budget bookkeeping (epochs.Loops._charge_budgets, SODA 6.2.1) after an
    overloaded epoch charges the owners in force: the tenant's `owner: vip` charges nobody's
    budget but its own namespace's (on main the tenant's job, ranked first as vip, ran and vip paid)."""
    from types import SimpleNamespace

    from soda_operator.soda.epochs import Loops

    policy = _policy(rankManager="budget", budgets={"allocated": {"vip": 1e9, "healthy": 1000}})
    tmpls = [_tmpl("w", "healthy", cpu="3"), _tmpl("w", "tenant", cpu="3")]
    jobs = [_job("good", "healthy", ("w",)), _job("mine", "tenant", ("w",), owner="vip")]
    scen, _ = crd.scenario_from_objects([_node()], tmpls, jobs, policy=policy)
    plan = pipeline.run(scen)
    written: list[dict] = []
    loops = SimpleNamespace(charged_at=None, applier=SimpleNamespace(policy_status=written.append))
    Loops._charge_budgets(loops, SimpleNamespace(policy=policy), scen, plan)  # type: ignore[arg-type]
    (st,) = written
    assert set(st["budgetSpent"]) == {"healthy"} and st["budgetSpent"]["healthy"] > 0, st
