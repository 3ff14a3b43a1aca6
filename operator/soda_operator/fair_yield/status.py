"""A YieldGroup's status and the Events its epochs deserve: the minimum and average yield (the
objective of VCSCHED, section 2.3, and its second phase, section 3.5), each pod's yield, the
group's ``state``, the allocator's own (``allocatorState``), the proven ``bound`` on the minimum
yield and the ``gap`` to it (the anytime default's; None for a heuristic without one), what ran
(``algorithm``), the decision's wall time beside its deadline (``decisionSeconds``,
``deadlineSeconds``), the pods on a lost node (``lost``), the moves an eviction refusal blocked
(``blockedMoves``: retried every epoch), the pods no node admits (``unplaceable``: left gated) and
the released pods Pending for placement reasons (``pending``: re-planned), and the ``Allocated``
condition (:mod:`..kube.conditions`).

``state`` means one thing (issue 47): ``optimal`` only when the allocation in force is the one the
allocator proved, for every pod of the group; else ``partial`` (a pod unplaceable or Pending for
placement), ``unapplied`` (a write refused), ``blocked`` (a move refused by a PodDisruptionBudget),
``moving`` (pods evicted to move: counted where they are until gone), the allocator's ``deadline``
or ``feasible``, ``infeasible`` (nothing fits: the pods stay gated), ``overBudget`` (the decision
passed the group's budget, nothing applied), ``invalid`` (the spec is refused), ``empty``.

``Allocated`` is True when the epoch placed the group's pods (reason ``Allocated``, or ``Moving``,
``MoveBlocked`` while moves are under way or refused), False with reason ``Infeasible`` when
their memory does not fit the nodes, ``Partial`` when some pods cannot run where they may go,
``WriteRefused``, ``OverBudget``, ``NoPlacement`` (the deadline passed before any placement was found;
the pods stay gated), or ``InvalidSpec`` when the spec is refused (the message names
the field; nothing is planned until it is fixed), Unknown with ``NoPods`` when the group has no
pod to place.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..kube import conditions
from ..kube.errors import TranslationError
from .decide import Decision

Conditions = Iterable[Mapping[str, Any]] | None
Event = tuple[str, str, str]  # reason, message, type


REASONS = {"empty": "NoPods", "infeasible": "Infeasible", "partial": "Partial", "unapplied": "WriteRefused",
           "blocked": "MoveBlocked", "moving": "Moving", "overBudget": "OverBudget"}
FALSE = ("infeasible", "partial", "unapplied", "overBudget")


def state(decision: Decision, blocked: Mapping[str, str] | None = None, failed: Mapping[str, str] | None = None) -> str:
    """The group's state after the writes: the decision's, unless a write was refused or a move blocked."""
    if decision.status in ("infeasible", "empty", "partial"):
        return decision.status
    if failed:
        return "unapplied"
    if blocked:
        return "blocked"
    return decision.status


def allocated(decision: Decision, pods: int, generation: int | None, old: Conditions,
              blocked: Mapping[str, str] | None = None, failed: Mapping[str, str] | None = None,
              deadline: float | None = None) -> dict[str, Any]:
    """The status an epoch writes (``old``: the group's current conditions; ``blocked``: the pods
    whose eviction the API server refused, with its reason; ``failed``: the other writes refused)."""
    st = state(decision, blocked, failed)
    unplaced = st == "deadline" and not decision.yields  # the deadline passed before any placement was found
    ok = None if st == "empty" else st not in FALSE and not unplaced
    notes = [decision.message] if decision.message else []
    if failed:
        notes.append("refused: " + "; ".join(f"{p} ({r})" for p, r in sorted(failed.items())))
    message = "; ".join(notes)
    return {
        "minYield": decision.min_yield,
        "averageYield": decision.avg_yield,
        "bound": decision.bound,
        "gap": decision.gap,
        "algorithm": decision.algorithm,
        "allocatorState": decision.allocator,
        "decisionSeconds": round(decision.seconds, 3),
        "deadlineSeconds": deadline,
        "lost": sorted(decision.lost),
        "blockedMoves": [{"pod": p, "reason": r} for p, r in sorted((blocked or {}).items())],
        "unplaceable": [{"pod": p, "reason": r} for p, r in sorted(decision.unplaceable.items())],
        "pending": [{"pod": p, "reason": r} for p, r in sorted(decision.pending.items())],
        "pods": pods,
        "state": st,
        "message": message,
        "yields": [{"pod": p, "yield": y} for p, y in sorted(decision.yields.items())],
        "conditions": [conditions.condition(
            "Allocated", ok, "NoPlacement" if unplaced else REASONS.get(st, "Allocated"),
            message or f"{pods} pod(s), minimum yield {decision.min_yield:.3f}", generation, old)],
    }


def over_budget(budget: float, deadline: float, generation: int | None, old: Conditions, busy: bool = False) -> dict[str, Any]:
    """The status of a group whose decision passed its budget (or, ``busy``, is still running past it):
    nothing of it is applied."""
    message = (f"the decision passed spec.deadlineSeconds ({deadline:g} s): not waited for beyond {budget:g} s, "
               "nothing applied" + ("; still running, no new decision until it ends" if busy else ""))
    return {"state": "overBudget", "message": message, "deadlineSeconds": deadline,
            "conditions": [conditions.condition("Allocated", False, "OverBudget", message, generation, old)]}


def invalid(error: TranslationError, generation: int | None, old: Conditions) -> dict[str, Any]:
    """The status of a group whose spec is refused: state ``invalid`` and the field in the message."""
    message = f"{error.field}: {error.message}"
    return {"state": "invalid", "message": message,
            "conditions": [conditions.condition("Allocated", False, error.reason, message, generation, old)]}


def events(decision: Decision, placed: int, evicted: int, blocked: Mapping[str, str] | None = None,
           failed: Mapping[str, str] | None = None) -> list[Event]:
    """The Events of an epoch that wrote ``placed`` and ``evicted`` pods and had ``blocked`` moves
    and ``failed`` writes."""
    out: list[Event] = []
    gap = "" if decision.gap is None else f", gap to the proven bound {100 * decision.gap:.2f}%"
    if placed or evicted:
        out.append(("Placed", f"{placed} pod(s) placed, {evicted} evicted to move or re-plan ({decision.algorithm}); "
                              f"minimum yield {decision.min_yield:.3f}, average {decision.avg_yield:.3f}{gap}", "Normal"))
    if decision.lost:
        out.append(("NodeLost", f"{len(decision.lost)} pod(s) on a node no longer usable (cordoned, NotReady or gone): "
                                f"{', '.join(sorted(decision.lost))}", "Warning"))
    if decision.unplaceable:
        out.append(("Unplaceable", "left gated, no node admits them: "
                                   + "; ".join(f"{p}: {r}" for p, r in sorted(decision.unplaceable.items())), "Warning"))
    if decision.pending:
        out.append(("PendingReplanned", "released pods Pending where they were placed, re-planned: "
                                        + "; ".join(f"{p}: {r}" for p, r in sorted(decision.pending.items())), "Warning"))
    if blocked:
        out.append(("MoveBlocked", "eviction refused, retried next epoch: "
                                   + "; ".join(f"{p}: {r}" for p, r in sorted(blocked.items())), "Warning"))
    if failed:
        out.append(("WriteRefused", "; ".join(f"{p}: {r}" for p, r in sorted(failed.items())), "Warning"))
    if decision.status == "infeasible":
        out.append(("Infeasible", decision.message, "Warning"))
    return out
