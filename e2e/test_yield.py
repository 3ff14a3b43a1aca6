"""Fair-yield groups live (docs/yield.md): a Deployment, a parallel Job and bare pods in one
YieldGroup on the KWOK nodes of the small topology (8 nodes of 4 cores).

- every gated pod lands on the node kubesoda chose (node affinity on its name set while gated, gate removed);
- running pods' CPU limits become alpha x yield in place (same UIDs) and the group's status gives
  the minimum and average yield;
- a pod that arrives later is placed and the yields re-optimised;
- a labelled pod without the gate is never touched;
- request-only and limit pods: requests follow the yields (no node's requests ever above its
  allocatable, sampled throughout), a cordoned node's pods moved through the Eviction API, a
  PodDisruptionBudget that refuses reported (status blockedMoves, MoveBlocked and NodeLost Events);
- a move in flight (issue 47): a pod that terminates for 30 s (hack/kwok.yaml's kubesoda-pod-delete-slow
  stage, driven by the pod annotation ``kubesoda.io/test-termination-delay``) and one whose eviction a
  PodDisruptionBudget refuses keep their CPU counted on their node until they are gone.
"""

from __future__ import annotations

import time

from live import FAST_POLICY, GROUP, VERSION, install_crds_and_policy, milli, start_operator

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


def res(cpu: str, limit: bool) -> str:
    lim = f", limits: {{cpu: '{cpu}', memory: 1Gi}}" if limit else ""
    return f"resources: {{requests: {{cpu: '{cpu}', memory: 1Gi}}{lim}}}"


def deployment(name: str, replicas: int, cpu: str, limit: bool) -> str:
    return f"""---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}, kubesoda.io/yield-group: moves}}}}
    spec:
      schedulingGates: [{{name: kubesoda.io/yield}}]
      {TOL}
      containers: [{{name: app, image: registry.k8s.io/pause:3.10, {res(cpu, limit)}}}]
"""


MOVES = """apiVersion: kubesoda.io/v1alpha1
kind: YieldGroup
metadata: {name: moves}
spec: {epochSeconds: 2}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: req}
spec:
  maxUnavailable: 0
  selector: {matchLabels: {app: req}}
""" + deployment("req", 6, "4", limit=False) + deployment("lim", 4, "4", limit=True)


class Overcommit:
    """Samples every bound, unfinished pod's CPU requests per node (all namespaces) against the
    node's allocatable, in a thread, until stopped: the worst excess seen."""

    def __init__(self, kube):
        import threading

        self.kube, self.worst, self.samples, self.stop_ = kube, {}, 0, threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stop_.is_set():
            alloc = {n.metadata.name: milli(n.status.allocatable["cpu"]) for n in self.kube.core.list_node().items}
            used: dict[str, int] = {}
            for p in self.kube.core.list_pod_for_all_namespaces().items:
                if not p.spec.node_name or p.status.phase in ("Succeeded", "Failed"):
                    continue
                for c in p.spec.containers:
                    req = (c.resources.requests or {}).get("cpu") if c.resources else None
                    used[p.spec.node_name] = used.get(p.spec.node_name, 0) + (milli(req) if req else 0)
            for n, u in used.items():
                if n in alloc and u > alloc[n]:
                    self.worst[n] = max(self.worst.get(n, 0), u - alloc[n])
            self.samples += 1
            self.stop_.wait(0.3)

    def stop(self):
        self.stop_.set()
        self.thread.join(timeout=10)
        return self.worst


def moves_pods(kube, ns):
    return kube.core.list_namespaced_pod(ns, label_selector="kubesoda.io/yield-group=moves").items


def placed(kube, ns, count):
    """``count`` pods Running where kubesoda placed them, each container's CPU request (and limit
    where it has one) at alpha x yield."""
    pods = [p for p in moves_pods(kube, ns) if not p.metadata.deletion_timestamp]
    if len(pods) != count:
        return False
    for p in pods:
        ann = p.metadata.annotations or {}
        if p.status.phase != "Running" or p.spec.scheduling_gates or p.spec.node_name != ann.get("kubesoda.io/yield-node"):
            return False
        want = 1000 * float(ann["kubesoda.io/yield-alpha"]) * float(ann.get("kubesoda.io/yield", "0"))
        r = p.spec.containers[0].resources
        if abs(milli(r.requests["cpu"]) - want) > 2 or (r.limits and abs(milli(r.limits["cpu"]) - want) > 2):
            return False
    return pods


