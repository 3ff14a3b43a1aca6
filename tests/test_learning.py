"""Learned resource functions in the operator (issue 14 items 3-4): signatures from StreamTemplates and
pods, the precedence of the functions a PE is planned with, the Scenario step, ResourceProfiles
(load, pin, write, failures) and the observation path, without a cluster."""

from __future__ import annotations

import math
import threading
from typing import Any

import numpy as np
import pytest
from kubernetes import client

from soda_operator.soda import crd, learning, status
from soda_operator.soda.learning import Learning, profile_status, settings_from, template_signatures
from soda_optimizer import steps
from soda_optimizer.learn import Learner, Sample, Signature
from soda_optimizer.learn.functions import (
    DECLARED,
    DEFAULT,
    PINNED,
    Choice,
    LearningSettings,
    apply_functions,
    choose,
)
from soda_optimizer.learn.signature import Level
from soda_optimizer.model import PEKind, ResourceFunction, pe_id
from soda_optimizer.observed import PEObservation
from soda_optimizer.plan import JobDecision, Plan

TEMPLATE = {
    "apiVersion": "kubesoda.io/v1alpha1", "kind": "StreamTemplate", "metadata": {"name": "t", "namespace": "ns"},
    "spec": {
        "pes": [
            {"name": "src", "kind": "source", "image": "busybox", "args": ["gen"], "resourceFunction": {"a": 0.1}},
            {"name": "mid", "image": "pe:1", "command": ["run"], "env": [{"name": "X", "value": "1"}],
             "resourceFunction": {"a": 0.002, "b": 1.0}},
            {"name": "out", "kind": "sink", "image": "pe:1", "args": ["sink"]},
        ],
        "streams": [{"from": "src", "to": "mid"}, {"from": "mid", "to": "out", "selectivity": 0.5}],
        "sinks": [{"pe": "out", "weight": 1}],
        "primalInputs": [{"pe": "src", "rate": 100}],
    },
}
JOB = {"apiVersion": "kubesoda.io/v1alpha1", "kind": "StreamJob", "metadata": {"name": "j", "namespace": "ns"},
       "spec": {"templates": ["t"]}}
NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": {"kubesoda.io/mips-per-core": "1000"}},
        "status": {"allocatable": {"cpu": "4"}}}

ON = LearningSettings(enabled=True)  # learning is opt in (the policy's default is off)


def _trained(sig: Signature, a: float, b: float, n: int = 40, seed: int = 0) -> Learner:
    """A learner that has seen ``n`` noisy samples of a transform in both regimes."""
    rng = np.random.default_rng(seed)
    lr = Learner()
    for i in range(n):
        m = float(rng.uniform(100, 1500))
        r_i = 100.0
        r_o = min(a * r_i * m, b * r_i) * float(np.exp(rng.normal(0, 0.02)))
        used = min(m, b / a)
        lr.observe(sig, [Sample(r_i=r_i, m=m, r_o=r_o, m_used=used, t=float(i))], now=float(i))
    return lr


# ------------------------------------------------------------------------------------ signatures


def test_signatures_levels_kinds_and_flowspec():
    sigs = template_signatures(TEMPLATE)
    assert set(sigs) == {"src", "mid", "out"}
    assert sigs["src"].kind is PEKind.source and sigs["mid"].kind is PEKind.transform and sigs["out"].kind is PEKind.sink
    assert all(s.level is Level.flowspec for s in sigs.values())
    assert sigs["src"].executable == "docker.io/library/busybox:latest"
    # KUBESODA_ env is ignored, other env counts
    t2 = {**TEMPLATE, "spec": {**TEMPLATE["spec"], "pes": [dict(p) for p in TEMPLATE["spec"]["pes"]]}}
    t2["spec"]["pes"][1]["env"] = [{"name": "X", "value": "1"}, {"name": "KUBESODA_OUTPUTS", "value": "zzz"}]
    assert template_signatures(t2)["mid"] == sigs["mid"]
    t2["spec"]["pes"][1]["env"] = [{"name": "X", "value": "2"}]
    assert template_signatures(t2)["mid"].arguments != sigs["mid"].arguments
    # mid and out share an image, not their arguments; out's flowspec names mid by its arguments key
    assert sigs["mid"].executable == sigs["out"].executable
    assert sigs["mid"].arguments != sigs["out"].arguments
    assert sigs["src"].flowspec != sigs["mid"].flowspec


