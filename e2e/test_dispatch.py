"""Batch dispatch live (docs/dispatch.md, issue 17): gated Jobs of three priorities with deadlines on four KWOK
nodes of the small topology, two of them relabelled as a faster class (node-class ``fast``, mips 2000: a prior of
2x) whose *true* speed is 3x (known only to hack/task_sim.py, which ends the task pods after work / speed).

- with no BatchDispatch yet, every task pod waits gated;
- the first decision is Algorithm 4's (deadline-based, fill by deadline): each job in priority order takes the
  fastest slots its deadline needs, the spare slots go to the closest deadline; never more tasks are released than
  slots (2 cores per task on 4-core nodes: 2 slots per node);
- every Job finishes before its deadline (no penalty), and the speed matrix learned that ``fast`` is faster;
- a node failure (NotReady) deletes its running tasks, their Job recreates them gated and they are dispatched
  again elsewhere; the Job still completes;
- a Job without the gate is left to the default scheduler.

And the paper's worker model (issue 35, item 5; :func:`test_plan_driven_dispatch_and_preemption`): on two nodes of
two slots each, a BatchDispatch whose periodic decision is a minute away (so only events drive it) -- the plan maps
every slot, busy or idle, to a Job; busy pods finish their task and the slot each frees goes, within seconds, to the
Job the plan then names: every pending pod of the high-priority Job takes a freed slot before any pod of the
lower priority, no running pod is deleted; with ``preemption: true`` the running pods of a low-priority Job are
evicted for a high-priority one, which takes their slots, and the evicted tasks come back gated and run later.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

from kubernetes import client, watch
from live import GROUP, ROOT, VERSION, start_operator

sys.path.insert(0, str(ROOT / "hack"))
import task_sim  # noqa: E402

TOL = "tolerations: [{key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}]"
FAST = ["z0-r0-n0", "z0-r0-n1"]
SLOW = ["z0-r1-n0", "z0-r1-n1"]
TRUE_SPEED = {**{n: 3.0 for n in FAST}, **{n: 1.0 for n in SLOW}}
WORK = 8  # seconds of work per task on a speed-1 node


def job(name: str, prio: int, deadline: int, tasks: int, work: float = WORK, gate: bool = True, indexed: bool = True, cpu: str = "2") -> str:
    gates = "schedulingGates: [{name: kubesoda.io/dispatch}]" if gate else ""
    return f"""---
apiVersion: batch/v1
kind: Job
metadata:
  name: {name}
  annotations: {{kubesoda.io/priority: "{prio}", kubesoda.io/deadline: "{deadline}", kubesoda.io/task-work: "{work}"}}
spec:
  completions: {tasks}
  parallelism: {tasks}
  backoffLimit: 20
  {"completionMode: Indexed" if indexed else ""}
  template:
    metadata: {{annotations: {{kubesoda.io/sim-work: "{work}"}}}}
    spec:
      restartPolicy: Never
      {gates}
      {TOL}
      containers: [{{name: task, image: registry.k8s.io/pause:3.10, resources: {{requests: {{cpu: '{cpu}', memory: 1Gi}}}}}}]
"""


def dispatcher(ns: str) -> str:
    return f"""apiVersion: kubesoda.io/v1alpha1
kind: BatchDispatch
metadata: {{name: default}}
spec: {{policy: deadline, intervalSeconds: 1, nodeSelector: {{kubesoda.io/e2e-dispatch: {ns}}}}}
"""


def pods_of(kube, ns, jobname):
    return [p for p in kube.core.list_namespaced_pod(ns, label_selector=f"batch.kubernetes.io/job-name={jobname}").items]


def released(p) -> str | None:
    return (p.metadata.annotations or {}).get("kubesoda.io/dispatch-node")


def pinned(p) -> list[str]:
    """The Node names a released pod's required node affinity names (``matchFields metadata.name In [...]``)."""
    na = p.spec.affinity.node_affinity if p.spec.affinity and p.spec.affinity.node_affinity else None
    req = na.required_during_scheduling_ignored_during_execution if na else None
    return [v for t in (req.node_selector_terms if req else []) for f in t.match_fields or [] if f.key == "metadata.name" for v in f.values]