def test_request_only_pods_pdb_and_a_cordoned_node(kube, kubectl, namespace, extender_port, wait_for, tmp_path):
    """Request-only and limit pods (40 cores of need on 32): requests follow the yields, so no node's
    requests ever sum above its allocatable; a node is cordoned mid-run: its limit pods move (evicted
    through the Eviction API, recreated gated, placed elsewhere), its request-only pods do not (their
    PodDisruptionBudget refuses), which the status and a Warning Event report."""
    op = start_operator(kubectl, extender_port, log=str(tmp_path / "operator.log"))
    watch = Overcommit(kube)
    cordoned = None
    try:
        kubectl("apply", "-n", namespace, "-f", "-", input=MOVES)
        pods = wait_for(lambda: placed(kube, namespace, 10), timeout=120, interval=1, what="10 pods placed, requests = alpha x yield")
        req = [p for p in pods if p.metadata.name.startswith("req-")]
        assert all(not p.spec.containers[0].resources.limits for p in req)  # still request-only
        assert sum(milli(p.spec.containers[0].resources.requests["cpu"]) for p in pods) <= 32000
        assert all(t.match_fields and t.match_fields[0].key == "metadata.name"
                   for p in pods for t in p.spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution.node_selector_terms)
        # cordon a node holding a request-only pod (its PDB blocks the move) and, if there, limit pods
        cordoned = req[0].spec.node_name
        kubectl("cordon", cordoned)
        st = wait_for(lambda: (s := kube.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "yieldgroups", "moves").get("status")
                               or {}).get("blockedMoves") and s, timeout=60, interval=0.5, what="a blocked move in the status")
        blocked = {b["pod"] for b in st["blockedMoves"]}
        assert blocked and all(n.startswith("req-") for n in blocked) and req[0].metadata.name in blocked, st
        assert req[0].metadata.name in st["lost"] and st["algorithm"] == "anytime" and st["gap"] is not None
        # the PDB held: the request-only pod is still there, same UID
        assert kube.core.read_namespaced_pod(req[0].metadata.name, namespace).metadata.uid == req[0].metadata.uid
        lim_there = [p.metadata.name for p in pods if p.metadata.name.startswith("lim-") and p.spec.node_name == cordoned]
        if lim_there:  # evicted, recreated gated, placed on another node
            wait_for(lambda: not any(p.metadata.name in lim_there for p in moves_pods(kube, namespace))
                     and all(p.spec.node_name != cordoned for p in moves_pods(kube, namespace) if p.metadata.name.startswith("lim-"))
                     and placed(kube, namespace, 10), timeout=90, interval=1, what="the limit pods moved off the cordoned node")
        events = kube.core.list_namespaced_event(namespace, field_selector="involvedObject.name=moves").items
        reasons = {e.reason for e in events}
        assert {"Placed", "MoveBlocked", "NodeLost"} <= reasons, reasons
        print(f"\nyield moves: blocked {sorted(blocked)}, moved {lim_there}; min yield {st['minYield']}, gap {st['gap']}")
    finally:
        worst = watch.stop()
        if cordoned:
            kubectl("uncordon", cordoned, check=False)
        op.stop()
        kubectl("delete", "-n", namespace, "deployment/req", "deployment/lim", "pdb/req", "--wait=false", check=False)
    assert watch.samples > 5 and not worst, f"CPU requests above allocatable (millicores over, per node): {worst}"


TAINT = "dedicated=infra:NoSchedule"
TAINTED = ("z0-r0-n0", "z0-r0-n1")  # the first nodes by name: MCB8 filled them first, tainted or not


def gated_deployment(name: str, replicas: int, cpu: str, selector: str = "", tolerations: str = TOL) -> str:
    return f"""---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}, kubesoda.io/yield-group: zoned}}}}
    spec:
      schedulingGates: [{{name: kubesoda.io/yield}}]
      {tolerations}
      {selector}
      {container(cpu)}
"""


