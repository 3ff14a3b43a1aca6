"""Fair-yield groups live (docs/yield.md): a Deployment, a parallel Job and bare pods in one
YieldGroup on the KWOK nodes of the small topology (8 nodes of 4 cores).

- every gated pod lands on the node kubesoda chose (nodeSelector set while gated, gate removed);
- running pods' CPU limits become alpha x yield in place (same UIDs) and the group's status gives
  the minimum and average yield;
- a pod that arrives later is placed and the yields re-optimised;
- a labelled pod without the gate is never touched.
"""

from __future__ import annotations

import time

from live import GROUP, VERSION, milli, start_operator

TOL = "tolerations: [{key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}]"


def container(cpu: str) -> str:
    return (f"containers: [{{name: app, image: registry.k8s.io/pause:3.10, resources: {{requests: {{cpu: '{cpu}', memory: 1Gi}}, "
            f"limits: {{cpu: '{cpu}', memory: 1Gi}}}}}}]")


WORKLOAD = f"""apiVersion: kubesoda.io/v1alpha1
kind: YieldGroup
metadata: {{name: fair}}
spec: {{epochSeconds: 3}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: web}}
spec:
  replicas: 4
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web, kubesoda.io/yield-group: fair}}}}
    spec:
      schedulingGates: [{{name: kubesoda.io/yield}}]
      {TOL}
      {container("4")}
---
apiVersion: batch/v1
kind: Job
metadata: {{name: crunch}}
spec:
  parallelism: 6
  completions: 6
  completionMode: Indexed
  template:
    metadata: {{labels: {{kubesoda.io/yield-group: fair}}}}
    spec:
      restartPolicy: Never
      schedulingGates: [{{name: kubesoda.io/yield}}]
      {TOL}
      {container("3")}
""" + "".join(f"""---
apiVersion: v1
kind: Pod
metadata: {{name: bare-{i}, labels: {{kubesoda.io/yield-group: fair}}}}
spec:
  schedulingGates: [{{name: kubesoda.io/yield}}]
  {TOL}
  {container("2")}
""" for i in range(2)) + f"""---
apiVersion: v1
kind: Pod
metadata: {{name: ungated, labels: {{kubesoda.io/yield-group: fair}}}}
spec:
  {TOL}
  {container("1")}
"""

LATE = f"""apiVersion: v1
kind: Pod
metadata: {{name: late, labels: {{kubesoda.io/yield-group: fair}}}}
spec:
  schedulingGates: [{{name: kubesoda.io/yield}}]
  {TOL}
  {container("4")}
"""


def group_pods(kube, ns):
    return [p for p in kube.core.list_namespaced_pod(ns, label_selector="kubesoda.io/yield-group=fair").items if p.metadata.name != "ungated"]


def settled(kube, ns, count):
    """``count`` pods placed by kubesoda, Running on their node, CPU = alpha x yield."""
    pods = group_pods(kube, ns)
    if len(pods) != count:
        return False
    for p in pods:
        ann = p.metadata.annotations or {}
        if p.status.phase != "Running" or p.spec.scheduling_gates or p.spec.node_name != ann.get("kubesoda.io/yield-node"):
            return False
        want = float(ann["kubesoda.io/yield-alpha"]) * float(ann.get("kubesoda.io/yield", "0"))
        lim = milli(p.spec.containers[0].resources.limits["cpu"])
        if abs(lim - want * 1000) > 2:
            return False
    return pods


def test_yield_group_places_resizes_and_reoptimises(kube, kubectl, namespace, extender_port, wait_for, tmp_path):
    op = start_operator(kubectl, extender_port, log=str(tmp_path / "operator.log"))
    try:
        kubectl("apply", "-n", namespace, "-f", "-", input=WORKLOAD)
        t0 = time.monotonic()
        pods = wait_for(lambda: settled(kube, namespace, 12), timeout=120, interval=1, what="12 pods placed, Running, CPU = alpha x yield")
        print(f"\nyield group: 12 pods placed and resized {time.monotonic() - t0:.1f} s after the apply")
        uids = {p.metadata.name: p.metadata.uid for p in pods}
        # 4 x 4 + 6 x 3 + 2 x 2 = 38 cores of need on 32 cores: yields below 1, CPU per node within capacity
        used: dict[str, int] = {}
        for p in pods:
            used[p.spec.node_name] = used.get(p.spec.node_name, 0) + milli(p.spec.containers[0].resources.limits["cpu"])
        assert max(used.values()) <= 4000, used
        st = wait_for(lambda: (s := kube.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "yieldgroups", "fair").get("status")
                               or {}).get("pods") == 12 and s, timeout=30, interval=0.5, what="the group's status counting 12 pods")
        assert 0.5 < st["minYield"] < 1.0 and st["averageYield"] >= st["minYield"], st
        web = {round(float(p.metadata.annotations["kubesoda.io/yield"]), 4) for p in pods if p.metadata.name.startswith("web-")}
        assert len(web) == 1  # the Deployment's replicas are one parallel job: one yield
        # the ungated pod is untouched: scheduled by the default scheduler, its CPU as created
        ung = kube.core.read_namespaced_pod("ungated", namespace)
        assert not (ung.metadata.annotations or {}).get("kubesoda.io/yield-node") and ung.spec.containers[0].resources.limits["cpu"] == "1"
        before = st["minYield"]
        kubectl("apply", "-n", namespace, "-f", "-", input=LATE)
        pods = wait_for(lambda: settled(kube, namespace, 13), timeout=90, interval=1, what="the late pod placed and yields re-optimised")
        # the group's status is patched when its epoch's handler returns, after the pods are resized: wait for it
        st = wait_for(lambda: (s := kube.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "yieldgroups", "fair").get("status")
                               or {}).get("pods") == 13 and s, timeout=30, interval=0.5, what="the group's status counting 13 pods")
        assert st["minYield"] <= before + 1e-6
        same = {p.metadata.name: p.metadata.uid for p in pods if p.metadata.name in uids}
        assert same == uids, "a running pod was recreated: resizes must be in place"
        print(f"minimum yield {before:.3f} -> {st['minYield']:.3f} with the late pod (migration budget 0: nobody moved)")
    finally:
        op.stop()
        kubectl("delete", "-n", namespace, "deployment/web", "job/crunch", "--wait=false", check=False)
