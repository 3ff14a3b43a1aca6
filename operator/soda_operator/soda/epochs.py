"""The macro and micro epochs: snapshot -> crd -> optimizer -> Plan -> apply (SODA paper section 4).

- macro epoch (every ``Policy.macro_epoch_s``, and soon after a relevant change, debounced):
  ``systems.decide("soda", ...)``, i.e. ``pipeline.run`` (the managers, then the allocation policy the SchedulingPolicy selects) on a
  consistent snapshot, then apply: admitted jobs get their PE instances, rejected jobs lose theirs,
  every StreamJob gets its status and an Event when its admission changes. A running job's
  template never changes (crd reads it back from status);
- micro epoch (every ``Policy.micro_epoch_s``): ``systems.decide`` with the previous plan (``pipeline.rerun``)
  from the last feasible Plan on
  the live node set and the fractions read back from the pods (never from memory); creates,
  resizes in place, deletes. A node that went away, or NotReady past its PE pods' grace, loses its
  fractions within one micro epoch (a NotReady node within the grace, or in a disrupted zone, keeps
  its pods and takes no new one: :mod:`.disruption`, issue 46); when a PE has no usable candidate
  left, a macro epoch is triggered.

The Plan is the only thing that crosses from the optimizer: the last feasible one is kept and
handed back for the micro epochs (recomputed by a macro epoch after a restart). An infeasible macro
plan is never applied: what runs keeps running on the last feasible plan, and the next macro epoch
(or a change) tries again. Module map: :mod:`.state` (snapshot), :mod:`.desired` (Plan ->
instances), :mod:`.status` (a job's phase), :mod:`.apply` (writes), :mod:`.loop` (timing).

Just over 400 lines: both epochs share :class:`Loops`' state (the last feasible plan, the statuses
written, the pods awaited), and the status phase must hold one lock with the Running refresh.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from kubernetes import client

from soda_optimizer import guard, steps, systems
from soda_optimizer.managers import budget as budget_managers
from soda_optimizer.model import Budgets, Policy, Scenario
from soda_optimizer.plan import Plan

from ..kube import clock, conditions, metrics
from ..kube.api import list_json
from . import crd, desired, disruption, indexes, loop, resizes, state, status
from .apply import Applier, Instance, changed_fields, status_changed
from .learning import Learning
from .observe import Observer
from .state import Snapshot

log = logging.getLogger("kubesoda.epochs")
# A failpoint for the live tests of the pipeline guard (e2e/test_hostile.py): while set, planning
# raises whenever a job lists a template of this name, as an unforeseen bug in a stage would. Unset
# (always, outside those tests) it costs nothing.
FAILPOINT_ENV = "KUBESODA_FAILPOINT_PLAN_TEMPLATE"


class Loops:
    def __init__(self, api: client.ApiClient, workers: int = 16, reader: Any = None, observer: Observer | None = None):
        self.api = api
        # observed rates from Prometheus (each micro epoch); without a URL, the status says so
        self.observer = observer or Observer(None)
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.applier = Applier(api, workers)
        # learned resource functions: ResourceProfiles in, the functions each epoch plans with out
        # (profiles read and written only by an operator that observes: --prometheus-url)
        self.learning = Learning(self.custom if self.observer.prom is not None else None, fence=lambda: self.applier.fence())
        # the watch-fed indexes (:class:`.indexes.Reader`), set by the daemon; None: list per epoch
        self.reader = reader
        # the status this replica last wrote per job (namespace, name, uid): while it leads nobody
        # else writes it, so it is newer than a watch that has not caught up (no Event twice)
        self.written: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.last: Plan | None = None  # the last feasible macro plan
        self.seen: set[str] = set()  # jobs of the last macro epoch, feasible or not
        self.seen_usable: set[str] = set()  # usable nodes at the last epoch
        # the pipeline guard (soda_optimizer.guard): what each job's spec was at the last good plan
        # (the jobs that changed since are the suspects when planning fails) and the jobs set aside,
        # job -> (its spec's digest, why): released when the digest changes
        self.good_prints: dict[str, str] = {}
        self.quarantine: dict[str, tuple[str, str]] = {}
        self.failpoint = os.environ.get(FAILPOINT_ENV) or None
        # the guard's policy suspect (issue 45): the last policy that planned (the fallback when the current one
        # makes planning fail), and while the current one fails: it, and why (the SchedulingPolicy's Planned condition)
        self.good_policy: Policy | None = None
        self.policy_fault: tuple[Policy, str] | None = None
        self.reported: set[tuple[str, str, str]] = set()  # invalid Nodes/templates/policies already given an Event
        self.known = 0  # StreamJobs and StreamTemplates in the last snapshot (without the indexes' count)
        self.macro_due = threading.Event()
        self.micro_due = threading.Event()
        self.lock = threading.Lock()  # one epoch at a time
        # the jobs' statuses: ``awaiting`` and ``written`` and the writes made from them, by an epoch
        # or by the Running refresh, which runs beside an epoch's pod creates (:func:`.loop.run`)
        self.status_lock = threading.Lock()
        self.apply_s = 0.0  # duration of the last apply (logged with the macro epoch)
        self.charged_at: float | None = None  # when the budget managers' bookkeeping last ran
        # Admitted jobs whose instances were not all Running at the last apply: (job, status, pods)
        self.awaiting: dict[tuple[str, str], tuple[dict[str, Any], dict[str, Any], list[str]]] = {}
        self.deletions_paused = False  # a zone was disrupted at the last apply (:mod:`.disruption`)
        # called after each applied plan with (scenario, plan, changes applied): the web view
        self.on_apply: Callable[[Scenario, Plan, dict[str, int]], None] | None = None

    def snapshot(self) -> Snapshot:
        """The cluster as the watches (or lists) show it, plus what this replica wrote that they
        may not show yet: the pods and Services it created (:class:`.apply.Inflight`; pods as pending pods) and the
        statuses it wrote (``written``, merged onto the jobs'), so an epoch plans from what the
        last one applied, not from a view that trails it (issue 39: plan once what was applied)."""
        if self.reader is not None:
            metrics.SNAPSHOTS.labels("index").inc()
            snap: Snapshot = self.reader.snapshot()
        else:
            metrics.SNAPSHOTS.labels("list").inc()
            snap = state.take(self.core, self.custom)
        self.known = len(snap.jobs) + len(snap.templates)
        return state.with_own_writes(snap, self.applier.inflight, self.applier.inflight_services, self.written)

    def objects(self) -> int:
        """StreamJobs and StreamTemplates known (the macro epoch's settle rule, :class:`.loop.Settle`):
        counted in the indexes, else as of the last snapshot."""
        if self.reader is not None:
            return self.reader.count()  # type: ignore[no-any-return]
        return self.known

    def _old_status(self, obj: dict[str, Any]) -> dict[str, Any]:
        md = obj.get("metadata") or {}
        mine = self.written.get((md.get("namespace", ""), md.get("name", ""), md.get("uid", "")))
        return mine if mine is not None else (obj.get("status") or {})

    def _write_statuses(self, updates: list[tuple[dict[str, Any], dict[str, Any]]]) -> None:
        self.applier.job_statuses([((o.get("metadata") or {}).get("namespace", ""), (o.get("metadata") or {}).get("name", ""), st)
                                   for o, st in updates])
        for o, st in updates:
            md = o.get("metadata") or {}
            self.written[(md.get("namespace", ""), md.get("name", ""), md.get("uid", ""))] = st

    def run(self, stop: threading.Event | Any, **kw: Any) -> None:  # or kopf.DaemonStopped (wait, is_set)
        """Run both loops until ``stop`` is set (the leader's daemon); see :func:`.loop.run`."""
        loop.run(self, stop, **kw)

    # ------------------------------------------------------------------ epochs
    def macro_epoch(self) -> Plan | None:
        with self.lock:
            t0 = time.perf_counter()
            snap = self.snapshot()
            t_snap = time.perf_counter() - t0
            scen, errors, plan = self._guarded_plan(snap)
            self._report_invalid(snap, errors)
            if plan is None:
                self._object_statuses(snap, errors)
                return None
            self._observe(plan)
            # the jobs this epoch decided about: the micro loop asks for a macro epoch only when
            # this set changes, never because the last one could not place everything
            self.seen = {j.name for j in scen.jobs}
            self.seen_usable = {n.name for n in scen.usable_nodes()}
            if not plan.feasible:
                # never tear down what runs: keep the last feasible plan (the micro loop keeps
                # adjusting it to the live nodes); the next macro epoch, or a change, tries again
                metrics.EPOCH_INFEASIBLE.inc()
                log.warning("macro epoch infeasible, keeping the last feasible plan%s: %s",
                            "" if self.last else " (none yet: nothing changes)", plan.message)
                self._object_statuses(snap, errors)
                return plan
            self.last = plan
            self._apply(snap, scen, plan)
            # after the jobs' statuses and pods: a template's status (its PE and stream counts, Valid)
            # decides nothing, and at 10x LSD its 1,179 writes took tens of seconds before the first pod
            self._object_statuses(snap, errors)
            self._charge_budgets(snap, scen, plan)
            metrics.EPOCH_SECONDS.labels("macro").observe(time.perf_counter() - t0)
            secs = {s.stage: s.seconds for s in plan.stages}
            log.info("macro epoch: %d/%d jobs admitted, importance %.2f, %.2fs (snapshot %.2fs, %s, apply %.2fs)",
                     sum(d.admitted for d in plan.jobs), len(plan.jobs), plan.importance, time.perf_counter() - t0, t_snap,
                     ", ".join(f"{k} {v:.2f}s" for k, v in secs.items()), self.apply_s)
            return plan

    def _guarded_plan(self, snap: Snapshot) -> tuple[Scenario, list[crd.ObjectError], Plan | None]:
        """The macro plan of ``snap`` under the pipeline guard (:mod:`soda_optimizer.guard`): when
        planning raises or yields a number that is not finite, the jobs that changed since the
        last good plan are the suspects; those that make it fail are quarantined (status Invalid,
        reason Quarantined, an Event, ``kubesoda_quarantined_jobs``) until their spec or their
        templates change, their running pods kept as they are and holding their CPU, and everyone
        else is planned as without them. The plan is None when planning fails even without every
        suspect (the last good plan stays)."""
        prints = crd.fingerprints(snap.jobs, snap.templates)
        self.quarantine = {j: q for j, q in self.quarantine.items() if prints.get(j) == q[0]}
        learned: list[Scenario] = []

        def plan_fn(s: Scenario) -> Plan:
            if self.failpoint and any(t.split("/", 1)[-1] == self.failpoint for j in s.jobs for t in j.templates):
                raise RuntimeError(f"failpoint {FAILPOINT_ENV}: a job lists template {self.failpoint}")
            # the pipeline's first step, made here once: the Scenario planned with is also written with the plan
            learned[:] = [steps.learned(s, self.learning.macro(s, snap.templates, snap.policy))]
            return systems.decide("soda", None, learned[0]).result  # type: ignore[no-any-return]

        for _ in range(3):  # a quarantine changes the capacity the others see: plan once more
            scen, errors = snap.scenario(quarantined={j: why for j, (_, why) in self.quarantine.items()})
            suspects = None if self.last is None else [j.name for j in scen.jobs if prints.get(j.name) != self.good_prints.get(j.name)]
            try:
                out = guard.run(scen, plan_fn, suspects, fallback=self.good_policy or Policy())
            except guard.Unplannable as e:
                metrics.EPOCH_FAILURES.inc()
                log.error("macro epoch failed, keeping the last plan: %s", e)
                return scen, errors, None
            metrics.GUARD_RUNS.inc(out.runs - 1)
            if not out.quarantined:
                break
            for j, why in out.quarantined.items():
                log.warning("quarantined StreamJob %s: planning failed with it: %s", j, why)
                self.quarantine[j] = (prints.get(j, ""), why[:500])
        else:
            log.error("macro epoch: the pipeline guard did not settle, keeping the last plan")
            return scen, errors, None
        self._policy_suspect(scen.policy, out.policy_fault, errors)
        metrics.QUARANTINED.set(len(self.quarantine))
        metrics.INVALID_OBJECTS.clear()
        for (kind, reason), n in Counter((e.kind, e.reason) for e in errors).items():
            metrics.INVALID_OBJECTS.labels(kind, reason).set(n)
        self.good_prints = {j.name: prints.get(j.name, "") for j in scen.jobs}
        return learned[0], errors, out.plan

    def _policy_suspect(self, policy: Policy, fault: str, errors: list[crd.ObjectError]) -> None:
        """The guard's verdict on the policy: planned (it becomes the fallback), or at fault (planned under the
        fallback meanwhile; the SchedulingPolicy's condition ``Planned`` False and a Warning Event say why, naming
        the fields that differ from the fallback, and no job is blamed)."""
        if not fault:
            self.good_policy, self.policy_fault = policy, None
            return
        fallback = self.good_policy or Policy()
        fields = ", ".join(policy_fields_changed(policy, fallback)) or "spec"
        used = "the defaults" if self.good_policy is None else "the last policy that planned"
        why = f"planning fails with this policy ({fault[:300]}); planned with {used} meanwhile; fields that differ from it: {fields}"
        if self.policy_fault is None or self.policy_fault[0] != policy:
            log.error("SchedulingPolicy at fault, no job blamed: %s", why)
        self.policy_fault = (policy, why)
        metrics.EPOCH_FAILURES.inc()
        errors.append(crd.ObjectError("SchedulingPolicy", "default", "", why, reason="PlanningFailed"))

    def _charge_budgets(self, snap: Snapshot, scen: Scenario, plan: Plan) -> None:
        """The budget managers' bookkeeping (SODA 6.2.1): after an overloaded macro epoch (a job
        left out) each owner is charged the mips its admitted jobs got x the time since the last
        charge (at most two macro epochs: a pause is not spent); underloaded epochs charge nothing.
        The total lives in the SchedulingPolicy's status.budgetSpent, so a restart or another
        replica goes on from it."""
        pol = scen.policy
        if "budget" not in (pol.rank_manager, pol.weight_manager) or snap.policy is None:
            self.charged_at = None
            return
        t = time.monotonic()
        seconds = pol.macro_epoch_s if self.charged_at is None else min(t - self.charged_at, 2 * pol.macro_epoch_s)
        self.charged_at = t
        if all(d.admitted for d in plan.jobs):
            return
        owner = {j.name: j.owner for j in scen.jobs}
        usage: dict[str, float] = {}
        for d in plan.jobs:
            if d.admitted:
                usage[owner.get(d.job, "")] = usage.get(owner.get(d.job, ""), 0.0) + d.mips
        old = {str(k): float(v) for k, v in ((snap.policy.get("status") or {}).get("budgetSpent") or {}).items()}
        new = budget_managers.charge(Budgets(spent=old), usage, seconds, overloaded=True).spent
        self.applier.policy_status({"budgetSpent": {k: round(v, 3) for k, v in new.items()},
                                    "budgetCharged": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})

    def micro_epoch(self) -> Plan | None:
        if self.last is None:
            return None  # no feasible plan yet: the macro loop's own timing retries
        with self.lock:
            t0 = time.perf_counter()
            snap = self.snapshot()
            scen, _ = snap.scenario(quarantined={j: why for j, (_, why) in self.quarantine.items()})
            if {j.name for j in scen.jobs} != self.seen:
                self.macro_due.set()  # jobs came or went: that is the macro model's decision
            usable = {n.name for n in scen.usable_nodes()}
            if self.seen_usable != usable and any(not (set(p.candidates) & usable) for p in self.last.pes if p.candidates):
                self.macro_due.set()  # a PE lost all its candidates (asked once per change of the usable nodes)
            self.seen_usable = usable
            if self.policy_fault is not None and scen.policy == self.policy_fault[0]:
                scen = scen.model_copy(update={"policy": self.good_policy or Policy()})  # the policy at fault: its fallback
            scen = steps.learned(scen, self.learning.planned())  # the pipeline's first step, once: observed and written too
            try:
                plan = systems.decide("soda", systems.SodaSpec(previous=self.last), scen).result
                why = guard.unsound(plan)
            except Exception as e:  # noqa: BLE001 - the macro epoch's guard finds the job it came from
                why = f"{type(e).__name__}: {e}"
            if why:
                metrics.EPOCH_FAILURES.inc()
                log.error("micro epoch failed (%s): nothing applied, a macro epoch will look for the job it comes from", why)
                self.macro_due.set()
                return None
            self._observe(plan)
            self.observer.observe(scen, plan, snap.pods, snap.policy)
            self.learning.observe(scen, plan, snap.templates, snap.pods, snap.policy, self.observer.last)
            self._apply(snap, scen, plan)
            metrics.EPOCH_SECONDS.labels("micro").observe(time.perf_counter() - t0)
            return plan

    def _observe(self, plan: Plan) -> None:
        for st in plan.stages:
            metrics.STAGE_SECONDS.labels(st.stage).observe(st.seconds)

    # ------------------------------------------------------------------ apply
    def _apply(self, snap: Snapshot, scen: Scenario, plan: Plan) -> None:
        t0 = time.perf_counter()
        try:
            counts = self._apply_plan(snap, scen, plan)
        finally:
            self.apply_s = time.perf_counter() - t0
        if self.on_apply is not None:
            self.on_apply(scen, plan, counts)

    def _apply_plan(self, snap: Snapshot, scen: Scenario, plan: Plan) -> dict[str, int]:
        jobs_by_key = {crd.key(j): j for j in snap.jobs}
        wanted = desired.instances(plan, snap, scen)
        by_job: dict[tuple[str, str], list[Instance]] = {}
        for w in wanted:
            by_job.setdefault((w.namespace, w.job), []).append(w)
        with self.status_lock:  # the Running refresh may be writing (it runs during the pod creates below)
            updates, events = self._plan_statuses(snap, scen, plan, by_job, jobs_by_key)
        decided = clock.now()
        managed = {tuple(j.name.split("/", 1)) for j in scen.jobs}
        failed_before = self.applier.create_failures
        # disruption is not intent (issue 46): a PE pod on a held NotReady node is never deleted
        dis = snap.disruption()
        existing = disruption.keep(snap.pods, dis.held, {(w.namespace, w.name) for w in wanted})
        counts = self.applier.sync_pods(wanted, existing, managed)  # type: ignore[arg-type]
        self.deletions_paused = disruption.report(self.applier, snap.policy, dis, self.deletions_paused)
        counts.update(self.applier.sync_services(desired.services(plan, snap, scen), snap.services, managed))  # type: ignore[arg-type]
        if self.applier.create_failures != failed_before:  # a job's creates refused (or no longer): its status and one Event say so now
            with self.status_lock:
                events += self._plan_statuses(snap, scen, plan, by_job, jobs_by_key)[1]
        # the jobs' Events after their pods and Services (issue 53): the status already shows each decision,
        # and at 1,040 jobs the 1,040 Admitted Events before the first pod create held every pod up ~10 s;
        # dated when decided, so that a job's Admitted never sorts after the Running the refresh posted meanwhile
        self.applier.events(events, at=decided)
        counts["status"] = updates
        admitted = sum(d.admitted for d in plan.jobs)
        metrics.IMPORTANCE.set(plan.importance)
        if plan.bound is not None:  # proven or estimated (issue 49); an unknown gap is NaN, never 0
            metrics.IMPORTANCE_BOUND.set(plan.bound)
            metrics.IMPORTANCE_BOUND_PROVEN.set(1 if plan.bound_proven else 0)
            metrics.IMPORTANCE_GAP.set(float("nan") if plan.gap is None else plan.gap)
        if snap.policy is not None:  # the plan's importance, bound and gap on the SchedulingPolicy too (issue 34)
            pol_st = status.policy_plan(plan, snap.policy.get("status"))
            if pol_st is not None:
                self.applier.policy_status(pol_st)
        metrics.JOBS.labels("admitted").set(admitted)
        metrics.JOBS.labels("rejected").set(len(plan.jobs) - admitted)
        if any(counts.values()):
            log.info("applied: %s", counts)
        return counts

    def _plan_statuses(self, snap: Snapshot, scen: Scenario, plan: Plan, by_job: dict[tuple[str, str], list[Instance]],
                       jobs_by_key: dict[str, dict[str, Any]]) -> tuple[int, list[tuple[dict[str, Any], str, str, str]]]:
        """Write every job's status for ``plan`` and note the Admitted ones the Running refresh waits
        for; returns how many statuses changed and the Events to post (the caller posts them after
        the pod creates). Statuses come first: a job shows its decision as soon as it is made, not
        after hundreds of pod creates (they follow; the status names the pods it plans). Called under
        ``status_lock``."""
        pod_phase = {(p["metadata"]["namespace"], p["metadata"]["name"]): (p.get("status") or {}).get("phase") for p in snap.pods}
        if self.reader is not None:
            # fresher than the snapshot: what the refresh may have promoted since it was taken
            pod_phase.update(self.pod_phases([(w.namespace, w.name) for ws in by_job.values() for w in ws]))
        unplaced = self.pod_unscheduled([(w.namespace, w.name) for ws in by_job.values() for w in ws], snap.pods)
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        updates = []
        events: list[tuple[dict[str, Any], str, str, str]] = []
        awaiting: dict[tuple[str, str], tuple[dict[str, Any], dict[str, Any], list[str]]] = {}
        index = status.PlanIndex.of(plan)  # once per plan, not per job
        functions = self.learning.statuses_of(plan)
        failures = self.applier.create_failures  # once: a merged copy
        not_in_force = resizes.problems(self.applier.resizes, snap.pods)  # refused or pending resizes (issue 46)
        resizes.count(not_in_force)
        cores = {n.name: n.cores for n in scen.nodes}
        by_field: Counter[str] = Counter()
        for j in scen.jobs:
            obj = jobs_by_key[j.name]
            ns, name = j.name.split("/", 1)
            inst: dict[str, list[dict[str, Any]]] = {}
            for w in by_job.get((ns, name), []):
                inst.setdefault(w.pe, []).append({"node": w.node, "fraction": round(w.fraction, 6), "pod": w.name})
            gen = (obj.get("metadata") or {}).get("generation")
            old = self._old_status(obj)
            st = status.planned(plan, j.name, gen, inst, {w.name: pod_phase.get((ns, w.name)) for w in by_job.get((ns, name), [])},
                                functions=functions.get(j.name, {}), index=index, owner=(j.owner, str((obj.get("spec") or {}).get("owner") or "")),
                                create_failure=failures.get((ns, name)))
            st = status.with_observed(st, self.observer.block(j.name), gen)  # conditions made again: the resizes' after it
            st = resizes.with_resizes(st, old, not_in_force.get(j.name), cores, gen)
            st = status.with_scheduling(st, old, {w.name: unplaced[(ns, w.name)] for w in by_job.get((ns, name), []) if (ns, w.name) in unplaced}, gen)
            st = status.with_transitions(old, st, now)
            if st["phase"] == "Admitted":  # promoted by refresh_running() as soon as its pods run, not an epoch later
                awaiting[(ns, name)] = (obj, st, [i["pod"] for v in inst.values() for i in v])
            for ev in (status.event(old, st), status.projection_event(old, st), status.owner_event(old, st), status.scheduling_event(old, st)):
                if ev:
                    events.append((obj, *ev))
            if status_changed(old, st):
                updates.append((obj, st))
                by_field.update(changed_fields(old, st))
        if by_field:
            log.info("job status writes by field: %s", ", ".join(f"{f}={n}" for f, n in by_field.most_common()))
        self._write_statuses(updates)
        live = {(md.get("namespace", ""), md.get("name", ""), md.get("uid", "")) for md in (o.get("metadata") or {} for o in snap.jobs)}
        self.written = {k: v for k, v in self.written.items() if k in live}
        self.awaiting = awaiting
        return len(updates), events

    def pod_phases(self, keys: list[tuple[str, str]]) -> dict[tuple[str, str], str | None]:
        """The phases of the named kubesoda pods, (namespace, name) -> phase: from the watch-fed
        index, else one list of kubesoda's pods."""
        if self.reader is not None:
            return self.reader.pod_phases(keys)  # type: ignore[no-any-return]
        pods = list_json(self.core.list_pod_for_all_namespaces, label_selector=crd.LABEL_JOB)
        return {(p["metadata"]["namespace"], p["metadata"]["name"]): (p.get("status") or {}).get("phase") for p in pods}

    def pod_unscheduled(self, keys: list[tuple[str, str]], pods: list[dict[str, Any]] | None = None) -> dict[tuple[str, str], str]:
        """Of the named kubesoda pods, those kube-scheduler could not place (issue 48): (namespace, name)
        -> its "reason: message" (:func:`.indexes.unscheduled`); from the watch-fed index, else ``pods``
        (or one list of kubesoda's pods)."""
        if self.reader is not None:
            return self.reader.pod_unscheduled(keys)  # type: ignore[no-any-return]
        want = set(keys)
        if pods is None:
            pods = list_json(self.core.list_pod_for_all_namespaces, label_selector=crd.LABEL_JOB)
        out = {}
        for p in pods:
            k = (p["metadata"]["namespace"], p["metadata"]["name"])
            why = indexes.unscheduled(p) if k in want else None
            if why is not None:
                out[k] = why
        return out

    def refresh_running(self) -> int:
        """An Admitted job whose planned instances all run becomes Running now, not at the next
        epoch; runs every second on its own thread, also while an epoch creates its pods (the epoch
        writes its statuses first, under ``status_lock``, then creates; at 7,370 pods that is
        minutes in which the first jobs' pods already run). The plan is the last applied one,
        nothing else changes. Returns how many jobs were promoted."""
        with self.status_lock:
            if not self.awaiting:
                return 0
            phase = self.pod_phases([(key[0], pod) for key, (_, _, pods) in self.awaiting.items() for pod in pods])
            done = [(key, obj, st) for key, (obj, st, pods) in self.awaiting.items()
                    if pods and all(phase.get((key[0], pod)) == "Running" for pod in pods)]
            now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            promoted = [(key, obj, status.with_transitions(st, status.running(st, (obj.get("metadata") or {}).get("generation")), now))
                        for key, obj, st in done]
            self._write_statuses([(obj, st) for _, obj, st in promoted])
            self.applier.events([(obj, "Running", st.get("message") or "every instance runs", "Normal") for _, obj, st in promoted])
            for key, _, _ in done:
                del self.awaiting[key]
            self._refresh_scheduling(phase)
            return len(done)

    def _refresh_scheduling(self, phase: dict[tuple[str, str], str | None]) -> None:
        """The awaiting jobs' ``Scheduled`` condition (issue 48) as their pods are now: a pod kube-scheduler
        cannot place is named in the status within a second, not at the next macro epoch. Under ``status_lock``."""
        pending = [(key[0], pod) for key, (_, _, pods) in self.awaiting.items() for pod in pods if phase.get((key[0], pod)) != "Running"]
        unplaced = self.pod_unscheduled(pending) if pending else {}
        writes, events = [], []
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        for key, (obj, st, pods) in list(self.awaiting.items()):
            gen = (obj.get("metadata") or {}).get("generation")
            new = status.with_scheduling(st, st, {p: unplaced[(key[0], p)] for p in pods if (key[0], p) in unplaced}, gen)
            if new is st or not status_changed(st, new):
                continue
            new = status.with_transitions(st, new, now)
            self.awaiting[key] = (obj, new, pods)
            writes.append((obj, new))
            ev = status.scheduling_event(st, new)
            if ev:
                events.append((obj, *ev))
        self._write_statuses(writes)
        self.applier.events(events)

    def _object_statuses(self, snap: Snapshot, errors: list[crd.ObjectError]) -> None:
        """The StreamTemplates' and the SchedulingPolicy's status: PE and stream counts, and the
        condition ``Valid`` (False, ``InvalidSpec``, with the field, when the translation refused
        the object). Written only when it changed (the watch-fed snapshot holds the current one)."""
        bad = {(e.kind, e.name): (f"{e.field}: {e.message}" if e.field else e.message) for e in errors if e.reason == "InvalidSpec"}
        at = conditions.now()
        writes: list[tuple[str, str | None, str, dict[str, Any]]] = []
        for t in snap.templates:
            md: dict[str, Any] = t.get("metadata") or {}
            old: dict[str, Any] = t.get("status") or {}
            why = bad.get(("StreamTemplate", crd.key(t)))
            sp = t.get("spec") or {}
            pes, streams = sp.get("pes"), sp.get("streams")
            new: dict[str, Any] = {"pes": len(pes) if isinstance(pes, list) else 0, "streams": len(streams) if isinstance(streams, list) else 0,
                   "observedGeneration": md.get("generation"),
                   "conditions": [conditions.condition("Valid", why is None, "InvalidSpec" if why else "Valid", why or "", md.get("generation"),
                                                       old.get("conditions"), at)]}
            if any(old.get(k) != new[k] for k in ("pes", "streams", "observedGeneration")) or not conditions.same(old.get("conditions"), new["conditions"]):
                writes.append(("streamtemplates", md.get("namespace"), md.get("name", ""), new))
        if snap.policy is not None:
            md, old = snap.policy.get("metadata") or {}, snap.policy.get("status") or {}
            why = bad.get(("SchedulingPolicy", crd.key(snap.policy)))
            conds = [conditions.condition("Valid", why is None, "InvalidSpec" if why else "Valid",
                                          f"{why} (the defaults are used meanwhile)" if why else "", md.get("generation"), old.get("conditions"), at),
                     # the pipeline guard's verdict (issue 45): False while planning fails with this policy
                     conditions.condition("Planned", self.policy_fault is None, "PlanningFailed" if self.policy_fault else "Planned",
                                          self.policy_fault[1] if self.policy_fault else "", md.get("generation"), old.get("conditions"), at)]
            mine = {"Valid", "Planned"}  # the others are kept as they are (NodesDisrupted: .disruption)
            olds = [c for c in old.get("conditions") or [] if isinstance(c, dict)]
            if not conditions.same([c for c in olds if c.get("type") in mine], conds):
                writes.append(("schedulingpolicies", None, md.get("name", "default"),
                               {"conditions": conds + [c for c in olds if c.get("type") not in mine]}))
        self.applier.object_statuses(writes)  # concurrently: one at a time, 1,179 templates took tens of seconds

    def _report_invalid(self, snap: Snapshot, errors: list[crd.ObjectError]) -> None:
        jobs_by_key = {crd.key(j): j for j in snap.jobs}
        others = {("Node", crd.key(o)): ("v1", o) for o in snap.nodes}
        others.update({("StreamTemplate", crd.key(o)): (crd.API_VERSION, o) for o in snap.templates})
        if snap.policy:
            others[("SchedulingPolicy", crd.key(snap.policy))] = (crd.API_VERSION, snap.policy)
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        for e in errors:
            if e.kind != "StreamJob":
                # a bad Node, template or policy: a Warning Event on it, once per distinct message
                # (the jobs it affects get their own status; a bad node is left out of the plan)
                if (e.kind, e.name, str(e)) not in self.reported:
                    self.reported.add((e.kind, e.name, str(e)))
                    log.warning("invalid object: %s", e)
                    if (e.kind, e.name) in others:
                        api_version, o = others[(e.kind, e.name)]
                        self.applier.event({"apiVersion": api_version, "kind": e.kind, "metadata": o.get("metadata") or {}},
                                           e.reason, f"{e.field}: {e.message}" if e.field else e.message, "Warning")
                continue
            log.warning("invalid object: %s", e)
            if e.name not in jobs_by_key:
                continue
            obj = jobs_by_key[e.name]
            ns, name = e.name.split("/", 1)
            with self.status_lock:  # never promoted to Running afterwards by the refresh
                self.awaiting.pop((ns, name), None)
                old = self._old_status(obj)
                st = status.with_transitions(old, status.invalid(e.field, e.message, (obj.get("metadata") or {}).get("generation"), e.reason), now)
                if old.get("message") != st["message"]:
                    self.applier.event(obj, e.reason, st["message"], "Warning")
                if status_changed(old, st):
                    self._write_statuses([(obj, st)])


def policy_fields_changed(a: Policy, b: Policy) -> list[str]:
    """The SchedulingPolicy fields (as the CRD names them) in which ``a`` and ``b`` differ."""
    names = {dst: f"spec.{src}" for src, dst in crd.POLICY_FIELDS.items()}
    names.update({w: f"spec.objectiveWeights.{w}" for w in ("w1", "w2", "w3", "w4")})
    names.update({"links": "spec.links", "node_reserved_cores": "spec.nodeReservedCpu", "budgets": "spec.budgets", "merit": "spec.merit",
                  "rank_overrides": "spec.rankOverrides", "licenses": "spec.licenses", "incompatible_colors": "spec.incompatibleColors"})
    return sorted(names.get(f, f) for f in type(a).model_fields if getattr(a, f) != getattr(b, f))
