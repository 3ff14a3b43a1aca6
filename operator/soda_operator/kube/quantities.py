"""CPU and memory quantities (``500m``, ``2``, ``64Mi``): the one parser of every system.

:func:`cores` and :func:`memory` check what a user wrote (finite, in range) and raise a
:class:`~.errors.TranslationError` naming the field; :func:`amount` reads what the API server has
already validated (a pod's requests, a node's allocatable) and gives a default for what is absent.
"""

from __future__ import annotations

import math
from typing import Any

from kubernetes.utils import parse_quantity

from soda_optimizer import bounds

from .errors import TranslationError, shown


def cores(q: Any, field: str) -> float:
    """A CPU quantity (500m, 2, 1.5) in cores: finite, not negative, at most ``bounds.MAX_CORES``."""
    try:
        v = float(parse_quantity(str(q)))
    except (ValueError, TypeError, ArithmeticError) as e:
        raise TranslationError(field, f"'{shown(q)}' is not a CPU quantity") from e
    if not (math.isfinite(v) and 0 <= v <= bounds.MAX_CORES):
        raise TranslationError(field, f"'{shown(q)}' is out of range: a CPU quantity from 0 to {bounds.MAX_CORES:g} cores")
    return v


def memory(q: Any, field: str) -> float:
    """A memory quantity (64Mi, 1G, 1048576) in bytes: finite, not negative, at most ``bounds.MAX_MEMORY``."""
    try:
        v = float(parse_quantity(str(q)))
    except (ValueError, TypeError, ArithmeticError) as e:
        raise TranslationError(field, f"'{shown(q)}' is not a memory quantity") from e
    if not (math.isfinite(v) and v >= 0):
        raise TranslationError(field, f"'{shown(q)}' is not a memory quantity")
    if v > bounds.MAX_MEMORY:
        raise TranslationError(field, f"'{shown(q)}' is out of range: a memory quantity of at most {bounds.MAX_MEMORY:g} bytes (1E)")
    return v


def amount(q: Any, default: float = 0.0) -> float:
    """A quantity the API server validated, as a number (cores or bytes); ``default`` when absent.
    Raises ValueError on a string that is not a quantity."""
    return default if q is None else float(parse_quantity(str(q)))


def millicores(q: Any) -> int:
    """A CPU quantity in whole millicores; -1 when absent."""
    return -1 if q is None else int(round(cores(q, "cpu") * 1000))


def milli(c: float) -> str:
    """Cores as a millicore quantity string (``2.5`` -> ``2500m``), rounded down (a share never
    grows past what was planned), at least 1m."""
    return f"{max(1, int(c * 1000 + 1e-6))}m"
