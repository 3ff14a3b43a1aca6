"""Faults, live: the API server or etcd killed and restarted while the operator applies a plan, the
operator SIGKILLed in the middle of a large apply, the extender down for a minute. Afterwards no pod is duplicated or orphaned, every job reaches its
planned state, and the recovery time is printed (pytest -s shows it).

The control-plane faults need the local control plane (hack/restart.sh restarts its processes);
against another cluster (KUBECONFIG given) they are skipped.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from live import (
    FAST_POLICY,
    GROUP,
    ROOT,
    VERSION,
    Operator,
    install_crds_and_policy,
    job,
    milli,
    pe_pods,
    running_as_planned,
    start_operator,
)

STATE = Path(os.environ.get("KUBESODA_STATE", ""))
LOCAL = bool(os.environ.get("KUBESODA_STATE")) and (STATE / "cmd" / "kube-apiserver").exists()
local_only = pytest.mark.skipif(not LOCAL, reason="needs the local control plane (hack/restart.sh)")
LSD_JOBS = 40
JOBS = ("clicks",) + tuple(f"dac-{i}" for i in range(6))


def restart(component: str, down: float = 0.0) -> None:
    subprocess.run([str(ROOT / "hack" / "restart.sh"), component, str(down)], check=True, timeout=180)


class KwokResync:
    """A kubelet re-syncs its pods periodically; KWOK 0.8 (the fake kubelet here) does not: a pod
    whose Pending -> Running patch failed while the control plane was down stays Pending though
    it is bound to its node. When such a pod (bound, planned, Pending) has waited 20 s, KWOK is
    restarted (it lists every pod when it starts), at most every 30 s. This only moves pods that
    kubesoda created and the scheduler bound: a missing, duplicate or misplaced pod, kubesoda's
    part, still fails the test. Returns False (never settles the wait by itself)."""

    def __init__(self, kube, ns: str):
        self.kube, self.ns, self.restarts, self.last = kube, ns, 0, 0.0

    def __call__(self) -> bool:
        now = time.time()
        if now - self.last < 30:
            return False
        stuck = [p for p in self.kube.core.list_namespaced_pod(self.ns, label_selector="kubesoda.io/job").items
                 if p.spec.node_name and p.status.phase == "Pending" and not p.metadata.deletion_timestamp
                 and now - p.metadata.creation_timestamp.timestamp() > 20]
        if stuck:
            restart("kwok")
            self.restarts, self.last = self.restarts + 1, now
        return False


def settled(kube, ns: str) -> bool:
    """Every job Running as planned (or Rejected, with no pod), and no kubesoda pod in the namespace
    that no plan names (no duplicate, no orphan)."""
    planned: set[str] = set()
    jobs = kube.custom.list_namespaced_custom_object(GROUP, VERSION, ns, "streamjobs")["items"]
    if len(jobs) != len(JOBS):
        return False
    for j in jobs:
        name, phase = j["metadata"]["name"], (j.get("status") or {}).get("phase")
        if phase == "Rejected":
            continue
        pods = running_as_planned(kube, ns, name)
        if not pods:
            return False
        planned |= {p.metadata.name for p in pods}
    every = {p.metadata.name for p in kube.core.list_namespaced_pod(ns, label_selector="kubesoda.io/job").items}
    return bool(planned) and every == planned


@pytest.fixture
def workload(kubectl, namespace):
    def apply() -> None:
        kubectl("apply", "-n", namespace, "-f", str(ROOT / "examples" / "small-pipeline"))
        dac = (ROOT / "examples" / "dac" / "dac.yaml").read_text()
        docs = [d for d in dac.split("\n---\n") if "kind: Namespace" not in d]
        kubectl("apply", "-n", namespace, "-f", "-", input="\n---\n".join(d.replace("namespace: bench", f"namespace: {namespace}") for d in docs))
    return apply


@local_only
# etcd was intermittent until stop 29: every pod was created and bound to its planned node, but
# KWOK's stage patch (Pending -> Running) had failed while etcd was down and KWOK 0.8 never retries it
# (see KwokResync). It was a non-strict xfail since (once in 8 runs the operator process was gone, not
# reproduced); it passed in CI and in 2 of 2 local runs with issue 46's changes, so it is strict now
# (issue 46): a regression shows
@pytest.mark.parametrize("component", ["kube-apiserver", "etcd"])
def test_control_plane_restarted_mid_apply(component, kube, kubectl, namespace, extender_port, wait_for, workload, tmp_path):
    op = start_operator(kubectl, extender_port, log=str(tmp_path / "operator.log"))
    try:
        workload()
        # the first macro epoch is writing statuses and creating pods: kill the component then
        wait_for(lambda: len(kube.core.list_namespaced_pod(namespace).items) >= 3, timeout=60, what="the apply under way")
        t0 = time.monotonic()
        restart(component, down=3.0)
        resync = KwokResync(kube, namespace)
        try:
            wait_for(lambda: settled(kube, namespace) or resync(), timeout=240, interval=2,
                     what=f"every job Running as planned after {component} restarted")
        except BaseException:
            # why not, kept beside the operator's log (the etcd case is intermittent and xfail hides output)
            settled_all(kube, namespace)
            lines = [f"not settled: {WHY.get('last')}"]
            for j in kube.custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "streamjobs")["items"]:
                st = j.get("status") or {}
                lines.append(f"job {j['metadata']['name']} {st.get('phase')} instances "
                             f"{[(i['pod'], i['node'], i.get('fraction')) for pe in st.get('pes') or [] for i in pe.get('instances') or []]}")
            for p in kube.core.list_namespaced_pod(namespace, label_selector="kubesoda.io/job").items:
                lines.append(f"pod {p.metadata.name} {p.status.phase} on {p.spec.node_name} (planned "
                             f"{(p.metadata.annotations or {}).get('kubesoda.io/node')}, fraction {(p.metadata.annotations or {}).get('kubesoda.io/fraction')}) limits {p.spec.containers[0].resources.limits} "
                             f"deleting {p.metadata.deletion_timestamp}")
            (tmp_path / "not-settled.txt").write_text("\n".join(lines) + "\n")
            # printed too: pytest shows a failed test's stdout, and CI keeps nothing else
            print("\n".join(lines), "\n--- operator log (tail) ---\n" + "\n".join(op.output().splitlines()[-60:]))
            raise
        print(f"\n{component} killed mid-apply, down 3 s: every job Running as planned (or Rejected) {time.monotonic() - t0:.1f} s later"
              f" (KWOK restarted {resync.restarts} time(s) for pods it left Pending)")
        assert op.proc is not None and op.proc.poll() is None, "the operator died: " + op.output()[-2000:]
    finally:
        op.stop()


def pe_uids(kube, ns: str) -> dict[str, str]:
    return {p.metadata.name: p.metadata.uid for p in kube.core.list_namespaced_pod(ns, label_selector="kubesoda.io/job").items
            if not p.metadata.deletion_timestamp}


def not_ready(kube) -> int:
    return sum(1 for n in kube.core.list_node().items
               if not any(c.type == "Ready" and c.status == "True" for c in n.status.conditions or []))


@local_only
@pytest.mark.parametrize("down_s", [30, 75])
def test_api_server_down_deletes_no_running_pod(down_s, kube, kubectl, namespace, extender_port, wait_for, tmp_path):
    """Disruption is not intent (issue 46): the API server down 30 s or 75 s under a running workload. When
    it returns, the node lifecycle controller marks every node NotReady (their leases went stale
    meanwhile); the operator says deletions are paused (an Event on the SchedulingPolicy), no PE pod
    is deleted or replaced (same UIDs, while the nodes flip and after; the plan may add instances
    once they are back), and every job is Running as planned again."""
    op = start_operator(kubectl, extender_port, log=str(tmp_path / "operator.log"))
    try:
        # a workload every job of which fits (with DAC, admission near the capacity flips between macro
        # epochs whose deadline-bound macroQ finds different plans under load: not what this measures)
        for example in ("small-pipeline", "glued"):
            kubectl("apply", "-n", namespace, "-f", str(ROOT / "examples" / example))
        resync = KwokResync(kube, namespace)
        wait_for(lambda: (settled_all(kube, namespace) or {}).get("Running") == 3 or resync(), timeout=180, interval=2,
                 what="the workload running")
        before = pe_uids(kube, namespace)
        # the fake kubelets stay down 60 s longer than the API server, so that every node's lease goes stale
        # past the node lifecycle controller's 50 s grace and all of them flip at once (a real kubelet, or
        # KWOK, may or may not renew in time after a 30 s outage: the flip is made certain here). 60 s, not
        # 30: after a 75 s outage the controller manager's clients came back too late to see the leases
        # stale before KWOK renewed them (CI of stop 55: no node NotReady at all)
        kwok = subprocess.Popen([str(ROOT / "hack" / "restart.sh"), "kwok", str(down_s + 60)])
        restart("kube-apiserver", down=float(down_s))
        t0, flipped = time.monotonic(), 0
        while time.monotonic() - t0 < 90:  # the node lifecycle controller's verdicts and the epochs that follow
            flipped = max(flipped, not_ready(kube))
            now = pe_uids(kube, namespace)
            lost = {k: v for k, v in before.items() if now.get(k) != v}
            assert not lost, f"PE pods deleted or replaced after the outage: {sorted(lost)[:5]} (of {len(before)})"
            time.sleep(1)
        kwok.wait(timeout=120)
        assert flipped, "no node went NotReady: the test did not exercise the disruption"
        paused = [e for e in kube.core.list_namespaced_event("default").items
                  if e.involved_object.kind == "SchedulingPolicy" and e.reason == "DeletionsPaused"]
        assert paused and "FullDisruption" in paused[-1].message, "no DeletionsPaused Event on the SchedulingPolicy"
        wait_for(lambda: (settled_all(kube, namespace) or {}).get("Running") == 3 or resync(), timeout=120, interval=2,
                 what="every job Running as planned after the outage")
        now = pe_uids(kube, namespace)
        assert all(now.get(k) == v for k, v in before.items()), "a PE pod was deleted or replaced after the nodes recovered"
        print(f"\nAPI server down {down_s} s (KWOK {down_s + 60} s): {len(before)} PE pods kept (UIDs), {flipped} node(s) seen NotReady, settled "
              f"{time.monotonic() - t0:.1f} s after it returned (KWOK restarted {resync.restarts} more time(s)); {paused[-1].message}")
        assert op.proc is not None and op.proc.poll() is None
    finally:
        op.stop()


BRANCHES = """apiVersion: kubesoda.io/v1alpha1
kind: StreamTemplate
metadata: {name: branches}
spec:
  pes:
  - {name: src, kind: source, resourceFunction: {a: 0.1}}
  - {name: hot, kind: sink, resourceFunction: {a: 0.001, b: 1}}
  - {name: cold, kind: sink, minCpu: 100m, resourceFunction: {a: 0.001, b: 1}}
  streams: [{from: src, to: hot}, {from: src, to: cold}]
  sinks: [{pe: hot, weight: 1}, {pe: cold, weight: 1}]
  primalInputs: [{pe: src, rate: 100}]
