"""A cluster kubesoda shares, live: other workloads' pods hold node capacity, and the epochs read
the watch-fed indexes instead of listing the cluster.

- a Deployment that kubesoda does not manage takes most of one node: kubesoda plans only what it
  leaves there, and none of its pods goes Pending for lack of CPU;
- a quiet cluster costs the API server no LIST per epoch: the API server's own
  ``apiserver_request_total`` over a window of several micro epochs, with ``--snapshots list`` (the
  old way) beside ``--snapshots index`` (the default).
"""

from __future__ import annotations

import re
import time

import pytest
from live import ROOT, milli, pe_pods, running_as_planned, start_operator

NODE = "z0-r0-n0"  # 4 cores in the small topology

FOREIGN = f"""apiVersion: apps/v1
kind: Deployment
metadata: {{name: other-team}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: other-team}}}}
  template:
    metadata: {{labels: {{app: other-team}}}}
    spec:
      nodeSelector: {{kubernetes.io/hostname: {NODE}}}
      tolerations: [{{key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}}]
      containers:
      - name: app
        image: registry.k8s.io/pause:3.10
        resources: {{requests: {{cpu: 3500m, memory: 1Gi}}, limits: {{cpu: 3500m, memory: 1Gi}}}}
"""

# eight PEs that would each like two cores: SODA spreads them over the cluster, so every node,
# the crowded one included, is worth planning on
GREEDY = """apiVersion: kubesoda.io/v1alpha1
kind: StreamTemplate
metadata: {name: wide}
spec:
  pes:
  - {name: src, kind: source, minCpu: 200m, maxCpu: "2", resourceFunction: {a: 0.01}}
""" + "".join(f"""  - {{name: w{i}, kind: sink, minCpu: 200m, maxCpu: "2", resourceFunction: {{a: 0.001, b: 1}}}}
""" for i in range(7)) + """  streams:
""" + "".join(f"""  - {{from: src, to: w{i}}}
""" for i in range(7)) + """  sinks: [""" + ", ".join(f"{{pe: w{i}, weight: 1}}" for i in range(7)) + """]
  primalInputs: [{pe: src, rate: 10000}]
---
apiVersion: kubesoda.io/v1alpha1
kind: StreamJob
metadata: {name: greedy}
spec: {templates: [wide], rank: 1}
"""


def test_foreign_pods_hold_their_capacity(kube, kubectl, namespace, extender_port, wait_for):
    kubectl("apply", "-n", namespace, "-f", "-", input=FOREIGN)
    wait_for(lambda: any(p.status.phase == "Running" and p.spec.node_name == NODE
                         for p in kube.core.list_namespaced_pod(namespace, label_selector="app=other-team").items),
             timeout=60, what="the other team's pod Running on " + NODE)
    op = start_operator(kubectl, extender_port)
    try:
        kubectl("apply", "-n", namespace, "-f", "-", input=GREEDY)
        pods = wait_for(lambda: running_as_planned(kube, namespace, "greedy"), timeout=120, what="greedy Running as planned")
        on_node = [p for p in pods if p.spec.node_name == NODE]
        used = sum(milli(p.spec.containers[0].resources.requests["cpu"]) for p in on_node)
        assert used <= 500, f"kubesoda planned {used}m on {NODE}, where another workload holds 3500m of 4000m"
        # the others get more than the crowded node: the plan saw the difference
        elsewhere = [milli(p.spec.containers[0].resources.requests["cpu"]) for p in pods if p.spec.node_name != NODE]
        assert elsewhere and max(elsewhere) > 500
        pending = [p.metadata.name for p in pe_pods(kube, namespace, "greedy") if p.status.phase != "Running"]
        assert not pending
    finally:
        op.stop()
        kubectl("delete", "-n", namespace, "deployment/other-team", "--wait=false", check=False)


def _requests(kubectl) -> dict[str, float]:
    """LIST and GET requests the API server has answered so far, by resource, and writes to the
    objects the operator writes (its own metric)."""
    out: dict[str, float] = {}
    text = kubectl("get", "--raw", "/metrics", timeout=30).stdout
    for line in text.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
        read = labels.get("verb") in ("LIST", "GET") and labels.get("resource") in (
            "nodes", "pods", "services", "streamjobs", "streamtemplates", "schedulingpolicies")
        write = labels.get("verb") in ("POST", "PUT", "PATCH", "DELETE") and labels.get("resource") in (
            "pods", "services", "streamjobs", "schedulingpolicies")
        if read or write:
            k = f"{labels['verb']} {labels['resource']}" + (f"/{labels['subresource']}" if labels.get("subresource") else "")
            out[k] = out.get(k, 0.0) + float(line.rsplit(" ", 1)[1])
    return out


@pytest.mark.parametrize("snapshots", ["list", "index"])
def test_quiet_micro_epochs_list_nothing(snapshots, kube, kubectl, namespace, extender_port, wait_for, tmp_path):
    from live import FAST_POLICY, Operator, install_crds_and_policy

    install_crds_and_policy(kubectl, FAST_POLICY)
    log = tmp_path / "operator.log"
    op = Operator("run", "--extender-port", str(extender_port), "--snapshots", snapshots, log=str(log))
    op.start()
    try:
        kubectl("apply", "-n", namespace, "-f", str(ROOT / "examples" / "small-pipeline"))
        wait_for(lambda: running_as_planned(kube, namespace, "clicks"), timeout=90, what="clicks Running as planned")
        time.sleep(3)  # let the last writes settle
        before = _requests(kubectl)
        window = 10.0  # five micro epochs of FAST_POLICY, and a macro epoch
        time.sleep(window)
        after = _requests(kubectl)
        delta = {k: after.get(k, 0) - before.get(k, 0) for k in after if after.get(k, 0) - before.get(k, 0) > 0}
        lists = sum(v for k, v in delta.items() if k.startswith("LIST"))
        print(f"--snapshots {snapshots}: API reads in {window:.0f} s of a quiet cluster: {delta}")
        if snapshots == "list":
            assert lists >= 5, delta  # the old way lists every epoch: the measurement can see it
        else:
            # A watch that ends (every WATCH_SERVER_TIMEOUT_S, at a random phase) is re-listed once by
            # Kopf: at most one LIST of a resource may fall in the window, never one per epoch.
            assert all(v <= 1 for k, v in delta.items() if k.startswith("LIST")), delta
            assert lists <= 2 and sum(v for k, v in delta.items() if k.split()[0] in ("LIST", "GET")) <= 4, delta
            # nothing changed, so nothing is written: no resize, no annotation, no status, no Service
            assert not [k for k in delta if k.split()[0] not in ("LIST", "GET")], delta
    finally:
        op.stop()
