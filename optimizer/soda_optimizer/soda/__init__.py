"""SODA (SODA paper section 4), as one allocation policy: macroQ -> macroW -> microQ -> microW.

:class:`Soda` implements :class:`~soda_optimizer.policy.AllocationPolicy`: ``plan`` runs the four
stages (a macro epoch and its first micro step), ``replan`` runs microQ and microW from the macro
decisions that the previous Plan carries (a micro epoch). Each stage lives in its own module of
this package and runs under its own deadline from the SchedulingPolicy (scaled to ``deadline_s``
when one is given):

- :mod:`.macroq` (5.1, with :mod:`.required`, the admission rule for required jobs, and :mod:`.rap`);
- :mod:`.macrow` (5.2: problem, constraints, TopLevelMILP, BottomLevel + miniW);
- :mod:`.microq` (5.3), :mod:`.microw` (5.4); :mod:`.stages` holds what each hands the next.

One bad job never costs the others their place: when macroW finds PEs that no rack can host even
alone (a node selector nobody matches, a minimum larger than any rack), their jobs are rejected
(reason ``placement``, with macroW's explanation; ``memory`` when what no node has is the memory
of an instance), jobs importing from them with reason
``dependency``, and macroQ and macroW run again without them (at most ``PLACEMENT_RETRIES``
times). The paper has no such step: its macroW is simply infeasible.
"""

from __future__ import annotations

import dataclasses
import math

import networkx as nx
import numpy as np

from ..model import Scenario, split_pe_id
from ..plan import JobDecision, PEPlan, Plan, gap_of
from ..policy import register
from . import macroq as _macroq
from . import macrow as _macrow
from . import microq as _microq
from . import microw as _microw
from .stages import MacroQResult, MacroWResult, MicroQResult, MicroWResult

PLACEMENT_RETRIES = 3


def _scale(scenario: Scenario, deadline_s: float | None) -> Scenario:
    """The stage deadlines scaled so that they add up to ``deadline_s`` (None: as the policy says)."""
    if deadline_s is None:
        return scenario
    p = scenario.policy
    fields = ("macroq_deadline_s", "macrow_deadline_s", "microq_deadline_s", "microw_deadline_s")
    k = deadline_s / sum(getattr(p, f) for f in fields)
    return scenario.model_copy(update={"policy": p.model_copy(update={f: getattr(p, f) * k for f in fields})})


def macro(scenario: Scenario) -> tuple[MacroQResult, MacroWResult]:
    """macroQ and macroW, rejecting the jobs that no node can host and planning the others again."""
    q = _macroq.solve(scenario)
    w = _macrow.solve(scenario, q)
    rejected: dict[str, JobDecision] = {}
    names = [j.name for j in scenario.jobs]
    for _ in range(PLACEMENT_RETRIES):
        if w.report.status != "infeasible" or not w.unplaceable:
            break
        bad = {split_pe_id(p)[0] for p in w.unplaceable}
        g = scenario.job_graph()
        gone = bad | {d for b in bad for d in nx.descendants(g, b)}
        for j in scenario.jobs:
            if j.name in gone:
                mine = sorted(p for p in w.unplaceable if split_pe_id(p)[0] == j.name)
                pes = ", ".join(split_pe_id(p)[1] for p in mine)
                whys = [w.why.get(p, w.violated or "") for p in mine]
                memory = bool(whys) and all(x.startswith("(memory)") for x in whys)
                why = (f"no node can host PE(s) {pes}: {whys[0] if whys else w.violated}" if j.name in bad
                       else f"imports from a job that cannot be placed: {sorted(bad & nx.ancestors(g, j.name))}")
                reason = ("memory" if memory else "placement") if j.name in bad else "dependency"
                rejected[j.name] = JobDecision(job=j.name, admitted=False, reason=reason, message=why, rank=j.rank, revised_rank=j.rank)
        scenario = scenario.model_copy(update={"jobs": tuple(j for j in scenario.jobs if j.name not in gone)})
        q = _macroq.solve(scenario)
        w = _macrow.solve(scenario, q)
    if rejected:
        decided = {d.job: d for d in q.decisions} | rejected
        q = dataclasses.replace(q, decisions=tuple(decided[j] for j in names if j in decided))
    return q, w


