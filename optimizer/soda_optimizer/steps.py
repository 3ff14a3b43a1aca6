"""The steps that run before any allocation policy: Scenario -> Scenario (DESIGN: "managers and
learners are Scenario -> Scenario steps before it").

:func:`prepare` applies, in order, the rank manager the SchedulingPolicy names, the
administrator's rank overrides, and the weight manager (:mod:`.managers`). Learned resource functions are
a Scenario -> Scenario step too (:func:`.learn.functions.apply_functions`), but the operator applies it
before ``pipeline.run`` (it holds the learner's state): the offline planner plans with the Scenario it
is given. A policy only ever sees the Scenario that comes out.
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
        if kind == "rank manager":
            scenario = override_ranks(scenario)
    return scenario


def override_ranks(scenario: Scenario) -> Scenario:
    """The administrator's rank overrides (``Policy.rank_overrides``), after the rank manager and
    before the weight manager; a required job keeps rank 1 (the admission rule needs it)."""
    over = scenario.policy.rank_overrides
    if not over or not any(j.name in over for j in scenario.jobs):
        return scenario
    jobs = tuple(j.model_copy(update={"rank": 1 if j.required else over[j.name]}) if j.name in over else j for j in scenario.jobs)
    return scenario.model_copy(update={"jobs": jobs})
