"""A hostile tenant's BatchDispatch and JobFlows against a healthy namespace, live (issue 45, rows "slotCPU: 1n",
"forecast: [1.0e308]" / "[1e6]" / "runSeconds: 1e7").

1. The real API server refuses every BatchDispatch, JobFlow and FlowPool number past its bound, naming the field
   (server-side dry run; the tables of soda_optimizer.dispatch.limits and .flows.limits), and ``slotCPU`` below 10m
   through the CRD's CEL quantity rule; at the bound it is accepted.
2. Objects stored before the bounds: the CRDs are applied without them, the tenant's hostile objects created
   (``slotCPU: 1n`` beside gated Jobs, ``forecast: [1.0e308]`` and ``runSeconds: 1e7`` on the healthy flow's own
   FlowPool, ``forecast: [1e5]`` on a pool of 1 server, and ``forecast: [1e4]`` on the healthy FlowPool, whose
   ``allowedNamespaces`` leaves the tenant out: refused naming ``spec.steps[0].pools``), then the real CRDs applied
   (now refusing such objects) and
   the operator started. Namespace ``healthy`` holds a BatchDispatch with a gated Job and a JobFlow: its released pods,
   its BatchDispatch's decision and its flow's plan do not change over two decision intervals of each, the operator's
   liveness endpoint answers every probe throughout, and each hostile object says why in its own status, naming the
   field; and the tenant can delete them while the operator runs (Kopf's finalizer released: the issue's 1n
   BatchDispatch could not be deleted until a restart).
"""

from __future__ import annotations

import copy
import json
import math
import os
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client
from live import GROUP, ROOT, VERSION, start_operator

from soda_optimizer.dispatch import limits as bd_limits
from soda_optimizer.flows import limits as fl_limits

KINDS = ("batchdispatches", "jobflows", "flowpools")
LIVENESS_PORT = int(os.environ.get("KUBESODA_PORT_BASE", "27100")) + 50  # the cluster takes base+0..9
TOL = "tolerations: [{key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}]"
HEALTHY_POOL, TENANT_POOL = "hk-healthy", "hk-tenant"
EPOCH = 8  # seconds: the flows' decision interval


def gated_job(name: str, tasks: int, cpu: str = "1") -> str:
    return f"""---
apiVersion: batch/v1
kind: Job
metadata: {{name: {name}, annotations: {{kubesoda.io/priority: "1", kubesoda.io/deadline: "600"}}}}
spec:
  completions: {tasks}
  parallelism: {tasks}
  completionMode: Indexed
  template:
    spec:
      restartPolicy: Never
      schedulingGates: [{{name: kubesoda.io/dispatch}}]
      {TOL}
      containers: [{{name: task, image: registry.k8s.io/pause:3.10, resources: {{requests: {{cpu: '{cpu}', memory: 64Mi}}}}}}]
"""


def dispatcher(slot: str) -> str:
    return f"""---
apiVersion: kubesoda.io/v1alpha1
kind: BatchDispatch
metadata: {{name: default}}
spec: {{policy: deadline, intervalSeconds: 2, slotCPU: {json.dumps(slot)}}}
"""


def jobflow(name: str, pool: str, forecast: float = 4, run: float = 6) -> str:
    return f"""---
apiVersion: kubesoda.io/v1alpha1
kind: JobFlow
metadata: {{name: {name}}}
spec:
  lifespanSeconds: 120
  epochSeconds: {EPOCH}
  arrivals: {{mode: external, forecast: [{forecast!r}]}}
  planner: {{evaluations: 10, deadlineSeconds: 1}}
  steps: [{{name: a, runSeconds: {run!r}, pools: [{pool}]}}]
"""


def flowpool(name: str, cap: float, zone: int, allowed: list[str] | None = None) -> str:
    shared = "" if allowed is None else f", allowedNamespaces: {json.dumps(allowed)}"
    return f"""---
apiVersion: kubesoda.io/v1alpha1
kind: FlowPool
metadata: {{name: {name}}}
spec: {{nodeSelector: {{topology.kubernetes.io/zone: zone-{zone}}}, capacity: [{cap}]{shared}}}
"""


# ------------------------------------------------------------------------------------------ 1. the bounds, live

