"""A BatchDispatch's spec, typed and checked: the decision maker's policy and its parameters (Lin 2014, 3.5.2
"Decision Maker": the policy the administrator specifies; 5.1-5.5 the policies, their parameters and the spare
fill; 4.4 the speed priors), the slot size of a worker (3.4), the decision interval and ``preemption`` (4.4's
"kill some low priority running tasks", here an eviction; off by default: the paper's dispatcher never kills).

``crds/batchdispatches.yaml`` is the one source of defaults: the API server fills them in (tests use
:func:`soda_operator.schema.with_defaults`), and this module states none. Two fields mean something when absent,
as the CRD says: ``fill`` (each policy's own fill, :mod:`soda_optimizer.dispatch`) and ``slotCPU`` (the largest
CPU request among the task pods, :func:`..decide.slot_cpu`). A value out of range is refused with one
:class:`~..kube.errors.TranslationError` naming the field as the CRD spells it (``spec.intervalSeconds: ...``),
never clamped; the ranges are the CRD's (:data:`soda_optimizer.dispatch.limits.RANGES`, ``slotCPU`` within
``MIN_SLOT_CPU``..``MAX_SLOT_CPU``), checked here again for objects stored before the CRD had them (issue 45), plus
what it cannot say (finite numbers).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from soda_optimizer import dispatch as dp
from soda_optimizer.dispatch.limits import MAX_LABEL_VALUE, MAX_SELECTOR_LABELS, MAX_SLOT_CPU, MIN_SLOT_CPU, RANGES

from ..kube import quantities
from ..kube.errors import TranslationError, from_validation

PolicyName = Literal["priority", "proportion", "workload", "deadline", "edf"]
FillName = Literal["priority", "deadline", "none"]
LabelValue = Annotated[str, Field(max_length=MAX_LABEL_VALUE)]


class DispatchSpec(BaseModel):
    """``BatchDispatch.spec``; fields are named as the CRD spells them (the aliases)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    policy: PolicyName
    fill: FillName | None = None  # absent: the policy's own
    reservation: float = Field(ge=RANGES["reservation"][0], le=RANGES["reservation"][1], allow_inf_nan=False)
    horizon: float = Field(gt=RANGES["horizon"][0], le=RANGES["horizon"][1], allow_inf_nan=False)
    slot_cpu: float | None = Field(None, alias="slotCPU")  # cores; absent: the largest task pod's CPU request
    node_selector: dict[str, LabelValue] | None = Field(None, alias="nodeSelector", max_length=MAX_SELECTOR_LABELS)
    prior_throughput: float = Field(alias="priorThroughput", gt=RANGES["priorThroughput"][0], le=RANGES["priorThroughput"][1],
                                    allow_inf_nan=False)
    mips_priors: bool = Field(alias="mipsPriors")
    window: int = Field(ge=RANGES["window"][0], le=RANGES["window"][1])
    interval_seconds: float = Field(alias="intervalSeconds", ge=RANGES["intervalSeconds"][0], le=RANGES["intervalSeconds"][1],
                                    allow_inf_nan=False)
    preemption: bool

    @field_validator("slot_cpu", mode="before")
    @classmethod
    def _cores(cls, v: Any) -> float | None:
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float, str)):
            raise ValueError("is not a CPU quantity")
        try:
            c = quantities.cores(v, "spec.slotCPU")
        except TranslationError as e:
            raise ValueError(e.message) from e
        if not MIN_SLOT_CPU - 1e-12 <= c <= MAX_SLOT_CPU:
            raise ValueError(f"'{quantities.shown(v)}' is out of range: a slot takes from 10m to {MAX_SLOT_CPU:g} CPU")
        return c


def parse(spec: Mapping[str, Any]) -> DispatchSpec:
    """``spec`` (as the API server stores it: defaulted) checked; a TranslationError names the first bad field."""
    try:
        s = DispatchSpec.model_validate(dict(spec))
    except ValidationError as e:
        raise from_validation(e) from e
    if s.fill not in (None, "none") and "fill" not in dp.registry.parameters(s.policy):
        # a fill the policy has no use for would be accepted and ignored
        raise TranslationError("spec.fill", f"policy {s.policy} fills no spare workers: set fill to none or leave it out")
    return s


def policy_of(spec: DispatchSpec | Mapping[str, Any]) -> dp.Policy:
    """The decision maker's policy with its parameters, from the optimizer's table of policies by name
    (:func:`soda_optimizer.dispatch.policy`); only the named family's own parameters are passed (a
    ``reservation`` beside ``policy: edf`` is the CRD's default, not a choice). A mapping is checked
    first (:func:`parse`)."""
    s = spec if isinstance(spec, DispatchSpec) else parse(spec)
    given = {"reservation": s.reservation, "horizon": s.horizon, **({} if s.fill is None else {"fill": s.fill})}
    try:
        return dp.policy(s.policy, **{k: v for k, v in given.items() if k in dp.registry.parameters(s.policy)})
    except ValueError as e:  # the optimizer's own checks: the model above states the same ranges
        raise TranslationError("spec.policy", str(e)) from e
