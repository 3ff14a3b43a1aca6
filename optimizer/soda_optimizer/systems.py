"""One entry shape for every allocation system (issue 33): SODA and the three related systems of DESIGN.md decide
through one call and answer in one record. Pure: no Kubernetes, no I/O.

An :class:`AllocationSystem` has a ``name``, the ``algorithms`` it accepts, and
``decide(spec, inputs, deadline_s) -> Decision``: ``spec`` says *how* to decide (the system's own settings,
naming one of its algorithms), ``inputs`` *what* to decide about, ``deadline_s`` how long it may take (None: the
system's default). A :class:`Decision` carries the ``status`` (``optimal``: proven; ``feasible``: an answer, no
proof; ``deadline``: the deadline passed, the best answer so far; ``infeasible``: no answer), a ``bound`` on the
objective where the system has one (else None), a ``detail`` line, and the system's own ``result`` unchanged.

The four systems, found by name (:func:`get`, :func:`names`):

- ``soda`` (SODA paper sections 3-5, the macroQ paper): spec a :class:`SodaSpec` or a :class:`~.model.Policy`
  (None: the Scenario's own; its ``placement`` is the algorithm), inputs a :class:`~.model.Scenario`, result the
  :class:`~.plan.Plan` of :func:`.pipeline.run` (a macro epoch) or, given the ``previous`` plan, of
  :func:`.pipeline.rerun` (a micro epoch);
- ``fair_yield`` (Stillwell et al. 2.5, 3, 6.1): spec a :class:`FairYieldSpec` or an algorithm name, inputs a
  :class:`~.fair_yield.Instance`, result the :class:`~.fair_yield.Allocation` of :func:`.fair_yield.allocate` or,
  for :data:`REALLOCATION`'s names, of :func:`.fair_yield.reallocate`;
- ``dispatch`` (Lin 2014, 3.5.2, 5, 6.3.2): spec a :class:`DispatchSpec`, a policy name
  (:func:`.dispatch.policy`) or a built policy, inputs :class:`DispatchInputs`, result the ``{free worker: job}``
  assignment of :func:`.dispatch.decide`;
- ``flows`` (Montana & Zinky 3.2, 3.3): spec :class:`~.flows.PlannerParams` (None: the defaults), inputs a
  :class:`~.flows.Problem`, result the :class:`~.flows.PlanResult` of :func:`.flows.plan_flows`.

Bounds: the fair-yield allocator gives an upper bound on the minimum yield where its algorithm has one (the MILP;
:attr:`.fair_yield.Allocation.bound`);
SODA, the dispatcher and the flow planner have none. The per-system calls (``pipeline.run``,
``fair_yield.allocate``/``reallocate``, ``dispatch.decide``, ``flows.plan_flows``) stay as they are: this module
sits on top of them and changes nothing they return.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Literal, Protocol, TypeVar, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from . import dispatch, fair_yield, flows, pipeline, policy
from .model import Policy, Scenario
from .plan import Plan

if TYPE_CHECKING:
    from .learn.functions import Choice

Status = Literal["optimal", "feasible", "deadline", "infeasible"]
R = TypeVar("R")


@dataclass(frozen=True)
class Decision(Generic[R]):
    """What a system decided: its status, a bound on the objective (None where it has none), a line of detail,
    and the system's own result."""

    system: str
    algorithm: str
    status: Status
    result: R
    bound: float | None = None
    detail: str = ""


@runtime_checkable
class AllocationSystem(Protocol):
    """An allocation system behind the common entry."""

    @property
    def name(self) -> str: ...

    @property
    def algorithms(self) -> tuple[str, ...]: ...

    def decide(self, spec: Any, inputs: Any, deadline_s: float | None = None) -> Decision[Any]: ...


# ----------------------------------------------------------------------------------------------------- SODA


@dataclass(frozen=True)
class SodaSpec:
    """How SODA decides: under ``policy`` (None: the Scenario's own), a macro epoch (:func:`.pipeline.run`) or,
    given the ``previous`` feasible plan, a micro epoch from it (:func:`.pipeline.rerun`), with the learner's
    resource ``functions`` (None: the Scenario's own)."""

    policy: Policy | None = None
    previous: Plan | None = None
    functions: Mapping[str, Choice] | None = None


