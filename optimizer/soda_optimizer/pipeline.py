"""One planning run, the way the operator and ``kubesoda plan`` make it: the steps before any
policy (learned resource functions when given, rank manager, rank overrides, weight manager:
:func:`.steps.prepare`, one order offline and live), then the allocation policy the
SchedulingPolicy selects (:mod:`.policy`; SODA by default). Tests and benchmarks that want one SODA
stage call it in :mod:`.soda` directly.

``functions`` (template PE id -> :class:`~.learn.functions.Choice`) are the resource functions the
learner chose (:func:`.learn.functions.choose`, with any exploration probes merged in); None plans
with the Scenario's own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from . import policy, steps
from .model import Scenario
from .plan import Plan

if TYPE_CHECKING:
    from .learn.functions import Choice


def run(scenario: Scenario, deadline_s: float | None = None, functions: Mapping[str, Choice] | None = None) -> Plan:
    """Plan a macro epoch and its first micro step."""
    scenario = steps.prepare(scenario, functions)
    return policy.for_scenario(scenario).plan(scenario, deadline_s)


def rerun(scenario: Scenario, previous: Plan, deadline_s: float | None = None,
          functions: Mapping[str, Choice] | None = None) -> Plan:
    """A micro epoch from the last feasible Plan (same policy that made it), with the functions of
    the macro epoch that made it."""
    scenario = steps.prepare(scenario, functions)
    return policy.get(previous.policy).replan(scenario, previous, deadline_s)
