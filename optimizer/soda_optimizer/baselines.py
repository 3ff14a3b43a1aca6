"""Placements without SODA, for comparison (SODA paper 7.2 compares with hand-made placements), as
allocation policies: macroQ decides admission and goals exactly as in SODA, then the goals are
placed without macroW/microW, as in the paper's comparisons:

- ``rand``: each PE on a random node with room for its goal (any node if none has room);
- ``rr``: round-robin over the nodes in name order;
- ``spread``: kube-scheduler-like "least allocated": each PE, in decreasing goal, on the node with
  the most free mips; no knowledge of streams.

A PE whose goal exceeds a node's free capacity is split over further nodes in the same order. The
Plan's candidates are the nodes a PE got a fraction on; ``replan`` places the same goals again on
the live nodes.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable

from .model import Scenario, split_pe_id
from .plan import PEPlan, Plan, StageReport
from .policy import register
from .soda import macroq as _macroq
from .soda.stages import MacroQResult

Place = Callable[[Scenario, dict[str, float]], dict[str, dict[str, float]]]


def _place(scenario: Scenario, goals: dict[str, float], order: list[str], pick: Callable[[str, dict[str, float]], list[str]]) -> dict[str, dict[str, float]]:
    H = {n.name: n.mips for n in scenario.usable_nodes()}
    free = dict(H)
    out: dict[str, dict[str, float]] = {}
    for p in order:
        need = goals[p]
        out[p] = {}
        for n in pick(p, free):
            if need <= 1e-9:
                break
            take = min(need, free[n])
            if take <= 1e-9:
                continue
            out[p][n] = take / H[n]
            free[n] -= take
            need -= take
    return out


def rand(scenario: Scenario, goals: dict[str, float], seed: int = 0) -> dict[str, dict[str, float]]:
    rng = random.Random(seed)
    names = sorted(n.name for n in scenario.usable_nodes())

    def pick(p: str, free: dict[str, float]) -> list[str]:
        roomy = [n for n in names if free[n] >= goals[p]]
        first = [rng.choice(roomy)] if roomy else []
        rest = names[:]
        rng.shuffle(rest)
        return first + rest

    return _place(scenario, goals, sorted(goals), pick)


def rr(scenario: Scenario, goals: dict[str, float]) -> dict[str, dict[str, float]]:
    names = sorted(n.name for n in scenario.usable_nodes())
    state = {"i": 0}

    def pick(p: str, free: dict[str, float]) -> list[str]:
        i = state["i"]
        state["i"] = (i + 1) % len(names)
        return names[i:] + names[:i]

    return _place(scenario, goals, sorted(goals), pick)


def spread(scenario: Scenario, goals: dict[str, float]) -> dict[str, dict[str, float]]:
    def pick(p: str, free: dict[str, float]) -> list[str]:
        return sorted(free, key=lambda n: (-free[n], n))

    return _place(scenario, goals, sorted(goals, key=lambda p: (-goals[p], p)), pick)


class _Baseline:
    name = ""
    place: Place

    def plan(self, scenario: Scenario, deadline_s: float | None = None) -> Plan:
        mq = _macroq.solve(scenario, deadline_s)
        return self._plan(scenario, mq)

    def replan(self, scenario: Scenario, previous: Plan, deadline_s: float | None = None) -> Plan:
        return self._plan(scenario, previous.state)

    def _plan(self, scenario: Scenario, mq: MacroQResult) -> Plan:
        t0 = time.monotonic()
        live = {j.name for j in scenario.jobs}
        goals = {p: g for p, g in mq.goals.items() if split_pe_id(p)[0] in live}
        fractions = type(self).place(scenario, goals)
        report = StageReport(stage="placement", seconds=time.monotonic() - t0, status="feasible", detail=f"{self.name} placement")
        pes = tuple(
            PEPlan(pe=p, job=split_pe_id(p)[0], name=split_pe_id(p)[1], goal_mips=round(g, 3), macro_goal_mips=round(g, 3),
                   candidates=tuple(sorted(fractions.get(p, {}))),
                   fractions={n: math.floor(f * 1e6) / 1e6 for n, f in fractions.get(p, {}).items()})
            for p, g in goals.items()
        )
        return Plan(policy=self.name, feasible=mq.report.status != "infeasible", message=mq.report.detail if mq.report.status == "infeasible" else "",
                    importance=mq.importance, jobs=tuple(d for d in mq.decisions if d.job in live), pes=pes,
                    stream_rates={f"{a}->{b}": t for (a, b), t in mq.stream_rates.items()}, stages=(mq.report, report), state=mq)


@register("rr")
class RoundRobin(_Baseline):
    name = "rr"
    place = staticmethod(rr)


@register("rand")
class Random(_Baseline):
    name = "rand"
    place = staticmethod(rand)


@register("spread")
class Spread(_Baseline):
    name = "spread"
    place = staticmethod(spread)
