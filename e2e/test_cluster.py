"""The control plane itself: real kube-scheduler, KWOK nodes, in-place resize, API errors."""

from __future__ import annotations

from kubernetes import client

LABELS = ("topology.kubernetes.io/zone", "kubesoda.io/rack", "kubesoda.io/mips-per-core")


def _pod(name: str, cpu: str, node_selector: dict[str, str] | None = None) -> client.V1Pod:
    res = client.V1ResourceRequirements(requests={"cpu": cpu, "memory": "64Mi"}, limits={"cpu": cpu, "memory": "64Mi"})
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1PodSpec(
            containers=[client.V1Container(name="main", image="busybox", resources=res)],
            node_selector=node_selector,
            tolerations=[client.V1Toleration(key="kwok.x-k8s.io/node", operator="Exists", effect="NoSchedule")],
        ),
    )


def test_nodes_are_labelled_and_ready(kube):
    nodes = kube.core.list_node().items
    assert nodes, "the cluster has no nodes"
    labelled = [n for n in nodes if all(k in (n.metadata.labels or {}) for k in LABELS)]
    assert labelled, f"no node carries all of {LABELS}"
    for n in labelled:
        ready = [c for c in n.status.conditions or [] if c.type == "Ready"]
        assert ready and ready[0].status == "True", f"node {n.metadata.name} is not Ready"


def test_pod_is_scheduled_onto_labelled_node_and_runs(kube, namespace, wait_for):
    node = next(n for n in kube.core.list_node().items if "kubesoda.io/rack" in (n.metadata.labels or {}))
    rack = node.metadata.labels["kubesoda.io/rack"]
    kube.core.create_namespaced_pod(namespace, _pod("p", "250m", {"kubesoda.io/rack": rack}))
    pod = wait_for(
        lambda: (p := kube.core.read_namespaced_pod("p", namespace)).status.phase == "Running" and p,
        timeout=60,
        what="pod Running",
    )
    assert pod.spec.node_name, "the scheduler did not bind the pod"
    bound = kube.core.read_node(pod.spec.node_name)
    assert bound.metadata.labels["kubesoda.io/rack"] == rack


def test_cpu_limit_changes_in_place_through_resize(kube, namespace, wait_for):
    kube.core.create_namespaced_pod(namespace, _pod("r", "500m"))
    before = wait_for(
        lambda: (p := kube.core.read_namespaced_pod("r", namespace)).status.phase == "Running" and p,
        what="pod Running",
    )
    body = {"spec": {"containers": [{"name": "main", "resources": {"requests": {"cpu": "1500m"}, "limits": {"cpu": "1500m"}}}]}}
    kube.core.patch_namespaced_pod_resize("r", namespace, body)
    after = kube.core.read_namespaced_pod("r", namespace)
    assert after.metadata.uid == before.metadata.uid, "the pod was replaced, not resized"
    assert after.spec.containers[0].resources.limits["cpu"] == "1500m"
    assert after.spec.containers[0].resources.requests["cpu"] == "1500m"
    assert after.status.qos_class == "Guaranteed"
    # the (simulated) kubelet reports the resize as actuated; no restart happened
    wait_for(
        lambda: (s := kube.core.read_namespaced_pod("r", namespace).status.container_statuses[0]).resources
        and s.resources.limits["cpu"] == "1500m"
        and s.restart_count == 0,
        what="resize actuated in status",
    )


def test_resize_that_changes_qos_is_refused(kube, namespace, wait_for):
    import pytest
    from kubernetes.client.rest import ApiException

    kube.core.create_namespaced_pod(namespace, _pod("q", "500m"))
    wait_for(lambda: kube.core.read_namespaced_pod("q", namespace).status.phase == "Running", what="pod Running")
    body = {"spec": {"containers": [{"name": "main", "resources": {"requests": {"cpu": "250m"}, "limits": {"cpu": "1"}}}]}}
    with pytest.raises(ApiException) as err:
        kube.core.patch_namespaced_pod_resize("q", namespace, body)
    assert err.value.status == 422 and "QOS" in err.value.body


def test_bad_manifest_gets_the_api_servers_error(kubectl, namespace):
    bad = f"""
apiVersion: v1
kind: Pod
metadata:
  name: Bad_Name
  namespace: {namespace}
spec:
  containers:
  - name: main
    image: busybox
    resources:
      limits: {{cpu: "-1"}}
"""
    proc = kubectl("apply", "-f", "-", input=bad, check=False, timeout=30)
    assert proc.returncode != 0
    assert "is invalid" in proc.stderr and "Bad_Name" in proc.stderr, proc.stderr