ZONE1 = "nodeSelector: {topology.kubernetes.io/zone: zone-1}"
ZONED = """apiVersion: kubesoda.io/v1alpha1
kind: YieldGroup
metadata: {name: zoned}
spec: {epochSeconds: 2}
""" + gated_deployment("web", 4, "4", ZONE1) + gated_deployment("stale", 1, "1", ZONE1) + gated_deployment(
    "infra", 2, "2", "nodeSelector: {topology.kubernetes.io/zone: zone-0}",
    "tolerations: [{key: kwok.x-k8s.io/node, operator: Exists}, {key: dedicated, operator: Exists}]") + f"""---
apiVersion: v1
kind: Pod
metadata: {{name: gpu, labels: {{kubesoda.io/yield-group: zoned}}}}
spec:
  schedulingGates: [{{name: kubesoda.io/yield}}]
  nodeSelector: {{gpu: "true"}}
  {TOL}
  {container("1")}
"""


def zoned_pods(kube, ns, app=None):
    sel = "kubesoda.io/yield-group=zoned" + (f",app={app}" if app else "")
    return [p for p in kube.core.list_namespaced_pod(ns, label_selector=sel).items if not p.metadata.deletion_timestamp]


def release_as_before(kube, ns, pod, node):
    """What the operator before issue 47 did to a pod it planned on ``node`` (a tainted node of the wrong zone):
    pinned there by name, annotated, its gate removed. The scheduler then leaves it Pending for good."""
    from soda_operator.kube.pods import pinned_affinity

    body = kube.core.api_client.sanitize_for_serialization(pod)
    kube.core.patch_namespaced_pod(pod.metadata.name, ns, {
        "metadata": {"annotations": {"kubesoda.io/yield-node": node, "kubesoda.io/yield-alpha": "1", "kubesoda.io/yield": "1.000000"}},
        "spec": {"affinity": pinned_affinity(body, node)}})
    kube.core.patch_namespaced_pod(pod.metadata.name, ns, [{"op": "replace", "path": "/spec/schedulingGates", "value": []}])


def test_taints_node_selectors_and_a_stuck_pod(kube, kubectl, namespace, extender_port, wait_for, tmp_path):
    """Issue 47, live: two zone-0 nodes tainted dedicated=infra:NoSchedule; 4 pods of 4 cores with nodeSelector
    zone-1 (they were all planned on the tainted nodes, Pending for good, and the group said optimal); 2 pods
    tolerating the taint with nodeSelector zone-0; a pod asking for a gpu label no node has (reported, left
    gated); a pod released as the operator did before onto a tainted zone-0 node, Pending (re-planned with
    migrationBudget 0). No node's requests above its allocatable in any sample."""
    watch = Overcommit(kube)
    op = None
    try:
        for n in TAINTED:
            kubectl("taint", "nodes", n, f"{TAINT}", "--overwrite")
        install_crds_and_policy(kubectl, FAST_POLICY)  # the operator starts once the stale pod is stuck
        kubectl("apply", "-n", namespace, "-f", "-", input=ZONED)
        stale = wait_for(lambda: zoned_pods(kube, namespace, "stale") or None, timeout=30, what="the stale pod created")[0]
        release_as_before(kube, namespace, stale, TAINTED[0])
        wait_for(lambda: any(c.reason == "Unschedulable" for c in (kube.core.read_namespaced_pod(stale.metadata.name, namespace).status.conditions or [])),
                 timeout=30, what="the stale pod Unschedulable")
        op = start_operator(kubectl, extender_port, log=str(tmp_path / "operator.log"))

        def settled():
            pods = zoned_pods(kube, namespace)
            run = [p for p in pods if p.metadata.name != "gpu"]
            if len(run) != 7 or any(p.status.phase != "Running" for p in run) or any(p.metadata.uid == stale.metadata.uid for p in run):
                return False
            return pods

        pods = wait_for(settled, timeout=120, interval=1, what="web, infra and the re-planned stale pod Running")
        zone = {n.metadata.name: n.metadata.labels["topology.kubernetes.io/zone"] for n in kube.core.list_node().items}
        for p in pods:
            app = (p.metadata.labels or {}).get("app")
            if app in ("web", "stale"):
                assert zone[p.spec.node_name] == "zone-1" and p.spec.node_name not in TAINTED, (p.metadata.name, p.spec.node_name)
            elif app == "infra":
                assert zone[p.spec.node_name] == "zone-0", (p.metadata.name, p.spec.node_name)
        gpu = kube.core.read_namespaced_pod("gpu", namespace)
        assert gpu.spec.scheduling_gates and not gpu.spec.node_name  # left gated
        st = wait_for(lambda: (s := kube.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "yieldgroups", "zoned").get("status")
                               or {}).get("unplaceable") and s.get("pods") == 8 and s, timeout=30, interval=0.5,
                      what="the group's status naming the unplaceable pod")
        assert [u["pod"] for u in st["unplaceable"]] == ["gpu"] and "nodeSelector" in st["unplaceable"][0]["reason"], st
        assert st["state"] == "partial" and st["conditions"][0]["reason"] == "Partial", st
        assert st["decisionSeconds"] >= 0 and st["deadlineSeconds"] == 1
        events = kube.core.list_namespaced_event(namespace, field_selector="involvedObject.name=zoned").items
        said = {e.reason: e for e in events}
        assert said["Unplaceable"].type == "Warning" and "gpu" in said["Unplaceable"].message
        assert said["PendingReplanned"].type == "Warning" and stale.metadata.name in said["PendingReplanned"].message
        print(f"\nzoned: web on {sorted(p.spec.node_name for p in pods if p.metadata.labels.get('app') == 'web')}, "
              f"state {st['state']}, min yield {st['minYield']}, decision {st['decisionSeconds']} s")
    finally:
        worst = watch.stop()
        if op is not None:
            op.stop()
        for n in TAINTED:
            kubectl("taint", "nodes", n, f"{TAINT}-", check=False)
        kubectl("delete", "-n", namespace, "deployment/web", "deployment/stale", "deployment/infra", "--wait=false", check=False)
    assert watch.samples > 5 and not worst, f"CPU requests above allocatable (millicores over, per node): {worst}"


