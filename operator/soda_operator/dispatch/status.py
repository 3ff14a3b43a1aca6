"""A BatchDispatch's status and the Events of a decision (Lin 2014, 3.5.1 "Status Checker": what is collected is
written down, so the system recovers its state after a restart -- here the learned speed matrix of 4.4 lives in
``status.speeds``; 6.3.2: each Job's deadline and penalty; docs/dispatch.md, "Status" and "Events").

Pure: the status fields to patch and the Events to post as (object, reason, message, type), for
:func:`..kube.events.post_all`. The conditions (:mod:`..kube.conditions`): ``Dispatching``, True while the spec is
valid, False with reason ``InvalidSpec`` and the field in the message when it is not; ``WithinBudget`` (issue 45),
True while a decision plans every slot and every Job within its deadline, False with reason ``Capped`` (the slots a
``spec.slotCPU`` gives were cut to what the nodes hold) or ``DeadlinePassed`` (the policy stopped before every Job
was planned: the plan is its best so far), naming the field.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from soda_optimizer import dispatch as dp

from ..kube import api, conditions
from ..kube.errors import TranslationError
from .decide import Outcome
from .objects import owner_job

KIND = "BatchDispatch"
Event = tuple[Mapping[str, Any], str, str, str]  # (object, reason, message, type)


def me(body: Mapping[str, Any]) -> dict[str, Any]:
    """The BatchDispatch as the object of an Event."""
    return {"apiVersion": api.API_VERSION, "kind": KIND, "metadata": dict(body.get("metadata") or {})}


def speeds_status(m: dp.SpeedMatrix) -> list[dict[str, Any]]:
    return [{"kind": k, "nodeClass": c, "samples": len(v), "throughput": round(len(v) / sum(v), 6),
             "secondsPerUnit": [round(x, 4) for x in v]} for (k, c), v in sorted(m.observed.items())]


def dispatching(out: Outcome, done: Mapping[str, Any], status: Mapping[str, Any], generation: int | None) -> dict[str, Any]:
    """The status after a decision was written (``done``: how many pods were released, evicted and deleted)."""
    slots = sum(out.decision.slots.values())
    msg = f"{out.policy.name}: {len(out.jobs)} Job(s), {slots} slot(s) of {out.slot_cpu:g} CPU"
    return {
        "state": "dispatching", "message": "",
        "conditions": [conditions.condition("Dispatching", True, "Dispatching", msg, generation, status.get("conditions")),
                       budget(out, generation, status)],
        "policy": out.policy.name, "slots": slots, "slotCPU": out.slot_cpu, "jobs": out.decision.jobs,
        "speeds": speeds_status(out.speeds), "measured": sorted(out.measured),
        "released": int(status.get("released") or 0) + done["placed"],
        "redispatched": int(status.get("redispatched") or 0) + done["deleted"],
        "preempted": int(status.get("preempted") or 0) + done["evicted"],
        "preemptionBlocked": [{"pod": p, "reason": why} for p, why in sorted(done["blocked"].items())],
    }


def budget(out: Outcome, generation: int | None, status: Mapping[str, Any]) -> dict[str, Any]:
    """The ``WithinBudget`` condition of a decision (issue 45): what a cap cut, or that the deadline passed."""
    d = out.decision
    if d.timed_out:
        why = (f"the decision stopped at its deadline ({dp.limits.DEADLINE_S:g} s) before every Job of this group was "
               "planned (spec.slotCPU and the number of Jobs set its work): the plan is the best so far")
        return conditions.condition("WithinBudget", False, "DeadlinePassed", "; ".join([*d.capped, why]), generation, status.get("conditions"))
    if d.capped:
        return conditions.condition("WithinBudget", False, "Capped", "; ".join(d.capped), generation, status.get("conditions"))
    return conditions.condition("WithinBudget", True, "WithinBudget", "every slot and Job planned within the deadline", generation,
                                status.get("conditions"))


def invalid(err: TranslationError, status: Mapping[str, Any], generation: int | None) -> dict[str, Any] | None:
    """The status of a refused spec; None when the status says so already (nothing to write, no new Event)."""
    msg = f"{err.field}: {err.message}"
    cond = conditions.condition("Dispatching", False, err.reason, msg, generation, status.get("conditions"))
    if status.get("state") == "invalid" and status.get("message") == msg and conditions.same(status.get("conditions"), [cond]):
        return None
    return {"state": "invalid", "message": msg, "conditions": [cond]}


def events_of(body: Mapping[str, Any], out: Outcome, done: Mapping[str, Any], job_bodies: Iterable[Mapping[str, Any]],
           warned: set[tuple[str, str]], blocked_before: Iterable[Mapping[str, Any]] = ()) -> list[Event]:
    """The Events of a written decision: ``Dispatched`` (on the BatchDispatch and on each Job: how many tasks went
    to which node), ``Preempted`` (on the BatchDispatch and on each Job that lost a task: which tasks were evicted
    and for which Job), ``PreemptionBlocked`` (evictions the API refused), ``Redispatch`` (tasks deleted on failed
    nodes), ``DeadlineAtRisk`` (once per Job: ``warned`` holds the (namespace, Job) warned already and gets the new
    ones)."""
    md = body.get("metadata") or {}
    name, ns = md.get("name"), md.get("namespace") or ""
    obj = me(body)
    job_body = {(b.get("metadata") or {}).get("name", ""): b for b in job_bodies}
    d = out.decision
    evs: list[Event] = []
    if done["placed"]:
        by_node: dict[str, int] = {}
        per_job: dict[str, dict[str, int]] = {}
        for p, n in d.place.items():
            by_node[n] = by_node.get(n, 0) + 1
            where = per_job.setdefault(owner_job(out.pods[p]) or "", {})
            where[n] = where.get(n, 0) + 1
        evs.append((obj, "Dispatched", f"{done['placed']} task(s) released ({out.policy.name}): " + _counts(by_node), "Normal"))
        for j, where in per_job.items():
            if j in job_body:
                evs.append((job_body[j], "Dispatched", f"{sum(where.values())} task(s) released by BatchDispatch {name}: "
                            + _counts(where), "Normal"))
    if done["evicted"]:
        evicted = {p: j for p, j in d.evict.items() if p not in done["blocked"]}
        lost: dict[str, list[str]] = {}
        for p in evicted:
            lost.setdefault(owner_job(out.pods[p]) or "", []).append(p)
        why = ", ".join(f"{p} for {j}" for p, j in sorted(evicted.items()))
        evs.append((obj, "Preempted", f"{done['evicted']} running task(s) evicted, their slots planned for other Jobs "
                    f"({out.policy.name}): {why}", "Normal"))
        for j, ps in sorted(lost.items()):
            if j in job_body:
                evs.append((job_body[j], "Preempted", f"{len(ps)} task(s) evicted by BatchDispatch {name} (preemption): "
                            + ", ".join(f"{p} for {evicted[p]}" for p in sorted(ps)), "Normal"))
    before = {b.get("pod") for b in blocked_before}
    fresh = {p: why for p, why in done["blocked"].items() if p not in before}
    if fresh:
        evs.append((obj, "PreemptionBlocked", "eviction refused: " + ", ".join(f"{p} ({why})" for p, why in sorted(fresh.items())),
                    "Warning"))
    if done["deleted"]:
        evs.append((obj, "Redispatch", f"{done['deleted']} task(s) on failed nodes deleted; their Jobs recreate them gated", "Warning"))
    for js in d.jobs:
        if js["meetsDeadline"] is False and (ns, js["job"]) not in warned and not js["complete"]:
            warned.add((ns, js["job"]))
            msg = f"job {js['job']}: projected finish {js['projectedFinish']} after deadline {js['deadline']}"
            evs.append((obj, "DeadlineAtRisk", msg, "Warning"))
            if js["job"] in job_body:
                evs.append((job_body[js["job"]], "DeadlineAtRisk", msg, "Warning"))
    return evs


def _counts(by_node: Mapping[str, int]) -> str:
    return ", ".join(f"{n} x{c}" for n, c in sorted(by_node.items()))
