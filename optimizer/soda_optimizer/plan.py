"""The Plan: what one macro + micro epoch decided (the optimizer's only output).

The operator's ``apply`` turns it into Kubernetes objects; ``kubesoda plan --json`` prints it
(schema in docs/plan-json.md). Everything is in mips and node names; no Kubernetes types. It is the
only thing that crosses from the optimizer to the operator: the operator hands the last feasible
Plan back to the policy's ``replan`` for a micro epoch (``state`` carries what the policy needs).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

RejectReason = Literal["", "rank-waterline", "capacity", "infeasible-required", "invalid", "dependency", "placement", "memory"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class JobDecision(_Frozen):
    job: str
    admitted: bool
    reason: RejectReason = ""
    message: str = ""
    template: str | None = None
    rank: int = 1
    revised_rank: int = 1
    importance: float = 0.0
    mips: float = 0.0


class PEPlan(_Frozen):
    pe: str  # pe_id(job, pe)
    job: str
    name: str
    goal_mips: float = 0.0  # g_p (microQ's when it ran, else macroQ's)
    macro_goal_mips: float = 0.0
    candidates: tuple[str, ...] = ()  # macroW's v(p, .) = 1
    fractions: dict[str, float] = Field(default_factory=dict)  # microW's f(p, n) > 0


class StageReport(_Frozen):
    stage: str  # macroq | macrow | microq | microw
    seconds: float
    status: Literal["optimal", "feasible", "deadline", "fallback", "infeasible", "skipped"]
    objective: float | None = None
    bound: float | None = None  # an upper bound of the objective's best value (macroQ: importance), when known
    gap: float | None = None  # (bound - objective) / bound: how far the answer may be from the best
    bound_proven: bool = False  # the bound holds; False: an estimate (Plan.bound_proven)
    detail: str = ""


class Plan(_Frozen):
    policy: str = "soda"  # the allocation policy that made it (soda_optimizer.policy)
    feasible: bool
    message: str = ""
    importance: float = 0.0
    # an upper bound of the best importance of any plan (macroQ's, over each job's own grid and
    # continuous allocations; soda.refine) and gap = (bound - importance) / bound; None: not known.
    # bound_proven: the bound holds (every curve it rests on exact); False: an estimate (issue 49), published as
    # computed, never raised to the answer, its gap None when the answer already passes it
    bound: float | None = None
    gap: float | None = None
    bound_proven: bool = False
    jobs: tuple[JobDecision, ...] = ()
    pes: tuple[PEPlan, ...] = ()
    stream_rates: dict[str, float] = Field(default_factory=dict)  # "p1->p2" (pe ids) -> t(p1,p2)
    stages: tuple[StageReport, ...] = ()
    # the policy's own macro decisions that its replan() reads (SODA: macroQ's and macroW's
    # results, with macroQ's component curves); opaque to everyone else, not serialised
    state: Any = Field(default=None, exclude=True, repr=False)


def gap_of(bound: float | None, importance: float, proven: bool) -> float | None:
    """(bound - importance) / bound. A proven bound is at least the answer (rounding aside: clipped at 0); an
    estimate at or below the answer proves nothing, and its gap is None (unknown), never 0 (issue 49)."""
    if bound is None:
        return None
    if bound <= 0:
        return 0.0 if proven or importance <= 0 else None
    g = (bound - importance) / bound
    return max(0.0, g) if proven else (g if g > 0 else None)