def test_signature_digest_from_pods_and_stable_flowspec():
    digest = "sha256:" + "ab" * 32
    pod = {"metadata": {"namespace": "ns", "name": "p", "labels": {crd.LABEL_JOB: "j", crd.LABEL_PE: "mid"}},
           "status": {"containerStatuses": [{"name": "pe", "imageID": f"docker.io/library/pe@{digest}"}]}}
    dig = learning.pod_digests([pod])
    assert dig == {("ns", "j", "mid"): f"docker.io/library/pe@{digest}"}
    sigs = template_signatures(TEMPLATE, {"mid": dig[("ns", "j", "mid")]})
    ref = template_signatures(TEMPLATE)
    assert sigs["mid"].executable == digest and ref["mid"].executable == "docker.io/library/pe:1"
    # the consumer's flowspec does not change when its producer's digest becomes known
    assert sigs["out"].flowspec == ref["out"].flowspec
    # what running pods taught, a new job (reference only) finds through the learner's alias
    lr = _trained(sigs["mid"], 0.004, 2.0)
    hit = lr.lookup(ref["mid"])
    assert hit is not None and hit.exact


def test_a_pe_with_no_input_stream_is_a_source_whatever_its_kind():
    t = {"metadata": {"name": "x"}, "spec": {"pes": [{"name": "a", "kind": "transform"}, {"name": "b", "kind": "source"}],
                                             "streams": [{"from": "a", "to": "b"}]}}
    sigs = template_signatures(t)
    assert sigs["a"].kind is PEKind.source and sigs["b"].kind is PEKind.transform


# ------------------------------------------------------------------------------------ precedence


SIG = Signature.build("transform", "pe:1", command=["run"], inputs=[("primal", "primal")])
DECL = ResourceFunction(a=0.002, b=1.0)


def test_precedence_learned_beats_declared_and_declared_wins_when_told():
    lr = _trained(SIG, 0.004, 2.0)
    c = choose(PEKind.transform, DECL, SIG, lr, ON)
    assert c.source == "learned:flowspec" and c.rf.a == pytest.approx(0.004, rel=0.05) and c.rf.b == pytest.approx(2.0, rel=0.05)
    assert choose(PEKind.transform, DECL, SIG, lr, LearningSettings(enabled=True, declared_wins=True)) == Choice(rf=DECL, source=DECLARED)
    # a PE without a declared function takes the learned one even when declared ones win
    assert choose(PEKind.transform, None, SIG, lr, LearningSettings(enabled=True, declared_wins=True)).source == "learned:flowspec"
    # disabled: declared, else the default
    assert choose(PEKind.transform, DECL, SIG, lr, LearningSettings(enabled=False)).source == DECLARED
    assert choose(PEKind.transform, None, SIG, lr, LearningSettings(enabled=False)).source == DEFAULT


def test_precedence_pinned_beats_everything():
    lr = _trained(SIG, 0.004, 2.0)
    lr.pin(SIG.at(Level.executable).key, a=0.01, b=3.0)  # pinned higher up than the learned node
    for st in (ON, LearningSettings(enabled=True, declared_wins=True)):
        c = choose(PEKind.transform, DECL, SIG, lr, st)
        assert c.source == PINNED and (c.rf.a, c.rf.b) == (0.01, 3.0) and c.key == SIG.at(Level.executable).key
    # the most specific pin wins
    lr.pin(SIG, a=0.02, b=4.0)
    assert choose(PEKind.transform, DECL, SIG, lr, ON).rf.a == 0.02


