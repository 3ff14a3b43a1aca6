"""Contracts between the four SODA components (paper section 4): what each stage hands the next.

macroQ -> (goals, stream rates, component curves) -> macroW -> (candidates) -> microQ -> (goals)
-> microW -> (fractions). ``pipeline.run`` chains them into a :class:`~.plan.Plan`.
All numbers are mips (resources) or the value functions' domain (rates); traffic is bytes/s.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..plan import JobDecision, StageReport


@dataclass(frozen=True)
class ComponentCurve:
    """A weak component's importance as a function of the mips it gets (macroQ's NSDP output).

    ``mips[k]`` is a grid of total component mips (ascending, ``mips[0]`` = the component's
    minimum), ``importance[k]`` the best importance with that much, and ``allocation[k, i]`` the
    mips PE ``pes[i]`` gets in that optimum (rows sum to at most ``mips[k]``). microQ fits its
    concave piecewise-linear function and pacing constraints from these.
    """

    pes: tuple[str, ...]
    mips: np.ndarray
    importance: np.ndarray
    allocation: np.ndarray
    concave: bool = False


@dataclass(frozen=True)
class MacroQResult:
    decisions: tuple[JobDecision, ...]
    choice: dict[str, str]  # admitted job -> template
    goals: dict[str, float]  # pe_id -> g_p (mips)
    stream_rates: dict[tuple[str, str], float]  # (pe_id, pe_id) -> traffic t(p1,p2)
    components: tuple[ComponentCurve, ...]
    importance: float
    report: StageReport
    resolution_mips: float = 0.0
    bound: float | None = None  # an upper bound of the best importance (continuous allocations); None: not computed
    gap: float | None = None  # (bound - importance) / bound
    bound_proven: bool = False  # the bound holds (every curve exact); False: an estimate, possibly below the answer


@dataclass(frozen=True)
class MacroWResult:
    candidates: dict[str, tuple[str, ...]]  # pe_id -> candidate node names
    objective: float | None
    report: StageReport
    violated: str | None = None  # the constraint that could not be met, when infeasible
    unplaceable: tuple[str, ...] = ()  # pe ids that no rack can host even alone (when infeasible)
    why: dict[str, str] = field(default_factory=dict)  # pe id -> why no rack can host it ("(memory) ..." when memory is why)


@dataclass(frozen=True)
class MicroQResult:
    goals: dict[str, float]  # pe_id -> g_p
    importance: float  # of ``goals`` (the report's objective)
    report: StageReport
    fitted: float | None = None  # the LP's objective over the concave fit (an upper envelope), when it ran


@dataclass(frozen=True)
class MicroWResult:
    fractions: dict[str, dict[str, float]]  # pe_id -> node -> f(p, n) > 0
    deviation: float  # sum_p |sum_n f H_n - g_p| in mips
    report: StageReport
    extra: dict[str, float] = field(default_factory=dict)
