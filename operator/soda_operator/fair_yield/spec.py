"""A YieldGroup's spec as typed, checked settings: the algorithm of every epoch (section 3; ``anytime``,
the default, or a named heuristic; ``dynamic``: section 6.1's re-placement within the budget alone),
the migration budget B of the later ones (section 6.1, constraint (31)), the epoch and the
allocator's deadline.

The CRD (``crds/yieldgroups.yaml``) is the one source of defaults: live objects come defaulted by
the API server (tests build theirs through :func:`soda_operator.schema.with_defaults`), so a field
missing here is an error, as is a value out of the CRD's range. Every error is one
:class:`~..kube.errors.TranslationError` naming the field as the CRD spells it
(``spec.epochSeconds: ...``); nothing is clamped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from soda_optimizer import bounds, fair_yield

from ..kube import quantities
from ..kube.errors import from_validation

DYNAMIC = "dynamic"  #: the re-placement heuristic within the migration budget (section 6.1), every epoch
ALGORITHMS = (*fair_yield.ALGORITHMS, DYNAMIC)


class GroupSpec(BaseModel):
    """A YieldGroup's ``spec``; fields by their CRD names (``epochSeconds``)."""

    model_config = ConfigDict(frozen=True, strict=True, extra="ignore")

    algorithm: str
    migration_budget: float = Field(alias="migrationBudget")  # bytes of memory an epoch may move
    epoch_seconds: float = Field(alias="epochSeconds", ge=1, le=bounds.MAX_EPOCH_S, allow_inf_nan=False)
    deadline_seconds: float = Field(alias="deadlineSeconds", gt=0, le=60, allow_inf_nan=False)

    @field_validator("algorithm")
    @classmethod
    def _known(cls, v: str) -> str:
        if v not in ALGORITHMS:
            raise ValueError(f"'{quantities.shown(v)}' is not an algorithm: one of {', '.join(ALGORITHMS)}")
        return v

    @field_validator("migration_budget", mode="before")
    @classmethod
    def _bytes(cls, v: Any) -> float:
        if isinstance(v, bool) or not isinstance(v, (int, float, str)):
            raise ValueError(f"'{quantities.shown(v)}' is not a memory quantity")
        return quantities.memory(v, "spec.migrationBudget")


def parse(spec: Mapping[str, Any]) -> GroupSpec:
    """The settings of a YieldGroup's (defaulted) ``spec``; a :class:`TranslationError` naming the
    field when one is missing or out of range."""
    try:
        return GroupSpec.model_validate(dict(spec))
    except ValidationError as e:
        raise from_validation(e) from e