def test_precedence_confidence_level_and_default():
    few = _trained(SIG, 0.004, 2.0, n=4)  # confidence < 0.5 everywhere
    assert choose(PEKind.transform, DECL, SIG, few, ON).source == DECLARED
    assert choose(PEKind.transform, DECL, SIG, few, LearningSettings(enabled=True, min_confidence=0.0)).source.startswith("learned:")
    # another program with the same image: only the executable node is trusted
    other = Signature.build("transform", "pe:1", command=["other"], inputs=[("primal", "primal")])
    lr = _trained(SIG, 0.004, 2.0)
    assert choose(PEKind.transform, DECL, other, lr, ON).source == DECLARED  # declared beats a pooled model
    c = choose(PEKind.transform, None, other, lr, ON)
    assert c.source == "learned:executable"  # nothing declared: borrow the most specific model that exists
    assert choose(PEKind.transform, DECL, other, lr, LearningSettings(enabled=True, override_level=Level.kind)).source == "learned:executable"
    # nothing at all: the policy's default per kind, combine kept
    d = LearningSettings(enabled=True, defaults={PEKind.sink: ResourceFunction(a=0.5, b=0.25)})
    c = choose(PEKind.sink, None, Signature.build("sink", "x"), Learner(), d, combine="min")
    assert c.source == DEFAULT and (c.rf.a, c.rf.b, c.rf.combine) == (0.5, 0.25, "min")
    assert choose(PEKind.source, None, None, None, d).rf == ResourceFunction()


def test_settings_from_policy():
    s = settings_from({"spec": {"learning": {"enabled": False, "declaredWins": True, "minConfidence": 0.8, "overrideLevel": "flowspec",
                                             "defaults": {"source": {"a": 0.2}, "bogus": {"a": 1}, "sink": {"a": -1}}}}})
    assert (s.enabled, s.declared_wins, s.min_confidence, s.override_level) == (False, True, 0.8, Level.flowspec)
    assert s.defaults == {PEKind.source: ResourceFunction(a=0.2, b=1.0)}
    assert settings_from(None) == LearningSettings() and not LearningSettings().enabled  # opt in
    assert settings_from({"spec": {"learning": {"minConfidence": 7}}}).min_confidence == 0.5  # bad: defaults


# ------------------------------------------------------------------------------------ the step


def _scenario():
    scen, errors = crd.scenario_from_objects([NODE], [TEMPLATE], [JOB])
    assert not errors
    return scen


def test_apply_functions_is_a_pure_step():
    scen = _scenario()
    assert apply_functions(scen, {}) is scen
    same = {pe_id("ns/t", "mid"): Choice(rf=scen.template("ns/t").pe("mid").rf, source=DECLARED)}
    assert apply_functions(scen, same) is scen
    new = ResourceFunction(a=0.01, b=2.0)
    out = apply_functions(scen, {pe_id("ns/t", "mid"): Choice(rf=new, source="learned:flowspec"), "ns/zzz:mid": Choice(rf=new, source=PINNED)})
    assert out.template("ns/t").pe("mid").rf == new
    assert scen.template("ns/t").pe("mid").rf == DECL  # the input is untouched
    assert out.template("ns/t").pe("src").rf == scen.template("ns/t").pe("src").rf


# ------------------------------------------------------------------------------------ profiles


class FakeCustom:
    """The CustomObjectsApi calls :class:`Learning` makes, on a dict; ``fail`` makes writes raise."""

    def __init__(self, items: list[dict[str, Any]] | None = None):
        self.objects = {o["metadata"]["name"]: o for o in items or []}
        self.fail = False
        self.fail_list = False
        self.writes = 0

    def list_cluster_custom_object(self, group, version, plural, label_selector=None, field_selector=None, **_):
        """The API server's selectors as the operator uses them: ``<label> in|notin (a,b)`` and ``spec.pinned=true``."""
        if self.fail_list:
            raise client.ApiException(status=404, reason="Not Found")
        items = list(self.objects.values())
        self.lists = getattr(self, "lists", 0) + 1
        if field_selector == "spec.pinned=true":
            items = [o for o in items if (o.get("spec") or {}).get("pinned")]
        if label_selector:
            label, op, rest = label_selector.split(" ", 2)
            values = set(rest.strip("()").split(","))
            items = [o for o in items if (((o["metadata"].get("labels") or {}).get(label) in values) == (op == "in"))]
        return {"items": items}

    def create_cluster_custom_object(self, group, version, plural, body, **_):
        if self.fail:
            raise client.ApiException(status=500, reason="boom")
        if body["metadata"]["name"] in self.objects:
            raise client.ApiException(status=409, reason="AlreadyExists")
        self.objects[body["metadata"]["name"]] = dict(body)

    def patch_cluster_custom_object_status(self, group, version, plural, name, body, **_):
        if self.fail:
            raise client.ApiException(status=500, reason="boom")
        self.objects[name]["status"] = body["status"]
        self.writes += 1


