"""Rank and weight managers (SODA paper sections 6.2, 6.3): Scenario -> Scenario steps.

A manager rewrites the ranks or stream weights that the allocation policies read; it runs before
any policy (:func:`..steps.prepare`), so a policy never knows whether a rank was typed by a user or
computed. The SchedulingPolicy chooses one of each (``rankManager``, ``weightManager``); only the
managers registered here exist, and the CRD's enum lists exactly these names, so the API server
refuses the others with a clear error.

- rank managers: ``static`` (the ranks as the jobs state them);
- weight managers: ``static`` (the weights as the templates and jobs state them), ``simple`` (SWM,
  :mod:`.weights`).

The paper's budget (BDRM, BDWM) and merit (MDRM) managers are not built yet.
"""

from __future__ import annotations

from collections.abc import Callable

from ..model import Scenario
from .weights import simple_weights

Step = Callable[[Scenario], Scenario]


def static(scenario: Scenario) -> Scenario:
    """Leave the scenario as the users wrote it."""
    return scenario


RANK_MANAGERS: dict[str, Step] = {"static": static}
WEIGHT_MANAGERS: dict[str, Step] = {"static": static, "simple": simple_weights}
