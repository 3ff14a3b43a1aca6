"""Standard ``status.conditions`` for every kind kubesoda writes (the Kubernetes API conventions, as
Kueue uses them): ``type``, ``status`` ("True"/"False"/"Unknown"), a CamelCase ``reason``, a
``message``, ``observedGeneration`` and a ``lastTransitionTime`` that moves only when the status does.

StreamJobs build theirs in :mod:`..soda.status` (Admitted, Running, MeetsProjection); this module
serves the others: StreamTemplate and SchedulingPolicy (``Valid``), YieldGroup (``Allocated``),
BatchDispatch (``Dispatching``), FlowPool (``Reachable``), JobFlow.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .clock import now


def condition(kind: str, ok: bool | None, reason: str, message: str, generation: int | None,
              old: Iterable[Mapping[str, Any]] | None = None, at: str | None = None) -> dict[str, Any]:
    """One condition; ``old`` (the object's current conditions) keeps ``lastTransitionTime``
    while the status stays the same."""
    status = "Unknown" if ok is None else "True" if ok else "False"
    reason = "".join(w[:1].upper() + w[1:] for w in str(reason or "Unknown").replace("-", " ").replace("_", " ").split())
    c: dict[str, Any] = {"type": kind, "status": status, "reason": reason, "message": message}
    if generation is not None:
        c["observedGeneration"] = generation
    prev = next((o for o in old or () if o.get("type") == kind), None)
    c["lastTransitionTime"] = prev["lastTransitionTime"] if prev and prev.get("status") == status and prev.get("lastTransitionTime") \
        else (at or now())
    return c


def same(a: Iterable[Mapping[str, Any]] | None, b: Iterable[Mapping[str, Any]] | None) -> bool:
    """Whether two condition lists say the same (transition times aside)."""
    def key(cs: Iterable[Mapping[str, Any]] | None) -> list[tuple[Any, ...]]:
        return sorted((c.get("type"), c.get("status"), c.get("reason"), c.get("message"), c.get("observedGeneration")) for c in cs or ())
    return key(a) == key(b)
