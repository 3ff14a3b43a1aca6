"""A hostile tenant's YieldGroup against a healthy one in another namespace (issues 45 and 47): each group
decides on a thread of its own (``soda_operator.fair_yield.worker``), so a group whose decision takes all of
its 60 s deadline delays no other group's epochs.

The tenant's group asks for the exact MILP (``milp``) with ``deadlineSeconds: 20`` on 60 pods of varied CPU and
memory filling the 8 KWOK nodes' memory to 96%: SCIP does not prove it within the deadline (offline: stopped by
its deadline at 17 s), so its decision takes most of its 20 s. A healthy group of 3 pods in another namespace,
applied after it, is placed and gets its status while the tenant's decision runs: the hog's status, when it
comes, shows a decision (``decisionSeconds``) that began before the healthy group was placed.
"""

from __future__ import annotations

import time

from live import GROUP, VERSION, start_operator
from test_yield import TOL


def pods(group: str, sizes: list[tuple[int, int]]) -> str:
    return "".join(f"""---
apiVersion: v1
kind: Pod
metadata: {{name: {group}-{i}, labels: {{kubesoda.io/yield-group: {group}}}}}
spec:
  schedulingGates: [{{name: kubesoda.io/yield}}]
  {TOL}
  containers: [{{name: app, image: registry.k8s.io/pause:3.10, resources: {{requests: {{cpu: {cpu}m, memory: {mem}Mi}}, limits: {{cpu: {cpu}m, memory: {mem}Mi}}}}}}]
""" for i, (cpu, mem) in enumerate(sizes))


HOG = """apiVersion: kubesoda.io/v1alpha1
kind: YieldGroup
metadata: {name: hog}
spec: {algorithm: milp, deadlineSeconds: 20, epochSeconds: 60}
""" + pods("hog", [(100 + (i * 397) % 3800, 512 + (i * 811) % 3300) for i in range(60)])

HEALTHY_GROUP = """apiVersion: kubesoda.io/v1alpha1
kind: YieldGroup
metadata: {name: ok}
spec: {epochSeconds: 2}
"""
HEALTHY = pods("ok", [(1000, 1024)] * 3)


def status(kube, ns, name):
    return kube.custom.get_namespaced_custom_object(GROUP, VERSION, ns, "yieldgroups", name).get("status") or {}


def test_a_slow_groups_decision_delays_no_other_group(kube, kubectl, namespace, extender_port, wait_for, tmp_path):
    other = f"{namespace}-ok"
    kubectl("create", "namespace", other)
    op = start_operator(kubectl, extender_port, log=str(tmp_path / "operator.log"))
    try:
        kubectl("apply", "-n", other, "-f", "-", input=HEALTHY_GROUP)  # the operator is up once it has an epoch of it
        wait_for(lambda: status(kube, other, "ok").get("state") == "empty", timeout=60, what="the operator running epochs")
        kubectl("apply", "-n", namespace, "-f", "-", input=HOG)
        time.sleep(5)  # the hog's first epoch has started (the timer ticks every 2 s)
        t0 = time.monotonic()
        kubectl("apply", "-n", other, "-f", "-", input=HEALTHY)
        st = wait_for(lambda: (s := status(kube, other, "ok")).get("pods") == 3 and s.get("state") == "optimal" and s,
                      timeout=60, interval=0.5, what="the healthy group placed")
        placed = time.monotonic()
        hog = status(kube, namespace, "hog")
        assert st["minYield"] == 1.0
        assert "decisionSeconds" not in hog, "the hog's decision had ended before the healthy group was placed"
        wait_for(lambda: len([p for p in kube.core.list_namespaced_pod(other).items if p.status.phase == "Running"]) == 3,
                 timeout=30, what="the healthy pods Running")
        hog = wait_for(lambda: (s := status(kube, namespace, "hog")).get("decisionSeconds") is not None and s, timeout=60,
                       interval=0.25, what="the hog's decision ended")
        began = time.monotonic() - hog["decisionSeconds"]  # at the latest: the status is seen within 0.25 s of its write
        print(f"\nhealthy group placed {placed - t0:.1f} s after its apply; the hog's decision ({hog['decisionSeconds']} s, "
              f"allocator {hog['allocatorState']}) began {placed - began:.1f} s before that")
        assert began < placed, "the two decisions did not overlap"
        assert hog["allocatorState"] == "deadline" and hog["deadlineSeconds"] == 20
    finally:
        op.stop()
        kubectl("delete", "namespace", other, "--wait=false", check=False)
