"""A clean uninstall (issue 48, item 3): the operator stopped, a namespace holding one object of every kind and
the CRDs are deleted, and nothing stays Terminating.

Kopf put a finalizer on every object a timer or daemon served (YieldGroup, BatchDispatch, JobFlow, FlowPool):
once the operator was gone, nothing removed it, and the namespace and those CRDs hung in Terminating
(:mod:`soda_operator.kube.periodic` runs those handlers without Kopf's timers). The objects here are the ones a
user would have: the small pipeline's StreamTemplate and StreamJob, a YieldGroup, a BatchDispatch, a FlowPool
and a JobFlow on it, a pinned ResourceProfile, the SchedulingPolicy ``default`` and the operator's
ClusterKopfPeering (it runs with ``--peering``, as the chart does); each periodic kind's handler has written its status
before the operator stops (so it did run on them).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from kubernetes import client
from live import FAST_POLICY, GROUP, ROOT, VERSION, install_crds_and_policy, start_operator

PERIODIC = ("yieldgroups", "batchdispatches", "jobflows")  # namespaced; and the cluster-scoped flowpools


def objects(ns: str, pool: str) -> str:
    return f"""apiVersion: {GROUP}/{VERSION}
kind: YieldGroup
metadata: {{name: fair, namespace: {ns}}}
spec: {{epochSeconds: 3}}
---
apiVersion: {GROUP}/{VERSION}
kind: BatchDispatch
metadata: {{name: default, namespace: {ns}}}
spec: {{policy: deadline, intervalSeconds: 1, nodeSelector: {{kubesoda.io/e2e-uninstall: {ns}}}}}
---
apiVersion: {GROUP}/{VERSION}
kind: FlowPool
metadata: {{name: {pool}}}
spec:
  nodeSelector: {{kubesoda.io/e2e-uninstall: {ns}}}
  capacity: [0, 2]
---
apiVersion: {GROUP}/{VERSION}
kind: JobFlow
metadata: {{name: f, namespace: {ns}}}
spec:
  utility: 1
  lifespanSeconds: 300
  epochSeconds: 4
  arrivals: {{mode: forecast, forecast: [0]}}
  planner: {{evaluations: 10, deadlineSeconds: 1}}
  steps:
  - name: a
    runSeconds: 2
    pools: [{pool}]
    jobTemplate:
      spec:
        template:
          spec:
            restartPolicy: Never
            containers: [{{name: a, image: registry.k8s.io/pause:3.10}}]
---
apiVersion: {GROUP}/{VERSION}
kind: ResourceProfile
metadata: {{name: {pool}.transform}}
spec: {{pinned: true, a: 2, b: 1}}
"""


def finalized(kube: Any, ns: str, pool: str) -> dict[str, list[str]]:
    """Every object of ours that carries a finalizer: kind/name -> finalizers."""
    out: dict[str, list[str]] = {}
    for plural in (*PERIODIC, "streamjobs", "streamtemplates"):
        for o in kube.custom.list_namespaced_custom_object(GROUP, VERSION, ns, plural)["items"]:
            if o["metadata"].get("finalizers"):
                out[f"{plural}/{o['metadata']['name']}"] = o["metadata"]["finalizers"]
    for group, plural, name in ((GROUP, "flowpools", pool), (GROUP, "schedulingpolicies", "default"), (GROUP, "resourceprofiles", f"{pool}.transform"),
                                ("kopf.dev", "clusterkopfpeerings", pool)):
        o = kube.custom.get_cluster_custom_object(group, "v1" if group == "kopf.dev" else VERSION, plural, name)
        if o["metadata"].get("finalizers"):
            out[f"{plural}/{name}"] = o["metadata"]["finalizers"]
    return out


def still_there(kube: Any, ns: str) -> list[str]:
    """The namespace and our CRDs that have not gone yet, with their deletion state."""
    left = []
    try:
        left.append(f"namespace {ns}: {kube.core.read_namespace(ns).status.phase}")
    except client.ApiException as e:
        if e.status != 404:
            raise
    for crd in kube.apiext.list_custom_resource_definition().items:
        if crd.spec.group in (GROUP, "kopf.dev"):
            left.append(f"crd {crd.metadata.name}: {'Terminating' if crd.metadata.deletion_timestamp else 'present'}")
    return left


def unstick(kube: Any) -> None:
    """Clear the finalizers left on our objects (as the user of an operator that left them had to)."""
    for plural in (*PERIODIC, "streamjobs", "streamtemplates", "flowpools", "schedulingpolicies", "resourceprofiles"):
        try:
            items = kube.custom.list_cluster_custom_object(GROUP, VERSION, plural)["items"]
        except client.ApiException:
            continue
        for o in items:
            md = o["metadata"]
            if md.get("finalizers"):
                if md.get("namespace"):
                    kube.custom.patch_namespaced_custom_object(GROUP, VERSION, md["namespace"], plural, md["name"], {"metadata": {"finalizers": None}})
                else:
                    kube.custom.patch_cluster_custom_object(GROUP, VERSION, plural, md["name"], {"metadata": {"finalizers": None}})


def test_uninstall_leaves_nothing_terminating(kube, kubectl, extender_port, wait_for, tmp_path):
    ns = f"e2e-uninstall-{uuid.uuid4().hex[:6]}"
    pool = f"uninstall-{ns[-6:]}"
    # with peering (as the chart runs it): the periodic handlers act on the elected replica, and the peering
    # object is one more kind to delete
    op = start_operator(kubectl, extender_port, log=str(tmp_path / "operator.log"), extra=("--peering", pool))
    try:
        kubectl("create", "namespace", ns)
        kubectl("apply", "-n", ns, "-f", str(ROOT / "examples" / "small-pipeline"))
        kubectl("apply", "-f", "-", input=objects(ns, pool))

        def handled() -> bool:
            statuses = [kube.custom.get_namespaced_custom_object(GROUP, VERSION, ns, p, n).get("status")
                        for p, n in (("yieldgroups", "fair"), ("batchdispatches", "default"), ("jobflows", "f"), ("streamjobs", "clicks"))]
            statuses.append(kube.custom.get_cluster_custom_object(GROUP, VERSION, "flowpools", pool).get("status"))
            return all(statuses)

        wait_for(handled, timeout=60, what=f"every kind's status written (operator log: {tmp_path / 'operator.log'})")
        # a Kopf finalizer would be on the periodic kinds by now (added at their first event, before any timer ran)
        fins = finalized(kube, ns, pool)
    finally:
        op.stop()
    # the uninstall: the operator is gone; the user deletes the namespace and the CRDs
    kubectl("delete", "namespace", ns, "--wait=false")
    kubectl("delete", "-f", str(ROOT / "crds"), "--wait=false")
    try:
        deadline = time.monotonic() + 60
        while still_there(kube, ns) and time.monotonic() < deadline:
            time.sleep(1)
        assert still_there(kube, ns) == [], f"Terminating 60 s after the deletes; finalizers while the operator ran: {fins}"
        assert fins == {}
    finally:
        unstick(kube)  # after a failure only: the suite's next files expect the CRDs (an operator fixture applies them again)
        wait_for(lambda: not [c for c in kube.apiext.list_custom_resource_definition().items if c.spec.group == GROUP],
                 timeout=120, what="the CRDs gone before they are installed again")
        install_crds_and_policy(kubectl, FAST_POLICY)
