"""The Simple Weight Manager, SWM (SODA paper section 6.3).

"Weights of 1 are assigned to all terminal PEs streams in job templates. All other streams are
given a weight of 0." In kubesoda a template's terminal, valued outputs are its ``sinks``; so SWM
sets every sink's weight to 1 and every stream's (and every import's) to 0, through each job's
weight overrides, whatever the users typed. Value functions stay as declared.
"""

from __future__ import annotations

from ..model import Scenario


def simple_weights(scenario: Scenario) -> Scenario:
    jobs = []
    for j in scenario.jobs:
        over: dict[str, float] = {}
        for tname in j.templates:
            t = scenario.template(tname)
            over.update({s.id: 0.0 for s in t.streams})
            over.update({f"sink:{k.pe}": 1.0 for k in t.sinks})
        imports = tuple(imp.model_copy(update={"weight": 0.0}) for imp in j.imports)
        jobs.append(j.model_copy(update={"weight_overrides": over, "imports": imports}))
    return scenario.model_copy(update={"jobs": tuple(jobs)})
