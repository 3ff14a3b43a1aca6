"""Write only changes (issue 39 item 4), against the real API server: once two jobs run, macro and
micro epochs go by without a single write (``kubesoda_writes_total``, every kind, read from the
operator's /metrics), and a change to one job's spec writes exactly that job's status, nothing else
(the other job's resourceVersion does not move either: the API server's own word).
"""

from __future__ import annotations

import socket
import time
import urllib.request

from live import GROUP, VERSION, job, running_as_planned, start_operator
from prometheus_client.parser import text_string_to_metric_families

JOBS = """apiVersion: kubesoda.io/v1alpha1
kind: StreamTemplate
metadata: {name: pair}
spec:
  pes:
  - {name: src, kind: source, resourceFunction: {a: 1}}
  - {name: snk, kind: sink, minCpu: 100m, resourceFunction: {a: 1, b: 1}}
  streams: [{from: src, to: snk}]
  sinks: [{pe: snk, weight: 1}]
  primalInputs: [{pe: src, rate: 300}]
---
apiVersion: kubesoda.io/v1alpha1
kind: StreamJob
metadata: {name: one}
spec: {templates: [pair], rank: 1}
---
apiVersion: kubesoda.io/v1alpha1
kind: StreamJob
metadata: {name: two}
spec: {templates: [pair], rank: 1}
"""
MACRO, MICRO = 6, 2  # live.FAST_POLICY


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def counters(port: int) -> dict[str, float]:
    """kubesoda_writes_total by kind, and the epochs run (``epochs:macro``, ``epochs:micro``)."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == "kubesoda_writes_total":
                out[s.labels["kind"]] = s.value
            elif s.name == "kubesoda_epoch_seconds_count":
                out[f"epochs:{s.labels['epoch']}"] = s.value
    return out


def delta(a: dict[str, float], b: dict[str, float]) -> dict[str, float]:
    return {k: b.get(k, 0) - a.get(k, 0) for k in set(a) | set(b) if b.get(k, 0) != a.get(k, 0)}


def writes(d: dict[str, float]) -> dict[str, float]:
    return {k: v for k, v in d.items() if not k.startswith("epochs:")}


def test_a_quiet_epoch_writes_nothing_and_a_changed_job_only_its_status(kube, kubectl, namespace, extender_port, wait_for):
    port = free_port()
    op = start_operator(kubectl, extender_port, extra=("--metrics-port", str(port)))
    try:
        kubectl("apply", "-n", namespace, "-f", "-", input=JOBS)
        for name in ("one", "two"):
            wait_for(lambda name=name: running_as_planned(kube, namespace, name), timeout=120, what=f"{name} Running as planned")
        # settled: one macro epoch without a write (the last creates' annotations and promotions done)
        last = {"c": counters(port), "t": time.monotonic()}

        def settled() -> bool:
            now = counters(port)
            if writes(delta(last["c"], now)):
                last.update(c=now, t=time.monotonic())
            return time.monotonic() - last["t"] > MACRO + 1
        wait_for(settled, timeout=90, interval=1, what="no write for a macro epoch")

        # 1. quiet: two macro epochs and their micro epochs write nothing at all
        before, rv = counters(port), {n: job(kube, namespace, n)["metadata"]["resourceVersion"] for n in ("one", "two")}
        time.sleep(2 * MACRO + 1)
        quiet = delta(before, counters(port))
        print(f"\nquiet window: {quiet}")
        assert quiet.get("epochs:macro", 0) >= 2 and quiet.get("epochs:micro", 0) >= 3, quiet
        assert writes(quiet) == {}, quiet
        assert {n: job(kube, namespace, n)["metadata"]["resourceVersion"] for n in ("one", "two")} == rv

        # 2. one job's spec changes (its owner, to the one its namespace is bound to anyway: nothing the plan reads): that
        # job's status (its observedGeneration) is written once, nothing else, by every epoch after it
        before = counters(port)
        kube.custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, "streamjobs", "one", {"spec": {"owner": namespace}})
        gen = job(kube, namespace, "one")["metadata"]["generation"]
        wait_for(lambda: (job(kube, namespace, "one").get("status") or {}).get("observedGeneration") == gen, timeout=30,
                 what="one's status at its new generation")
        time.sleep(2 * MACRO + 1)
        changed = delta(before, counters(port))
        print(f"after one's change: {changed}")
        assert changed.get("epochs:macro", 0) >= 2, changed
        assert writes(changed) == {"job_status": 1}, changed
        assert job(kube, namespace, "two")["metadata"]["resourceVersion"] == rv["two"]
        assert job(kube, namespace, "one")["status"]["phase"] == "Running"
    finally:
        op.stop()