BASES = {
    "batchdispatches": {"policy": "workload", "reservation": 0, "horizon": 1, "slotCPU": "1", "priorThroughput": 1, "window": 1,
                        "intervalSeconds": 1},
    "jobflows": {"lifespanSeconds": 60, "epochSeconds": 10, "utility": 1, "horizonEpochs": 1,
                 "steps": [{"runSeconds": 1, "pools": ["p"]}], "arrivals": {"forecast": [1]},
                 "planner": {"evaluations": 1, "deadlineSeconds": 1, "seed": 0}},
    "flowpools": {"nodeSelector": {"a": "b"}, "capacity": [1], "loadMap": [{"load": 1, "throughput": 1}]},
}
KIND_OF = {"batchdispatches": "BatchDispatch", "jobflows": "JobFlow", "flowpools": "FlowPool"}


def _set(spec: dict[str, Any], path: str, value: Any) -> str:
    """Set the CRD path (``[]``: the first item) in ``spec``; returns the field as the API server names it."""
    target: Any = spec
    shown = "spec"
    parts = path.split(".")
    for i, part in enumerate(parts):
        key, item = (part[:-2], True) if part.endswith("[]") else (part, False)
        shown += f".{key}" + ("[0]" if item else "")
        holder, at = (target[key], 0) if item else (target, key)
        if i == len(parts) - 1:
            holder[at] = value
        else:
            target = holder[at]
    return shown


def _dry_run(kube: Any, plural: str, ns: str, spec: dict[str, Any]) -> str | None:
    """None when the API server accepts the object (server-side dry run), else its message."""
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND_OF[plural], "metadata": {"name": "bounds"}, "spec": spec}
    try:
        if plural == "flowpools":
            kube.custom.create_cluster_custom_object(GROUP, VERSION, plural, body, dry_run="All")
        else:
            kube.custom.create_namespaced_custom_object(GROUP, VERSION, ns, plural, body, dry_run="All")
    except client.exceptions.ApiException as e:
        return str(json.loads(e.body).get("message")) if e.body else str(e)
    return None


