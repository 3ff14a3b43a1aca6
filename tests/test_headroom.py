"""microQ's headroom (soda/knee.py ``with_headroom``, issue 52 item 3): the capacity microQ leaves
idle goes back, up to macroQ's goal, to PEs whose saturation is not identified (a learned function
that saw the PE at one allocation: what it believes is a lower bound). Checked against an LP of the
same transport problem, and through microQ itself (on main microQ took such a PE down to its
believed saturation and left the rest of macroQ's goal idle)."""

from __future__ import annotations

import dataclasses

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from ortools.linear_solver import pywraplp

from soda_optimizer.importance import Evaluator
from soda_optimizer.model import Node, Scenario
from soda_optimizer.soda import macroq as macroq_stage
from soda_optimizer.soda import macrow as macrow_stage
from soda_optimizer.soda import microq
from soda_optimizer.soda.knee import with_headroom
from tests.test_knee import _chain


def _flagged(scen: Scenario, known: tuple[bool, ...]) -> Scenario:
    t = scen.templates[0]
    pes = tuple(p.model_copy(update={"rf": p.rf.model_copy(update={"saturation_identified": k})}) for p, k in zip(t.pes, known))
    return scen.model_copy(update={"templates": (t.model_copy(update={"pes": pes}),)})


def _most_headroom(goals: dict[str, float], extra: dict[str, float], cands: dict[str, tuple[str, ...]], nodes: dict[str, float]) -> float:
    """The oracle: max sum of raises e_p <= extra_p with every goal_p + e_p hosted by p's candidates."""
    lp = pywraplp.Solver.CreateSolver("GLOP")
    f = {(p, n): lp.NumVar(0, lp.infinity(), f"f{p}{n}") for p in goals for n in cands[p]}
    e = {p: lp.NumVar(0, extra.get(p, 0.0), f"e{p}") for p in goals}
    for p in goals:
        lp.Add(sum(f[p, n] for n in cands[p]) == goals[p] + e[p])
    for n, h in nodes.items():
        lp.Add(sum(f[p, m] for p in goals for m in cands[p] if m == n) <= h + 1e-2)  # hosted() rounds to 1/1000 mips
    lp.Maximize(sum(e.values()))
    assert lp.Solve() == lp.OPTIMAL
    return float(lp.Objective().Value())


@settings(max_examples=80, deadline=None)
@given(st.tuples(*[st.floats(1e-3, 1.0)] * 3), st.floats(1.0, 500.0), st.tuples(*[st.booleans()] * 3),
       st.lists(st.sampled_from([500.0, 1000.0, 3000.0]), min_size=1, max_size=3),
       st.lists(st.floats(0.0, 3000.0), min_size=3, max_size=3), st.lists(st.floats(0.0, 4000.0), min_size=3, max_size=3),
       st.data())
def test_headroom_is_the_most_the_nodes_host_and_only_for_unidentified_saturations(a, rate, known, caps, raw, more, data):
    ev = Evaluator(_flagged(_chain(a, (0.5, 1.0), rate, (0.0, 0.0, 0.0)), known).glued({"ns/j": "ns/t"}))
    nodes = {f"n{i}": c for i, c in enumerate(caps)}
    cands = {p: tuple(data.draw(st.lists(st.sampled_from(sorted(nodes)), min_size=1, unique=True))) for p in ev.pes}
    goals = microq.hosted(dict(zip(ev.pes, raw)), cands, nodes)  # goals the candidates host, as microQ's are
    macro = {p: goals[p] + x for p, x in zip(ev.pes, more)}
    out = with_headroom(ev, goals, macro, cands, nodes)
    flag = {p: ev.glued.spec(p).rf.saturation_identified for p in ev.pes}
    assert all(out[p] >= goals[p] - 1e-9 and out[p] <= macro[p] + 1e-6 for p in ev.pes)
    assert all(out[p] == goals[p] for p in ev.pes if flag[p])
    assert microq.hosted(out, cands, nodes) == out or all(
        abs(h - out[p]) < 1e-2 for p, h in microq.hosted(out, cands, nodes).items())
    before, after = ev.importance(np.array([[goals[p] for p in ev.pes], [out[p] for p in ev.pes]]))
    assert after >= before - 1e-9 * (1 + abs(before))
    best = _most_headroom(goals, {p: macro[p] - goals[p] for p in ev.pes if not flag[p]}, cands, nodes)
    raised = sum(out[p] - goals[p] for p in ev.pes)
    assert raised <= best + 1e-2
    assert raised >= best - 0.01 * len(ev.pes) - 1e-6, (raised, best)  # the flow's 1/1000-mips units


def test_microq_keeps_macroqs_goal_for_a_pe_whose_saturation_it_has_not_seen():
    """A learned PE seen at one allocation (its saturation not identified) that macroQ gave more than
    it believes it needs: microQ's concave fit drops the flat segment past that belief; on main the
    PE fell to the belief and the rest of macroQ's goal stayed idle on an empty node."""
    scen = _flagged(_chain((0.01, 0.01, 0.01), (1.0, 1.0), 100.0, (0.0, 0.0, 0.0)), (True, False, True))
    scen = scen.model_copy(update={"nodes": (Node(name="n0", mips=20000.0),)})
    q = macroq_stage.solve(scen)
    x = next(p for p in q.goals if p.endswith(":x"))
    sat = dict(zip(Evaluator(scen.glued(q.choice)).pes, Evaluator(scen.glued(q.choice)).saturation()))[x]
    q = dataclasses.replace(q, goals={**q.goals, x: sat + 1500.0})  # past its believed knee, as a grid point may be
    w = macrow_stage.solve(scen, q)
    out = microq.solve(scen, q, w.candidates)
    assert out.goals[x] == q.goals[x], (out.goals[x], q.goals[x], out.report.detail)
    assert "headroom" in (out.report.detail or "")
    # an identified PE's goal is still trimmed to its saturation (the knee)
    s = next(p for p in q.goals if p.endswith(":s"))
    q2 = dataclasses.replace(q, goals={**q.goals, s: q.goals[s] + 1500.0})
    out2 = microq.solve(scen, q2, macrow_stage.solve(scen, q2).candidates)
    assert out2.goals[s] <= q.goals[s] + 1e-6
