"""Issue 45: the namespace is the boundary of the resource function learner. One namespace's
observations only ever change its own namespace's learned functions, even when another namespace
runs the very same template (same images, arguments, producers: the same signature path); profiles
are kept per namespace (``<namespace>.<key>``); a cluster-wide profile (no namespace) is read-only
and planning uses it only when an administrator pinned it. Without a cluster: the operator's
:class:`Learning` over a dict-backed CustomObjectsApi (as tests/test_learning.py's)."""

from __future__ import annotations

import copy
import re
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kubernetes import client

from soda_operator.soda import crd
from soda_operator.soda.learning import (
    NAMESPACE_LABEL,
    Learning,
    model_from_profile,
    profile_status,
    template_signatures,
)
from soda_optimizer.learn import Learner, Sample, Signature
from soda_optimizer.learn.functions import DECLARED, DEFAULT, PINNED
from soda_optimizer.learn.signature import Level
from soda_optimizer.model import pe_id
from soda_optimizer.observed import PEObservation
from soda_optimizer.plan import JobDecision, Plan

NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": {"kubesoda.io/mips-per-core": "1000"}},
        "status": {"allocatable": {"cpu": "4"}}}


class FakeCustom:
    """The CustomObjectsApi calls :class:`Learning` makes, on a dict (the API server's selectors as
    the operator uses them: ``<label> in|notin (a,b)`` and ``spec.pinned=true``)."""

    def __init__(self, items: list[dict[str, Any]] | None = None):
        self.objects = {o["metadata"]["name"]: o for o in items or []}

    def list_cluster_custom_object(self, group, version, plural, label_selector=None, field_selector=None, **_):
        items = list(self.objects.values())
        if field_selector == "spec.pinned=true":
            items = [o for o in items if (o.get("spec") or {}).get("pinned")]
        if label_selector:
            label, op, rest = label_selector.split(" ", 2)
            values = set(rest.strip("()").split(","))
            items = [o for o in items if (((o["metadata"].get("labels") or {}).get(label) in values) == (op == "in"))]
        return {"items": items}

    def create_cluster_custom_object(self, group, version, plural, body, **_):
        if body["metadata"]["name"] in self.objects:
            raise client.ApiException(status=409, reason="AlreadyExists")
        self.objects[body["metadata"]["name"]] = dict(body)

    def patch_cluster_custom_object_status(self, group, version, plural, name, body, **_):
        self.objects[name]["status"] = body["status"]


POLICY = {"spec": {"observation": {"windowSeconds": 6}, "learning": {"enabled": True}}}
TEMPLATE: dict[str, Any] = {
    "apiVersion": "kubesoda.io/v1alpha1", "kind": "StreamTemplate", "metadata": {"name": "feat"},
    "spec": {"pes": [{"name": "src", "kind": "source", "image": "example.com/src:1", "resourceFunction": {"a": 0.1}},
                     {"name": "parse", "image": "example.com/parse:1", "command": ["run"]},
                     {"name": "out", "kind": "sink", "image": "example.com/out:1", "resourceFunction": {"a": 0.002, "b": 1.0}}],
             "streams": [{"from": "src", "to": "parse"}, {"from": "parse", "to": "out"}],
             "sinks": [{"pe": "out", "weight": 1}], "primalInputs": [{"pe": "src", "rate": 100}]},
}
NAMESPACES = ("healthy", "tenant")


def _in(ns: str) -> tuple[dict[str, Any], dict[str, Any]]:
    t = copy.deepcopy(TEMPLATE)
    t["metadata"]["namespace"] = ns
    return t, {"apiVersion": "kubesoda.io/v1alpha1", "kind": "StreamJob", "metadata": {"name": "feat", "namespace": ns},
               "spec": {"templates": ["feat"]}}


def _pod(ns: str, cpu: str) -> dict[str, Any]:
    return {"metadata": {"namespace": ns, "name": "feat-parse-0", "labels": {crd.LABEL_JOB: "feat", crd.LABEL_PE: "parse"}},
            "spec": {"nodeName": "n1", "containers": [{"name": "pe", "resources": {"limits": {"cpu": cpu}}}]},
            "status": {"phase": "Running"}}


def _world(namespaces=NAMESPACES):
    objs = [_in(ns) for ns in namespaces]
    templates, jobs = [t for t, _ in objs], [j for _, j in objs]
    scen, errors = crd.scenario_from_objects([NODE], templates, jobs)
    assert not errors
    plan = Plan(feasible=True, jobs=tuple(JobDecision(job=f"{ns}/feat", admitted=True, template=f"{ns}/feat") for ns in namespaces))
    return scen, plan, templates


