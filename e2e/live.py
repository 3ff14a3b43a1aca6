"""Helpers for the live operator suites: the operator as a subprocess, and what "running as planned" means."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
GROUP, VERSION = "kubesoda.io", "v1alpha1"


# short epochs for the live suites: macro 6 s, micro 2 s, deadlines 1 s
FAST_POLICY = """apiVersion: kubesoda.io/v1alpha1
kind: SchedulingPolicy
metadata: {name: default}
spec:
  macroEpochSeconds: 6
  microEpochSeconds: 2
  macroQDeadlineSeconds: 1
  macroWDeadlineSeconds: 1
"""


def install_crds_and_policy(kubectl: Any, policy: str) -> None:
    kubectl("apply", "--server-side", "-f", str(ROOT / "crds"))
    for name in ("streamtemplates.kubesoda.io", "streamjobs.kubesoda.io", "schedulingpolicies.kubesoda.io", "yieldgroups.kubesoda.io",
                 "batchdispatches.kubesoda.io", "jobflows.kubesoda.io", "flowpools.kubesoda.io", "resourceprofiles.kubesoda.io",
                 "clusterkopfpeerings.kopf.dev"):
        kubectl("wait", "--for=condition=Established", f"crd/{name}", "--timeout=60s")
    kubectl("apply", "-f", "-", input=policy)


class Operator:
    """``kubesoda <args>`` as a subprocess, exactly as a user starts it; output appended to ``log``."""

    def __init__(self, *args: str, log: str | None = None):
        self.args = args
        self.log_path = log or os.environ.get("KUBESODA_OPERATOR_LOG", "/tmp/kubesoda-e2e-operator.log")
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        with open(self.log_path, "a") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "soda_operator.cli", *self.args], stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def output(self) -> str:
        return Path(self.log_path).read_text() if Path(self.log_path).exists() else ""


def job(kube: Any, ns: str, name: str) -> dict[str, Any]:
    return kube.custom.get_namespaced_custom_object(GROUP, VERSION, ns, "streamjobs", name)


def pe_pods(kube: Any, ns: str, jobname: str) -> list[Any]:
    return kube.core.list_namespaced_pod(ns, label_selector=f"kubesoda.io/job={jobname}").items


def milli(cpu: str) -> int:
    return int(cpu[:-1]) if cpu.endswith("m") else int(float(cpu) * 1000)


def running_as_planned(kube: Any, ns: str, jobname: str) -> list[Any] | bool:
    """Job Running; every instance pod Running on its planned node with CPU = fraction x cores.
    The pod's fraction annotation may lag the status's fraction by less than a millicore (the
    operator does not rewrite it for less: apply._fraction_moved)."""
    st = job(kube, ns, jobname).get("status") or {}
    if st.get("phase") != "Running":
        return False
    pods = pe_pods(kube, ns, jobname)
    planned = {(i["pod"], i["node"]): i["fraction"] for pe in st.get("pes", []) for i in pe.get("instances", [])}
    if not pods or len(pods) != len(planned):
        return False
    cores = {n.metadata.name: float(n.status.allocatable["cpu"]) for n in kube.core.list_node().items}
    for p in pods:
        ann, node = p.metadata.annotations, p.spec.node_name
        if p.status.phase != "Running" or node != ann["kubesoda.io/node"] or node not in cores or (p.metadata.name, node) not in planned:
            return False
        want = planned[(p.metadata.name, node)] * cores[node] * 1000
        if abs(milli(p.spec.containers[0].resources.limits["cpu"]) - want) > 1.5:
            return False
        if abs(float(ann["kubesoda.io/fraction"]) * cores[node] * 1000 - want) >= 1:
            return False
    return pods


def start_operator(kubectl: Any, extender_port: int, log: str | None = None, policy: str = FAST_POLICY, extra: tuple[str, ...] = ()) -> Operator:
    """CRDs and the policy installed, then ``kubesoda run`` with the extender on ``extender_port``
    (and ``extra`` flags)."""
    install_crds_and_policy(kubectl, policy)
    proc = Operator("run", "--extender-port", str(extender_port), *extra, log=log)
    proc.start()
    return proc


class Simulator(Operator):
    """``kubesoda simulate`` (the fluid data plane) as a subprocess: ``port``, and optionally the
    namespace it plays and a file of true resource functions (``--true-functions``)."""

    def __init__(self, port: int | str, *extra: str, interval: float = 1.0):
        super().__init__("simulate", "--port", str(port), "--interval", str(interval), *extra,
                         log=os.environ.get("KUBESODA_SIMULATOR_LOG", "/tmp/kubesoda-e2e-simulate.log"))