def test_profiles_written_loaded_and_refitted_the_same():
    api = FakeCustom()
    lrn = Learning(api, clock=lambda: 100.0)  # type: ignore[arg-type]
    lrn.learner = _trained(SIG, 0.004, 2.0)
    lrn.dirty = {n.key for n in SIG.lineage()}
    lrn.sync()
    assert len(api.objects) == 4 and not lrn.dirty
    obj = api.objects[SIG.key]
    assert obj["spec"] == {"pinned": False} and obj["status"]["level"] == "flowspec"
    # issue 38: the fit and a summary of the window, not the window
    assert obj["status"]["window"]["n"] == 40 and obj["status"]["window"]["ri"] == [100.0, 100.0]
    assert obj["status"]["model"]["fit"]["a"] == pytest.approx(obj["status"]["a"], rel=1e-5)
    assert obj["status"]["confidence"] > 0.5 and obj["status"]["a"] == pytest.approx(0.004, rel=0.05)
    lrn.sync()
    assert api.writes == 4  # nothing changed: nothing written
    # a restarted operator: loads the PEs' own profiles and the roots first, plans with the same
    # model from the start; the other levels in the next cycles (issue 38: no cycle lists them all)
    again = Learning(api)  # type: ignore[arg-type]
    lists = api.lists
    again.sync()
    assert set(again.learner.models) == {SIG.key, "transform"}, set(again.learner.models)
    assert api.lists == lists + 2  # the first tier and the pins
    c = choose(PEKind.transform, DECL, SIG, again.learner, ON)
    assert c.source == "learned:flowspec" and c.rf.a == pytest.approx(lrn.learner.get(SIG.key).a, rel=1e-3)  # type: ignore[union-attr]
    for _ in range(3):
        again.sync()
    assert set(again.learner.models) == set(api.objects) and not again.tiers
    assert not again.learner.models[SIG.key].samples  # the samples were in memory only
    # a restored fit stands until the samples taken since give one as confident: one new sample
    # does not make the restarted operator forget what it learned
    again.take(SIG, [Sample(r_i=100.0, m=800.0, r_o=200.0, m_used=500.0, t=41.0)], 41.0)
    again.sync()
    c = choose(PEKind.transform, DECL, SIG, again.learner, ON)
    assert c.source == "learned:flowspec" and c.rf.a == pytest.approx(lrn.learner.get(SIG.key).a, rel=1e-3)  # type: ignore[union-attr]
    assert api.writes == 4  # and nothing to write


