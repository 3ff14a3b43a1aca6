"""The one error of an object's translation: names the field (as the CRD spells it) and says why."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError


class TranslationError(ValueError):
    """A field of a Kubernetes object that cannot be taken: ``field`` names it as the CRD spells it
    (``spec.pes[0].minCpu``), ``message`` says why, ``reason`` is the CamelCase reason of the
    object's condition and Event."""

    def __init__(self, field: str, message: str, reason: str = "InvalidSpec"):
        super().__init__(message)
        self.field = field
        self.message = message
        self.reason = reason


def shown(value: Any) -> str:
    """A value as an error message quotes it: at most 40 characters."""
    t = str(value)
    return t if len(t) <= 40 else f"{t[:37]}..."


def from_pydantic(e: ValidationError, prefix: str = "spec", names: Mapping[str, str] | None = None) -> TranslationError:
    """The first error of a pydantic validation as the field error: its place below ``prefix``
    (``spec.steps[0].runSeconds``), each model field named as the CRD spells it (``names``; a
    model whose aliases are the CRD's names needs none) and the refused value when it is a scalar."""
    err = e.errors()[0]
    loc = "".join(f"[{x}]" if isinstance(x, int) else f".{(names or {}).get(str(x), x)}" for x in err["loc"]).lstrip(".")
    msg = str(err["msg"]).removeprefix("Value error, ")
    got = err.get("input")
    if isinstance(got, (int, float, str)) and not isinstance(got, bool) and err.get("type") != "value_error":
        msg += f" (got {shown(got)})"
    return TranslationError(f"{prefix}.{loc}" if loc else prefix, msg)
