"""The allocation-policy seam: every allocation system implements one protocol, found by name.

A policy turns a :class:`~.model.Scenario` into a :class:`~.plan.Plan`, under a deadline, and never
does I/O. Two calls, matching the operator's two loops:

- ``plan(scenario, deadline_s)``: a macro epoch (decide what runs and where it may run) followed by
  its first micro step (the fractions). The Plan carries every macro decision the micro step needs
  (admission, templates, goals, candidates, macroQ's component curves), so
- ``replan(scenario, previous, deadline_s)``: a micro epoch, from ``previous`` (the last feasible
  Plan of ``plan``) and the live Scenario. The Plan is the only thing that crosses from the
  optimizer to the operator, in both directions.

``deadline_s`` scales the policy's own stage deadlines when given (None: the SchedulingPolicy's).

The registry maps the SchedulingPolicy's ``placement`` to an implementation: ``soda`` (the four
SODA stages, :mod:`.soda`), and the placement baselines of the paper's comparisons ``rr``,
``rand``, ``spread`` (:mod:`.baselines`: macroQ's goals, placed without SODA). The related
systems (fair-yield sharing, deadline dispatch, flow routing) have inputs of their own and live
in their own subpackages (:mod:`.fair_yield`, :mod:`.dispatch`, :mod:`.flows`) beside these.

Managers and learners are not policies: they are Scenario -> Scenario steps (:mod:`.steps`) that
run before any policy, so a policy never knows where its ranks, weights or resource functions
came from.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

from .model import Scenario
from .plan import Plan


@runtime_checkable
class AllocationPolicy(Protocol):
    name: str

    def plan(self, scenario: Scenario, deadline_s: float | None = None) -> Plan: ...

    def replan(self, scenario: Scenario, previous: Plan, deadline_s: float | None = None) -> Plan: ...


_REGISTRY: dict[str, Callable[[], AllocationPolicy]] = {}


def register(name: str) -> Callable[[Callable[[], AllocationPolicy]], Callable[[], AllocationPolicy]]:
    """Class decorator: ``@register("soda") class Soda: ...``."""
    def deco(factory: Callable[[], AllocationPolicy]) -> Callable[[], AllocationPolicy]:
        if name in _REGISTRY:
            raise ValueError(f"allocation policy '{name}' registered twice")
        _REGISTRY[name] = factory
        return factory

    return deco


def names() -> list[str]:
    _load()
    return sorted(_REGISTRY)


def get(name: str) -> AllocationPolicy:
    """The policy registered as ``name``; a clear error naming the known ones otherwise."""
    _load()
    if name not in _REGISTRY:
        raise KeyError(f"no allocation policy '{name}' (known: {', '.join(sorted(_REGISTRY))})")
    return _REGISTRY[name]()


def for_scenario(scenario: Scenario) -> AllocationPolicy:
    """The policy the Scenario's SchedulingPolicy selects (``placement``)."""
    return get(scenario.policy.placement)


def _load() -> None:
    # the implementations register themselves on import
    from . import baselines, soda  # noqa: F401