SLOW = "kubesoda.io/test-termination-delay"  # hack/kwok.yaml's kubesoda-pod-delete-slow stage: Terminating this long
SLOW_S = 30


def slow_moves(budget: str = "64Gi") -> str:
    """A group on one node: a 4-core pod that terminates slowly, a 4-core pod whose PodDisruptionBudget refuses
    every eviction, and a bare 2-core pod (never moved): 10 cores of need on 4, each at yield 0.4."""
    def dep(name: str, annotations: str) -> str:
        return f"""---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}, kubesoda.io/yield-group: slow}}, annotations: {{{annotations}}}}}
    spec:
      schedulingGates: [{{name: kubesoda.io/yield}}]
      {TOL}
      containers: [{{name: app, image: registry.k8s.io/pause:3.10, {res("4", limit=False)}}}]
"""
    return f"""apiVersion: kubesoda.io/v1alpha1
kind: YieldGroup
metadata: {{name: slow}}
spec: {{epochSeconds: 2, migrationBudget: {budget}}}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {{name: held}}
spec:
  maxUnavailable: 0
  selector: {{matchLabels: {{app: held}}}}
""" + dep("mover", f"{SLOW}: {SLOW_S}s") + dep("held", "") + f"""---
apiVersion: v1
kind: Pod
metadata: {{name: stay, labels: {{kubesoda.io/yield-group: slow}}}}
spec:
  schedulingGates: [{{name: kubesoda.io/yield}}]
  {TOL}
  containers: [{{name: app, image: registry.k8s.io/pause:3.10, {res("2", limit=False)}}}]
"""


def slow_pods(kube, ns):
    return {p.metadata.name: p for p in kube.core.list_namespaced_pod(ns, label_selector="kubesoda.io/yield-group=slow").items}


def request_m(p) -> int:
    return sum(milli((c.resources.requests or {}).get("cpu", "0")) for c in p.spec.containers)


