"""A YieldGroup's status and the Events its epochs deserve: the minimum and average yield (the
objective of VCSCHED, section 2.3, and its second phase, section 3.5), each pod's yield, the
allocator's state, the proven ``bound`` on the minimum yield and the ``gap`` to it (the anytime
default's; None for a heuristic without one), what ran (``algorithm``), the pods on a lost node
(``lost``) and the moves an eviction refusal blocked (``blockedMoves``: retried every epoch), and
the ``Allocated`` condition (:mod:`..kube.conditions`).

``Allocated`` is True when the epoch placed the group's pods, False with reason ``Infeasible`` when
their memory does not fit the nodes (they stay gated) or ``InvalidSpec`` when the spec is refused
(the message names the field; nothing is planned until it is fixed), Unknown with ``NoPods`` when
the group has no pod to place.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..kube import conditions
from ..kube.errors import TranslationError
from .decide import Decision

Conditions = Iterable[Mapping[str, Any]] | None
Event = tuple[str, str, str]  # reason, message, type


def allocated(decision: Decision, pods: int, generation: int | None, old: Conditions,
              blocked: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The status an epoch writes (``old``: the group's current conditions; ``blocked``: the pods
    whose eviction the API server refused, with its reason)."""
    ok = None if decision.status == "empty" else decision.status != "infeasible"
    return {
        "minYield": decision.min_yield,
        "averageYield": decision.avg_yield,
        "bound": decision.bound,
        "gap": decision.gap,
        "algorithm": decision.algorithm,
        "lost": sorted(decision.lost),
        "blockedMoves": [{"pod": p, "reason": r} for p, r in sorted((blocked or {}).items())],
        "pods": pods,
        "state": decision.status,
        "message": decision.message,
        "yields": [{"pod": p, "yield": y} for p, y in sorted(decision.yields.items())],
        "conditions": [conditions.condition(
            "Allocated", ok, {"empty": "NoPods", "infeasible": "Infeasible"}.get(decision.status, "Allocated"),
            decision.message or f"{pods} pod(s), minimum yield {decision.min_yield:.3f}", generation, old)],
    }


def invalid(error: TranslationError, generation: int | None, old: Conditions) -> dict[str, Any]:
    """The status of a group whose spec is refused: state ``invalid`` and the field in the message."""
    message = f"{error.field}: {error.message}"
    return {"state": "invalid", "message": message,
            "conditions": [conditions.condition("Allocated", False, error.reason, message, generation, old)]}


def events(decision: Decision, placed: int, evicted: int, blocked: Mapping[str, str] | None = None) -> list[Event]:
    """The Events of an epoch that wrote ``placed`` and ``evicted`` pods and had ``blocked`` moves."""
    out: list[Event] = []
    gap = "" if decision.gap is None else f", gap to the proven bound {100 * decision.gap:.2f}%"
    if placed or evicted:
        out.append(("Placed", f"{placed} pod(s) placed, {evicted} evicted to move ({decision.algorithm}); "
                              f"minimum yield {decision.min_yield:.3f}, average {decision.avg_yield:.3f}{gap}", "Normal"))
    if decision.lost:
        out.append(("NodeLost", f"{len(decision.lost)} pod(s) on a node no longer usable (cordoned, NotReady or gone): "
                                f"{', '.join(sorted(decision.lost))}", "Warning"))
    if blocked:
        out.append(("MoveBlocked", "eviction refused, retried next epoch: "
                                   + "; ".join(f"{p}: {r}" for p, r in sorted(blocked.items())), "Warning"))
    if decision.status == "infeasible":
        out.append(("Infeasible", decision.message, "Warning"))
    return out
