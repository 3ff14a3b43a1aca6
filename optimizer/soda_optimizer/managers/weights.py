"""The Simple Weight Manager, SWM (SODA paper section 6.3), and the weight-writing helper the budget
weight manager (BDWM, :mod:`.budget`) shares with it.

"Weights of 1 are assigned to all terminal PEs streams in job templates. All other streams are
given a weight of 0." In kubesoda a template's terminal, valued outputs are its ``sinks``; so SWM
sets every sink's weight to 1 and every stream's (and every import's) to 0, through each job's
weight overrides, whatever the users typed. Value functions stay as declared.
"""

from __future__ import annotations

from collections.abc import Callable

from ..model import Job, Scenario


def sink_weights(scenario: Scenario, weight: Callable[[Job], float]) -> Scenario:
    """Every sink of every template of a job gets ``weight(job)``; every stream and import gets 0
    (written as the job's weight overrides, so the templates stay shared and untouched)."""
    jobs = []
    for j in scenario.jobs:
        w = weight(j)
        over: dict[str, float] = {}
        for tname in j.templates:
            t = scenario.template(tname)
            over.update({s.id: 0.0 for s in t.streams})
            over.update({f"sink:{k.pe}": w for k in t.sinks})
        imports = tuple(imp.model_copy(update={"weight": 0.0}) for imp in j.imports)
        jobs.append(j.model_copy(update={"weight_overrides": over, "imports": imports}))
    return scenario.model_copy(update={"jobs": tuple(jobs)})


def simple_weights(scenario: Scenario) -> Scenario:
    """SWM: every sink weighs 1, every other stream 0."""
    return sink_weights(scenario, lambda _job: 1.0)