def test_a_slow_termination_and_a_refused_eviction_hold_their_cpu(kube, kubectl, namespace, extender_port, wait_for, tmp_path):
    """Issue 47, live: the group runs on one node (the others cordoned), 10 cores of need on 4; the other nodes
    come back and the epoch moves both Deployment pods off it (the bare pod stays): one terminates for 30 s (KWOK's
    kubesoda-pod-delete-slow stage), the other's eviction its PodDisruptionBudget refuses. While the move is in
    flight the bare pod must not grow into the CPU the two still hold: no node's requests (terminating pods
    included) above its allocatable in any sample; the terminating pod is seen Terminating on its node, its
    replacement placed elsewhere; once it is gone, the bare pod grows into what it held."""
    names = sorted(n.metadata.name for n in kube.core.list_node().items if (n.metadata.annotations or {}).get("kwok.x-k8s.io/node") == "fake")
    home, others = names[0], names[1:]
    watch = Overcommit(kube)
    op = start_operator(kubectl, extender_port, log=str(tmp_path / "operator.log"))
    try:
        for n in others:
            kubectl("cordon", n)
        kubectl("apply", "-n", namespace, "-f", "-", input=slow_moves())

        def on_home():
            pods = slow_pods(kube, namespace)
            if len(pods) != 3 or any(p.status.phase != "Running" or p.spec.node_name != home for p in pods.values()):
                return False
            return pods if 3900 <= sum(request_m(p) for p in pods.values()) <= 4000 else False  # 10 cores of need at yield 0.4

        pods = wait_for(on_home, timeout=90, interval=1, what=f"the three pods Running on {home}, 4 cores in all")
        mover = next(p for n, p in pods.items() if n.startswith("mover-"))
        held = next(p for n, p in pods.items() if n.startswith("held-"))
        stay_before = request_m(pods["stay"])
        for n in others:
            kubectl("uncordon", n)
        seen: dict[str, float] = {}  # what was seen while the move was in flight

        def in_flight():
            now = slow_pods(kube, namespace)
            old = now.get(mover.metadata.name)
            if old is not None and old.metadata.deletion_timestamp:
                seen.setdefault("terminating", time.monotonic())
                seen["last"] = time.monotonic()
                assert old.spec.node_name == home and request_m(old) == request_m(mover)  # still holds its CPU there
                assert request_m(now["stay"]) <= stay_before, "the bare pod grew into CPU the moving pods still hold"
                new = [p for n, p in now.items() if n.startswith("mover-") and n != mover.metadata.name and p.spec.node_name]
                if new and new[0].status.phase == "Running":
                    seen["replaced"] = 1
                    assert new[0].spec.node_name != home
            return old is None and "terminating" in seen and now

        now = wait_for(in_flight, timeout=SLOW_S + 60, interval=0.5, what="the slow pod Terminating, then gone")
        assert seen["last"] - seen["terminating"] >= SLOW_S - 10, seen  # held in Terminating by the KWOK stage
        assert seen.get("replaced"), "the moved pod's replacement was not Running elsewhere while the old one terminated"
        assert now[held.metadata.name].metadata.uid == held.metadata.uid and not now[held.metadata.name].metadata.deletion_timestamp
        st = kube.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "yieldgroups", "slow").get("status") or {}
        assert [b["pod"] for b in st.get("blockedMoves", [])] == [held.metadata.name], st
        # the terminating pod gone, the bare pod gets what it held: 4 cores less the blocked pod's 1.6
        grown = wait_for(lambda: (r := request_m(kube.core.read_namespaced_pod("stay", namespace))) > stay_before and r,
                         timeout=30, interval=0.5, what="the bare pod growing once the slow pod is gone")
        assert grown + request_m(now[held.metadata.name]) <= 4000
        print(f"\nslow move: Terminating {seen['last'] - seen['terminating']:.0f} s on {home}; bare pod {stay_before}m -> {grown}m, "
              f"blocked {held.metadata.name}; {watch.samples} samples")
    finally:
        worst = watch.stop()
        for n in others:
            kubectl("uncordon", n, check=False)
        op.stop()
        # the slow pods would hold the namespace's deletion for their 30 s: scaled away, then deleted at once
        kubectl("scale", "-n", namespace, "deployment/mover", "--replicas=0", check=False)
        kubectl("delete", "-n", namespace, "pod", "-l", "app=mover", "--grace-period=0", "--force", check=False)
        kubectl("delete", "-n", namespace, "deployment/mover", "deployment/held", "pdb/held", "pod/stay", "--wait=false", check=False)
    assert watch.samples > 20 and not worst, f"CPU requests above allocatable (millicores over, per node): {worst}"