def micro(scenario: Scenario, macroq: MacroQResult, candidates: dict[str, tuple[str, ...]]) -> tuple[MicroQResult, MicroWResult]:
    q = _microq.solve(scenario, macroq, candidates)
    w = _microw.solve(scenario, q.goals, candidates, choice=macroq.choice)
    return q, w


def to_plan(scenario: Scenario, mq: MacroQResult, mw: MacroWResult, uq: MicroQResult | None, uw: MicroWResult | None,
            policy: str = "soda") -> Plan:
    goals = uq.goals if uq is not None else mq.goals
    glued = scenario.glued(mq.choice)
    pes = []
    for job in mq.choice:
        for pid in glued.pes_of(job):
            pes.append(
                PEPlan(
                    pe=pid,
                    job=job,
                    name=split_pe_id(pid)[1],
                    goal_mips=round(goals.get(pid, 0.0), 3),
                    macro_goal_mips=round(mq.goals.get(pid, 0.0), 3),
                    candidates=mw.candidates.get(pid, ()),
                    fractions={n: math.floor(f * 1e6) / 1e6 for n, f in (uw.fractions.get(pid, {}) if uw else {}).items()},  # floor: never overload
                )
            )
    stages = [mq.report, mw.report] + ([uq.report] if uq else []) + ([uw.report] if uw else [])
    infeasible = [s for s in stages if s.status == "infeasible"]
    importance = uq.importance if uq is not None else mq.importance
    # a proven bound holds for microQ's answer too (rounding aside); an estimate is published as computed (issue 49)
    bound = None if mq.bound is None else max(mq.bound, importance) if mq.bound_proven else mq.bound
    return Plan(
        policy=policy,
        feasible=not infeasible,
        message="; ".join(f"{s.stage}: {s.detail}" for s in infeasible),
        importance=importance,
        bound=bound,
        gap=gap_of(bound, importance, mq.bound_proven),
        bound_proven=mq.bound_proven,
        jobs=_final_jobs(scenario, mq, goals),
        pes=tuple(pes),
        stream_rates={f"{a}->{b}": t for (a, b), t in mq.stream_rates.items()},
        stages=tuple(stages),
        state=(mq, mw),
    )


def _final_jobs(scenario: Scenario, mq: MacroQResult, goals: dict[str, float]) -> tuple[JobDecision, ...]:
    """macroQ's job decisions with each admitted job's mips and importance at the plan's final PE
    goals (microQ's, when they differ from macroQ's): the job table agrees with the PE goals beside
    it (issue 49: `kubesoda plan` showed macroQ's per-job mips next to microQ's goals)."""
    if all(abs(goals.get(p, 0.0) - m) <= 1e-6 for p, m in mq.goals.items()):
        return mq.decisions
    from ..importance import Evaluator
    from .macroq import _importance_by_job

    ev = Evaluator(scenario.glued(mq.choice))
    imp = _importance_by_job(ev, np.array([goals.get(p, 0.0) for p in ev.pes]))
    return tuple(d.model_copy(update={"mips": sum(goals.get(p, 0.0) for p in ev.glued.pes_of(d.job)),
                                      "importance": imp.get(d.job, 0.0)}) if d.admitted else d for d in mq.decisions)


@register("soda")
class Soda:
    name = "soda"

    def plan(self, scenario: Scenario, deadline_s: float | None = None) -> Plan:
        scenario = _scale(scenario, deadline_s)
        mq, mw = macro(scenario)
        if mq.report.status == "infeasible" or mw.report.status == "infeasible":
            return to_plan(scenario, mq, mw, None, None)
        uq, uw = micro(scenario, mq, mw.candidates)
        return to_plan(scenario, mq, mw, uq, uw)

    def replan(self, scenario: Scenario, previous: Plan, deadline_s: float | None = None) -> Plan:
        scenario = _scale(scenario, deadline_s)
        mq, mw = previous.state
        live = {j.name for j in scenario.jobs}  # jobs deleted since the macro epoch keep nothing
        if set(mq.choice) - live:
            mq = dataclasses.replace(mq, choice={j: t for j, t in mq.choice.items() if j in live},
                                     decisions=tuple(d for d in mq.decisions if d.job in live),
                                     goals={p: g for p, g in mq.goals.items() if split_pe_id(p)[0] in live})
        uq, uw = micro(scenario, mq, {p: c for p, c in mw.candidates.items() if split_pe_id(p)[0] in live})
        return to_plan(scenario, mq, mw, uq, uw)


__all__ = ["Soda", "macro", "micro", "to_plan"]