def _fresh(lrn: Learning, sig: Signature, a: float, b: float, t0: float, n: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    for i in range(n):
        m = float(rng.uniform(100, 1500))
        r_o = min(a * 100.0 * m, b * 100.0) * float(np.exp(rng.normal(0, 0.02)))
        lrn.take(sig, [Sample(r_i=100.0, m=m, r_o=r_o, m_used=min(m, b / a), t=t0 + i)], t0 + i)


def test_only_fits_that_moved_are_refitted_and_written():
    """Issue 38 item 4: samples the fit predicts cost no refit and no write; samples it does not
    (the PE changed) are refitted first and written."""
    api = FakeCustom()
    lrn = Learning(api, clock=lambda: 100.0)  # type: ignore[arg-type]
    _fresh(lrn, SIG, 0.004, 2.0, 0.0, 40, 0)
    lrn.sync()
    assert lrn.stats["refitted"] == 4 and len(api.objects) == 4 and api.writes == 4
    a = lrn.learner.models[SIG.key].a
    assert a == pytest.approx(0.004, rel=0.05)
    _fresh(lrn, SIG, 0.004, 2.0, 40.0, 6, 1)  # one more macro epoch of the same behaviour
    lrn.sync()
    assert lrn.stats["candidates"] == 0 and lrn.stats["written"] == 0 and api.writes == 4
    assert lrn.learner.models[SIG.key].a == a  # the lazy refit stays off: nothing refits on read
    choose(PEKind.transform, DECL, SIG, lrn.learner, ON)
    assert lrn.learner.models[SIG.key].a == a
    _fresh(lrn, SIG, 0.002, 2.0, 46.0, 6, 2)  # twice the cost per tuple from now on
    lrn.sync()
    assert lrn.stats["refitted"] >= 1 and lrn.stats["written"] >= 1 and api.writes > 4
    assert lrn.learner.models[SIG.key].a < 0.9 * a


class Ticks:
    """A clock for the budgets that advances one second each time it is read (issue 52 item 4):
    a refit given 0.5 s fits its first window and stops at the next check, one given 1.5 s fits
    two, whatever the machine's speed (counted, not timed)."""

    def __init__(self) -> None:
        self.t = 0.0
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            self.t += 1.0
            return self.t


class Clock:
    """A clock for the budgets that stands still until a cost is counted on it (:meth:`advance`)."""

    def __init__(self) -> None:
        self.t = 0.0
        self._lock = threading.Lock()

    def __call__(self) -> float:
        return self.t

    def advance(self, s: float) -> None:
        with self._lock:
            self.t += s


def test_the_fit_budget_defers_and_the_neediest_come_first():
    """A small budget fits the first window in the queue only (the nodes holding it: one PE's
    levels are fitted together, never one level now and the others next cycle); a never-fitted
    node comes before one whose fit merely aged. (Issue 52 item 4: before, a budget of 0 fitted one
    window: every cycle made at least one fit, whatever its budget; now it fits none.)"""
    other = Signature.build("transform", "example.com/other:1", args=["x"], inputs=[("u", "u->t")])
    third = Signature.build("transform", "example.com/third:1", inputs=[("u", "u->t")])
    api = FakeCustom()
    lrn = Learning(api, clock=lambda: 100.0, timer=Ticks())  # type: ignore[arg-type]
    _fresh(lrn, SIG, 0.004, 2.0, 0.0, 40, 0)
    _fresh(lrn, third, 0.01, 1.0, 0.0, 40, 5)
    st = lrn.refit(0.0)
    assert st["refitted"] == 0 and st["deferred"] == st["candidates"] > 0  # no budget: no fit
    st = lrn.refit(0.5)
    assert st["refitted"] == 1 and st["deferred"] == st["candidates"] - 1 > 0  # the root, most fresh
    st = lrn.refit(0.5)
    fitted = {k for k, m in lrn.learner.models.items() if m.fit is not None}
    own = [{n.key for n in s.lineage() if n.level is not Level.kind} for s in (SIG, third)]
    assert st["refitted"] == 3 and sum(o <= fitted for o in own) == 1  # one PE's three levels, one window
    lrn.refit(math.inf)
    fitted = {k for k, m in lrn.learner.models.items() if m.fit is not None}
    assert {n.key for n in SIG.lineage()} <= fitted
    _fresh(lrn, SIG, 0.004, 2.0, 40.0, 300, 3)  # the whole window replaced: needs a refit, not urgently
    _fresh(lrn, other, 0.01, 1.0, 340.0, 10, 4)  # never fitted
    lrn.refit(0.5)
    mine = [lrn.learner.models[n.key] for n in other.lineage() if n.level is not Level.kind]
    assert all(m.fit is not None for m in mine)  # the never-fitted PE's window, before anything else
    assert all(lrn.learner.models[n.key].fitted_n < lrn.learner.models[n.key].observed for n in SIG.lineage())


def test_pinning_from_the_spec_and_unpinning():
    api = FakeCustom()
    lrn = Learning(api)  # type: ignore[arg-type]
    lrn.learner = _trained(SIG, 0.004, 2.0)
    lrn.dirty = {SIG.key}
    lrn.sync()
    api.objects[SIG.key]["spec"] = {"pinned": True, "a": 0.05}
    lrn.sync()
    m = lrn.learner.models[SIG.key]
    assert m.pinned and m.a == 0.05 and m.b == pytest.approx(2.0, rel=0.05)
    assert api.objects[SIG.key]["status"]["confidence"] == 1.0
    n = m.observed
    lrn.learner.observe(SIG, [Sample(r_i=1, m=1, r_o=1)], now=50.0)
    assert lrn.learner.models[SIG.key].observed == n  # a pinned node learns nothing
    assert choose(PEKind.transform, DECL, SIG, lrn.learner, LearningSettings(enabled=True, declared_wins=True)).source == PINNED
    api.objects[SIG.key]["spec"] = {"pinned": False}
    lrn.sync()
    assert not lrn.learner.models[SIG.key].pinned
    assert choose(PEKind.transform, DECL, SIG, lrn.learner, ON).rf.a == pytest.approx(0.004, rel=0.05)


def test_bad_profiles_and_failed_writes_never_raise():
    good = {"metadata": {"name": SIG.key, "labels": {"kubesoda.io/signature-level": "flowspec"}}, "spec": {"pinned": False},
            "status": profile_status(_trained(SIG, 0.004, 2.0).get(SIG.key), 0.0)}
    bad = [{"metadata": {"name": "junk"}, "spec": {}, "status": {}},
           {"metadata": {"name": "transform-args-0000"}, "spec": {}, "status": {"path": ["transform", "exe:x"], "kind": "transform", "level": "nope"}},
           {"metadata": {"name": "w"}, "spec": {}, "status": {"path": ["sink"], "kind": "sink", "level": "kind", "key": "w",
                                                              "window": [{"ri": "x"}]}}]
    api = FakeCustom([good, *bad])
    lrn = Learning(api)  # type: ignore[arg-type]
    before = learning.ERRORS.labels("load")._value.get()
    for _ in range(4):  # the tiers: the bad ones have no level label (the last)
        lrn.sync()
    assert list(lrn.learner.models) == [SIG.key]
    assert learning.ERRORS.labels("load")._value.get() == before + 3
    api.fail = True
    lrn.learner.observe(SIG, [Sample(r_i=1, m=1, r_o=1)], now=1e9)
    lrn.dirty = {SIG.key}
    lrn.sync()
    # the new nodes (the profile's own kept its stored fit: nothing to write) failed: kept for the next macro epoch
    assert lrn.dirty == {n.key for n in SIG.lineage()} - {SIG.key}
    api.fail_list = True
    lrn.sync()  # no CRD: logged
    assert Learning(None).macro(_scenario(), [TEMPLATE], None) is not None  # no raise: the declared functions


# ------------------------------------------------------------------------------------ the operator's path


def _pod(pe: str, cpu: str, phase: str = "Running") -> dict[str, Any]:
    return {"metadata": {"namespace": "ns", "name": f"j-{pe}", "labels": {crd.LABEL_JOB: "j", crd.LABEL_PE: pe}},
            "spec": {"nodeName": "n1", "containers": [{"name": "pe", "resources": {"limits": {"cpu": cpu}}}]},
            "status": {"phase": phase}}


def test_observe_waits_for_a_held_allocation_then_learns_and_plans_with_it():
    now = [0.0]
    lrn = Learning(None, clock=lambda: now[0])
    scen = _scenario()
    plan = Plan(feasible=True, jobs=(JobDecision(job="ns/j", admitted=True, template="ns/t"),))
    policy = {"spec": {"observation": {"windowSeconds": 6}, "learning": {"enabled": True}}}
    true_a, true_b = 0.004, 0.8  # mid: saturates at 200 mips
    taken = 0
    rng = np.random.default_rng(1)
    for i in range(60):
        now[0] = 2.0 * i
        cpu = ["100m", "150m", "400m"][(i // 8) % 3]  # the allocation changes every 16 s
        m = float(cpu[:-1])
        r_i = 100.0
        r_o = min(true_a * r_i * m, true_b * r_i) * float(np.exp(rng.normal(0, 0.02)))
        obs = {pe_id("ns/j", "mid"): PEObservation(received={"src->mid": r_i}, emitted={"mid->out": 0.5 * r_o}, mips=min(m, true_b / true_a))}
        taken += lrn.observe(scen, plan, [TEMPLATE], [_pod("mid", cpu)], policy, obs)
    assert 0 < taken < 60  # samples right after a change are skipped (window 6 s + 2 s)
    fns = lrn.choose_all(scen, [TEMPLATE], policy)
    c = fns[pe_id("ns/t", "mid")]
    assert c.source == "learned:flowspec", c
    assert c.rf.a == pytest.approx(true_a, rel=0.1) and c.rf.b == pytest.approx(true_b, rel=0.1)
    assert fns[pe_id("ns/t", "out")].source == DEFAULT and fns[pe_id("ns/t", "src")].source == DECLARED
    assert steps.learned(scen, lrn.planned()).template("ns/t").pe("mid").rf == c.rf
    st = lrn.status_of(plan, "ns/j")
    assert st["mid"]["source"] == "learned:flowspec" and st["out"] == {"a": 1.0, "b": 1.0, "source": "default"}
    # into the job's status
    from soda_optimizer.plan import PEPlan
    plan2 = plan.model_copy(update={"pes": (PEPlan(pe="ns/j:mid", job="ns/j", name="mid"),)})
    js = status.planned(plan2, "ns/j", 1, {}, None, functions=st)
    assert js["pes"][0]["resourceFunction"]["source"] == "learned:flowspec"
    assert "resourceFunction" not in status.planned(plan2, "ns/j", 1, {}, None)["pes"][0]
    # disabled: no learning
    assert lrn.observe(scen, plan, [TEMPLATE], [_pod("mid", "400m")], {"spec": {"learning": {"enabled": False}}}, obs) == 0


def test_a_pe_reused_in_another_template_starts_from_the_learned_model():
    """Same image and arguments, other names and producers, nothing declared: the arguments node."""
    lr = _trained(template_signatures(TEMPLATE)["mid"], 0.004, 2.0)
    other = {"metadata": {"name": "u", "namespace": "ns"},
             "spec": {"pes": [{"name": "feed", "kind": "source", "image": "other:2"},
                              {"name": "work", "image": "pe:1", "command": ["run"], "env": [{"name": "X", "value": "1"}]}],
                      "streams": [{"from": "feed", "to": "work"}]}}
    c = choose(PEKind.transform, None, template_signatures(other)["work"], lr, ON)
    assert c.source == "learned:arguments" and c.rf.a == pytest.approx(0.004, rel=0.05)


def test_profile_status_carries_a_fitted_condition():
    from soda_operator.soda.learning import profile_status

    good = _trained(SIG, 0.004, 2.0).get(SIG.key)
    few = _trained(SIG, 0.004, 2.0, n=4).get(SIG.key)
    assert good is not None and few is not None
    c = profile_status(good, 100.0)["conditions"][0]
    assert (c["type"], c["status"], c["reason"]) == ("Fitted", "True", "Confident") and "confidence" in c["message"]
    c = profile_status(few, 100.0)["conditions"][0]
    assert c["status"] == "False" and c["reason"] in ("NoFit", "LowConfidence")


# ------------------------------------------------------------------------------------ a cold start (issue 38 item 4)


def _pes(n: int) -> list[Signature]:
    return [Signature.build("transform", f"example.com/op{i}:1", inputs=[("u", "u->t")]) for i in range(n)]


def test_a_node_without_a_fit_is_not_written():
    """A profile holds a fit: the nodes the fit budget left unfitted are not created empty (main
    created and wrote every node observed: two calls each, nothing in them worth keeping)."""
    api = FakeCustom()
    lrn = Learning(api, clock=lambda: 100.0, timer=Ticks())  # type: ignore[arg-type]
    sigs = _pes(5)
    for k, sig in enumerate(sigs):
        _fresh(lrn, sig, 0.004 * (k + 1), 2.0, 0.0, 12, k)
    lrn.refit(1.5)  # two windows of the six
    lrn.write(math.inf)
    fitted = {k for k, m in lrn.learner.models.items() if m.fit is not None}
    assert 0 < len(fitted) < len(lrn.learner.models)
    assert set(api.objects) == fitted
    assert all("model" in o["status"] for o in api.objects.values())
    lrn.refit(math.inf)
    lrn.write(math.inf)  # fitted now: written now
    assert set(api.objects) == set(lrn.learner.models)


class SlowCustom(FakeCustom):
    """Each create and write costs ``delay`` seconds of ``clock`` (a loaded API server's calls,
    counted rather than slept: the test does not depend on the machine's load); records the order
    of creation."""

    def __init__(self, clock: Clock, delay: float):
        super().__init__()
        self.clock = clock
        self.delay = delay
        self.order: list[str] = []

    def create_cluster_custom_object(self, group, version, plural, body, **kw):
        self.clock.advance(self.delay)
        super().create_cluster_custom_object(group, version, plural, body, **kw)
        self.order.append(body["metadata"]["name"])

    def patch_cluster_custom_object_status(self, group, version, plural, name, body, **kw):
        self.clock.advance(self.delay)
        super().patch_cluster_custom_object_status(group, version, plural, name, body, **kw)


def test_a_cold_start_writes_within_a_budget_roots_and_own_fits_first_and_loses_nothing():
    """Many new PEs at once: each cycle writes for its budget only (main wrote all 2 x nodes calls in
    the first cycle: 352 s at 7,000 PEs), the kinds' roots and the PEs' own (flowspec) fits first;
    the next cycles write the rest, and a restarted operator has every fit."""
    clock = Clock()
    api = SlowCustom(clock, 0.01)
    lrn = Learning(api, clock=lambda: 100.0, timer=clock, fit_budget_s=60.0, write_budget_s=0.05, cycle_budget_s=0.06)  # type: ignore[arg-type]
    sigs = _pes(12)
    for k, sig in enumerate(sigs):
        _fresh(lrn, sig, 0.002 * (1 + k % 4), 2.0, 0.0, 20, k)
    total = len(lrn.learner.models)  # 12 PEs x 3 levels + the root
    lrn.sync()
    first = list(api.order)
    assert 0 < len(first) < total and lrn.stats["unwritten"] == total - len(first)
    assert "transform" in first[:learning.WRITERS]  # the root first (among the writes in flight together)
    assert {lrn.learner.models[k].level for k in first if k != "transform"} == {Level.flowspec}  # the PEs' own before their ancestors
    for _ in range(40):
        if not lrn.dirty and not lrn.stats.get("deferred"):
            break
        lrn.sync()
    assert set(api.objects) == set(lrn.learner.models) and not lrn.dirty
    # restarted: every fit back, the same
    again = Learning(api)  # type: ignore[arg-type]
    for _ in range(4):
        again.sync()
    assert set(again.learner.models) == set(lrn.learner.models)
    for k, m in lrn.learner.models.items():
        assert again.learner.models[k].a == pytest.approx(m.a, rel=1e-5)


def test_a_restart_restores_a_later_tier_into_a_node_observed_since_the_start():
    """A restarted operator observes PEs before it has listed every tier: the node created by the
    new sample takes its profile's stored fit (it had none) and count, and that profile is not
    overwritten with a fit of the few new samples."""
    api = FakeCustom()
    lrn = Learning(api, clock=lambda: 100.0)  # type: ignore[arg-type]
    lrn.learner = _trained(SIG, 0.004, 2.0)
    lrn.dirty = {n.key for n in SIG.lineage()}
    lrn.sync()
    args = SIG.at(Level.arguments).key
    stored = lrn.learner.models[args]
    again = Learning(api, clock=lambda: 200.0)  # type: ignore[arg-type]
    again.sync()  # the first tier: flowspec and the root
    assert args not in again.learner.models
    again.take(SIG, [Sample(r_i=100.0, m=800.0, r_o=200.0, m_used=500.0, t=150.0)], 150.0)
    assert again.learner.models[args].fit is None
    writes = api.writes
    for _ in range(3):
        again.sync()
    m = again.learner.models[args]
    assert m.fit is not None and m.a == pytest.approx(stored.a, rel=1e-5)
    assert m.observed == stored.observed + 1 and len(m.samples) == 1
    assert api.objects[args]["status"]["a"] == pytest.approx(stored.a, rel=1e-5) and api.writes == writes


def test_the_drift_anchor_survives_a_restart():
    """Issue 52: drift is judged against the last trusted fit (``LearnedModel.anchor``). The operator refits a copy of
    each node outside the lock and copied back the fit but not the anchor, so in the operator it was never set; now it
    is, and it is written with the fit and restored by a restarted operator."""
    api = FakeCustom()
    lrn = Learning(api, clock=lambda: 100.0)  # type: ignore[arg-type]
    lrn.learner = _trained(SIG, 0.004, 2.0)
    lrn.dirty = {n.key for n in SIG.lineage()}
    lrn.sync()
    held = lrn.learner.models[SIG.key].anchor
    assert held is not None  # a trusted fit anchors drift
    assert api.objects[SIG.key]["status"]["model"]["anchor"]["need"] == held.need
    again = Learning(api)  # type: ignore[arg-type]
    again.sync()
    got = again.learner.models[SIG.key].anchor
    assert got is not None and got.need == held.need and got.c == pytest.approx(held.c, rel=1e-4)
