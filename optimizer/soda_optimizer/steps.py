"""The steps that run before any allocation policy: Scenario -> Scenario (DESIGN: "managers and
learners are Scenario -> Scenario steps before it"; SODA paper section 6: the rank and weight
managers; RFL, section 5, for the resource functions).

:func:`prepare` applies, in this order, the one order used offline (``kubesoda plan``, the
benchmarks) and live (the operator's macro and micro epochs):

1. the **learned resource functions**, when given (``functions``: template PE id -> the
   :class:`~.learn.functions.Choice` it is planned with, probes included;
   :func:`.learn.functions.apply_functions`). The caller holds the learner's state and chooses the
   functions (:func:`.learn.functions.choose`); the step only puts them in, so the managers below
   already see them (a budget manager's job cost depends on them);
2. the **rank manager** the SchedulingPolicy names;
3. the administrator's **rank overrides**;
4. the **weight manager** (:mod:`.managers`).

A policy only ever sees the Scenario that comes out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from .managers import RANK_MANAGERS, WEIGHT_MANAGERS
from .model import Scenario

if TYPE_CHECKING:  # .learn imports scipy: loaded only when functions are given
    from .learn.functions import Choice


def prepare(scenario: Scenario, functions: Mapping[str, Choice] | None = None) -> Scenario:
    """The Scenario a policy plans with: learned functions (when given), rank manager, rank
    overrides, weight manager (the module docstring's order)."""
    scenario = learned(scenario, functions)
    pol = scenario.policy
    for kind, registry, name in (("rank manager", RANK_MANAGERS, pol.rank_manager),
                                 ("weight manager", WEIGHT_MANAGERS, pol.weight_manager)):
        if name not in registry:  # the model's Literal refuses these first; a second guard for callers
            raise ValueError(f"{kind} '{name}' is not implemented (available: {', '.join(sorted(registry))})")
        scenario = registry[name](scenario)
        if kind == "rank manager":
            scenario = override_ranks(scenario)
    return scenario


def learned(scenario: Scenario, functions: Mapping[str, Choice] | None) -> Scenario:
    """Step 1 alone: ``scenario`` with the learned functions put in (itself when there are none).
    The operator also keeps this Scenario to write what it planned with (instances, budgets)."""
    if not functions:
        return scenario
    from .learn.functions import apply_functions

    return apply_functions(scenario, functions)


def override_ranks(scenario: Scenario) -> Scenario:
    """The administrator's rank overrides (``Policy.rank_overrides``), after the rank manager and
    before the weight manager; a required job keeps rank 1 (the admission rule needs it)."""
    over = scenario.policy.rank_overrides
    if not over or not any(j.name in over for j in scenario.jobs):
        return scenario
    jobs = tuple(j.model_copy(update={"rank": 1 if j.required else over[j.name]}) if j.name in over else j for j in scenario.jobs)
    return scenario.model_copy(update={"jobs": jobs})