class Soda:
    """SODA through :func:`.pipeline.run` / :func:`.pipeline.rerun` (the steps, then the policy the ``placement``
    names)."""

    name = "soda"

    @property
    def algorithms(self) -> tuple[str, ...]:
        return tuple(policy.names())

    def decide(self, spec: SodaSpec | Policy | None, inputs: Scenario, deadline_s: float | None = None) -> Decision[Plan]:
        s = spec if isinstance(spec, SodaSpec) else SodaSpec(policy=spec)
        scenario = inputs if s.policy is None else inputs.model_copy(update={"policy": s.policy})
        if s.previous is None:
            plan = pipeline.run(scenario, deadline_s, s.functions)
        else:
            plan = pipeline.rerun(scenario, s.previous, deadline_s, s.functions)
        timed_out = any(s.status == "deadline" for s in plan.stages)
        status: Status = "infeasible" if not plan.feasible else "deadline" if timed_out else "feasible"
        admitted = sum(d.admitted for d in plan.jobs)
        detail = plan.message or f"{admitted}/{len(plan.jobs)} jobs admitted, importance {plan.importance:.6g}"
        return Decision(self.name, scenario.policy.placement, status, plan, None, detail)


# ----------------------------------------------------------------------------------------------- fair yield

#: re-placement under a migration budget (6.1): the name :func:`.fair_yield.reallocate` reports -> its method
REALLOCATION: dict[str, Literal["heuristic", "milp"]] = {"dynamic": "heuristic", "dynamic-milp": "milp"}


