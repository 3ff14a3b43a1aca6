"""A hostile tenant against the live scheduler (issue 32): no object of one namespace may stop, stall
or take over planning for the others.

`clicks` (examples/small-pipeline) runs in one namespace; a tenant namespace applies each input of
the issue's table that reaches the cluster. Over two macro epochs (6 s each) `clicks` keeps its pods
(same UIDs), CPU limits and status, the operator process stays up, and each hostile object either
is refused by the API server naming its field or says why in its own status.

The pipeline guard is driven by the operator's failpoint (``KUBESODA_FAILPOINT_PLAN_TEMPLATE``):
planning raises whenever a job lists the template it names, as an unforeseen bug in a stage would.
"""

from __future__ import annotations

import base64
import os
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from live import ROOT, job, pe_pods, running_as_planned, start_operator

FAILPOINT = "boom"

CHAIN = """apiVersion: kubesoda.io/v1alpha1
kind: StreamTemplate
metadata: {name: chain}
spec:
  pes:
  - {name: s, kind: source, resourceFunction: {a: 1000000}}
  - {name: t, resourceFunction: {a: 1000000, b: 1000000}}
  - {name: k, kind: sink, resourceFunction: {a: 1000000, b: 1000000}}
  streams:
  - {from: s, to: t, selectivity: 1000000}
  - {from: t, to: k, selectivity: 1000000}
  sinks: [{pe: k, weight: 1000000000}]
  primalInputs: [{pe: s, rate: 1000000000000}]
---
apiVersion: kubesoda.io/v1alpha1
kind: StreamJob
metadata: {name: chain}
spec: {templates: [chain], rank: 1, required: true}
"""

SMALL = """apiVersion: kubesoda.io/v1alpha1
kind: StreamTemplate
metadata: {name: small}
spec:
  pes:
  - {name: a, kind: source, minCpu: 200m, maxCpu: 200m, resourceFunction: {a: 0.01}}
  sinks: [{pe: a, weight: 1}]
  primalInputs: [{pe: a, rate: 1}]
---
apiVersion: kubesoda.io/v1alpha1
kind: StreamTemplate
metadata: {name: boom}
spec:
  pes:
  - {name: a, kind: source, minCpu: 200m, resourceFunction: {a: 0.01}}
  sinks: [{pe: a, weight: 1}]
  primalInputs: [{pe: a, rate: 1}]
---
apiVersion: kubesoda.io/v1alpha1
kind: StreamJob
metadata: {name: tenant-job}
spec: {templates: [small], rank: 2}
"""

TOO_BIG = [  # (what, manifest, the field the API server names)
    ("sink weight 1e308", "kind: StreamTemplate\nmetadata: {name: w}\nspec:\n  pes: [{name: a, kind: source}]\n  sinks: [{pe: a, weight: 1.0e308}]\n",
     "spec.sinks[0].weight"),
    ("slope 1e308", "kind: StreamTemplate\nmetadata: {name: s}\nspec:\n  pes: [{name: a, kind: source}]\n"
                    "  sinks: [{pe: a, value: {kind: linear, slope: 1.0e308}}]\n", "spec.sinks[0].value.slope"),
    ("selectivity 1e308", "kind: StreamTemplate\nmetadata: {name: x}\nspec:\n  pes: [{name: a, kind: source}, {name: b}]\n"
                          "  streams: [{from: a, to: b, selectivity: 1.0e308}]\n", "spec.streams[0].selectivity"),
    ("weightOverrides 1e308", "kind: StreamJob\nmetadata: {name: o}\nspec: {templates: [small], weightOverrides: {'sink:a': 1.0e308}}\n",
     "spec.weightOverrides"),
]


@pytest.fixture(scope="module")
def operator(kubectl: Any, extender_port: int) -> Iterator[Any]:
    log = "/tmp/kubesoda-e2e-hostile.log"
    open(log, "w").close()
    os.environ["KUBESODA_FAILPOINT_PLAN_TEMPLATE"] = FAILPOINT
    try:
        proc = start_operator(kubectl, extender_port, log=log)
    finally:
        del os.environ["KUBESODA_FAILPOINT_PLAN_TEMPLATE"]
    yield proc
    proc.stop()


@pytest.fixture
def tenant(kube: Any) -> Iterator[str]:
    from kubernetes import client

    name = f"tenant-{os.getpid()}-{int(time.time() * 1000) % 100000}"
    kube.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    kube.core.delete_namespace(name)


def picture(kube: Any, ns: str, name: str) -> tuple[Any, ...]:
    """What must not change: the pods (UID, node, CPU limit) and the status's decision."""
    st = job(kube, ns, name).get("status") or {}
    pods = sorted((p.metadata.uid, p.spec.node_name, p.spec.containers[0].resources.limits["cpu"]) for p in pe_pods(kube, ns, name))
    pes = sorted((pe["name"], pe.get("goalMips"), tuple(pe.get("candidates") or ())) for pe in st.get("pes") or [])
    return st.get("phase"), st.get("chosenTemplate"), pes, pods


