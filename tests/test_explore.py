"""Exploration (issue 14 item 5, soda_optimizer.learn.explore): which PEs are probed, how far, and a
closed loop on the fluid data plane where a PE only ever seen CPU-bound is stuck at a pessimistic
saturation point without probes and finds its true one with them."""

from __future__ import annotations

import numpy as np
import pytest

from soda_operator.dataplane.model import Instance, solve
from soda_operator.soda.learning import settings_from
from soda_optimizer import pipeline, steps
from soda_optimizer.learn import LearnConfig, Learner, Sample, Signature, sample_from_observation
from soda_optimizer.learn.explore import apply_probes, select
from soda_optimizer.learn.functions import Choice, ExplorationSettings, LearningSettings, choose
from soda_optimizer.model import (
    PE,
    Job,
    Node,
    PEKind,
    PreviousState,
    PrimalInput,
    ResourceFunction,
    Scenario,
    Sink,
    Stream,
    Template,
    pe_id,
)
from soda_optimizer.observed import PEObservation

ON = ExplorationSettings(enabled=True, step=0.5, period=1, max_share=1.0, min_samples=3)


def _learner(sig: Signature, a: float, b: float, ms: list[float]) -> Learner:
    lr = Learner(LearnConfig(n_full=5))
    for i, m in enumerate(ms):
        r_i = 100.0
        lr.observe(sig, [Sample(r_i=r_i, m=m, r_o=min(a * r_i * m, b * r_i), m_used=min(m, b / a), t=float(i))], now=float(i))
    return lr


def test_only_learned_models_with_a_parameter_not_identified_are_probed() -> None:
    sig = Signature.build("transform", "acme/t:1", inputs=[("primal", "primal")])
    settings = LearningSettings(enabled=True)
    cpu_bound = _learner(sig, a=1e-3, b=2.0, ms=[100.0, 150.0, 200.0, 120.0, 180.0, 160.0] * 2)  # saturation 2000: never reached
    c = choose(PEKind.transform, None, sig, cpu_bound, settings)
    assert c.source.startswith("learned")
    m = cpu_bound.get(c.key or "")
    assert m is not None and m.fit is not None and m.fit.a_identified and not m.fit.b_identified
    probes = select({"ns/t:t": c}, cpu_bound, ON, epoch=0)
    p = probes["ns/t:t"]
    assert p.parameter == "b" and p.factor == 1.5
    assert p.choice.rf.b == pytest.approx(1.5 * c.rf.b) and p.choice.rf.a == c.rf.a
    assert p.choice.source.endswith("+probe")
    # both regimes seen: nothing to probe
    both = _learner(sig, a=1e-3, b=2.0, ms=[500.0, 1000.0, 1500.0, 3000.0, 4000.0, 5000.0] * 2)
    cb = choose(PEKind.transform, None, sig, both, settings)
    assert select({"ns/t:t": cb}, both, ON, epoch=0) == {}
    # off, declared, pinned, too few samples: nothing
    assert select({"ns/t:t": c}, cpu_bound, ON.model_copy(update={"enabled": False}), epoch=0) == {}
    assert select({"ns/t:t": Choice(rf=c.rf, source="declared")}, cpu_bound, ON, epoch=0) == {}
    assert select({"ns/t:t": c}, cpu_bound, ON.model_copy(update={"min_samples": 100}), epoch=0) == {}
    cpu_bound.pin(c.key or "")
    assert select({"ns/t:t": c}, cpu_bound, ON, epoch=0) == {}


def test_period_and_share_bound_the_probes() -> None:
    settings = LearningSettings(enabled=True)
    choices, lr = {}, Learner(LearnConfig(n_full=5))
    for k in range(10):
        sig = Signature.build("transform", f"acme/t{k}:1", inputs=[("primal", "primal")])
        for i, m in enumerate([100.0, 150.0, 200.0, 120.0, 180.0, 160.0]):
            lr.observe(sig, [Sample(r_i=100.0, m=m, r_o=0.1 * m, m_used=m, t=float(i))], now=float(i))
        choices[f"ns/t:p{k}"] = choose(PEKind.transform, None, sig, lr, settings)
    ex = ON.model_copy(update={"period": 3, "max_share": 0.2})
    seen: dict[str, list[int]] = {}
    for epoch in range(12):
        probes = select(choices, lr, ex, epoch)
        assert len(probes) <= 2  # 20% of 10
        for pe in probes:
            seen.setdefault(pe, []).append(epoch)
    assert seen  # some are probed
    for epochs in seen.values():
        assert all(b - a >= 3 for a, b in zip(epochs, epochs[1:]))  # at most once per period


