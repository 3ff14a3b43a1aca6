"""Fair-yield pods on real nodes (docs/yield.md, "On a real node"): busy containers whose CPU, read
back from their cgroups on the host, is the yield kubesoda planned for them, and follows it in place
when the group changes.

Two real nodes (``KUBESODA_REAL_NODES=2``, hack/real-node.sh: kubelets with containerd on this host)
offer the group 300m and 400m: a pause pod on each (``PAUSE``, containerd's sandbox image, no CPU
used) requests the rest of its node, so that the group's shares are contended on paper without
loading the shared 2-core host for real. Every other node is cordoned for the test's duration: the
allocator plans on every usable node (it does not read a pod's node constraints), and a KWOK node's
4 free cores would give every pod its whole need.

1. Two bare pods, ``a`` (a busy loop with a 600m limit: its need alpha) and ``b`` (400m), join one
   YieldGroup. The max-min yield puts ``a`` alone on the 400m node (yield 2/3) and ``b`` alone on
   the 300m one (yield 3/4): different yields and different CPU. Each container's CFS quota, read
   from its cgroup, is alpha x its planned yield (within a millicore), and the CPU it burns is that
   quota (within ``TOLERANCE``).
2. A third pod ``c`` (300m) joins. The group re-plans (migration budget 0: nobody moves): ``c`` goes
   beside ``a`` (both 4/9 = 0.444; beside ``b`` both would get 3/7 = 0.429), so ``a``'s quota
   shrinks in place from 399m to 266m, with no restart (restart count 0, same container id and UID),
   and every container's CPU follows its quota again.
3. ``c`` leaves: ``a`` grows back in place to its first share (a resize up, which the kubelet admits
   only once ``c``'s CPU is released), again without a restart.

The expected placements and yields come from a brute force over the placements (:func:`oracle`),
not from the operator. Needs two real nodes with kubesoda's image (built and loaded by
hack/build-image.py when missing); skipped otherwise.
"""

from __future__ import annotations

import itertools
import json
import statistics
import time

import pytest
from live import FAST_POLICY, GROUP, VERSION, install_crds_and_policy, milli, start_operator
from realnode import IMAGE, NO_REAL_NODE, cpu_quota_millicores, ensure_image, real_nodes
from test_realnode import container_cgroup, usage_seconds

PAUSE = "localhost/kubesoda/pause:3.10.1"  # on every real node: containerd's sandbox image
FREE = (300, 400)  # millicores the first and second real node offer the group (a pause pod holds the rest)
ALPHA = {"a": 600, "b": 400, "c": 300}  # each pod's CPU limit as created: its need alpha, millicores
WINDOW, WINDOWS = 4.0, 3  # CPU use: the median of WINDOWS windows of WINDOW seconds, all pods at once
TOLERANCE = 0.15  # the CPU used against the quota, as e2e/test_realnode.py
BURN = "while True:\n    pass\n"


def oracle(free: dict[str, int], alpha: dict[str, int], pinned: dict[str, str]) -> tuple[dict[str, str], dict[str, float]]:
    """The paper's two phases by brute force: of every placement that keeps ``pinned`` pods where
    they are, the one with the largest minimum yield (the node's share, capped at 1), then each
    node's slack above that minimum given to its smallest needs first (the largest average yield).
    The placement must be unique (the test's numbers are chosen so)."""
    scored = []
    for nodes in itertools.product(sorted(free), repeat=len(alpha)):
        where = dict(zip(sorted(alpha), nodes))
        if any(where[p] != n for p, n in pinned.items()):
            continue
        load = {n: sum(alpha[p] for p in where if where[p] == n) for n in free}
        scored.append((min(min(1.0, free[where[p]] / load[where[p]]) for p in where), where))
    scored.sort(key=lambda s: -s[0])
    assert len(scored) == 1 or scored[0][0] - scored[1][0] > 0.01, f"the test's numbers give no unique optimum: {scored[:2]}"
    best, where = scored[0]
    yields = {}
    for n in free:
        slack = free[n] - best * sum(alpha[p] for p in where if where[p] == n)
        for p in sorted((p for p in where if where[p] == n), key=lambda p: alpha[p]):
            extra = min(1.0 - best, slack / alpha[p])
            yields[p], slack = best + extra, slack - extra * alpha[p]
    return where, yields