---
apiVersion: kubesoda.io/v1alpha1
kind: StreamJob
metadata: {name: branchy}
spec: {templates: [branches], rank: 1, required: true}
"""
DENY_RESIZE = """apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: NAME}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [UPDATE], resources: [pods/resize]}
  validations:
  - {expression: "false", message: resizes are frozen here}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: NAME}
spec:
  policyName: NAME
  validationActions: [Deny]
  matchResources:
    namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: NS}}
"""


def refused_total(port: int) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith("kubesoda_resizes_refused_total "))


def test_a_refused_resize_is_known_and_backs_off(kube, kubectl, namespace, extender_port, wait_for, tmp_path):
    """Issue 46: a ValidatingAdmissionPolicy denies pods/resize in the namespace, then the plan
    shrinks a PE (its sink's weight set to 0): the job gets a Warning Event ResizeRefused and the
    condition Resized=False naming the pod, its status lists the fraction in force, the resize is
    retried with backoff (not every micro epoch), and it goes through once the policy is gone."""
    metrics_port = free_port()
    op = start_operator(kubectl, extender_port, log=str(tmp_path / "operator.log"), extra=("--metrics-port", str(metrics_port)))
    name = f"deny-resize-{namespace}"
    try:
        kubectl("apply", "-n", namespace, "-f", "-", input=BRANCHES)
        wait_for(lambda: running_as_planned(kube, namespace, "branchy"), timeout=90, what="branchy Running")
        kubectl("apply", "-f", "-", input=DENY_RESIZE.replace("NAME", name).replace("NS", namespace))
        cold = next(p for p in pe_pods(kube, namespace, "branchy") if p.metadata.labels["kubesoda.io/pe"] == "cold")
        held = cold.spec.containers[0].resources.limits["cpu"]
        cpu = f"{milli(held) + 1}m"
        probe = ["patch", "pod", cold.metadata.name, "-n", namespace, "--subresource", "resize", "--dry-run=server", "-p",
                 json.dumps({"spec": {"containers": [{"name": "pe", "resources": {"requests": {"cpu": cpu}, "limits": {"cpu": cpu}}}]}})]
        wait_for(lambda: "frozen" in (out := kubectl(*probe, check=False)).stderr or print(out.stderr.strip()[:300]), timeout=30, interval=2,
                 what="the policy in force")
        kube.custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, "streamjobs", "branchy", {"spec": {"weightOverrides": {"sink:cold": 0}}})

        def refused():
            st = job(kube, namespace, "branchy").get("status") or {}
            cond = next((c for c in st.get("conditions") or [] if c["type"] == "Resized"), None)
            return cond if cond and cond["status"] == "False" else None
        cond = wait_for(refused, timeout=60, what="the Resized condition False")
        assert cond["reason"] == "ResizeRefused" and cold.metadata.name in cond["message"], cond
        events = [e for e in kube.core.list_namespaced_event(namespace).items if e.involved_object.name == "branchy" and e.reason == "ResizeRefused"]
        assert events and events[0].type == "Warning" and "frozen" in events[0].message
        st = job(kube, namespace, "branchy")["status"]
        cores = {n.metadata.name: float(n.status.allocatable["cpu"]) for n in kube.core.list_node().items}
        inst = next(i for pe in st["pes"] for i in pe["instances"] if i["pod"] == cold.metadata.name)
        assert abs(inst["fraction"] * cores[inst["node"]] * 1000 - milli(held)) <= 1.5, (inst, held)  # in force, not planned
        n0 = refused_total(metrics_port)
        time.sleep(30)  # 15 micro epochs of 2 s: backing off, at most 3 more requests (10 s, 20 s apart)
        retries = refused_total(metrics_port) - n0
        assert retries <= 3, f"{retries} refused resizes in 30 s"
        kubectl("delete", "validatingadmissionpolicybinding", name)
        wait_for(lambda: next((c for c in (job(kube, namespace, "branchy").get("status") or {}).get("conditions") or []
                               if c["type"] == "Resized"), {}).get("reason") == "AsPlanned", timeout=120, what="the resize done once allowed")
        print(f"\nrefused resize: {retries:g} retries in 30 s while refused; done once the policy went")
    finally:
        kubectl("delete", "validatingadmissionpolicybinding", name, "--ignore-not-found", check=False)
        kubectl("delete", "validatingadmissionpolicy", name, "--ignore-not-found", check=False)
        op.stop()


WHY: dict[str, str] = {}


def settled_all(kube, ns: str) -> dict | None:
    """One read of jobs and pods: every job Running with exactly its planned instances Running on
    their nodes, or Rejected with none; no other kubesoda pod. Returns counts when settled (why
    not, in ``WHY``, when not)."""
    jobs = kube.custom.list_namespaced_custom_object(GROUP, VERSION, ns, "streamjobs")["items"]
    pods = kube.core.list_namespaced_pod(ns, label_selector="kubesoda.io/job").items
    live = {(p.metadata.name, p.spec.node_name) for p in pods if p.status.phase == "Running" and not p.metadata.deletion_timestamp}
    planned: set[tuple[str, str]] = set()
    counts = {"Running": 0, "Rejected": 0}
    for j in jobs:
        st = j.get("status") or {}
        if st.get("phase") not in counts:
            WHY["last"] = f"{j['metadata']['name']} is {st.get('phase')} ({st.get('reason')}: {st.get('message', '')[:120]})"
            return None
        counts[st["phase"]] += 1
        planned |= {(i["pod"], i["node"]) for pe in st.get("pes") or [] for i in pe.get("instances") or []}
    if not jobs or planned != live or len(pods) != len(planned):
        WHY["last"] = (f"{len(jobs)} jobs; planned but not running {sorted(planned - live)[:3]}, running but not planned "
                       f"{sorted(live - planned)[:3]}, {len(pods)} pods for {len(planned)} planned")
        return None
    return {**counts, "pods": len(pods)}


def test_operator_sigkilled_mid_apply(kube, kubectl, namespace, extender_port, wait_for, tmp_path):
    """The operator SIGKILLed while it creates the pods of the LSD-like workload (its 40 first jobs
    that import nothing, a few hundred pods): a new
    one finishes the job from what the cluster holds (statuses and pod annotations, never memory):
    no duplicate or orphan pod, every job Running as planned or Rejected."""
    op = start_operator(kubectl, extender_port, log=str(tmp_path / "operator-1.log"))
    op2 = None
    try:
        lsd = (ROOT / "examples" / "lsd" / "lsd.yaml").read_text()
        docs = [d for d in lsd.split("\n---\n") if "kind: Namespace" not in d]
        # the jobs that import nothing (and all templates): a large apply that fits 8 nodes of 4 cores
        jobs = [d for d in docs if "kind: StreamJob" in d and "imports:" not in d][:LSD_JOBS]
        docs = [d for d in docs if "kind: StreamJob" not in d] + jobs
        kubectl("apply", "-n", namespace, "-f", "-", input="\n---\n".join(d.replace("namespace: bench", f"namespace: {namespace}").replace("job: bench/", f"job: {namespace}/")
                                       for d in docs), timeout=300)
        wait_for(lambda: len(kube.core.list_namespaced_pod(namespace, label_selector="kubesoda.io/job").items) >= 20,
                 timeout=120, what="the first macro epoch creating pods")
        op.stop(signal.SIGKILL)
        at_kill = len(kube.core.list_namespaced_pod(namespace, label_selector="kubesoda.io/job").items)
        t0 = time.monotonic()
        op2 = Operator("run", "--extender-port", str(extender_port), log=str(tmp_path / "operator-2.log"))
        op2.start()
        try:
            done = wait_for(lambda: settled_all(kube, namespace), timeout=240, interval=3, what="LSD settled after the operator was SIGKILLed")
        except BaseException:
            print("not settled:", WHY.get("last"))
            raise
        print(f"\noperator SIGKILLed with {at_kill} pods created: a new one settled it ({done}) {time.monotonic() - t0:.1f} s later")
        assert done["Running"] > 0
        assert op2.proc is not None and op2.proc.poll() is None
    finally:
        op.stop()
        if op2 is not None:
            op2.stop()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_extender_down_for_a_minute(kube, kubectl, namespace, extender_port, wait_for, tmp_path):
    """The operator without its in-process extender, the extender as its own process on the
    scheduler's port: while it is down PE pods wait (none lands on an unplanned node), and once it
    is back every job runs as planned."""
    install_crds_and_policy(kubectl, FAST_POLICY)
    op = Operator("run", "--extender-port", "0", log=str(tmp_path / "operator.log"))
    ext = Operator("extender", "--port", str(extender_port), log=str(tmp_path / "extender.log"))
    op.start()
    try:
        kubectl("apply", "-n", namespace, "-f", str(ROOT / "examples" / "small-pipeline"))
        wait_for(lambda: len(pe_pods(kube, namespace, "clicks")) >= 4, timeout=60, what="clicks' pods created")
        t_down = time.monotonic()
        while time.monotonic() - t_down < 60:  # a minute without an extender
            for p in pe_pods(kube, namespace, "clicks"):
                assert not p.spec.node_name, f"{p.metadata.name} bound to {p.spec.node_name} with the extender down"
            time.sleep(5)
        assert (job(kube, namespace, "clicks").get("status") or {}).get("phase") == "Admitted"
        ext.start()
        t0 = time.monotonic()
        wait_for(lambda: running_as_planned(kube, namespace, "clicks"), timeout=120, interval=1, what="clicks Running once the extender is back")
        print(f"\nextender down 60 s: clicks Running as planned {time.monotonic() - t0:.1f} s after it came back")
    finally:
        ext.stop()
        op.stop()
