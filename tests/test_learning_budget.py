"""Issue 52 item 4: the learner's cycle within its budget at any load. No fit, no choice of functions
and no write starts once the budget is spent; what waits is done by a later cycle, the longest
waiting first; every template keeps a function meanwhile. The costs are counted on a clock the
test holds (:class:`Clock`, :class:`Ticks`), never timed: the tests do not depend on the machine's
load."""

from __future__ import annotations

import math
from typing import Any

from prometheus_client import REGISTRY

from soda_operator.soda import crd, learning
from soda_operator.soda.learning import Learning, template_signatures
from soda_optimizer.learn.functions import DECLARED
from soda_optimizer.learn.signature import Level
from soda_optimizer.model import pe_id
from tests.test_learning import NODE, SIG, Clock, FakeCustom, Ticks, _fresh, _pes

POLICY = {"spec": {"learning": {"enabled": True}}}
N = 12  # templates


def _template(j: int) -> dict[str, Any]:
    return {"apiVersion": "kubesoda.io/v1alpha1", "kind": "StreamTemplate", "metadata": {"name": f"t{j}", "namespace": "ns"},
            "spec": {"pes": [{"name": "src", "kind": "source", "image": f"example.com/src{j}:1", "resourceFunction": {"a": 0.1}},
                             {"name": "op", "image": f"example.com/op{j}:1", "resourceFunction": {"a": 0.001, "b": 1.0}}],
                     "streams": [{"from": "src", "to": "op"}], "sinks": [{"pe": "op", "weight": 1}],
                     "primalInputs": [{"pe": "src", "rate": 100}]}}


def _job(j: int) -> dict[str, Any]:
    return {"apiVersion": "kubesoda.io/v1alpha1", "kind": "StreamJob", "metadata": {"name": f"j{j}", "namespace": "ns"},
            "spec": {"templates": [f"t{j}"]}}


class Costly(Learning):
    """The operator's learner, each template's choice of functions costing ``cost`` seconds of the
    test's clock (the real choice runs); records which templates it chose, in order."""

    def __init__(self, api: Any, clock: Clock, cost: float, **kw: Any):
        super().__init__(api, timer=clock, **kw)
        self.clk, self.cost = clock, cost
        self.chose: list[str] = []

    def _choose_template(self, tname: str, obj: Any, version: str | None = None) -> Any:
        self.clk.advance(self.cost)
        self.chose.append(tname)
        return super()._choose_template(tname, obj, version)


def _gauge(name: str) -> float | None:
    return REGISTRY.get_sample_value(name)


def test_no_fit_and_no_write_starts_once_the_macro_epoch_spent_the_budget():
    """The macro epoch spent the learning's whole budget on the epoch: its cycle fits nothing and
    writes nothing (main's made one fit and wrote for a second whatever the budget), and the fits
    wait for the next cycle, which makes them."""
    api = FakeCustom()
    lrn = Learning(api, clock=lambda: 100.0)  # type: ignore[arg-type]
    for k, sig in enumerate(_pes(3)):
        _fresh(lrn, sig, 0.004 * (k + 1), 2.0, 0.0, 30, k)
    lrn.epoch_share_s = learning.LEARNING_BUDGET_S + 1.0
    lrn.sync()
    assert lrn.stats["candidates"] > 0 and lrn.stats["refitted"] == 0 and lrn.stats["deferred"] == lrn.stats["candidates"]
    assert lrn.stats["written"] == 0 and not api.objects
    assert _gauge("kubesoda_learning_refits_deferred") == lrn.stats["candidates"]
    assert lrn.stats["cycle_cpu_s"] >= 0 and _gauge("kubesoda_learning_cycle_cpu_seconds") == lrn.stats["cycle_cpu_s"]
    lrn.cycle_budget_s = math.inf  # the next macro epoch leaves the cycle a budget (here: no limit, not timed)
    lrn.sync()
    assert lrn.stats["refitted"] == lrn.stats["candidates"] > 0 and lrn.stats["deferred"] == 0
    assert set(api.objects) == set(lrn.learner.models)