def _feed(lrn: Learning, truth: dict[str, tuple[float, float]], rounds: int = 60, seed: int = 0) -> int:
    """Micro epochs of observations of each namespace's ``parse`` (true a, b per namespace), through
    :meth:`Learning.observe` as the operator calls it."""
    scen, plan, templates = _world()
    rng = np.random.default_rng(seed)
    taken = 0
    for i in range(rounds):
        lrn.clock = lambda i=i: 2.0 * i  # type: ignore[misc]
        cpu = ["100m", "150m", "400m"][(i // 8) % 3]
        m = float(cpu[:-1])
        pods, obs = [], {}
        for ns, (a, b) in truth.items():
            r_o = min(a * 100.0 * m, b * 100.0) * float(np.exp(rng.normal(0, 0.02)))
            obs[pe_id(f"{ns}/feat", "parse")] = PEObservation(received={"src->parse": 100.0}, emitted={"parse->out": r_o}, mips=min(m, b / a))
            pods.append(_pod(ns, cpu))
        taken += lrn.observe(scen, plan, templates, pods, POLICY, obs)
    return taken


def test_a_tenants_observations_never_reach_another_namespaces_learned_function():
    """The tenant runs healthy's template and reports a PE 10x less efficient: healthy, observed
    nothing, keeps its declared/default functions, and no node healthy's PEs look up holds a sample.
    (On the code before issue 45 the two shared one signature: healthy was planned learned:flowspec
    from the tenant's samples.)"""
    lrn = Learning(None)
    assert _feed(lrn, {"tenant": (0.0004, 0.8)}) > 0
    scen, _, templates = _world()
    fns = lrn.choose_all(scen, templates, POLICY)
    assert fns[pe_id("tenant/feat", "parse")].source == "learned:flowspec"
    assert fns[pe_id("tenant/feat", "parse")].rf.a == pytest.approx(0.0004, rel=0.1)
    assert fns[pe_id("healthy/feat", "parse")].source == DEFAULT, fns[pe_id("healthy/feat", "parse")]
    assert fns[pe_id("healthy/feat", "out")].source == DECLARED
    healthy = {n.key for s in template_signatures(templates[0]).values() for n in s.lineage()}
    assert not healthy & set(lrn.learner.models), "a tenant's samples reached a node of healthy's signature paths"
    assert all(m.namespace == "tenant" and k.startswith("tenant.") for k, m in lrn.learner.models.items())


def test_two_namespaces_with_identical_templates_learn_apart_and_their_profiles_do_not_mix():
    """Both observed, with different truths: each is planned with its own, the profiles are named,
    labelled and stated per namespace, and a restarted operator restores each to its own."""
    api = FakeCustom()
    lrn = Learning(api, background=False)  # type: ignore[arg-type]
    truth = {"healthy": (0.004, 0.8), "tenant": (0.002, 0.6)}  # both saturate within the allocations (b identified)
    _feed(lrn, truth)
    scen, _, templates = _world()
    lrn.sync()
    fns = lrn.choose_all(scen, templates, POLICY)
    for ns, (a, b) in truth.items():
        c = fns[pe_id(f"{ns}/feat", "parse")]
        assert c.source == "learned:flowspec" and c.rf.a == pytest.approx(a, rel=0.1) and c.rf.b == pytest.approx(b, rel=0.1), (ns, c)
        assert c.key is not None and c.key.startswith(f"{ns}.")
    assert api.objects and {o["metadata"]["name"].split(".", 1)[0] for o in api.objects.values()} == set(truth)
    for name, obj in api.objects.items():
        ns = name.split(".", 1)[0]
        assert obj["metadata"]["labels"][NAMESPACE_LABEL] == ns and obj["status"]["namespace"] == ns, obj["metadata"]
        assert obj["status"]["key"] == name and obj["status"]["level"] in {"kind", "executable", "arguments", "flowspec"}
    # the two roots are two objects: nothing is pooled across namespaces
    assert {"healthy.transform", "tenant.transform"} <= set(api.objects)
    again = Learning(api, background=False)  # type: ignore[arg-type]
    again.sync()
    fns = again.choose_all(scen, templates, POLICY)
    for ns, (a, _) in truth.items():
        c = fns[pe_id(f"{ns}/feat", "parse")]
        assert c.source == "learned:flowspec" and c.rf.a == pytest.approx(a, rel=0.1), (ns, c)


def _legacy(a: float, pinned: bool) -> dict[str, Any]:
    """A profile as an operator before issue 45 wrote it: named by the unscoped key, a trusted fit."""
    sig = template_signatures(_in("healthy")[0])["parse"].shared()
    lr = Learner()
    rng = np.random.default_rng(3)
    for i in range(40):
        m = float(rng.uniform(100, 1500))
        r_o = min(a * 100.0 * m, 0.8 * 100.0) * float(np.exp(rng.normal(0, 0.02)))
        lr.observe(sig, [Sample(r_i=100.0, m=m, r_o=r_o, m_used=min(m, 0.8 / a), t=float(i))], now=float(i))
    model = lr.get(sig.key)
    assert model is not None and model.namespace is None and "." not in sig.key
    spec: dict[str, Any] = {"pinned": pinned, **({"a": 0.05, "b": 2.0} if pinned else {})}
    return {"metadata": {"name": sig.key, "labels": {"kubesoda.io/signature-level": "flowspec"}}, "spec": spec,
            "status": profile_status(model, 40.0)}


def test_a_cluster_wide_profile_is_used_only_when_pinned_and_never_learns():
    scen, _, templates = _world()
    # learned before namespaces (from every namespace's PEs together): not used by anyone
    api = FakeCustom([_legacy(0.004, pinned=False)])
    lrn = Learning(api, background=False)  # type: ignore[arg-type]
    lrn.sync()
    fns = lrn.choose_all(scen, templates, POLICY)
    assert {fns[pe_id(f"{ns}/feat", "parse")].source for ns in NAMESPACES} == {DEFAULT}
    # an administrator's pin: every namespace's PE of that path is planned with it
    api = FakeCustom([_legacy(0.004, pinned=True)])
    lrn = Learning(api, background=False)  # type: ignore[arg-type]
    lrn.sync()
    fns = lrn.choose_all(scen, templates, POLICY)
    for ns in NAMESPACES:
        c = fns[pe_id(f"{ns}/feat", "parse")]
        assert c.source == PINNED and (c.rf.a, c.rf.b) == (0.05, 2.0) and "." not in str(c.key), c
    # observations go to the namespaces' own nodes, never to the shared one
    key = next(iter(api.objects))
    before = lrn.learner.models[key].observed
    _feed(lrn, {"tenant": (0.0004, 0.8)})
    assert lrn.learner.models[key].observed == before
    # a namespace's own pin beats the cluster-wide one at the same level
    own = template_signatures(_in("tenant")[0])["parse"]
    lrn.learner.pin(own.key, a=0.07, b=1.5)
    fns = lrn.choose_all(scen, templates, POLICY)
    assert (fns[pe_id("tenant/feat", "parse")].rf.a, fns[pe_id("healthy/feat", "parse")].rf.a) == (0.07, 0.05)


def test_a_profile_whose_status_names_another_namespace_is_refused():
    good = _legacy(0.004, pinned=False)
    obj = copy.deepcopy(good)
    obj["metadata"]["name"] = f"tenant.{good['metadata']['name']}"
    obj["status"].update(key=obj["metadata"]["name"], namespace="tenant")
    assert model_from_profile(obj)["namespace"] == "tenant"
    obj["status"]["namespace"] = "healthy"
    with pytest.raises(ValueError, match="not the scope of its name"):
        model_from_profile(obj)


@settings(max_examples=100, deadline=None)
@given(st.from_regex(r"\A[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\Z"), st.sampled_from(["kind", "executable", "arguments", "flowspec"]))
def test_a_scoped_key_is_a_dns_subdomain_that_no_other_scope_shares(ns, level):
    sig = Signature.build("transform", "example.com/parse:1", command=["run"], inputs=[("primal", "primal")], namespace=ns).at(Level(level))
    assert sig.key == f"{ns}.{sig.shared().key}" and sig.path == sig.shared().path and len(sig.key) <= 95
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*", sig.key)
    other = "x" + ns[1:] if ns[0] != "x" else "y" + ns[1:]
    assert sig.model_copy(update={"namespace": other}).key != sig.key and "." not in sig.shared().key
    with pytest.raises(ValueError):
        Signature.build("transform", "example.com/parse:1", namespace=ns + ".evil")