def job_done(kube, ns, name) -> bool:
    st = client.BatchV1Api(kube.api_client).read_namespaced_job(name, ns).status
    return any(c.type == "Complete" and c.status == "True" for c in st.conditions or [])


def drop_dispatchers(kubectl, ns) -> None:
    """Delete the namespace's BatchDispatches while the operator runs: Kopf holds a finalizer on objects with timers,
    and what it has not released in 10 s is released here, so that the namespace can go at once."""
    kubectl("delete", "-n", ns, "batchdispatches", "--all", "--wait=false", check=False)
    kubectl("wait", "--for=delete", "-n", ns, "batchdispatches", "--all", "--timeout=10s", check=False)
    kubectl("patch", "-n", ns, "batchdispatch", "default", "--type=merge", "-p", '{"metadata":{"finalizers":null}}', check=False)


def bd_status(kube, ns):
    return kube.custom.get_namespaced_custom_object(GROUP, VERSION, ns, "batchdispatches", "default").get("status") or {}


def test_dispatch_priorities_deadlines_speeds_and_failure(kube, kubectl, namespace, extender_port, wait_for, tmp_path):
    ns = namespace
    orig = {n: dict(kube.core.read_node(n).metadata.labels) for n in FAST + SLOW}
    stop = threading.Event()
    sim = threading.Thread(target=task_sim.run, args=(kube.core, ns, TRUE_SPEED, 1.0, 0.1, stop), daemon=True)
    op = None
    victim = None
    try:
        for n in FAST:
            kube.core.patch_node(n, {"metadata": {"labels": {"kubesoda.io/node-class": "fast", "kubesoda.io/mips-per-core": "2000",
                                                             "kubesoda.io/e2e-dispatch": ns}}})
        for n in SLOW:
            kube.core.patch_node(n, {"metadata": {"labels": {"kubesoda.io/e2e-dispatch": ns}}})
        kubectl("apply", "--server-side", "-f", str(ROOT / "crds" / "batchdispatches.yaml"))
        kubectl("wait", "--for=condition=Established", "crd/batchdispatches.kubesoda.io", "--timeout=60s")
        op = start_operator(kubectl, extender_port, log=str(tmp_path / "operator.log"))
        sim.start()
        t0 = time.monotonic()
        # three priorities, deadlines in seconds after creation; a Job without the gate on a node outside the group
        kubectl("apply", "-n", ns, "-f", "-", input=job("high", 3, 45, 6) + job("mid", 2, 70, 6) + job("low", 1, 110, 6, indexed=False)
                + job("plain", 3, 30, 1, gate=False).replace("restartPolicy: Never", "restartPolicy: Never\n      nodeSelector: {kubernetes.io/hostname: z1-r1-n1}"))
        wait_for(lambda: sum(len(pods_of(kube, ns, j)) for j in ("high", "mid", "low")) == 18, timeout=30, what="18 task pods created")
        time.sleep(3)  # the operator is up: without a BatchDispatch nothing is released
        pods = [p for j in ("high", "mid", "low") for p in pods_of(kube, ns, j)]
        assert all(p.spec.scheduling_gates and not released(p) and not p.spec.node_name for p in pods)
        kubectl("apply", "-n", ns, "-f", "-", input=dispatcher(ns))
        # the first decision fills the 8 slots; no task ends before ~2.4 s, so the next release comes later
        first = wait_for(lambda: (r := [p for j in ("high", "mid", "low") for p in pods_of(kube, ns, j) if released(p)]) and len(r) >= 8 and r,
                         timeout=30, interval=0.2, what="the first decision's 8 tasks released")
        t_first = time.monotonic() - t0
        # the first decision: 8 slots (2 per node); the most urgent job (high: 48 units in 45 s) takes the fast slots first
        on = {}
        for p in first:
            on.setdefault(released(p), []).append(p.metadata.labels["batch.kubernetes.io/job-name"])
        print(f"\nfirst decision {t_first:.1f} s after the apply: {on}")
        assert len(first) == 8
        # deadline-based, fill by deadline (Algorithm 4, section 5.5): by priority, each job takes the fastest free
        # slots until sum 1/T >= 1/d: high (48 units in ~40 s, 1.2/s) one fast slot (prior 2/s), mid (~0.75/s) one,
        # low (~0.46/s) one; then the spare slots by closest deadline, fastest first: high's other 5 tasks take the last
        # fast slot and the 4 slow ones. mid and low keep 5 tasks each gated.
        assert sorted(j for n in FAST for j in on.get(n, [])) == ["high", "high", "low", "mid"], on
        assert sorted(j for n in SLOW for j in on.get(n, [])) == ["high"] * 4, on
        # never more tasks released and unfinished on a node than its slots; gated ones wait
        peak = 0
        saw_waiting = False
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            pods = [p for j in ("high", "mid", "low") for p in pods_of(kube, ns, j)]
            live: dict[str, int] = {}
            for p in pods:
                if released(p) and p.status.phase not in ("Succeeded", "Failed") and not p.metadata.deletion_timestamp:
                    live[released(p)] = live.get(released(p), 0) + 1
            assert all(c <= 2 for c in live.values()), live
            peak = max(peak, sum(live.values()))
            saw_waiting |= any(p.spec.scheduling_gates for p in pods)
            if all(job_done(kube, ns, j) for j in ("high", "mid", "low")):
                break
            time.sleep(0.5)
        t_done = time.monotonic() - t0
        assert all(job_done(kube, ns, j) for j in ("high", "mid", "low")), "the jobs did not complete"
        assert saw_waiting and peak <= 8
        # released pods ran where kubesoda put them
        for j in ("high", "mid", "low"):
            for p in pods_of(kube, ns, j):
                if p.status.phase == "Succeeded":
                    assert [p.spec.node_name] == [released(p)] == pinned(p), (p.metadata.name, pinned(p))
                    assert "kubernetes.io/hostname" not in (p.spec.node_selector or {})
        st = wait_for(lambda: (s := bd_status(kube, ns)) and all(x["complete"] for x in s.get("jobs", []) if x["job"] in ("high", "mid", "low")) and s,
                      timeout=15, what="status: the three jobs complete")
        per = {x["job"]: x for x in st["jobs"]}
        print(f"all 18 tasks done {t_done:.1f} s after the apply; status: " + ", ".join(
            f"{j}: done {per[j]['done']} penalty {per[j]['penalty']} finish {per[j]['projectedFinish']} deadline {per[j]['deadline']}" for j in ("high", "mid", "low")))
        for j in ("high", "mid", "low"):
            assert per[j]["done"] == 6 and per[j]["penalty"] == 0 and per[j]["meetsDeadline"], per[j]
        speeds = {(s["kind"], s["nodeClass"]): s["throughput"] for s in st["speeds"]}
        print(f"learned throughput (units/s per slot): {speeds}")
        assert speeds[("default", "fast")] > 1.5 * speeds[("default", "mips-1000")], speeds
        # the Job without the gate: scheduled by the default scheduler, untouched by kubesoda
        plain = pods_of(kube, ns, "plain")
        assert plain and all(not released(p) and p.spec.node_name == "z1-r1-n1" for p in plain)

        reasons = {(e.involved_object.kind, e.involved_object.name, e.reason) for e in kube.core.list_namespaced_event(ns).items}
        assert {("BatchDispatch", "default", "Dispatched"), ("Job", "high", "Dispatched"), ("Job", "low", "Dispatched")} <= reasons, reasons
        assert not {r for r in reasons if r[2] == "DeadlineAtRisk"}, reasons  # every projection met its deadline
        # ---- an operator restart keeps the learned speeds (they live in the BatchDispatch's status)
        samples = {s["nodeClass"]: s["samples"] for s in st["speeds"]}
        op.stop()
        op = start_operator(kubectl, extender_port, log=str(tmp_path / "operator-restarted.log"))

        # ---- a node failure: tasks of a long job running on a fast node are deleted and dispatched again
        kubectl("apply", "-n", ns, "-f", "-", input=job("long", 2, 120, 8, work=24))
        running = wait_for(lambda: [p for p in pods_of(kube, ns, "long") if released(p) in FAST and p.status.phase == "Running"], timeout=30,
                           what="long running on a fast node")
        victim = released(running[0])
        lost = {p.metadata.uid for p in pods_of(kube, ns, "long") if released(p) == victim}
        t1 = time.monotonic()
        kube.core.patch_node(victim, {"metadata": {"annotations": {"kubesoda.io/simulate-not-ready": "true"}}})
        kube.core.patch_node_status(victim, {"status": {"conditions": [{"type": "Ready", "status": "False", "reason": "KubeletDown", "message": "e2e"}]}})
        wait_for(lambda: not ({p.metadata.uid for p in pods_of(kube, ns, "long")} & lost), timeout=30, what=f"long's pods on {victim} deleted")
        t_del = time.monotonic() - t1
        wait_for(lambda: job_done(kube, ns, "long"), timeout=60, what="long complete after the failure")
        t_long = time.monotonic() - t1
        after = pods_of(kube, ns, "long")
        assert all(released(p) != victim for p in after), "a task was dispatched to the failed node"
        st = bd_status(kube, ns)
        assert st.get("redispatched", 0) >= len(lost)
        now = {s["nodeClass"]: s["samples"] for s in st["speeds"]}
        assert all(now[c] >= min(samples[c] + 1, 20) for c in samples), (samples, now)  # kept across the restart, then grew
        print(f"node failure: {len(lost)} task(s) on {victim} deleted {t_del:.1f} s after NotReady, redispatched; long complete {t_long:.1f} s after")
    finally:
        stop.set()
        drop_dispatchers(kubectl, ns)
        if op is not None:
            op.stop()
        if victim:
            kube.core.patch_node(victim, {"metadata": {"annotations": {"kubesoda.io/simulate-not-ready": None}}})
        for n, labels in orig.items():
            kube.core.patch_node(n, {"metadata": {"labels": {k: labels.get(k) for k in ("kubesoda.io/node-class", "kubesoda.io/mips-per-core",
                                                                                           "kubesoda.io/e2e-dispatch")}}})
        kubectl("delete", "-n", ns, "jobs", "--all", "--wait=false", check=False)


