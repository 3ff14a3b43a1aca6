"""Time at the Kubernetes edge: RFC 3339 strings from and to unix seconds."""

from __future__ import annotations

import math
import time
from datetime import datetime
from typing import Any


def now() -> str:
    """The current time as the API writes it (``2026-11-25T00:00:00Z``)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def parse(s: Any) -> float | None:
    """Unix seconds of an API timestamp (a string or a datetime); None when absent or unreadable."""
    if not s:
        return None
    if isinstance(s, datetime):
        return s.timestamp()
    try:
        return datetime.fromisoformat(str(s).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def iso(t: float | None) -> str | None:
    """An RFC 3339 string of unix seconds (local offset, whole seconds); None for None or a non-finite time."""
    return None if t is None or not math.isfinite(t) else datetime.fromtimestamp(t).astimezone().isoformat(timespec="seconds")
