"""Rank and weight managers (SODA paper sections 6.2, 6.3): Scenario -> Scenario steps.

A manager rewrites the ranks or stream weights that the allocation policies read; it runs before
any policy (:func:`..steps.prepare`), so a policy never knows whether a rank was typed by a user or
computed. The SchedulingPolicy chooses one of each (``rankManager``, ``weightManager``); only the
managers registered here exist, and the model's Literals (and the CRD's enum) list exactly these
names, so anything else is refused with a clear error.

- rank managers: ``static`` (the ranks as the jobs state them), ``budget`` (BDRM, section 6.2.1,
  :mod:`.budget`), ``merit`` (MDRM, section 6.2.2, :mod:`.merit`);
- weight managers: ``static`` (the weights as the templates and jobs state them), ``simple`` (SWM,
  section 6.3, :mod:`.weights`), ``budget`` (BDWM, section 6.3, :mod:`.budget`).

The budget managers read ``Policy.budgets``; :func:`.budget.charge` is the bookkeeping that
depletes them after overloaded epochs (the caller's, e.g. the operator's, job). The merit manager
reads ``Policy.merit`` and ``Scenario.now``. See ``docs/managers.md``.
"""

from __future__ import annotations

from collections.abc import Callable

from ..model import Scenario
from .budget import budget_rank_manager, budget_weight_manager, charge
from .merit import merit_rank_manager
from .weights import simple_weights

Step = Callable[[Scenario], Scenario]


def static(scenario: Scenario) -> Scenario:
    """Leave the scenario as the users wrote it."""
    return scenario


RANK_MANAGERS: dict[str, Step] = {"static": static, "budget": budget_rank_manager, "merit": merit_rank_manager}
WEIGHT_MANAGERS: dict[str, Step] = {"static": static, "simple": simple_weights, "budget": budget_weight_manager}

__all__ = ["RANK_MANAGERS", "WEIGHT_MANAGERS", "Step", "charge", "static"]