def pod(name: str) -> dict:
    cpu = f"{ALPHA[name]}m"
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"kubesoda.io/yield-group": "fair"}},
        "spec": {
            "schedulingGates": [{"name": "kubesoda.io/yield"}],
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 0,
            "securityContext": {"runAsNonRoot": True},
            "containers": [{"name": "burn", "image": IMAGE, "imagePullPolicy": "IfNotPresent", "command": ["python3", "-c", BURN],
                            "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}, "limits": {"cpu": cpu, "memory": "64Mi"}}}],
        },
    }


def filler(node: str, cpu: int) -> dict:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"hold-{node.replace('.', '-')}"},
        "spec": {"nodeName": node, "automountServiceAccountToken": False, "terminationGracePeriodSeconds": 0,
                 "containers": [{"name": "pause", "image": PAUSE, "imagePullPolicy": "Never",
                                 "resources": {"requests": {"cpu": f"{cpu}m", "memory": "16Mi"}, "limits": {"cpu": f"{cpu}m", "memory": "16Mi"}}}]},
    }


GROUP_YAML = """apiVersion: kubesoda.io/v1alpha1
kind: YieldGroup
metadata: {name: fair}
spec: {epochSeconds: 2, deadlineSeconds: 1}
"""


def free_millicores(kube, node) -> int:
    """The node's allocatable CPU minus the CPU requests of every bound, unfinished pod on it."""
    used = 0
    for p in kube.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node.metadata.name}").items:
        if p.status.phase in ("Succeeded", "Failed"):
            continue
        used += sum(milli((c.resources.requests or {}).get("cpu", "0")) for c in p.spec.containers if c.resources)
    return milli(node.status.allocatable["cpu"]) - used


@pytest.fixture
def two_real_nodes(kube) -> list[str]:
    nodes = real_nodes(kube)
    if len(nodes) < 2:
        pytest.skip(f"{len(nodes)} real node(s): this test needs two (KUBESODA_REAL_NODES=2 hack/cluster-up.sh)"
                    + ("" if nodes else f"; {NO_REAL_NODE}"))
    ensure_image(nodes[:2])
    return [str(n.metadata.name) for n in nodes[:2]]


class Waiting(str):
    """Why a wait is not over: falsy, so that wait_for goes on and shows it when it times out."""

    def __bool__(self) -> bool:
        return False


def settled(kube, ns: str, names: list[str]):
    """Every pod of ``names`` Running where kubesoda placed it, its CPU limit alpha x its planned
    yield (the annotation) and actuated by the kubelet (status resources = spec): the pods, else
    why not (:class:`Waiting`)."""
    out = {}
    for name in names:
        p = kube.core.read_namespaced_pod(name, ns)
        ann = p.metadata.annotations or {}
        st = (p.status.container_statuses or [None])[0]
        if p.status.phase != "Running" or p.spec.scheduling_gates or st is None or st.state.running is None \
                or p.spec.node_name != ann.get("kubesoda.io/yield-node"):
            return Waiting(f"{name}: {p.status.phase} on {p.spec.node_name}, gates {p.spec.scheduling_gates}, planned on "
                           f"{ann.get('kubesoda.io/yield-node')}")
        limit = milli(p.spec.containers[0].resources.limits["cpu"])
        planned = ALPHA[name] * float(ann.get("kubesoda.io/yield", "0"))
        if abs(limit - planned) >= 1:
            return Waiting(f"{name}: CPU limit {limit}m, alpha x yield {planned:.1f}m")
        actual = (st.resources.limits or {}).get("cpu") if st.resources else None
        if actual is None or milli(actual) != limit:
            return Waiting(f"{name}: CPU limit {limit}m, the kubelet's {actual}")
        out[name] = p
    return out