def test_probe_is_a_scenario_step() -> None:
    t = Template(name="ns/t", pes=(PE(name="s", kind="source", rf=ResourceFunction(a=1.0)), PE(name="x", rf=ResourceFunction(a=1e-3, b=1.0))),
                 streams=(Stream(src="s", dst="x"),), sinks=(Sink(pe="x"),), primal_inputs=(PrimalInput(pe="s", rate=100.0),))
    scen = Scenario(nodes=(Node(name="n", mips=8000.0),), templates=(t,), jobs=(Job(name="ns/j", templates=("ns/t",)),))
    sig = Signature.build("transform", "acme/t:1", inputs=[("primal", "primal")])
    lr = _learner(sig, a=1e-3, b=2.0, ms=[100.0, 150.0, 200.0, 120.0, 180.0, 160.0] * 2)
    c = choose(PEKind.transform, None, sig, lr, LearningSettings(enabled=True))
    probes = select({"ns/t:x": c}, lr, ON, 0)
    out = apply_probes(scen, {"ns/t:x": c}, probes)
    assert out.template("ns/t").pes[1].rf == probes["ns/t:x"].choice.rf
    assert apply_probes(scen, {"ns/t:x": c}, {}).template("ns/t").pes[1].rf == c.rf


def test_settings_from_policy() -> None:
    s = settings_from({"spec": {"learning": {"enabled": True, "exploration": {"enabled": True, "step": 0.3, "period": 4,
                                                                              "maxShare": 0.5, "minSamples": 2}}}})
    assert s.exploration == ExplorationSettings(enabled=True, step=0.3, period=4, max_share=0.5, min_samples=2)
    bad = settings_from({"spec": {"learning": {"enabled": True, "exploration": {"enabled": True, "step": 7}}}})
    assert bad.enabled and not bad.exploration.enabled
    assert not settings_from(None).exploration.enabled


# --------------------------------------------------------------------------- closed loop

TRUE = ResourceFunction(a=5e-4, b=1.0)  # saturation 2000 mips
DECLARED = ResourceFunction(a=5e-4, b=0.1)  # saturation 200: the user's guess is 10x too low


def _scenario() -> Scenario:
    t = Template(name="ns/t", pes=(PE(name="s", kind="source", rf=ResourceFunction(a=10.0)), PE(name="x", rf=DECLARED),
                                   PE(name="k", kind="sink", rf=ResourceFunction(a=1.0, b=1.0))),
                 streams=(Stream(src="s", dst="x"), Stream(src="x", dst="k")), sinks=(Sink(pe="k"),),
                 primal_inputs=(PrimalInput(pe="s", rate=100.0),))
    return Scenario(nodes=(Node(name="n", mips=8000.0, mips_per_core=1000.0),), templates=(t,), jobs=(Job(name="ns/j", templates=("ns/t",)),))


def _loop(exploration: ExplorationSettings, macros: int = 10, per_macro: int = 4) -> tuple[float, bool]:
    """The transform's allocation at the end and whether its B was identified: plan, run on the data
    plane with the true function, learn; the functions (and probes) change at macro epochs."""
    scen = _scenario()
    sig = Signature.build("transform", "acme/x:1", inputs=[("s", "s->x")])
    lr = Learner(LearnConfig(n_full=5))
    settings = LearningSettings(enabled=True, exploration=exploration)
    rng = np.random.default_rng(0)
    plan = None
    t = 0.0
    for mac in range(macros):
        c = choose(PEKind.transform, DECLARED, sig, lr, settings)
        choices = {"ns/t:x": c}
        probes = select(choices, lr, settings.exploration, mac)
        planned = apply_probes(scen, choices, probes)
        if plan is not None:
            planned = planned.model_copy(update={"previous": PreviousState(candidates={p.pe: p.candidates for p in plan.pes},
                                                                           fractions={p.pe: dict(p.fractions) for p in plan.pes})})
        plan = pipeline.run(planned)
        assert plan.feasible
        for _ in range(per_macro):
            inst = [Instance("ns", f"{p.name}-{n}", "ns/j", p.name, n, f * 8.0) for p in plan.pes for n, f in p.fractions.items()]
            dp = solve(scen.glued({"ns/j": "ns/t"}), inst, {"n": scen.nodes[0]}, rf={pe_id("ns/j", "x"): TRUE.model_copy(
                update={"a": TRUE.a * float(np.exp(rng.normal(0, 0.03)))})})
            g = pe_id("ns/j", "x")
            ob = PEObservation(received={"s->x": dp.pe_input[g]}, emitted={"x->k": dp.pe_output[g]}, mips=dp.pe_mips_used[g])
            smp = sample_from_observation(ob, PEKind.transform, dp.pe_mips[g], t)
            assert smp is not None
            lr.observe(sig, [smp], t)
            t += 10.0
    m = lr.get(sig.key)
    assert m is not None and m.fit is not None
    x = next(p for p in plan.pes if p.name == "x") if plan is not None else None
    return (sum(x.fractions.values()) * 8000.0 if x is not None else 0.0), m.fit.b_identified


