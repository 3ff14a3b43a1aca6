"""One SODA run: macroQ -> macroW -> microQ -> microW (paper section 4), as a :class:`Plan`.

``macro`` and ``micro`` are the operator's two loops; ``run`` chains both once (the offline
planner, tests and benchmarks). Every stage runs under its own deadline from the Policy.

One bad job never costs the others their place: when macroW finds PEs that no rack can host even
alone (a node selector nobody matches, a minimum larger than any rack), their jobs are rejected
(reason ``placement``, with macroW's explanation), jobs importing from them with reason
``dependency``, and macroQ and macroW run again without them (at most ``PLACEMENT_RETRIES``
times). The paper has no such step: its macroW is simply infeasible.
"""

from __future__ import annotations

import dataclasses
import math

import networkx as nx

from . import macroq as _macroq
from . import macrow as _macrow
from . import microq as _microq
from . import microw as _microw
from .model import Scenario, split_pe_id
from .plan import JobDecision, PEPlan, Plan
from .stages import MacroQResult, MacroWResult, MicroQResult, MicroWResult

PLACEMENT_RETRIES = 3


def macro(scenario: Scenario) -> tuple[MacroQResult, MacroWResult]:
    q = _macroq.solve(scenario)
    w = _macrow.solve(scenario, q)
    rejected: dict[str, JobDecision] = {}
    names = [j.name for j in scenario.jobs]
    for _ in range(PLACEMENT_RETRIES):
        if w.report.status != "infeasible" or not w.unplaceable:
            break
        bad = {split_pe_id(p)[0] for p in w.unplaceable}
        g = nx.DiGraph((imp.job, j.name) for j in scenario.jobs for imp in j.imports)
        g.add_nodes_from(j.name for j in scenario.jobs)
        gone = bad | {d for b in bad for d in nx.descendants(g, b)}
        for j in scenario.jobs:
            if j.name in gone:
                why = (f"no node can host PE(s) {', '.join(sorted(split_pe_id(p)[1] for p in w.unplaceable if split_pe_id(p)[0] == j.name))}:"
                       f" {w.violated}" if j.name in bad else f"imports from a job that cannot be placed: {sorted(bad & nx.ancestors(g, j.name))}")
                rejected[j.name] = JobDecision(job=j.name, admitted=False, reason="placement" if j.name in bad else "dependency",
                                               message=why, rank=j.rank, revised_rank=j.rank)
        scenario = scenario.model_copy(update={"jobs": tuple(j for j in scenario.jobs if j.name not in gone)})
        q = _macroq.solve(scenario)
        w = _macrow.solve(scenario, q)
    if rejected:
        decided = {d.job: d for d in q.decisions} | rejected
        q = dataclasses.replace(q, decisions=tuple(decided[j] for j in names if j in decided))
    return q, w


def micro(
    scenario: Scenario, macroq: MacroQResult, candidates: dict[str, tuple[str, ...]]
) -> tuple[MicroQResult, MicroWResult]:
    q = _microq.solve(scenario, macroq, candidates)
    w = _microw.solve(scenario, q.goals, candidates)
    return q, w


def to_plan(
    scenario: Scenario, mq: MacroQResult, mw: MacroWResult, uq: MicroQResult | None, uw: MicroWResult | None
) -> Plan:
    goals = uq.goals if uq is not None else mq.goals
    pes = []
    for job, tname in mq.choice.items():
        for p in scenario.template(tname).pes:
            pid = f"{job}:{p.name}"
            pes.append(
                PEPlan(
                    pe=pid,
                    job=job,
                    name=p.name,
                    goal_mips=round(goals.get(pid, 0.0), 3),
                    macro_goal_mips=round(mq.goals.get(pid, 0.0), 3),
                    candidates=mw.candidates.get(pid, ()),
                    fractions={n: math.floor(f * 1e6) / 1e6 for n, f in (uw.fractions.get(pid, {}) if uw else {}).items()},  # floor: never overload
                )
            )
    stages = [mq.report, mw.report] + ([uq.report] if uq else []) + ([uw.report] if uw else [])
    infeasible = [s for s in stages if s.status == "infeasible"]
    decisions: tuple[JobDecision, ...] = mq.decisions
    return Plan(
        feasible=not infeasible,
        message="; ".join(f"{s.stage}: {s.detail}" for s in infeasible),
        importance=uq.importance if uq is not None else mq.importance,
        jobs=decisions,
        pes=tuple(pes),
        stream_rates={f"{a}->{b}": t for (a, b), t in mq.stream_rates.items()},
        stages=tuple(stages),
    )


def run(scenario: Scenario) -> Plan:
    mq, mw = macro(scenario)
    if mq.report.status == "infeasible" or mw.report.status == "infeasible":
        return to_plan(scenario, mq, mw, None, None)
    uq, uw = micro(scenario, mq, mw.candidates)
    return to_plan(scenario, mq, mw, uq, uw)
