"""The steps that run before any allocation policy: Scenario -> Scenario (DESIGN: "managers and
learners are Scenario -> Scenario steps before it").

:func:`prepare` applies, in order, the rank manager and the weight manager the SchedulingPolicy
names (:mod:`.managers`). A resource-function learner goes here too, between them and the policy,
as one more step: a policy only ever sees the Scenario that comes out.
"""

from __future__ import annotations

from .managers import RANK_MANAGERS, WEIGHT_MANAGERS
from .model import Scenario


def prepare(scenario: Scenario) -> Scenario:
    pol = scenario.policy
    for kind, registry, name in (("rank manager", RANK_MANAGERS, pol.rank_manager),
                                 ("weight manager", WEIGHT_MANAGERS, pol.weight_manager)):
        if name not in registry:  # the model's Literal refuses these first; a second guard for callers
            raise ValueError(f"{kind} '{name}' is not implemented (available: {', '.join(sorted(registry))})")
        scenario = registry[name](scenario)
    return scenario