def test_exploration_unsticks_a_pe_only_seen_cpu_bound() -> None:
    m_off, id_off = _loop(ExplorationSettings(enabled=False))
    m_on, id_on = _loop(ExplorationSettings(enabled=True, step=0.5, period=1, min_samples=3))
    # without probes the PE stays near the declared saturation point (200 mips): B is only bounded
    assert not id_off and m_off < 400
    # with probes (x1.5 per macro epoch) its allocation reaches the true saturation point and B is measured
    assert id_on and m_on > 0.9 * 2000


# --------------------------------------------------------------------------- the operator's wiring

TEMPLATE = {
    "apiVersion": "kubesoda.io/v1alpha1", "kind": "StreamTemplate", "metadata": {"name": "t", "namespace": "ns"},
    "spec": {
        "pes": [{"name": "src", "kind": "source", "image": "acme/src:1", "resourceFunction": {"a": 1.0}},
                {"name": "mid", "image": "acme/mid:1"},
                {"name": "out", "kind": "sink", "image": "acme/out:1", "resourceFunction": {"a": 1.0, "b": 1.0}}],
        "streams": [{"from": "src", "to": "mid"}, {"from": "mid", "to": "out"}],
        "sinks": [{"pe": "out", "weight": 1}],
        "primalInputs": [{"pe": "src", "rate": 100}],
    },
}


def test_operator_macro_probes_and_micro_keeps_the_probes() -> None:
    from soda_operator.soda import crd
    from soda_operator.soda.learning import Learning, template_signatures

    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": {"kubesoda.io/mips-per-core": "1000"}},
            "status": {"allocatable": {"cpu": "8"}}}
    job = {"apiVersion": "kubesoda.io/v1alpha1", "kind": "StreamJob", "metadata": {"name": "j", "namespace": "ns"},
           "spec": {"templates": ["t"]}}
    scen, errors = crd.scenario_from_objects([node], [TEMPLATE], [job])
    assert not errors
    sig = template_signatures(TEMPLATE)["mid"]
    lrn = Learning(None, config=LearnConfig(n_full=5))
    for i, m in enumerate([100.0, 150.0, 200.0, 120.0, 180.0, 160.0] * 2):  # CPU-bound only: B not identified
        lrn.learner.observe(sig, [Sample(r_i=100.0, m=m, r_o=0.05 * m, m_used=m, t=float(i))], now=float(i))
    policy = {"spec": {"learning": {"enabled": True, "exploration": {"enabled": True, "period": 1, "maxShare": 1.0}}}}
    out = steps.learned(scen, lrn.macro(scen, [TEMPLATE], policy))
    mid = pe_id("ns/t", "mid")
    chosen = lrn.functions[mid]
    assert chosen.source.startswith("learned") and mid in lrn.probes
    planned = out.template("ns/t").pes[1].rf
    assert planned.b == pytest.approx(1.5 * chosen.rf.b) and planned.a == chosen.rf.a
    assert steps.learned(scen, lrn.planned()).template("ns/t").pes[1].rf == planned  # the micro epochs plan with the same probe
    # exploration off: no probe, the chosen function
    off = {"spec": {"learning": {"enabled": True}}}
    out = steps.learned(scen, lrn.macro(scen, [TEMPLATE], off))
    assert lrn.probes == {} and out.template("ns/t").pes[1].rf == chosen.rf
