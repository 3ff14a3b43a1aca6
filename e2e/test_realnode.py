"""A real node (hack/real-node.sh): kubesoda's image runs, gets the CPU its limit says, and an
in-place resize changes that CPU without a restart.

Needs a node without the KWOK annotation (``KUBESODA_REAL_NODES=1 hack/cluster-up.sh``); skipped
otherwise. The image ``ghcr.io/kubesoda/kubesoda:dev`` is built and loaded by hack/build-image.py
when the node does not have it yet. CPU use is measured on the host from the container's cgroup
(cpuacct.usage under the kubelet's cgroup root; cpu.stat on cgroup v2), or, when the node is not
on this host, from the kubelet's /metrics/cadvisor through the API server's node proxy.
"""

from __future__ import annotations

import glob
import json
import time
from pathlib import Path

import pytest
from realnode import IMAGE, first_real_node

WINDOW = 10.0  # seconds of CPU use per measurement
TOLERANCE = 0.15

BURNER = """
import os, sys, platform
import soda_operator
print(f"burning uid={os.getuid()} python={platform.python_version()} kubesoda={soda_operator.__name__}", flush=True)
x = 0
while True:
    x += 1
"""


@pytest.fixture
def real_node(kube) -> str:
    return first_real_node(kube)


def container_cgroup(pod) -> Path | None:
    """The container's cgroup directory on this host (cgroup v1 cpuacct or v2), if it is here."""
    cid = pod.status.container_statuses[0].container_id.split("://", 1)[1]
    uid = pod.metadata.uid
    for pattern in (f"/sys/fs/cgroup/cpuacct/*/kubepods*/**/pod{uid}/{cid}",
                    f"/sys/fs/cgroup/*/kubepods*/**/pod{uid}/{cid}",
                    f"/sys/fs/cgroup/kubepods*/**/pod{uid}/{cid}"):
        hits = glob.glob(pattern, recursive=True)
        if hits:
            return Path(hits[0])
    return None


def usage_seconds(kubectl, node: str, pod, cgroup: Path | None) -> float:
    """Total CPU seconds the container has used so far."""
    if cgroup is not None:
        if (cgroup / "cpuacct.usage").exists():
            return int((cgroup / "cpuacct.usage").read_text()) / 1e9
        stat = dict(line.split() for line in (cgroup / "cpu.stat").read_text().splitlines())
        return int(stat["usage_usec"]) / 1e6
    cid = pod.status.container_statuses[0].container_id.split("://", 1)[1]
    text = kubectl("get", "--raw", f"/api/v1/nodes/{node}/proxy/metrics/cadvisor").stdout
    for line in text.splitlines():
        if line.startswith("container_cpu_usage_seconds_total{") and cid in line:
            return float(line[line.rindex("}") + 1:].split()[0])
    raise AssertionError(f"no container_cpu_usage_seconds_total for {cid} in {node}'s cadvisor metrics")


def millicores(kubectl, kube, node: str, namespace: str, name: str) -> float:
    pod = kube.core.read_namespaced_pod(name, namespace)
    cgroup = container_cgroup(pod)
    u0, t0 = usage_seconds(kubectl, node, pod, cgroup), time.monotonic()
    time.sleep(WINDOW)
    u1, t1 = usage_seconds(kubectl, node, pod, cgroup), time.monotonic()
    return (u1 - u0) / (t1 - t0) * 1000


def cfs_quota(kube, namespace: str, name: str) -> int | None:
    cgroup = container_cgroup(kube.core.read_namespaced_pod(name, namespace))
    if cgroup is None:
        return None
    cpu = Path(str(cgroup).replace("/cpuacct/", "/cpu/")) / "cpu.cfs_quota_us"
    return int(cpu.read_text()) if cpu.exists() else None


def test_cpu_limit_and_in_place_resize_on_a_real_node(real_node, kube, namespace, kubectl, wait_for):
    name = "burn"
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "nodeName": real_node,
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 0,
            "securityContext": {"runAsNonRoot": True},
            "containers": [{
                "name": "burn",
                "image": IMAGE,
                "imagePullPolicy": "IfNotPresent",
                "command": ["python3", "-c", BURNER],
                "resources": {"requests": {"cpu": "100m", "memory": "64Mi"},
                              "limits": {"cpu": "500m", "memory": "256Mi"}},
            }],
        },
    }
    kubectl("apply", "-f", "-", input=json.dumps(pod))

    def running():
        p = kube.core.read_namespaced_pod(name, namespace)
        st = (p.status.container_statuses or [None])[0]
        return st is not None and st.state.running is not None and p
    wait_for(running, timeout=120, what=f"pod {name} Running on {real_node}")

    # logs through the API server -> kubelet on the node address: the image's user and Python
    logs = wait_for(lambda: (out := kubectl("logs", "-n", namespace, name, check=False).stdout) and "burning" in out and out,
                    timeout=30, what="the burner's first log line")
    assert "uid=65532" in logs and "python=3.11." in logs, logs

    time.sleep(2)
    before = millicores(kubectl, kube, real_node, namespace, name)
    quota_before = cfs_quota(kube, namespace, name)
    print(f"\nCPU with a 500m limit: {before:.0f}m (cfs_quota_us {quota_before})")
    assert abs(before - 500) <= 500 * TOLERANCE, f"{before:.0f}m used under a 500m limit"

    kubectl("patch", "pod", name, "-n", namespace, "--subresource", "resize", "-p",
            json.dumps({"spec": {"containers": [{"name": "burn", "resources": {"limits": {"cpu": "200m"}}}]}}))

    def actuated():
        p = kube.core.read_namespaced_pod(name, namespace)
        res = p.status.container_statuses[0].resources
        return res is not None and res.limits and res.limits.get("cpu") == "200m"
    wait_for(actuated, timeout=60, what="the kubelet to actuate the resize (status resources.limits.cpu 200m)")
    time.sleep(1)
    after = millicores(kubectl, kube, real_node, namespace, name)
    quota_after = cfs_quota(kube, namespace, name)
    print(f"CPU after the resize to 200m: {after:.0f}m (cfs_quota_us {quota_after})")
    assert abs(after - 200) <= 200 * TOLERANCE, f"{after:.0f}m used under a 200m limit"
    status = kube.core.read_namespaced_pod(name, namespace).status.container_statuses[0]
    assert status.restart_count == 0, "the resize restarted the container"
    if quota_before is not None and quota_after is not None:
        assert (quota_before, quota_after) == (50000, 20000)