# ---------------------------------------------------------------------------------------------- the plan model
PLAN_NODES = ["z0-r0-n0", "z0-r0-n1"]  # 4 CPU each, tasks of 2 CPU: 2 slots each, 4 in all
LOW, HIGH, MID = "low", "high", "mid"


class PodLog:
    """Every watch event of the namespace's pods, with the time it was seen: (t, type, name, job, released node,
    phase, being deleted)."""

    def __init__(self, core: client.CoreV1Api, ns: str) -> None:
        self.events: list[tuple[float, str, str, str, str | None, str, bool]] = []
        self._w = watch.Watch()
        self._t = threading.Thread(target=self._run, args=(core, ns), daemon=True)
        self._t.start()

    def _run(self, core: client.CoreV1Api, ns: str) -> None:
        try:
            for ev in self._w.stream(core.list_namespaced_pod, ns, timeout_seconds=300):
                p = ev["object"]
                self.events.append((time.monotonic(), ev["type"], p.metadata.name, (p.metadata.labels or {}).get("batch.kubernetes.io/job-name", ""),
                                    released(p), p.status.phase or "", p.metadata.deletion_timestamp is not None))
        except Exception as e:  # the namespace going away at the end
            print(f"pod watch ended: {e}")

    def stop(self) -> None:
        self._w.stop()

    def first(self, pred: Any) -> dict[str, float]:
        """Each pod's first time ``pred(event)`` held."""
        out: dict[str, float] = {}
        for e in list(self.events):
            if e[2] not in out and pred(e):
                out[e[2]] = e[0]
        return out

    def job_of(self) -> dict[str, str]:
        return {e[2]: e[3] for e in self.events}


