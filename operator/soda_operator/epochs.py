"""The macro and micro loops: snapshot -> crd -> optimizer -> Plan -> apply (SODA paper section 4).

- macro epoch (every ``Policy.macro_epoch_s``, and soon after a relevant change, debounced):
  macroQ + macroW on a consistent snapshot, then a micro step, then apply: admitted jobs get
  their PE instances, rejected jobs lose theirs, every StreamJob gets its status and an Event
  when its admission changes. A running job's template never changes (crd reads it back from
  status);
- micro epoch (every ``Policy.micro_epoch_s``): microQ + microW from the live node set and the
  fractions read back from the pods (never from memory); creates, resizes in place, deletes.
  A node that went NotReady or away loses its fractions within one micro epoch; when a PE has no
  usable candidate left, a macro epoch is triggered.

All state that must survive a restart is in the API server; the only memory is the last macroQ
result (component curves), recomputed by a macro epoch after a restart.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client

from soda_optimizer import pipeline
from soda_optimizer.model import Scenario
from soda_optimizer.plan import Plan
from soda_optimizer.stages import MacroQResult, MacroWResult

from . import crd, metrics
from .apply import Applier, Fenced, Instance, list_json, status_changed

log = logging.getLogger("kubesoda.epochs")
MIN_EPOCH_S = 1.0


@dataclass
class Snapshot:
    nodes: list[dict[str, Any]]
    templates: list[dict[str, Any]]
    jobs: list[dict[str, Any]]
    policy: dict[str, Any] | None
    pods: list[dict[str, Any]]
    services: set[tuple[str, str]] = field(default_factory=set)  # (namespace, name) of kubesoda's Services


class Loops:
    def __init__(self, api: client.ApiClient, workers: int = 16):
        self.api = api
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.applier = Applier(api, workers)
        self.last: tuple[MacroQResult, MacroWResult] | None = None  # the last feasible macro plan
        self.seen: set[str] = set()  # jobs of the last macro epoch, feasible or not
        self.seen_usable: set[str] = set()  # usable nodes at the last micro epoch
        self.reported: set[tuple[str, str, str]] = set()  # invalid Nodes/templates/policies already given an Event
        self.macro_due = threading.Event()
        self.micro_due = threading.Event()
        self.lock = threading.Lock()
        self.apply_s = 0.0  # duration of the last apply (logged with the macro epoch)
        # Admitted jobs whose instances were not all Running at the last apply: (job, status, pods)
        self.awaiting: dict[tuple[str, str], tuple[dict[str, Any], dict[str, Any], list[str]]] = {}

    # ------------------------------------------------------------------ snapshot
    def snapshot(self) -> Snapshot:
        nodes = list_json(self.core.list_node)
        templates = self.custom.list_cluster_custom_object(crd.GROUP, crd.VERSION, "streamtemplates")["items"]
        jobs = self.custom.list_cluster_custom_object(crd.GROUP, crd.VERSION, "streamjobs")["items"]
        try:
            policy = self.custom.get_cluster_custom_object(crd.GROUP, crd.VERSION, "schedulingpolicies", "default")
        except client.ApiException as e:
            if e.status != 404:
                raise
            policy = None
        pods = list_json(self.core.list_pod_for_all_namespaces, label_selector=crd.LABEL_JOB)
        services = {(v["metadata"]["namespace"], v["metadata"]["name"])
                    for v in list_json(self.core.list_service_for_all_namespaces, label_selector=crd.LABEL_JOB)}
        return Snapshot(nodes, templates, jobs, policy, pods, services)

    def policy_epochs(self, snap: Snapshot | None = None) -> tuple[float, float]:
        try:
            pol, _ = crd.policy_from_object((snap.policy if snap else None) or None)
        except crd.TranslationError:
            pol = crd.Policy()  # a bad policy is reported by the epoch's translation; the loop keeps its defaults
        # never faster than MIN_EPOCH_S, whatever the policy says (it would only load the API server)
        return max(pol.macro_epoch_s, MIN_EPOCH_S), max(pol.micro_epoch_s, MIN_EPOCH_S)

    # ------------------------------------------------------------------ epochs
    def macro_epoch(self) -> Plan | None:
        with self.lock:
            t0 = time.perf_counter()
            snap = self.snapshot()
            t_snap = time.perf_counter() - t0
            scen, errors = crd.scenario_from_objects(snap.nodes, snap.templates, snap.jobs, snap.policy, snap.pods)
            self._report_invalid(snap, errors)
            mq, mw = pipeline.macro(scen)
            for st in (mq.report, mw.report):
                metrics.STAGE_SECONDS.labels(st.stage).observe(st.seconds)
            # the jobs this epoch decided about: the micro loop asks for a macro epoch only when
            # this set changes, never because the last one could not place everything
            self.seen = {j.name for j in scen.jobs}
            self.seen_usable = {n.name for n in scen.usable_nodes()}
            if mq.report.status == "infeasible" or mw.report.status == "infeasible":
                # never tear down what runs: keep the last feasible plan (the micro loop keeps
                # adjusting it to the live nodes); the next macro epoch, or a change, tries again
                plan = pipeline.to_plan(scen, mq, mw, None, None)
                metrics.EPOCH_INFEASIBLE.inc()
                log.warning("macro epoch infeasible, keeping the last feasible plan%s: %s",
                            "" if self.last else " (none yet: nothing changes)", plan.message)
                return plan
            self.last = (mq, mw)
            plan = self._micro(snap, scen, mq, mw)
            metrics.EPOCH_SECONDS.labels("macro").observe(time.perf_counter() - t0)
            log.info("macro epoch: %d/%d jobs admitted, importance %.2f, %.2fs (snapshot %.2fs, macroQ %.2fs, macroW %.2fs, apply %.2fs)",
                     sum(d.admitted for d in plan.jobs), len(plan.jobs), plan.importance, time.perf_counter() - t0, t_snap,
                     mq.report.seconds, mw.report.seconds, self.apply_s)
            return plan

    def micro_epoch(self) -> Plan | None:
        if self.last is None:
            return None  # no feasible plan yet: the macro loop's own timing retries
        with self.lock:
            t0 = time.perf_counter()
            snap = self.snapshot()
            scen, errors = crd.scenario_from_objects(snap.nodes, snap.templates, snap.jobs, snap.policy, snap.pods)
            mq, mw = self.last
            if {j.name for j in scen.jobs} != self.seen:
                self.macro_due.set()  # jobs came or went: that is the macro model's decision
            usable = {n.name for n in scen.usable_nodes()}
            if any(not (set(c) & usable) for c in mw.candidates.values()) and self.seen_usable != usable:
                self.macro_due.set()  # a PE lost its candidates (once per change of the usable nodes)
            self.seen_usable = usable
            plan = self._micro(snap, scen, mq, mw)
            metrics.EPOCH_SECONDS.labels("micro").observe(time.perf_counter() - t0)
            return plan

    def _micro(self, snap: Snapshot, scen: Scenario, mq: MacroQResult, mw: MacroWResult) -> Plan:
        # jobs that disappeared since macroQ keep nothing
        live = {j.name for j in scen.jobs}
        uq, uw = pipeline.micro(scen, mq, {p: c for p, c in mw.candidates.items() if p.split(":")[0] in live})
        for st in (uq.report, uw.report):
            metrics.STAGE_SECONDS.labels(st.stage).observe(st.seconds)
        plan = pipeline.to_plan(scen, mq, mw, uq, uw)
        self._apply(snap, scen, plan, uw.fractions)
        return plan

    # ------------------------------------------------------------------ apply
    def _apply(self, snap: Snapshot, scen: Scenario, plan: Plan, fractions: dict[str, dict[str, float]]) -> None:
        t0 = time.perf_counter()
        try:
            self._apply_plan(snap, scen, plan, fractions)
        finally:
            self.apply_s = time.perf_counter() - t0

    def _apply_plan(self, snap: Snapshot, scen: Scenario, plan: Plan, fractions: dict[str, dict[str, float]]) -> None:
        node_cores = {n.name: n.cores for n in scen.nodes}
        jobs_by_key = {crd.key(j): j for j in snap.jobs}
        tmpl_by_key = {crd.key(t): t for t in snap.templates}
        admitted = {d.job: d for d in plan.jobs if d.admitted}
        wanted: list[Instance] = []
        for pe in plan.pes:
            if pe.job not in admitted:
                continue
            job_obj = jobs_by_key[pe.job]
            ns, jname = pe.job.split("/", 1)
            tmpl = tmpl_by_key.get(admitted[pe.job].template or "")
            spec = next((p for p in ((tmpl or {}).get("spec") or {}).get("pes") or [] if p.get("name") == pe.name), {})
            for node, f in fractions.get(pe.pe, {}).items():
                if f > 0 and node in node_cores:
                    wanted.append(Instance(ns, jname, pe.name, node, f, node_cores[node], pe.candidates, spec, job_obj))
        # statuses and Events first: a job shows its decision as soon as it is made, not after
        # hundreds of pod creates (they follow; the status names the pods it plans)
        updates = []
        events: list[tuple[dict[str, Any], str, str, str]] = []
        awaiting: dict[tuple[str, str], tuple[dict[str, Any], dict[str, Any], list[str]]] = {}
        pods_by_name = {(p["metadata"]["namespace"], p["metadata"]["name"]): p for p in snap.pods}
        for j in scen.jobs:
            obj = jobs_by_key[j.name]
            ns, name = j.name.split("/", 1)
            inst: dict[str, list[dict]] = {}
            running = True
            for w in (i for i in wanted if i.namespace == ns and i.job == name):
                pod = pods_by_name.get((ns, w.name))
                phase = ((pod or {}).get("status") or {}).get("phase")
                running &= phase == "Running"
                inst.setdefault(w.pe, []).append({"node": w.node, "fraction": round(w.fraction, 6), "pod": w.name})
            status = crd.job_status(plan, j.name, (obj.get("metadata") or {}).get("generation"), inst)
            if status["phase"] == "Admitted":
                # Running = every PE has an instance and every instance runs; a PE left without one
                # (its candidate nodes went away) makes the job Degraded until a macro epoch re-places it
                # (a PE whose macroQ goal is 0 has no instance by design: macroQ gave it nothing; its
                # microQ goal is also 0 when it cannot be hosted, so that one does not tell)
                missing = sorted(p.name for p in plan.pes if p.job == j.name and p.macro_goal_mips > 0 and not inst.get(p.name))
                if missing:
                    status.update(phase="Degraded", reason="NoUsableCandidate",
                                  message=f"no usable candidate node for PE(s) {', '.join(missing)}; waiting for the next macro epoch")
                elif running:
                    status["phase"] = "Running"
                else:  # promoted by refresh_running() as soon as its pods run, not an epoch later
                    awaiting[(ns, name)] = (obj, status, [i["pod"] for v in inst.values() for i in v])
            old = obj.get("status") or {}
            if old.get("phase") != status["phase"] or old.get("reason") != status.get("reason"):
                events.append((obj, status["phase"], status.get("message") or status.get("reason") or status["phase"],
                               "Normal" if status["phase"] in ("Admitted", "Running") else "Warning"))
            if status_changed(old, status):
                updates.append((ns, name, status))
        self.applier.job_statuses(updates)
        self.applier.events(events)
        self.awaiting = awaiting
        managed = {tuple(j.name.split("/", 1)) for j in scen.jobs}
        counts = self.applier.sync_pods(wanted, snap.pods, managed)  # type: ignore[arg-type]
        services = sorted({(*p.job.split("/", 1), p.name) for p in plan.pes if p.job in admitted})
        counts["service"] = self.applier.ensure_services([(ns, j, pe, jobs_by_key[f"{ns}/{j}"]) for ns, j, pe in services], snap.services)
        counts["status"] = len(updates)
        metrics.IMPORTANCE.set(plan.importance)
        metrics.JOBS.labels("admitted").set(len(admitted))
        metrics.JOBS.labels("rejected").set(len(plan.jobs) - len(admitted))
        if any(counts.values()):
            log.info("applied: %s", counts)

    def refresh_running(self) -> int:
        """Between epochs: an Admitted job whose planned instances all run becomes Running now, not
        at the next epoch (one list of kubesoda's pods; the plan is the last epoch's, nothing else
        changes). Returns how many jobs were promoted."""
        with self.lock:
            if not self.awaiting:
                return 0
            phase = {(p["metadata"]["namespace"], p["metadata"]["name"]): (p.get("status") or {}).get("phase")
                     for p in list_json(self.core.list_pod_for_all_namespaces, label_selector=crd.LABEL_JOB)}
            done = [(key, obj, status) for key, (obj, status, pods) in self.awaiting.items()
                    if pods and all(phase.get((key[0], pod)) == "Running" for pod in pods)]
            self.applier.job_statuses([(key[0], key[1], dict(status, phase="Running")) for key, _, status in done])
            self.applier.events([(obj, "Running", status.get("message") or "every instance runs", "Normal") for _, obj, status in done])
            for key, _, _ in done:
                del self.awaiting[key]
            return len(done)

    def _report_invalid(self, snap: Snapshot, errors: list[crd.ObjectError]) -> None:
        jobs_by_key = {crd.key(j): j for j in snap.jobs}
        others = {("Node", crd.key(o)): ("v1", o) for o in snap.nodes}
        others.update({("StreamTemplate", crd.key(o)): (crd.API_VERSION, o) for o in snap.templates})
        if snap.policy:
            others[("SchedulingPolicy", crd.key(snap.policy))] = (crd.API_VERSION, snap.policy)
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
                                           "InvalidSpec", f"{e.field}: {e.message}" if e.field else e.message, "Warning")
                continue
            log.warning("invalid object: %s", e)
            if e.name not in jobs_by_key:
                continue
            obj = jobs_by_key[e.name]
            ns, name = e.name.split("/", 1)
            status = {"phase": "Invalid", "reason": "InvalidSpec", "message": f"{e.field}: {e.message}" if e.field else e.message,
                      "observedGeneration": (obj.get("metadata") or {}).get("generation")}
            if (obj.get("status") or {}).get("message") != status["message"]:
                self.applier.event(obj, "InvalidSpec", status["message"], "Warning")
            if status_changed(obj.get("status"), status):
                self.applier.job_status(ns, name, status)

    # ------------------------------------------------------------------ loop
    def run(self, stop: threading.Event, debounce_s: float = 1.0, max_debounce_s: float = 10.0, refresh_s: float = 1.0) -> None:
        """Run both loops until ``stop`` is set (the leader's daemon). Once ``stop`` is set, the
        epoch in progress writes nothing more (the applier's fence)."""
        self.applier.fence = stop.is_set
        next_macro = 0.0
        next_micro = 0.0
        next_refresh = 0.0
        while not stop.is_set():
            try:
                macro_s, micro_s = self.policy_epochs(None)
                try:
                    pol = self.custom.get_cluster_custom_object(crd.GROUP, crd.VERSION, "schedulingpolicies", "default")
                    macro_s, micro_s = self.policy_epochs(Snapshot([], [], [], pol, []))
                except client.ApiException:
                    pass
                now = time.monotonic()
                if self.macro_due.is_set():
                    # debounce: wait for a quiet second (a `kubectl apply` of many jobs arrives over
                    # several seconds; planning on half of them would place the rest around them),
                    # but never longer than max_debounce_s
                    first = time.monotonic()
                    while True:
                        self.macro_due.clear()
                        if stop.wait(debounce_s) or not self.macro_due.is_set() or time.monotonic() - first >= max_debounce_s:
                            break
                    next_macro = 0.0
                if now >= next_macro:
                    # a failed epoch is retried a micro epoch later, never in a tight loop
                    next_macro = next_micro = time.monotonic() + micro_s
                    self.macro_epoch()
                    next_macro = time.monotonic() + macro_s
                    next_micro = time.monotonic() + micro_s
                elif now >= next_micro or self.micro_due.is_set():
                    self.micro_due.clear()
                    next_micro = time.monotonic() + micro_s
                    self.micro_epoch()
                    next_micro = time.monotonic() + micro_s
                elif self.awaiting and now >= next_refresh:
                    self.refresh_running()
                    next_refresh = time.monotonic() + refresh_s
            except Fenced:
                log.info("stopped mid-epoch: no more writes from this replica")
                return
            except Exception:  # never crash-loop: log and try again next tick
                metrics.EPOCH_FAILURES.inc()
                log.exception("epoch failed")
                stop.wait(2.0)
            wait = max(0.05, min(next_macro, next_micro, next_refresh if self.awaiting else next_micro) - time.monotonic())
            # wake early when a handler flags work
            for _ in range(int(wait / 0.1) + 1):
                if stop.is_set() or self.macro_due.is_set() or self.micro_due.is_set():
                    break
                time.sleep(min(0.1, wait))