def test_the_choice_of_functions_stops_at_its_budget_keeps_the_last_and_reaches_every_template():
    """Each template's choice costs 1 s of the budget. A cold start chooses on the epoch what the
    learning's budget allows (main chose every template, whatever it cost) and plans the rest with
    their declared functions; later macro epochs choose the rest. Then every PE's fit moves: each
    cycle chooses what its budget allows, the others keep their last (learned) choice and are
    chosen by the next cycles, the longest due first; every PE has a function all along."""
    clock = Clock()
    api = FakeCustom()
    lrn = Costly(api, clock, 1.0)
    templates, jobs = [_template(j) for j in range(N)], [_job(j) for j in range(N)]
    scen, errors = crd.scenario_from_objects([NODE], templates, jobs)
    assert not errors
    sigs = [template_signatures(t)["op"] for t in templates]
    for j, sig in enumerate(sigs):  # each PE its own behaviour (its own fit beats the pooled root's)
        _fresh(lrn, sig, 0.001 * (2 + j), 2.0, 0.0, 40, j)
    lrn.refit(math.inf)
    ops = [pe_id(f"ns/t{j}", "op") for j in range(N)]
    every = {pe_id(f"ns/t{j}", pe) for j in range(N) for pe in ("src", "op")}
    epoch_budget = learning.LEARNING_BUDGET_S - lrn.write_budget_s

    def reference() -> dict[str, Any]:
        """Every template's choice, without a budget (and without its cost)."""
        return {k: c for j, t in enumerate(templates) for k, c in Learning._choose_template(lrn, f"ns/t{j}", t).items()}

    def macro() -> dict[str, Any]:
        before = len(lrn.chose)
        fns = lrn.macro(scen, templates, POLICY)
        on_epoch = len(lrn.chose) - before
        assert on_epoch <= epoch_budget / lrn.cost + 1  # checked before each choice: at most one past the budget
        assert set(fns) == every  # every PE of every template has a function
        assert lrn.wait_idle(60)
        return fns

    lrn.settings = learning.settings_from(POLICY)
    ref = reference()
    assert all(ref[k].source.startswith("learned") for k in ops)
    fns = macro()
    chosen = [k for k in ops if fns[k] == ref[k]]
    assert 0 < len(chosen) < N, "the cold start chose every template on the epoch, whatever it cost"
    assert all(fns[k].source == DECLARED for k in ops if k not in chosen)  # the others: their declared function
    for _ in range(4):
        fns = macro()
        if all(fns[k] == ref[k] for k in ops):
            break
    assert all(fns[k] == ref[k] for k in ops)
    # every PE now needs twice the CPU per tuple: every template is due, more than a cycle's budget
    for j, sig in enumerate(sigs):
        _fresh(lrn, sig, 0.0005 * (2 + j), 2.0, 40.0, 20, 100 + j)
    cycle_budget = learning.CYCLE_BUDGET_S - lrn.write_budget_s
    start = len(lrn.chose)
    fns = macro()  # plans with the last cycle's choice; its cycle refits every PE and chooses what its budget allows
    assert all(fns[k] == ref[k] for k in ops)
    new = reference()
    assert all(new[k].rf.a < 0.9 * ref[k].rf.a for k in ops)
    seen = []
    for _ in range(N):
        st = lrn.stats
        assert 0 < st["chosen"] <= cycle_budget / lrn.cost + 1
        assert _gauge("kubesoda_learning_choices_deferred") == st["choices_deferred"]
        fns = macro()
        assert all(fns[k] in (ref[k], new[k]) for k in ops)  # the others keep their last (learned) choice
        seen.append(sum(fns[k] == new[k] for k in ops))
        if seen[-1] == N:
            break
    assert seen[-1] == N and 0 < seen[0] < N and seen == sorted(seen), seen  # a cycle's worth at a time, all reached
    after = lrn.chose[start:]
    assert len(set(after[:N])) == N, after  # the longest due first: none chosen twice before every one was


def test_a_refit_that_waited_long_enough_comes_before_fresher_needs():
    """A lesser need (a PE's whole window replaced) behind a stream of never-fitted PEs, one window
    fitted per cycle: once it has waited AGED cycles it is refitted ahead of them (main: it waits
    until no fresher need is left)."""
    lrn = Learning(FakeCustom(), clock=lambda: 100.0, timer=Ticks())  # type: ignore[arg-type]
    _fresh(lrn, SIG, 0.004, 2.0, 0.0, 40, 0)
    lrn.refit(math.inf)
    _fresh(lrn, SIG, 0.004, 2.0, 40.0, 300, 3)  # the whole window replaced: a refit due, the lowest need
    new = _pes(learning.AGED + 4)
    for k, sig in enumerate(new):
        _fresh(lrn, sig, 0.004, 2.0, 340.0, 10, 10 + k)  # never fitted: the highest need
    own = [lrn.learner.models[n.key] for n in SIG.lineage() if n.level is not Level.kind]
    assert all(m.fitted_n < m.observed for m in own)
    for _ in range(learning.AGED + 2):
        assert lrn.refit(0.5)["refitted"] >= 1  # one window a cycle
        if all(m.fitted_n == m.observed for m in own):
            break
    assert all(m.fitted_n == m.observed for m in own), "a lesser refit starved behind fresher needs"
    assert any(lrn.learner.models[s.key].fit is None for s in new)  # ahead of never-fitted PEs still waiting


def test_a_cold_start_with_nothing_learned_plans_every_template_declared_at_no_cost():
    """Nothing fitted or pinned yet: every template's choice is its declared functions, made on the
    epoch without a lookup (no template's choice is paid for), equal to the real choice, and
    published (the cycle does not choose them again until a node changes)."""
    clock = Clock()
    lrn = Costly(FakeCustom(), clock, 1.0, fit_budget_s=0.0)  # and no fit in this macro epoch's cycle either
    templates, jobs = [_template(j) for j in range(N)], [_job(j) for j in range(N)]
    scen, errors = crd.scenario_from_objects([NODE], templates, jobs)
    assert not errors
    for j, t in enumerate(templates):  # samples, no fit yet
        _fresh(lrn, template_signatures(t)["op"], 0.001 * (2 + j), 2.0, 0.0, 2, j)
    fns = lrn.macro(scen, templates, POLICY)
    assert lrn.wait_idle(60)
    assert set(lrn.chose) <= {f"ns/t{i}" for i in range(N) if (i + 1) % learning.ROLL == 0}  # no lookup paid for but the cycle's roll
    lrn.settings = learning.settings_from(POLICY)
    ref = {k: c for j, t in enumerate(templates) for k, c in Learning._choose_template(lrn, f"ns/t{j}", t).items()}
    assert fns == ref and {c.source for c in fns.values()} == {DECLARED}
    assert lrn.stats["choices_deferred"] == 0 and not lrn.due and len(lrn.published) == N