def unchanged(kube: Any, ns: str, name: str, before: tuple[Any, ...], operator: Any, seconds: float = 14) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        assert picture(kube, ns, name) == before, "the healthy job changed"
        assert operator.proc.poll() is None, operator.output()[-3000:]
        time.sleep(1)


def phase_of(kube: Any, ns: str, name: str) -> dict[str, Any]:
    return job(kube, ns, name).get("status") or {}


def test_hostile_tenant_costs_the_healthy_job_nothing(operator, kube, kubectl, namespace, tenant, wait_for, extender_port):
    kubectl("apply", "-n", namespace, "-f", str(ROOT / "examples" / "small-pipeline"))
    wait_for(lambda: running_as_planned(kube, namespace, "clicks"), timeout=90, what="clicks Running as planned")
    before = picture(kube, namespace, "clicks")
    kubectl("apply", "-n", tenant, "-f", "-", input=SMALL)
    # 1. numbers past the schema: the API server refuses them, naming the field
    for what, body, fld in TOO_BIG:
        out = kubectl("apply", "-n", tenant, "-f", "-", input=f"apiVersion: kubesoda.io/v1alpha1\n{body}", check=False)
        assert out.returncode != 0 and fld in out.stderr and "less than or equal to" in out.stderr, (what, out.stderr)
    # 2. numbers in range whose product overflows: the job is Invalid, naming its template and stream
    kubectl("apply", "-n", tenant, "-f", "-", input=CHAIN)
    st = wait_for(lambda: (s := phase_of(kube, tenant, "chain")).get("phase") == "Invalid" and s, timeout=60, what="chain Invalid")
    assert st["reason"] == "InvalidSpec" and st["message"].startswith("spec.templates[0]: template chain: stream") and "limit" in st["message"], st
    # 3. a pod of the tenant's own making with a 200 KB planned-node annotation goes to the extender
    big = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "forged", "labels": {"kubesoda.io/job": "forged", "kubesoda.io/pe": "x"},
                        "annotations": {"kubesoda.io/node": "n" * 200_000}},
           "spec": {"schedulerName": "kubesoda", "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}
    kube.core.create_namespaced_pod(tenant, big)
    unchanged(kube, namespace, "clicks", before, operator)
    forged = kube.core.read_namespaced_pod("forged", tenant)
    assert not forged.spec.node_name, "a forged planned node placed the pod"
    events = wait_for(lambda: kube.core.list_namespaced_event(tenant, field_selector="involvedObject.name=forged").items,
                      timeout=30, what="an event for the forged pod")
    assert any("not a node name" in (e.message or "") for e in events), [e.message for e in events]
    assert all(len(e.message or "") < 4096 for e in events), [len(e.message or "") for e in events]
    assert phase_of(kube, tenant, "tenant-job").get("phase") == "Running"


def test_the_api_server_refuses_every_number_past_its_bound(kubectl, tenant):
    """Each bounded number of a StreamTemplate or StreamJob (the table tests/test_bounds.py holds
    equal to the CRDs), set just past its bound, is refused by the real API server naming its field
    (server-side dry run: nothing is stored); at the bound it is accepted."""
    import copy
    import json
    import math
    import sys

    sys.path.insert(0, str(ROOT / "tests"))
    from test_bounds import BASE_J, BASE_T, JOB, TEMPLATE, _set

    for path, (bound, field) in (TEMPLATE | JOB).items():
        base = BASE_T if path in TEMPLATE else BASE_J
        for value, refused in ((bound, False), (math.nextafter(bound, math.inf) if bound < 1e300 else bound, True)):
            obj = copy.deepcopy(base)
            obj["metadata"]["namespace"] = tenant
            _set(obj, path, value)
            out = kubectl("apply", "--dry-run=server", "-f", "-", input=json.dumps(obj), check=False)
            if refused:
                crd_field = field.split("[sink:b]")[0]
                assert out.returncode != 0 and "less than or equal to" in out.stderr and crd_field.split("[")[0] in out.stderr, (path, out.stderr)
            else:
                assert out.returncode == 0, (path, out.stderr)


def test_a_job_that_makes_planning_fail_is_quarantined_alone(operator, kube, kubectl, namespace, tenant, wait_for):
    kubectl("apply", "-n", namespace, "-f", str(ROOT / "examples" / "small-pipeline"))
    wait_for(lambda: running_as_planned(kube, namespace, "clicks"), timeout=90, what="clicks Running as planned")
    kubectl("apply", "-n", tenant, "-f", "-", input=SMALL)
    wait_for(lambda: running_as_planned(kube, tenant, "tenant-job"), timeout=90, what="tenant-job Running")
    before = picture(kube, namespace, "clicks")
    theirs = sorted((p.metadata.uid, p.spec.containers[0].resources.limits["cpu"]) for p in pe_pods(kube, tenant, "tenant-job"))
    # the tenant lists the template the failpoint trips on: every plan with this job raises
    kubectl("patch", "streamjob", "tenant-job", "-n", tenant, "--type=merge", "-p", '{"spec": {"templates": ["small", "boom"]}}')
    st = wait_for(lambda: (s := phase_of(kube, tenant, "tenant-job")).get("reason") == "Quarantined" and s, timeout=60,
                  what="tenant-job Quarantined")
    assert st["phase"] == "Invalid" and f"failpoint KUBESODA_FAILPOINT_PLAN_TEMPLATE: a job lists template {FAILPOINT}" in st["message"], st
    unchanged(kube, namespace, "clicks", before, operator)
    # its running pods keep their last good plan
    assert sorted((p.metadata.uid, p.spec.containers[0].resources.limits["cpu"]) for p in pe_pods(kube, tenant, "tenant-job")) == theirs
    events = kube.core.list_namespaced_event(tenant, field_selector="involvedObject.name=tenant-job").items
    assert any(e.reason == "Quarantined" and e.type == "Warning" for e in events)
    assert f"quarantined StreamJob {tenant}/tenant-job" in operator.output()
    # the tenant mends it: released, planned again
    kubectl("patch", "streamjob", "tenant-job", "-n", tenant, "--type=merge", "-p", '{"spec": {"templates": ["small"]}}')
    wait_for(lambda: running_as_planned(kube, tenant, "tenant-job"), timeout=90, what="tenant-job Running again")
    assert picture(kube, namespace, "clicks") == before


def test_a_kubeconfig_secret_runs_nothing_in_the_operator(operator, kube, tenant, wait_for, tmp_path):
    """A FlowPool whose member-cluster kubeconfig has an exec entry (write on that Secret suffices):
    refused, naming the entry and the flag, and the command never runs; a Secret outside the
    operator's namespace (``default`` for a `kubesoda run` outside the cluster) is never read."""
    marker = tmp_path / "ran"
    kc = {"apiVersion": "v1", "kind": "Config", "current-context": "c",
          "clusters": [{"name": "k", "cluster": {"server": "https://127.0.0.1:1"}}],
          "users": [{"name": "u", "user": {"exec": {"apiVersion": "client.authentication.k8s.io/v1beta1", "command": "touch", "args": [str(marker)]}}}],
          "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]}
    data = {"kubeconfig": base64.b64encode(yaml.safe_dump(kc).encode()).decode()}
    name = f"{tenant}-exec"
    kube.core.create_namespaced_secret("default", {"metadata": {"name": name}, "data": data})
    kube.core.create_namespaced_secret(tenant, {"metadata": {"name": "elsewhere"}, "data": data})
    pools = {name: {"kubeconfigSecret": {"name": name}}, f"{tenant}-elsewhere": {"kubeconfigSecret": {"namespace": tenant, "name": "elsewhere"}}}
    try:
        for pool, cluster in pools.items():
            kube.custom.create_cluster_custom_object("kubesoda.io", "v1alpha1", "flowpools",
                                                     {"apiVersion": "kubesoda.io/v1alpha1", "kind": "FlowPool", "metadata": {"name": pool},
                                                      "spec": {"cluster": cluster, "capacity": [1]}})

        def condition(pool: str) -> dict[str, Any] | None:
            st = kube.custom.get_cluster_custom_object("kubesoda.io", "v1alpha1", "flowpools", pool).get("status") or {}
            return next((c for c in st.get("conditions") or [] if c["type"] == "Reachable" and c["status"] == "False"), None)

        c = wait_for(lambda: condition(name), timeout=30, what="the exec FlowPool refused")
        assert c["reason"] == "KubeconfigRefused" and "users[0].user.exec" in c["message"] and "--allow-unsafe-kubeconfigs" in c["message"], c
        c = wait_for(lambda: condition(f"{tenant}-elsewhere"), timeout=30, what="the other namespace's Secret refused")
        assert c["reason"] == "KubeconfigRefused" and "read only from the operator's namespace default" in c["message"], c
        time.sleep(3)  # a few more ticks of the pool timer
        assert not marker.exists(), "the kubeconfig's exec command ran inside the operator"
    finally:
        for pool in pools:
            kube.custom.delete_cluster_custom_object("kubesoda.io", "v1alpha1", "flowpools", pool)
        kube.core.delete_namespaced_secret(name, "default")
