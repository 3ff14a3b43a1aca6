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
"""

from __future__ import annotations

import sys
import threading
import time

from kubernetes import client
from live import GROUP, ROOT, VERSION, start_operator

sys.path.insert(0, str(ROOT / "hack"))
import task_sim  # noqa: E402

TOL = "tolerations: [{key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}]"
FAST = ["z0-r0-n0", "z0-r0-n1"]
SLOW = ["z0-r1-n0", "z0-r1-n1"]
TRUE_SPEED = {**{n: 3.0 for n in FAST}, **{n: 1.0 for n in SLOW}}
WORK = 8  # seconds of work per task on a speed-1 node


def job(name: str, prio: int, deadline: int, tasks: int, work: float = WORK, gate: bool = True, indexed: bool = True) -> str:
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
      containers: [{{name: task, image: registry.k8s.io/pause:3.10, resources: {{requests: {{cpu: '2', memory: 1Gi}}}}}}]
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


def job_done(kube, ns, name) -> bool:
    st = client.BatchV1Api(kube.api_client).read_namespaced_job(name, ns).status
    return any(c.type == "Complete" and c.status == "True" for c in st.conditions or [])


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
                    assert p.spec.node_name == released(p) == p.spec.node_selector["kubernetes.io/hostname"]
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
        op = start_operator(kubectl, extender_port, log=str(tmp_path / "operator.log"))

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
        if op is not None:
            op.stop()
        if victim:
            kube.core.patch_node(victim, {"metadata": {"annotations": {"kubesoda.io/simulate-not-ready": None}}})
        for n, labels in orig.items():
            kube.core.patch_node(n, {"metadata": {"labels": {k: labels.get(k) for k in ("kubesoda.io/node-class", "kubesoda.io/mips-per-core",
                                                                                           "kubesoda.io/e2e-dispatch")}}})
        kubectl("delete", "-n", ns, "jobs", "--all", "--wait=false", check=False)