def plan_dispatcher(ns: str) -> str:
    """Priority-based, spare slots by priority, a periodic decision a minute away; ``preemption`` left to the CRD's
    default (off)."""
    return f"""apiVersion: kubesoda.io/v1alpha1
kind: BatchDispatch
metadata: {{name: default}}
spec: {{policy: priority, fill: priority, intervalSeconds: 60, nodeSelector: {{kubesoda.io/e2e-dispatch: {ns}}}}}
"""


def test_plan_driven_dispatch_and_preemption(kube, kubectl, namespace, extender_port, wait_for, tmp_path):
    """Priority-based (r = 0) with the spare fill by priority, on 4 slots: the plan gives the highest-priority Job
    as many slots as it has unfinished tasks, then the next. ``intervalSeconds: 60``: every decision after the first
    is taken at an event (a task pod's, a Job's, a Node's)."""
    ns = namespace
    orig = {n: dict(kube.core.read_node(n).metadata.labels) for n in PLAN_NODES}
    stop = threading.Event()
    sim = threading.Thread(target=task_sim.run, args=(kube.core, ns, {}, 1.0, 0.05, stop), daemon=True)
    op = None
    log = PodLog(kube.core, ns)
    batch = client.BatchV1Api(kube.api_client)
    t_start = time.monotonic()
    try:
        for n in PLAN_NODES:
            kube.core.patch_node(n, {"metadata": {"labels": {"kubesoda.io/e2e-dispatch": ns}}})
        kubectl("apply", "--server-side", "-f", str(ROOT / "crds" / "batchdispatches.yaml"))
        kubectl("wait", "--for=condition=Established", "crd/batchdispatches.kubesoda.io", "--timeout=60s")
        op = start_operator(kubectl, extender_port, log=str(tmp_path / "operator.log"))
        sim.start()
        print(f"\noperator started in {time.monotonic() - t_start:.1f} s")
        # ---- preemption off. low (priority 1) takes the 4 slots, 6 s per task
        kubectl("apply", "-n", ns, "-f", "-", input=job(LOW, 1, 600, 4, work=6))
        wait_for(lambda: len(pods_of(kube, ns, LOW)) == 4, timeout=30, what="low's 4 pods")
        kubectl("apply", "-n", ns, "-f", "-", input=plan_dispatcher(ns))
        wait_for(lambda: sum(p.status.phase == "Running" for p in pods_of(kube, ns, LOW)) == 4, timeout=30, what="low running on the 4 slots")
        # high (priority 3, 5 tasks) and mid (priority 2, 4 tasks) arrive: 9 pending pods for 4 busy slots
        t_arrive = time.monotonic()
        kubectl("apply", "-n", ns, "-f", "-", input=job(HIGH, 3, 600, 5, work=3) + job(MID, 2, 600, 4, work=3))
        wait_for(lambda: len(pods_of(kube, ns, HIGH)) == 5 and len(pods_of(kube, ns, MID)) == 4, timeout=30, what="high's and mid's pods")
        st = wait_for(lambda: (s := bd_status(kube, ns)) and {j["job"]: j.get("planned") for j in s.get("jobs", [])}.get(HIGH) == 4 and s,
                      timeout=15, what="the plan: the 4 busy slots for high")
        planned = {j["job"]: j["planned"] for j in st["jobs"]}
        print(f"\nplan while low runs on every slot: {planned}")
        assert planned == {HIGH: 4, MID: 0, LOW: 0}, planned
        wait_for(lambda: all(job_done(kube, ns, j) for j in (LOW, HIGH, MID)), timeout=60, interval=0.5, what="low, high and mid complete")
        t_done = time.monotonic()
        rel = log.first(lambda e: e[4] is not None)
        fin = log.first(lambda e: e[5] == "Succeeded")
        jobs = log.job_of()
        order = sorted((t, jobs[p]) for p, t in rel.items() if t > t_arrive)
        print("released after high and mid arrived, in order: " + " ".join(f"{j}@{t - t_arrive:.1f}s" for t, j in order))
        # every pending pod of high took a freed slot before any pod of mid; low got no slot again
        assert [j for _, j in order] == [HIGH] * 5 + [MID] * 4, order
        # each release came within seconds of a slot freed (the decision at the finishing pod's event, not the
        # periodic one a minute away), and never before one was freed: the slots were never oversubscribed
        finishes = sorted(fin.values())
        lags = []
        for t, _ in order:
            before = [f for f in finishes if f <= t + 0.05]
            assert before and len(before) >= sum(1 for u, _ in order if u <= t), (t, finishes)
            lags.append(t - max(before))
        print(f"slot freed -> next pod released: median {sorted(lags)[len(lags) // 2]:.2f} s, max {max(lags):.2f} s "
              f"(intervalSeconds 60); all done {t_done - t_arrive:.1f} s after high and mid arrived")
        assert max(lags) < 4.0, lags
        # no running pod was deleted or evicted: every pod of the three Jobs ran once and succeeded
        assert not [e for e in log.events if e[3] in (LOW, HIGH, MID) and (e[1] == "DELETED" or e[6])], "a pod was deleted"
        for j, n in ((LOW, 4), (HIGH, 5), (MID, 4)):
            ps = pods_of(kube, ns, j)
            assert len(ps) == n and all(p.status.phase == "Succeeded" for p in ps), j
            assert all([p.spec.node_name] == [released(p)] == pinned(p) for p in ps), j
        assert bd_status(kube, ns).get("preempted", 0) == 0
        # ---- preemption on: bg (priority 1, 2 long tasks) runs on 2 slots, 2 are idle; urgent (priority 3, 4 tasks)
        # arrives: the plan gives urgent all 4 slots, the idle ones at once, bg's two by eviction
        bd = kube.custom.get_namespaced_custom_object(GROUP, VERSION, ns, "batchdispatches", "default")
        assert bd["spec"]["preemption"] is False  # the CRD's default, written by the API server
        kube.custom.patch_namespaced_custom_object(GROUP, VERSION, ns, "batchdispatches", "default", {"spec": {"preemption": True}})
        kubectl("apply", "-n", ns, "-f", "-", input=job("bg", 1, 600, 2, work=60))
        first_bg = wait_for(lambda: (r := [p for p in pods_of(kube, ns, "bg") if p.status.phase == "Running"]) and len(r) == 2 and r,
                            timeout=30, what="bg running on 2 slots")
        victims = {p.metadata.name for p in first_bg}
        t_urgent = time.monotonic()
        kubectl("apply", "-n", ns, "-f", "-", input=job("urgent", 3, 600, 4, work=3))
        wait_for(lambda: job_done(kube, ns, "urgent"), timeout=40, interval=0.5, what="urgent complete")
        t_u = time.monotonic() - t_urgent
        gone = log.first(lambda e: e[2] in victims and (e[1] == "DELETED" or e[6]))
        rel = log.first(lambda e: e[4] is not None)
        urgent = sorted(rel[p] - t_urgent for p in rel if p.startswith("urgent"))
        print(f"preemption: urgent's pods released {', '.join(f'{t:.1f}' for t in urgent)} s after it arrived; bg's {len(gone)} running "
              f"pods evicted {max(gone.values()) - t_urgent:.1f} s after; urgent complete {t_u:.1f} s after (bg's tasks take 60 s)")
        assert set(gone) == victims, (gone, victims)  # every running bg pod was evicted for urgent ...
        assert len(urgent) == 4 and urgent[2] >= min(gone.values()) - t_urgent  # ... whose last two pods took their slots
        st = bd_status(kube, ns)
        assert st["preempted"] == 2 and not st.get("preemptionBlocked"), st
        evs = {(e.involved_object.kind, e.involved_object.name, e.reason) for e in kube.core.list_namespaced_event(ns).items}
        assert {("BatchDispatch", "default", "Preempted"), ("Job", "bg", "Preempted")} <= evs, evs
        # bg's tasks come back gated (its Job recreates them, after Kubernetes' back-off for failed pods) and are
        # dispatched again: urgent is done, so the plan gives them the slots
        back = wait_for(lambda: (r := [p for p in pods_of(kube, ns, "bg") if p.metadata.name not in victims and released(p)]) and len(r) == 2 and r,
                        timeout=60, what="bg's recreated pods released again")
        assert all(not p.spec.scheduling_gates and pinned(p) for p in back)
        print(f"bg's 2 recreated pods released again {time.monotonic() - t_urgent:.1f} s after urgent arrived; "
              f"{time.monotonic() - t_start:.1f} s since the test began")
    finally:
        stop.set()
        log.stop()
        drop_dispatchers(kubectl, ns)
        if op is not None:
            op.stop()
        print(f"operator stopped, {time.monotonic() - t_start:.1f} s since the test began")
        for n, labels in orig.items():
            kube.core.patch_node(n, {"metadata": {"labels": {"kubesoda.io/e2e-dispatch": labels.get("kubesoda.io/e2e-dispatch")}}})
        for j in batch.list_namespaced_job(ns).items:
            batch.delete_namespaced_job(j.metadata.name, ns, propagation_policy="Background")


