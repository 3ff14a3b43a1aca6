"""The one error of an object's translation: names the field (as the CRD spells it) and says why;
:func:`from_validation` makes it from pydantic's first error, for every system's spec model."""

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
    """A value as an error quotes it: at most 40 characters (a tenant's 263 KB string is not echoed)."""
    t = str(value)
    return t if len(t) <= 40 else f"{t[:37]}..."


def from_validation(e: ValidationError, prefix: str = "spec", names: Mapping[str, str] | None = None) -> TranslationError:
    """The first error of a spec model's validation, its field path as the CRD spells it (``names``
    maps model field names to the CRD's where they differ; aliases already are) and the value it got."""
    err = e.errors()[0]
    loc = "".join(f"[{x}]" if isinstance(x, int) else f".{(names or {}).get(str(x), x)}" for x in err["loc"]).lstrip(".")
    msg = str(err["msg"]).removeprefix("Value error, ")
    got = err.get("input")
    if isinstance(got, (int, float, str)) and not isinstance(got, bool) and err.get("type") != "value_error":
        msg += f" (got {shown(got)})"
    return TranslationError(f"{prefix}.{loc}" if loc else prefix, msg)