def group_yields(kube, ns: str) -> dict[str, float]:
    st = kube.custom.get_namespaced_custom_object(GROUP, VERSION, ns, "yieldgroups", "fair").get("status") or {}
    return {y["pod"]: y["yield"] for y in st.get("yields") or []}


def replanned(kube, ns: str, free: dict[str, int], pinned: dict[str, str], names: list[str]):
    """The group's status giving ``names`` the optimum's yields (an epoch that ran while a pod was
    still leaving plans without its CPU: the next one sees it) and those pods settled: the pods,
    else why not (:class:`Waiting`)."""
    _, want = oracle(free, {n: ALPHA[n] for n in names}, pinned)
    planned = group_yields(kube, ns)
    if set(planned) != set(names) or any(abs(planned[n] - want[n]) >= 1e-5 for n in names):
        return Waiting(f"planned yields {planned}, the optimum's {want}")
    return settled(kube, ns, names)


def check(kube, kubectl, ns: str, pods: dict, free: dict[str, int], pinned: dict[str, str]) -> dict[str, tuple[int, float, float]]:
    """Placement and yields as the oracle's; each container's cgroup quota = its limit = alpha x
    yield; CPU used = quota within TOLERANCE. Returns pod -> (limit, quota, used) in millicores."""
    where, want = oracle(free, {n: ALPHA[n] for n in pods}, pinned)
    planned = group_yields(kube, ns)
    out = {}
    cgroups = {}
    for name, p in pods.items():
        assert p.spec.node_name == where[name], f"{name} on {p.spec.node_name}, the optimum puts it on {where[name]}"
        assert abs(planned[name] - want[name]) < 1e-5, f"{name}: planned yield {planned[name]}, the optimum's {want[name]:.6f}"
        cgroups[name] = container_cgroup(p)
        if cgroups[name] is None:
            pytest.skip(f"{name}'s cgroup is not on this host: its quota cannot be read")
        quota = cpu_quota_millicores(cgroups[name])
        limit = milli(p.spec.containers[0].resources.limits["cpu"])
        assert quota is not None and abs(quota - limit) < 1, f"{name}: cgroup quota {quota}m, limit {limit}m"
        assert abs(quota - ALPHA[name] * planned[name]) < 1, f"{name}: cgroup quota {quota}m, alpha x yield {ALPHA[name] * planned[name]:.1f}m"
        out[name] = (limit, quota)
    used: dict[str, list[float]] = {n: [] for n in pods}
    for _ in range(WINDOWS):
        u0, t0 = {n: usage_seconds(kubectl, p.spec.node_name, p, cgroups[n]) for n, p in pods.items()}, time.monotonic()
        time.sleep(WINDOW)
        u1, t1 = {n: usage_seconds(kubectl, p.spec.node_name, p, cgroups[n]) for n, p in pods.items()}, time.monotonic()
        for n in pods:
            used[n].append((u1[n] - u0[n]) / (t1 - t0) * 1000)
    result = {}
    for name, (limit, quota) in out.items():
        m = statistics.median(used[name])
        print(f"  {name}: alpha {ALPHA[name]}m on {pods[name].spec.node_name}, yield {planned[name]:.6f}: limit {limit}m, "
              f"cgroup quota {quota:.0f}m, used {m:.0f}m (windows {[round(u) for u in used[name]]})")
        result[name] = (limit, quota, m)
    for name, (_, quota, m) in result.items():
        assert abs(m - quota) <= quota * TOLERANCE, f"{name} used {m:.0f}m under a {quota:.0f}m quota"
    return result


