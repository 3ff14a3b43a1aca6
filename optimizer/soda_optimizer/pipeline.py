"""One planning run, the way the operator and ``kubesoda plan`` make it: the steps before any
policy (rank and weight managers, :mod:`.steps`), then the allocation policy the SchedulingPolicy
selects (:mod:`.policy`; SODA by default). Tests and benchmarks that want one SODA stage call it in
:mod:`.soda` directly.
"""

from __future__ import annotations

from . import policy, steps
from .model import Scenario
from .plan import Plan


def run(scenario: Scenario, deadline_s: float | None = None) -> Plan:
    """Plan a macro epoch and its first micro step."""
    scenario = steps.prepare(scenario)
    return policy.for_scenario(scenario).plan(scenario, deadline_s)


def rerun(scenario: Scenario, previous: Plan, deadline_s: float | None = None) -> Plan:
    """A micro epoch from the last feasible Plan (same policy that made it)."""
    scenario = steps.prepare(scenario)
    return policy.get(previous.policy).replan(scenario, previous, deadline_s)