class FairYieldSpec(BaseModel):
    """How to allocate: one of :data:`.fair_yield.ALGORITHMS`, or a re-placement (:data:`REALLOCATION`) of
    ``previous`` (one host per task, -1 = new) moving at most ``budget``. With ``previous`` and one of
    :data:`.fair_yield.ALGORITHMS`: a YieldGroup's epoch (:func:`.fair_yield.epoch.replace`: the algorithm within
    the budget, its moves checked against the re-placement heuristic's). ``fixed[t]``: task t stays on its
    previous host (a pod without a controller; issue 47 / 45: the operator's one entry)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    algorithm: str = fair_yield.DEFAULT
    seed: int = 0
    previous: tuple[int, ...] | None = None
    budget: float | None = Field(default=None, ge=0)
    by_count: bool = False
    fixed: tuple[bool, ...] | None = None


class FairYield:
    """Max-min yield allocation (:func:`.fair_yield.allocate`) and re-allocation (:func:`.fair_yield.reallocate`)."""

    name = "fair_yield"

    @property
    def algorithms(self) -> tuple[str, ...]:
        return (*fair_yield.ALGORITHMS, *REALLOCATION)

    def decide(
        self, spec: FairYieldSpec | str | None, inputs: fair_yield.Instance, deadline_s: float | None = None
    ) -> Decision[fair_yield.Allocation]:
        s = FairYieldSpec() if spec is None else FairYieldSpec(algorithm=spec) if isinstance(spec, str) else spec
        method = REALLOCATION.get(s.algorithm)
        fixed = None if s.fixed is None else list(s.fixed)
        if method is not None:
            if s.previous is None or s.budget is None:
                raise ValueError(f"fair_yield algorithm {s.algorithm!r}: give previous and budget")
            alloc = fair_yield.reallocate(inputs, list(s.previous), s.budget, method, s.by_count, deadline_s, fixed)
        elif s.algorithm.lower() in fair_yield.ALLOCATORS and s.previous is not None:
            alloc = fair_yield.epoch.replace(inputs, s.algorithm.lower(), list(s.previous), s.budget or 0.0,
                                             fixed or [False] * len(s.previous), deadline_s)
        elif s.algorithm.lower() in fair_yield.ALLOCATORS:
            alloc = fair_yield.allocate(inputs, s.algorithm, deadline_s, s.seed)
        else:
            raise ValueError(f"fair_yield: unknown algorithm {s.algorithm!r}; one of {', '.join(self.algorithms)}")
        detail = f"min yield {alloc.min_yield:.6g}, average yield {alloc.avg_yield:.6g}" if alloc.ok else "no placement"
        ran = alloc.algorithm if s.previous is not None and method is None else s.algorithm
        return Decision(self.name, ran, alloc.status, alloc, alloc.bound, detail)


# -------------------------------------------------------------------------------------------------- dispatch


class DispatchSpec(BaseModel):
    """A dispatch policy by name and its parameters (:func:`.dispatch.policy`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    policy: str = "deadline"
    params: dict[str, Any] = Field(default_factory=dict)


@dataclass(frozen=True)
class DispatchInputs:
    """One decision's inputs (3.5.2): the jobs, the workers, the time, the speed estimates (None: the priors)."""

    jobs: Sequence[dispatch.JobView]
    workers: Sequence[dispatch.WorkerView]
    now: float
    speeds: dispatch.SpeedMatrix | None = None


@dataclass(frozen=True)
class DispatchStep(DispatchInputs):
    """Inputs of one step of the paper's worker model (figure 3.2, :func:`.dispatch.step`): every worker is offered,
    busy or idle; ``preempt``: a busy worker the plan gives to another job has its task killed (4.4; ``"lower"``: only
    for a job of higher priority, :data:`.dispatch.Preempt`). The result is the :class:`.dispatch.Step` (plan,
    starts, preemptions) instead of the assignment."""

    preempt: dispatch.Preempt = False


class Dispatch:
    """The decision maker (:func:`.dispatch.decide`, or one :func:`.dispatch.step` for :class:`DispatchStep`
    inputs): free workers to jobs, under a policy named in the table.

    Bounded (issue 45): at most :data:`.dispatch.limits.MAX_WORKERS` workers (more is refused: the caller caps the
    slots, the operator per node), and the policy stops before its next job once ``deadline_s`` (None:
    :data:`.dispatch.limits.DEADLINE_S`) passed: status ``deadline``, the assignment so far (sound)."""

    name = "dispatch"

    @property
    def algorithms(self) -> tuple[str, ...]:
        return tuple(dispatch.names())

    def decide(
        self, spec: DispatchSpec | str | dispatch.Policy | None, inputs: DispatchInputs, deadline_s: float | None = None
    ) -> Decision[Any]:
        if spec is None or isinstance(spec, str | DispatchSpec):
            s = DispatchSpec() if spec is None else DispatchSpec(policy=spec) if isinstance(spec, str) else spec
            pol = dispatch.policy(s.policy, **s.params)
        else:
            pol = spec
        if len(inputs.workers) > dispatch.limits.MAX_WORKERS:
            raise ValueError(f"dispatch: {len(inputs.workers)} workers, more than one decision takes "
                             f"({dispatch.limits.MAX_WORKERS}): cap the slots")
        limit = dispatch.limits.DEADLINE_S if deadline_s is None else deadline_s
        out: Any
        if isinstance(inputs, DispatchStep):
            out = dispatch.step(pol, inputs.jobs, inputs.workers, inputs.now, inputs.speeds, preempt=inputs.preempt,
                                deadline_s=limit)
            timed_out, plan = out.timed_out, out.plan
        else:
            with dispatch.budget(limit) as b:
                out = plan = dispatch.decide(pol, inputs.jobs, inputs.workers, inputs.now, inputs.speeds)
            timed_out = b.timed_out
        detail = f"{len(plan)} worker(s) to {len(set(plan.values()))} job(s)"
        if timed_out:
            detail += f"; stopped at the deadline ({limit:g} s) before every job was planned"
        return Decision(self.name, pol.name, "deadline" if timed_out else "feasible", out, None, detail)


# ----------------------------------------------------------------------------------------------------- flows


class Flows:
    """Job-flow routing and backlog (:func:`.flows.plan_flows`); ``deadline_s`` overrides the params' own."""

    name = "flows"
    algorithms = ("ga",)  # Level 2's order-based GA over the rapid route builder, in Level 3's backward sweep

    def decide(
        self, spec: flows.PlannerParams | None, inputs: flows.Problem, deadline_s: float | None = None
    ) -> Decision[flows.PlanResult]:
        params = spec or flows.PlannerParams()
        if deadline_s is not None:
            params = params.model_copy(update={"deadline_s": deadline_s})
        res = flows.plan_flows(inputs, params)
        detail = (f"score {res.result.score:.6g} (first plan {res.first_score:.6g}), {res.evaluations} evaluations, "
                  f"{res.epochs_optimised} epoch(s) optimised")
        if res.bound is not None and res.gap is not None:  # eq. (2) is a cost: the LP's is a lower bound
            detail += f", LP lower bound {res.bound:.6g} (gap at most {res.gap:.1%})"
        return Decision(self.name, "ga", "deadline" if res.timed_out else "feasible", res, res.bound, detail)


# -------------------------------------------------------------------------------------------------- registry

_SYSTEMS: dict[str, AllocationSystem] = {s.name: s for s in (Soda(), FairYield(), Dispatch(), Flows())}


def names() -> list[str]:
    """The registered systems."""
    return sorted(_SYSTEMS)


def get(name: str) -> AllocationSystem:
    """The system registered as ``name``; a clear error naming the known ones otherwise."""
    if name not in _SYSTEMS:
        raise KeyError(f"no allocation system '{name}' (known: {', '.join(names())})")
    return _SYSTEMS[name]


def decide(system: str, spec: Any, inputs: Any, deadline_s: float | None = None) -> Decision[Any]:
    """``get(system).decide(spec, inputs, deadline_s)``."""
    return get(system).decide(spec, inputs, deadline_s)


__all__ = [
    "REALLOCATION",
    "AllocationSystem",
    "Decision",
    "Dispatch",
    "DispatchInputs",
    "DispatchSpec",
    "DispatchStep",
    "FairYield",
    "FairYieldSpec",
    "Flows",
    "Soda",
    "SodaSpec",
    "Status",
    "decide",
    "get",
    "names",
]
