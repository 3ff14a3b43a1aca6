"""A StreamJob's status: the one place that computes its phase, reason, message and conditions.

Phases: ``Pending`` (not planned yet), ``Admitted`` (planned, instances not all Running yet),
``Running`` (every PE with a macroQ goal > 0 has an instance and every instance pod runs; a PE to
which macroQ gives nothing has no pod by design), ``Degraded`` (admitted, but a PE with a goal has
no instance: none of its candidate nodes is usable), ``Rejected`` (the Plan's reason and message),
``Invalid`` (the spec fails validation; the message names the field).

``conditions`` follow the Kubernetes API conventions: ``Admitted`` and ``Running``, each with
status, reason, message and ``observedGeneration``; and ``MeetsProjection`` once the job has
observations (:mod:`.observe`): False with reason ``BelowProjection`` while the observed importance
is under the projected one by more than the policy's tolerance.

Issue 45: ``owner`` is the owner the job is planned, ranked and charged as (the administrator's
binding of its namespace, :func:`.crd.effective_owner`); when its ``spec.owner`` names another,
``ownerIgnored`` keeps what it wrote and the condition ``OwnerBound`` is False (reason
``OwnerNotBound``), with one Warning Event (:func:`owner_event`). An admitted job whose pods the
API server refuses to create is ``Degraded`` with reason ``CreateFailed`` and the API server's
words (:func:`planned`'s ``create_failure``): its status and one Warning Event say why.

Issue 48: an admitted job whose pod kube-scheduler cannot place (``PodScheduled`` False: the extender
unreachable, no node with room) has the condition ``Scheduled`` False, reason ``FailedScheduling``,
naming the pod and the scheduler's message, and one Warning Event (:func:`with_scheduling`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from soda_optimizer.plan import JobDecision, PEPlan, Plan

Instances = Mapping[str, list[dict[str, Any]]]  # PE name -> [{node, fraction, pod}]
# The whole plan's figures (issue 34/49), written on the SchedulingPolicy ``default`` only (:func:`policy_plan`).
# A StreamJob's status carried them too until issue 53: every macro epoch whose bound came out proven
# in one epoch and estimated in the next (a deadline-bound macroQ at 2,000 nodes) rewrote all 1,040
# job statuses for a figure no job owns, ~5 ms of API server CPU each. A job's status now sets them
# to null (a merge patch removes them from objects written before), so the write happens once.
PLAN_WIDE = ("planImportance", "planBound", "planBoundProven", "planGap")


def _conditions(phase: str, reason: str, message: str, generation: int | None) -> list[dict[str, Any]]:
    admitted = phase in ("Admitted", "Running", "Degraded")
    running = phase == "Running"
    conds: list[dict[str, Any]] = [
        {"type": "Admitted", "status": "True" if admitted else "False",
         "reason": reason if not admitted else "Admitted", "message": message if not admitted else ""},
        {"type": "Running", "status": "True" if running else "False",
         "reason": "Running" if running else (reason or phase), "message": "" if running else message},
    ]
    for c in conds:
        c["reason"] = "".join(w[:1].upper() + w[1:] for w in str(c["reason"] or "Unknown").replace("-", " ").split())
        if generation is not None:
            c["observedGeneration"] = generation
    return conds


def _projection(observed: Mapping[str, Any], generation: int | None) -> dict[str, Any] | None:
    """The ``MeetsProjection`` condition of an ``observed`` block with a ratio (else None)."""
    ratio = observed.get("ratio")
    if ratio is None:
        return None
    tol = float(observed.get("tolerance", 0.1))
    ok = ratio >= 1.0 - tol
    msg = (f"observed importance {observed.get('importance')} is {ratio:.0%} of the projected "
           f"{observed.get('projectedImportance')} (rates over {observed.get('windowSeconds')}s)")
    c: dict[str, Any] = {"type": "MeetsProjection", "status": "True" if ok else "False", "reason": "AsProjected" if ok else "BelowProjection",
         "message": msg}
    if generation is not None:
        c["observedGeneration"] = generation
    return c


def _finish(status: dict[str, Any], generation: int | None) -> dict[str, Any]:
    status["conditions"] = _conditions(status["phase"], status.get("reason", ""), status.get("message", ""), generation)
    if status.get("observed"):
        c = _projection(status["observed"], generation)
        if c is not None:
            status["conditions"].append(c)
    if status.get("ownerIgnored") is not None:
        c = {"type": "OwnerBound", "status": "False", "reason": "OwnerNotBound",
             "message": f"spec.owner '{status['ownerIgnored']}' is not an owner the SchedulingPolicy binds to this namespace "
                        f"(spec.owners); the job is planned, ranked and charged as owner '{status.get('owner')}'"}
        if generation is not None:
            c["observedGeneration"] = generation
        status["conditions"].append(c)
    if generation is not None:
        status["observedGeneration"] = generation
    return status


@dataclass(frozen=True)
class PlanIndex:
    """A plan's decisions and PEs by job, built once per plan: :func:`planned` runs for every job, and
    scanning the whole plan each time was quadratic (1,040 jobs x 7,370 PEs at 2,000 nodes, seconds of
    every macro and micro epoch)."""

    decisions: dict[str, JobDecision]
    pes: dict[str, list[PEPlan]]

    @classmethod
    def of(cls, plan: Plan) -> PlanIndex:
        pes: dict[str, list[PEPlan]] = {}
        for pe in plan.pes:
            pes.setdefault(pe.job, []).append(pe)
        return cls({d.job: d for d in plan.jobs}, pes)


def planned(plan: Plan, job_key: str, generation: int | None, instances: Instances,
            pod_phases: Mapping[str, str | None] | None = None,
            functions: Mapping[str, Mapping[str, Any]] | None = None, index: PlanIndex | None = None,
            owner: tuple[str, str] | None = None, create_failure: str | None = None) -> dict[str, Any]:
    """The status of a job the Plan decided about (or did not), with its instances and, when the
    pods' phases are given, whether it runs. ``functions``: PE name -> the resource function it was
    planned with, ``{a, b, source}`` (:mod:`.learning`). ``index``: the plan's :class:`PlanIndex`
    (built here when not given: pass it when calling for every job). ``owner``: (the effective
    owner, the job's ``spec.owner``). ``create_failure``: why the API server refused to create one
    of its pods at the last attempt."""
    who = _owner(owner)
    index = index or PlanIndex.of(plan)
    dec = index.decisions.get(job_key)
    if dec is None:
        return _finish({"phase": "Pending", "reason": "NotPlanned", "message": "not in the last plan", **who}, generation)
    job_pes = index.pes.get(job_key, [])
    pes = [{"name": pe.name, "goalMips": round(pe.goal_mips, 3), "candidates": list(pe.candidates),
            "instances": list(instances.get(pe.name, [])),
            **({"resourceFunction": dict(functions[pe.name])} if functions and pe.name in functions else {})}
           for pe in job_pes]
    status: dict[str, Any] = {
        "phase": "Admitted" if dec.admitted else "Rejected",
        "reason": dec.reason or ("Admitted" if dec.admitted else ""),
        "message": dec.message,
        "rank": dec.rank,  # in force: as the job states it, or as the rank manager and the administrator's overrides set it
        "revisedRank": dec.revised_rank,
        "importance": round(dec.importance, 6),
        "mips": round(dec.mips, 3),
        "pes": pes,
        **who,
    }
    status.update(dict.fromkeys(PLAN_WIDE))  # the plan's own figures are the SchedulingPolicy's (issue 53): cleared here
    if dec.template:
        status["chosenTemplate"] = dec.template.split("/", 1)[-1]
    if dec.admitted and pod_phases is not None:
        missing = sorted(p.name for p in job_pes if p.macro_goal_mips > 0 and not instances.get(p.name))
        pods = [i["pod"] for v in instances.values() for i in v]
        if create_failure:
            status.update(phase="Degraded", reason="CreateFailed", message=f"creating its pods failed: {create_failure}")
        elif missing:
            status.update(phase="Degraded", reason="NoUsableCandidate",
                          message=f"no usable candidate node for PE(s) {', '.join(missing)}; waiting for the next macro epoch")
        elif all(pod_phases.get(p) == "Running" for p in pods):
            status["phase"] = "Running"
    return _finish(status, generation)


def _owner(owner: tuple[str, str] | None) -> dict[str, Any]:
    if owner is None:
        return {}
    effective, written = owner
    return {"owner": effective, "ownerIgnored": written if written and written != effective else None}


def owner_event(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """A Warning when a job's spec.owner starts being ignored (or names another owner than before)."""
    ignored = new.get("ownerIgnored")
    if ignored is None or ignored == (old or {}).get("ownerIgnored"):
        return None
    c: Mapping[str, Any] = next((c for c in new.get("conditions") or [] if c.get("type") == "OwnerBound"), {})
    return "OwnerNotBound", str(c.get("message") or ignored), "Warning"


def with_observed(status: dict[str, Any], observed: Mapping[str, Any] | None, generation: int | None) -> dict[str, Any]:
    """A planned status with the job's ``observed`` block (:mod:`.observe`), for admitted jobs."""
    if observed is None or status["phase"] not in ("Admitted", "Running", "Degraded"):
        return status
    return _finish(dict(status, observed=dict(observed)), generation)


def projection_event(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """A Warning when the observed importance falls below the projection, Normal when it recovers."""
    def cond(st: Mapping[str, Any] | None) -> Mapping[str, Any]:
        return next((c for c in (st or {}).get("conditions") or [] if c.get("type") == "MeetsProjection"), {})
    o, n = cond(old), cond(new)
    if not n or o.get("status") == n.get("status"):
        return None
    if n["status"] == "False":
        return "BelowProjection", n["message"], "Warning"
    return ("AsProjected", n["message"], "Normal") if o else None


SCHEDULED = "Scheduled"  # issue 48: a PE pod the scheduler cannot place is named in its job's status
MAX_SCHEDULER_MESSAGE = 600  # characters of kube-scheduler's message kept (it lists node counts by reason)


def with_scheduling(status: dict[str, Any], old: Mapping[str, Any] | None, failures: Mapping[str, str] | None,
                    generation: int | None) -> dict[str, Any]:
    """``status`` with the condition ``Scheduled``: False, reason ``FailedScheduling``, while a pod of the
    job is Pending with kube-scheduler's ``PodScheduled`` False (``failures``: pod name -> its
    "reason: message", :func:`.indexes.unscheduled`), the message naming the first such pod and the
    scheduler's words; the ``Running`` condition then gives the same reason and message. True once none
    is, only for a job that had the condition (nothing is added to a job that never had a problem);
    dropped when the job runs (:func:`running` makes the conditions again)."""
    if status.get("phase") not in ("Admitted", "Degraded"):  # Running, Rejected, ...: no pod waits to be placed
        conds = status.get("conditions") or []
        return status if not any(c.get("type") == SCHEDULED for c in conds) else dict(status, conditions=[c for c in conds if c.get("type") != SCHEDULED])
    had = any(c.get("type") == SCHEDULED for c in (old or {}).get("conditions") or [] if isinstance(c, Mapping))
    fails = dict(failures or {})
    failing = bool(fails)
    if not failing and not had:
        return status
    cond: dict[str, Any] = {"type": SCHEDULED, "status": "True", "reason": "Scheduled", "message": ""}
    if failing:
        pod = sorted(fails)[0]
        more = f" ({len(fails) - 1} more of its pods cannot be scheduled)" if len(fails) > 1 else ""
        cond.update(status="False", reason="FailedScheduling", message=f"pod {pod}: {fails[pod][:MAX_SCHEDULER_MESSAGE]}{more}")
    if generation is not None:
        cond["observedGeneration"] = generation
    conds = [c for c in status.get("conditions") or [] if c.get("type") != SCHEDULED]
    if failing:
        conds = [dict(c, reason=cond["reason"], message=cond["message"]) if c.get("type") == "Running" and c.get("status") == "False" else c
                 for c in conds]
    return dict(status, conditions=conds + [cond])


def scheduling_event(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """One Warning ``FailedScheduling`` when a job's ``Scheduled`` condition turns False (not again
    while it stays False, whatever the scheduler's message says)."""
    def failing(st: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
        return next((c for c in (st or {}).get("conditions") or [] if c.get("type") == SCHEDULED and c.get("status") == "False"), None)
    c = failing(new)
    return ("FailedScheduling", str(c.get("message") or ""), "Warning") if c is not None and failing(old) is None else None


def running(status: dict[str, Any], generation: int | None) -> dict[str, Any]:
    """An Admitted status whose pods all run now."""
    return _finish(dict(status, phase="Running"), generation)


def invalid(field: str, message: str, generation: int | None, reason: str = "InvalidSpec") -> dict[str, Any]:
    """Phase Invalid: the spec was refused (``InvalidSpec``) or planning failed with this job and the
    pipeline guard set it aside (``Quarantined``)."""
    return _finish({"phase": "Invalid", "reason": reason, "message": f"{field}: {message}" if field else message}, generation)


def with_transitions(old: Mapping[str, Any] | None, new: dict[str, Any], now: str) -> dict[str, Any]:
    """``new`` with each condition's ``lastTransitionTime``: kept from ``old`` while the
    condition's status stays, ``now`` when it changes."""
    before = {c.get("type"): c for c in (old or {}).get("conditions") or []}
    for c in new.get("conditions") or []:
        o = before.get(c["type"])
        c["lastTransitionTime"] = o["lastTransitionTime"] if o and o.get("status") == c["status"] and o.get("lastTransitionTime") else now
    return new


def event(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """(reason, message, type) of the Event a status change deserves, or None."""
    old = old or {}
    if old.get("phase") == new["phase"] and old.get("reason") == new.get("reason"):
        return None
    kind = "Normal" if new["phase"] in ("Admitted", "Running") else "Warning"
    return new["phase"], new.get("message") or new.get("reason") or new["phase"], kind


def policy_plan(plan: Plan, old: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The SchedulingPolicy status fields of the plan in force (issue 34): ``planImportance``,
    ``planBound``, ``planBoundProven`` (False: an estimate, issue 49), ``planGap`` (None: unknown, an estimate
    the answer passes) and ``planJobsAdmitted``; None when they are what ``old`` (the policy's status) already
    says, or the plan has no bound."""
    if plan.bound is None:
        return None
    new = {"planImportance": round(plan.importance, 6), "planBound": round(plan.bound, 6), "planBoundProven": plan.bound_proven,
           "planGap": None if plan.gap is None else round(plan.gap, 6), "planJobsAdmitted": sum(d.admitted for d in plan.jobs)}
    old = old or {}
    return None if all(old.get(k) == v for k, v in new.items()) else new