def test_yield_pods_cpu_follows_their_yields_on_real_nodes(two_real_nodes, kube, kubectl, namespace, extender_port, wait_for, tmp_path):
    t_start = time.monotonic()
    install_crds_and_policy(kubectl, FAST_POLICY)
    cordoned = []
    op = None
    try:
        for n in kube.core.list_node().items:
            if n.metadata.name not in two_real_nodes and not n.spec.unschedulable:
                kubectl("cordon", n.metadata.name)
                cordoned.append(n.metadata.name)
        # a pause pod on each real node holds all of its CPU but FREE (sized once an earlier test's
        # pods there are gone: they hold CPU until then)
        wait_for(lambda: not any(p.metadata.deletion_timestamp for n in two_real_nodes
                                 for p in kube.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={n}").items),
                 timeout=60, what="no pod terminating on the real nodes")
        free = dict(zip(two_real_nodes, FREE))
        for node in two_real_nodes:
            hold = free_millicores(kube, kube.core.read_node(node)) - free[node]
            assert hold > 0, f"{node} offers less than {free[node]}m already"
            kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(filler(node, hold)))
        wait_for(lambda: all(free_millicores(kube, kube.core.read_node(n)) == free[n] for n in two_real_nodes),
                 timeout=30, what=f"the real nodes offering {FREE} millicores")
        # the pods and the group before the operator: its first epoch sees both pods (Kopf fills its
        # indexes before any handler runs), so the plan does not depend on the order they are seen
        for name in ("a", "b"):
            kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(pod(name)))
        kubectl("apply", "-n", namespace, "-f", "-", input=GROUP_YAML)
        op = start_operator(kubectl, extender_port, log=str(tmp_path / "operator.log"))
        t0 = time.monotonic()
        pods = wait_for(lambda: replanned(kube, namespace, free, {}, ["a", "b"]), timeout=90, interval=1,
                        what="a and b Running where placed, CPU limit alpha x the optimum's yield, actuated")
        print(f"\nfair yield on real nodes {two_real_nodes} offering {FREE} millicores; two pods, running as planned "
              f"{time.monotonic() - t0:.1f} s after the operator started:")
        first = check(kube, kubectl, namespace, pods, free, {})
        ids = {n: (p.metadata.uid, p.status.container_statuses[0].container_id) for n, p in pods.items()}
        where = {n: p.spec.node_name for n, p in pods.items()}

        def in_place(pods):
            for name, (uid, cid) in ids.items():
                st = pods[name].status.container_statuses[0]
                assert (pods[name].metadata.uid, st.container_id, st.restart_count) == (uid, cid, 0), f"{name} was restarted or recreated"

        # a third pod: the group re-plans, the running pods' quotas follow in place
        kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(pod("c")))
        t0 = time.monotonic()
        pods = wait_for(lambda: replanned(kube, namespace, free, where, ["a", "b", "c"]), timeout=90, interval=1,
                        what="c placed and the yields re-planned, actuated in place")
        print(f"with a third pod, re-planned and actuated {time.monotonic() - t0:.1f} s after it was created:")
        second = check(kube, kubectl, namespace, pods, free, where)
        in_place(pods)
        assert any(abs(first[n][1] - second[n][1]) >= 50 for n in ids), "no running pod's quota changed: the test shows nothing"

        # c leaves: the CPU it held goes back to a, which grows in place
        kubectl("delete", "-n", namespace, "pod/c", "--wait=true")
        t0 = time.monotonic()
        pods = wait_for(lambda: replanned(kube, namespace, free, where, ["a", "b"]), timeout=60, interval=1,
                        what="a grown back in place")
        print(f"c gone, re-planned and actuated {time.monotonic() - t0:.1f} s after:")
        third = check(kube, kubectl, namespace, pods, free, where)
        in_place(pods)
        assert third["a"][1] - second["a"][1] >= 50, "a did not grow back"
        print(f"  (the test took {time.monotonic() - t_start:.0f} s)")
    finally:
        if op is not None:
            # the group first, while the operator runs: it removes its finalizer (else the namespace
            # waits for it); the pods go with the namespace
            kubectl("delete", "-n", namespace, "yieldgroup/fair", "--timeout=30s", check=False)
            op.stop()
        for name in cordoned:
            kubectl("uncordon", name, check=False)