def test_the_api_server_refuses_every_dispatch_and_flow_number_past_its_bound(kube, kubectl, namespace):
    for k in KINDS:
        kubectl("apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "crds" / f"{k}.yaml"))
    for k in KINDS:
        kubectl("wait", "--for=condition=Established", f"crd/{k}.kubesoda.io", "--timeout=60s")
    tables = {"batchdispatches": bd_limits.RANGES, "jobflows": fl_limits.FLOW_RANGES, "flowpools": fl_limits.POOL_RANGES}
    for plural, table in tables.items():
        assert _dry_run(kube, plural, namespace, copy.deepcopy(BASES[plural])) is None, plural
        for path, (_lo, hi) in table.items():
            integer = path in ("window", "horizonEpochs", "planner.evaluations", "planner.seed")
            for value, refused in ((hi, False), (hi + 1 if integer else math.nextafter(hi, math.inf), True)):
                spec = copy.deepcopy(BASES[plural])
                field = _set(spec, path, int(value) if integer else value)
                said = _dry_run(kube, plural, namespace, spec)
                if refused:
                    assert said is not None and field in said and "less than or equal to" in said, (plural, path, said)
                else:
                    assert said is None, (plural, path, said)
    # FlowPool spec.allowedNamespaces (the administrator's consent to share a pool): namespaces, as the API server names them
    for allowed, ok in (([namespace], True), ([], True), (["Not_a_namespace"], False), (["a" * 64], False)):
        said = _dry_run(kube, "flowpools", namespace, {**BASES["flowpools"], "allowedNamespaces": allowed})
        assert (said is None) == ok, (allowed, said)
        if not ok:
            assert "spec.allowedNamespaces[0]" in said, said
    # the maps a tenant writes onto Kubernetes objects: label values 63 characters
    said = _dry_run(kube, "flowpools", namespace, {**BASES["flowpools"], "nodeSelector": {"a": "b" * 64}})
    assert said is not None and "spec.nodeSelector.a" in said, said
    # slotCPU, a quantity: the CEL rule
    for slot, ok in (("10m", True), ("100k", True), ("1n", False), ("100u", False), ("9m", False), ("100001", False), (1, True)):
        said = _dry_run(kube, "batchdispatches", namespace, {**BASES["batchdispatches"], "slotCPU": slot})
        assert (said is None) == ok, (slot, said)
        if not ok:
            assert "spec.slotCPU" in said and "from 10m to 100k" in said, said


# ---------------------------------------------------------------------------- 2. hostile objects beside healthy ones


def _unbounded(path: Any) -> list[dict[str, Any]]:
    """A CRD as it was before issue 45's bounds: no maximum, no CEL quantity rule."""

    def strip(x: Any) -> Any:
        if isinstance(x, dict):
            out = {k: strip(v) for k, v in x.items() if k != "maximum"}
            if "x-kubernetes-validations" in out:
                out["x-kubernetes-validations"] = [r for r in out["x-kubernetes-validations"] if "quantity" not in r["rule"]]
                if not out["x-kubernetes-validations"]:
                    del out["x-kubernetes-validations"]
            return out
        if isinstance(x, list):
            return [strip(v) for v in x]
        return x

    return [strip(d) for d in yaml.safe_load_all(path.read_text())]


@pytest.fixture
def namespaces(kube: Any) -> Iterator[tuple[str, str]]:
    for ns in ("healthy", "tenant"):
        kube.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    try:
        yield "healthy", "tenant"
    finally:
        for ns in ("healthy", "tenant"):
            for plural in ("batchdispatches", "jobflows"):
                try:
                    for obj in kube.custom.list_namespaced_custom_object(GROUP, VERSION, ns, plural)["items"]:
                        kube.custom.patch_namespaced_custom_object(GROUP, VERSION, ns, plural, obj["metadata"]["name"],
                                                                   {"metadata": {"finalizers": None}})
                        kube.custom.delete_namespaced_custom_object(GROUP, VERSION, ns, plural, obj["metadata"]["name"])
                except client.exceptions.ApiException:
                    pass
            kube.core.delete_namespace(ns, grace_period_seconds=0)
        for pool in (HEALTHY_POOL, TENANT_POOL):
            try:
                kube.custom.patch_cluster_custom_object(GROUP, VERSION, "flowpools", pool, {"metadata": {"finalizers": None}})
                kube.custom.delete_cluster_custom_object(GROUP, VERSION, "flowpools", pool)
            except client.exceptions.ApiException:
                pass
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and any(_exists(kube, ns) for ns in ("healthy", "tenant")):
            time.sleep(1)


def _exists(kube: Any, ns: str) -> bool:
    try:
        kube.core.read_namespace(ns)
    except client.exceptions.ApiException as e:
        return e.status != 404
    return True


def _live(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def _obj(kube: Any, ns: str, plural: str, name: str) -> dict[str, Any]:
    return kube.custom.get_namespaced_custom_object(GROUP, VERSION, ns, plural, name)


def _conds(st: dict[str, Any]) -> list[tuple[str, str, str]]:
    return sorted((c["type"], c["status"], c["reason"]) for c in st.get("conditions") or [])


def picture(kube: Any, ns: str) -> tuple[Any, ...]:
    """What must not change in ``healthy``: the task pods (UID, node, gated), the BatchDispatch's decision, the flow's plan."""
    pods = sorted((p.metadata.uid, p.spec.node_name or (p.metadata.annotations or {}).get("kubesoda.io/dispatch-node"),
                   bool(p.spec.scheduling_gates)) for p in kube.core.list_namespaced_pod(ns).items)
    bd = _obj(kube, ns, "batchdispatches", "default").get("status") or {}
    jobs = [(j["job"], j["running"], j["waiting"], j["planned"]) for j in bd.get("jobs") or []]
    jf = _obj(kube, ns, "jobflows", "h").get("status") or {}
    plan = jf.get("plan") or {}
    return (pods, bd.get("state"), bd.get("slots"), bd.get("released"), jobs, _conds(bd),
            jf.get("state"), plan.get("flows"), plan.get("entries"), _conds(jf))


def test_hostile_dispatch_and_flows_cost_the_healthy_namespace_nothing(kube, kubectl, extender_port, namespaces, wait_for, tmp_path):
    healthy, tenant = namespaces
    # objects stored before the bounds: the CRDs without them, the tenant's objects, then the real CRDs
    for k in KINDS:
        kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=yaml.safe_dump_all(_unbounded(ROOT / "crds" / f"{k}.yaml")))
        kubectl("wait", "--for=condition=Established", f"crd/{k}.kubesoda.io", "--timeout=60s")
    # the healthy pool is shared with the healthy namespace only (the administrator's allowedNamespaces)
    kubectl("apply", "-f", "-", input=flowpool(HEALTHY_POOL, 3, 0, [healthy]) + flowpool(TENANT_POOL, 1, 1))
    kubectl("apply", "-n", tenant, "-f", "-", input=gated_job("flood", 8, cpu="10m") + dispatcher("1n")
            + jobflow("huge", HEALTHY_POOL, forecast=1.0e308) + jobflow("slow", HEALTHY_POOL, run=1.0e7)
            + jobflow("capped", TENANT_POOL, forecast=1e5) + jobflow("intruder", HEALTHY_POOL, forecast=1e4))
    op = start_operator(kubectl, extender_port, log=str(tmp_path / "operator.log"),
                        extra=("--liveness", f"http://127.0.0.1:{LIVENESS_PORT}/healthz"))  # installs the real CRDs
    url = f"http://127.0.0.1:{LIVENESS_PORT}/healthz"
    try:
        # the API server now refuses what the tenant stored before, naming the field
        for body, field in ((dispatcher("1n"), "spec.slotCPU"), (jobflow("huge2", HEALTHY_POOL, forecast=1.0e308), "spec.arrivals.forecast[0]"),
                            (jobflow("slow2", HEALTHY_POOL, run=1.0e7), "spec.steps[0].runSeconds")):
            out = kubectl("apply", "-n", tenant, "--dry-run=server", "-f", "-", input=body.replace("name: default", "name: other"), check=False)
            assert out.returncode != 0 and field in out.stderr, out.stderr
        wait_for(lambda: _live(url), timeout=30, what="the operator's liveness endpoint")
        kubectl("apply", "-n", healthy, "-f", "-", input=gated_job("work", 2) + dispatcher("1") + jobflow("h", HEALTHY_POOL))

        def settled() -> bool:
            bd = _obj(kube, healthy, "batchdispatches", "default").get("status") or {}
            jf = _obj(kube, healthy, "jobflows", "h").get("status") or {}
            pods = kube.core.list_namespaced_pod(healthy).items
            return (bd.get("released") == 2 and len(pods) == 2 and all(p.status.phase == "Running" for p in pods)
                    and jf.get("state") == "routing" and bool((jf.get("plan") or {}).get("entries")))

        wait_for(settled, timeout=60, what="the healthy Job's tasks Running and its flow routing")
        # each hostile object says why in its own status, naming the field
        st = wait_for(lambda: (s := _obj(kube, tenant, "batchdispatches", "default").get("status") or {}).get("state") == "invalid" and s,
                      timeout=30, what="the 1n BatchDispatch refused")
        assert st["message"].startswith("spec.slotCPU:") and "from 10m" in st["message"], st
        for name, field in (("huge", "spec.arrivals.forecast[0]"), ("slow", "spec.steps[0].runSeconds"), ("intruder", "spec.steps[0].pools")):
            st = wait_for(lambda name=name: (s := _obj(kube, tenant, "jobflows", name).get("status") or {}).get("state") == "invalid" and s,
                          timeout=30, what=f"JobFlow {name} refused")
            assert st["message"].startswith(field), st
        st = wait_for(lambda: (s := _obj(kube, tenant, "jobflows", "capped").get("status") or {}).get("state") == "routing" and s,
                      timeout=30, what="JobFlow capped routing")
        budget = next(c for c in st["conditions"] if c["type"] == "WithinBudget")
        assert (budget["status"], budget["reason"]) == ("False", "ForecastCapped") and budget["message"].startswith("spec.arrivals.forecast:"), budget
        assert all(p.spec.scheduling_gates for p in kube.core.list_namespaced_pod(tenant).items)  # nothing dispatched for 1n
        # two decision intervals of each (BatchDispatch 2 s, flows one epoch of EPOCH s): nothing of healthy moves
        before = picture(kube, healthy)
        end = time.monotonic() + 2 * EPOCH + 1
        probes = 0
        while time.monotonic() < end:
            assert _live(url), "the liveness probe missed"
            probes += 1
            assert picture(kube, healthy) == before, "the healthy namespace changed"
            assert op.proc is not None and op.proc.poll() is None, op.output()[-3000:]
            time.sleep(1)
        assert probes >= 2 * EPOCH
        jf = _obj(kube, healthy, "jobflows", "h")["status"]
        assert jf["plan"]["flows"] == 1  # planned alone: the refused flows on its pool are in no plan
        # the tenant's objects can be deleted while the operator runs (its loop releases their finalizers)
        kubectl("delete", "-n", tenant, "batchdispatch/default", "jobflow/huge", "jobflow/slow", "--timeout=30s")
        assert _live(url)
    finally:
        op.stop()
