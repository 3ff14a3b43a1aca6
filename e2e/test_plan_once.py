"""Plan once what was applied (issue 39 item 3), against the real API server.

1. StreamTemplates and StreamJobs created in bursts 0.8 s apart for longer than the old fixed 10 s
   debounce cap, 12.5 objects a second (the settle rule never cuts an apply of at least 10 a
   second): the first macro epoch that plans any of the jobs plans all of them (docs/operator.md
   "Plan once what was applied"; before, it planned what had come in 10 s and the next epoch the
   rest). Each burst's two jobs list four of its eight templates each as alternatives.
2. More bursts, now 2.5 s apart (each its own macro epoch, planned while the previous one's pods
   are new), then every job Running as planned: the operator sent exactly one create per PE pod
   there is, and none was answered 409, by the operator's own count (``kubesoda_pod_creates_total``)
   and by the API server's (``apiserver_request_total`` for POST pods).
"""

from __future__ import annotations

import json
import re
import socket
import time
import urllib.request
from pathlib import Path

from live import GROUP, VERSION, running_as_planned, start_operator
from prometheus_client.parser import text_string_to_metric_families

TEMPLATE = {
    "apiVersion": f"{GROUP}/{VERSION}", "kind": "StreamTemplate", "metadata": {"name": "pair"},
    "spec": {"pes": [{"name": "src", "kind": "source", "minCpu": "50m", "resourceFunction": {"a": 1}},
                     {"name": "snk", "kind": "sink", "minCpu": "50m", "resourceFunction": {"a": 1, "b": 1}}],
             "streams": [{"from": "src", "to": "snk"}], "sinks": [{"pe": "snk", "weight": 1}],
             "primalInputs": [{"pe": "src", "rate": 100}]},
}
SPREAD_BURSTS, SPREAD_GAP = 14, 0.8  # 14 bursts over 11.2 s: past the old 10 s cap
TEMPLATES_PER_BURST = 8
LATE_BURSTS, LATE_GAP = 3, 2.5  # each its own macro epoch
PER_BURST = 2


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def operator_creates(port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == "kubesoda_pod_creates_total":
                out[s.labels["result"]] = s.value
            elif s.name == "kubesoda_writes_total" and s.labels["kind"] == "pod_create":
                out["requests"] = s.value
    return out


def apiserver_pod_posts(kubectl) -> dict[str, float]:
    """POST pods (not bindings) the API server answered, by code."""
    out: dict[str, float] = {}
    for line in kubectl("get", "--raw", "/metrics", timeout=30).stdout.splitlines():
        if line.startswith("apiserver_request_total{"):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
            if labels.get("verb") == "POST" and labels.get("resource") == "pods" and not labels.get("subresource"):
                out[labels["code"]] = out.get(labels["code"], 0.0) + float(line.rsplit(" ", 1)[1])
    return out


def create_jobs(kube, namespace: str, names: list[str], templates: tuple[str, ...] = ("pair",)) -> None:
    for n in names:
        kube.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "streamjobs", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "StreamJob", "metadata": {"name": n}, "spec": {"templates": list(templates), "rank": 1}})


def create_templates(kube, namespace: str, names: list[str]) -> None:
    for n in names:
        kube.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "streamtemplates", {**TEMPLATE, "metadata": {"name": n}})


def macro_epochs(log: Path) -> list[tuple[int, int]]:
    """(admitted, jobs) of each macro epoch the operator logged."""
    out = []
    for line in log.read_text().splitlines():
        try:
            msg = json.loads(line).get("msg", "")
        except ValueError:
            continue
        m = re.match(r"macro epoch: (\d+)/(\d+) jobs admitted", msg)
        if m:
            out.append((int(m.group(1)), int(m.group(2))))
    return out


def test_jobs_applied_in_bursts_are_planned_once_and_created_once(kube, kubectl, namespace, extender_port, wait_for, tmp_path):
    port = free_port()
    log = tmp_path / "operator.log"
    op = start_operator(kubectl, extender_port, log=str(log), extra=("--metrics-port", str(port)))
    try:
        wait_for(lambda: macro_epochs(log), timeout=60, what="the operator's first (empty) macro epoch")
        ops0, api0 = operator_creates(port), apiserver_pod_posts(kubectl)
        kube.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "streamtemplates", TEMPLATE)
        names = []
        t0 = time.monotonic()
        for b in range(SPREAD_BURSTS):
            variants = [f"v{b:02d}-{i}" for i in range(TEMPLATES_PER_BURST)]
            create_templates(kube, namespace, variants)
            burst = [f"s{b:02d}-{i}" for i in range(PER_BURST)]
            for i, n in enumerate(burst):
                create_jobs(kube, namespace, [n], tuple(variants[i::PER_BURST]))
            names += burst
            time.sleep(max(0.0, t0 + (b + 1) * SPREAD_GAP - time.monotonic()))
        spread = time.monotonic() - t0
        wait_for(lambda: any(n for _, n in macro_epochs(log)), timeout=120, what="a macro epoch that plans the jobs")
        planned = [n for _, n in macro_epochs(log) if n]
        print(f"\n{len(names)} jobs and {SPREAD_BURSTS * TEMPLATES_PER_BURST + 1} templates created over {spread:.1f}s; "
              f"jobs per macro epoch: {planned}")
        assert planned[0] == len(names), f"the first macro epoch planned {planned[0]} of {len(names)} jobs"

        for b in range(LATE_BURSTS):
            time.sleep(LATE_GAP)
            burst = [f"l{b}-{i}" for i in range(PER_BURST)]
            create_jobs(kube, namespace, burst)
            names += burst
        for n in names:
            wait_for(lambda n=n: running_as_planned(kube, namespace, n), timeout=120, what=f"{n} Running as planned")
        time.sleep(3)  # a micro epoch more: nothing further is created
        pods = kube.core.list_namespaced_pod(namespace, label_selector="kubesoda.io/job").items
        ops = {k: v - ops0.get(k, 0.0) for k, v in operator_creates(port).items()}
        api = {k: v - api0.get(k, 0.0) for k, v in apiserver_pod_posts(kubectl).items()}
        print(f"{len(names)} jobs, {len(pods)} PE pods; operator's creates: {ops}; API server's POST pods by code: {api}")
        print(f"jobs per macro epoch: {[n for _, n in macro_epochs(log)]}")
        assert all(running_as_planned(kube, namespace, n) for n in names)
        assert ops.get("exists", 0) == 0 and api.get("409", 0) == 0, (ops, api)
        assert ops.get("created", 0) == len(pods) == api.get("201", 0) == ops.get("requests", 0), (len(pods), ops, api)
    finally:
        op.stop()