def test_an_urgent_job_takes_an_idle_slot_at_once_without_eviction(kube, kubectl, namespace, extender_port, wait_for, tmp_path):
    """Issue 51: a fast node (mips 2000) full of ``low``'s pods, a slow node with one slot busy (``low``) and one
    idle, ``preemption: true``. ``urgent`` (priority 5) arrives: the plan gives it the fastest slot (busy with
    ``low``); its pod goes to the idle slow slot at once and no pod of ``low`` is evicted. (Main planned it behind the
    busy fast slot: nothing released, and ``low``'s pod there evicted beside the idle slot.)"""
    ns = namespace
    fast, slow = PLAN_NODES
    orig = {n: dict(kube.core.read_node(n).metadata.labels) for n in PLAN_NODES}
    stop = threading.Event()
    sim = threading.Thread(target=task_sim.run, args=(kube.core, ns, {}, 1.0, 0.1, stop), daemon=True)
    op = None
    log = PodLog(kube.core, ns)
    try:
        kube.core.patch_node(fast, {"metadata": {"labels": {"kubesoda.io/node-class": "fast", "kubesoda.io/mips-per-core": "2000",
                                                            "kubesoda.io/e2e-dispatch": ns}}})
        kube.core.patch_node(slow, {"metadata": {"labels": {"kubesoda.io/e2e-dispatch": ns}}})
        kubectl("apply", "--server-side", "-f", str(ROOT / "crds" / "batchdispatches.yaml"))
        kubectl("wait", "--for=condition=Established", "crd/batchdispatches.kubesoda.io", "--timeout=60s")
        op = start_operator(kubectl, extender_port, log=str(tmp_path / "operator.log"))
        sim.start()
        kubectl("apply", "-n", ns, "-f", "-", input=job(LOW, 1, 600, 3, work=120))
        wait_for(lambda: len(pods_of(kube, ns, LOW)) == 3, timeout=30, what="low's 3 pods")
        kubectl("apply", "-n", ns, "-f", "-", input=f"""apiVersion: kubesoda.io/v1alpha1
kind: BatchDispatch
metadata: {{name: default}}
spec: {{policy: deadline, preemption: true, intervalSeconds: 60, nodeSelector: {{kubesoda.io/e2e-dispatch: {ns}}}}}
""")
        lows = wait_for(lambda: (r := [p for p in pods_of(kube, ns, LOW) if p.status.phase == "Running"]) and len(r) == 3 and r,
                        timeout=30, what="low running on 3 of the 4 slots")
        assert sorted(released(p) for p in lows) == sorted([fast, fast, slow]), [released(p) for p in lows]
        t0 = time.monotonic()
        kubectl("apply", "-n", ns, "-f", "-", input=job("urgent", 5, 30, 1, work=3))
        got = wait_for(lambda: (r := [p for p in pods_of(kube, ns, "urgent") if released(p)]) and r, timeout=20, interval=0.2,
                       what="urgent's pod released")
        t_rel = time.monotonic() - t0
        wait_for(lambda: job_done(kube, ns, "urgent"), timeout=30, interval=0.5, what="urgent complete")
        print(f"\nurgent released to {released(got[0])} {t_rel:.1f} s after it was created; complete {time.monotonic() - t0:.1f} s after")
        assert released(got[0]) == slow, released(got[0])
        assert not [e for e in log.events if e[3] == LOW and (e[1] == "DELETED" or e[6])], "a pod of low was evicted"
        assert all(p.status.phase == "Running" for p in pods_of(kube, ns, LOW))
        assert bd_status(kube, ns).get("preempted", 0) == 0
    finally:
        stop.set()
        log.stop()
        drop_dispatchers(kubectl, ns)
        if op is not None:
            op.stop()
        for n, labels in orig.items():
            kube.core.patch_node(n, {"metadata": {"labels": {k: labels.get(k) for k in ("kubesoda.io/node-class", "kubesoda.io/mips-per-core",
                                                                                           "kubesoda.io/e2e-dispatch")}}})
        kubectl("delete", "-n", ns, "jobs", "--all", "--wait=false", check=False)
