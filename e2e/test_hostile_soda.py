"""The namespace is a boundary for SODA's objects, live (issue 45).

A healthy namespace runs examples/glued (``features`` exports its stream, ``alerts`` imports it).
A tenant with the chart's ``kubesoda-edit`` rights in its own namespace only (the same rules, as a
Role bound to user ``mallory``) then applies, through the real API server:

- 12 StreamJobs each importing the other 11 (main enumerated every cycle: no epoch ran again);
- a job importing ``<healthy>/features`` (main glued it: the healthy exporter sent its stream to
  the tenant's pods);
- a job with ``owner: vip`` (main ranked and charged it as ``vip``);
- a job whose name has 253 characters (main put it in the ``kubesoda.io/job`` label: every create
  refused with 422, silently, the job Admitted with its CPU reserved);
- a job whose pods the API server refuses (an environment variable named ``A=B``).

Over two macro epochs (6 s each) after every hostile object has its answer, the healthy jobs keep
their pods (same UIDs), nodes, CPU limits, status and the exporter's KUBESODA_OUTPUTS; each hostile
object says why in its own status and one Event.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import pytest
from live import ROOT, job, pe_pods, running_as_planned

from soda_operator.kube.pods import LABEL_JOB, job_label

EPOCHS_S = 14  # two macro epochs of the live policy (6 s) and some

# the rules of the chart's kubesoda-edit ClusterRole (charts/kubesoda/templates/rbac.yaml), in the tenant's namespace
EDITOR = """apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: kubesoda-edit, namespace: {ns}}}
rules:
- {{apiGroups: [kubesoda.io], resources: [streamjobs, streamtemplates, yieldgroups, batchdispatches, jobflows],
   verbs: [get, list, watch, create, update, patch, delete, deletecollection]}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: mallory-edits, namespace: {ns}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: kubesoda-edit}}
subjects: [{{apiGroup: rbac.authorization.k8s.io, kind: User, name: mallory}}]
"""

KNOT = 12
LONG = ".".join(["a" * 63, "b" * 63, "c" * 63, "d" * 61])  # 253 characters: a valid StreamJob name


def hostile(healthy: str) -> str:
    docs = ["""kind: StreamTemplate
metadata: {name: knot}
spec:
  pes: [{name: a, kind: source, minCpu: 100m, resourceFunction: {a: 0.01}}, {name: b, resourceFunction: {a: 0.01}}]
  streams: [{from: a, to: b}]
  primalInputs: [{pe: a, rate: 1}]
  sinks: [{pe: b, weight: 1}]
  exports: [{name: o, pe: b}]
""", """kind: StreamTemplate
metadata: {name: small}
spec:
  pes: [{name: a, kind: source, minCpu: 200m, maxCpu: 200m, resourceFunction: {a: 0.01}}]
  sinks: [{pe: a, weight: 1}]
  primalInputs: [{pe: a, rate: 1}]
""", """kind: StreamTemplate
metadata: {name: badenv}
spec:
  pes: [{name: a, kind: source, minCpu: 200m, maxCpu: 200m, resourceFunction: {a: 0.01}, env: [{name: A=B, value: x}]}]
  sinks: [{pe: a, weight: 1}]
  primalInputs: [{pe: a, rate: 1}]
"""]
    for i in range(KNOT):
        imports = ", ".join(f"{{job: k{j}, export: o, pe: a}}" for j in range(KNOT) if j != i)
        docs.append(f"kind: StreamJob\nmetadata: {{name: k{i}}}\nspec: {{templates: [knot], rank: 1, imports: [{imports}]}}\n")
    docs.append(f"kind: StreamJob\nmetadata: {{name: spy}}\nspec: {{templates: [knot], imports: [{{job: {healthy}/features, export: features, pe: a}}]}}\n")
    docs.append("kind: StreamJob\nmetadata: {name: vip}\nspec: {templates: [small], rank: 1, owner: vip}\n")
    docs.append(f"kind: StreamJob\nmetadata: {{name: {LONG}}}\nspec: {{templates: [small], rank: 2}}\n")
    docs.append("kind: StreamJob\nmetadata: {name: badenv}\nspec: {templates: [badenv], rank: 2}\n")
    return "---\n".join(f"apiVersion: kubesoda.io/v1alpha1\n{d}" for d in docs)


@pytest.fixture
def tenant(kube: Any, kubectl: Any) -> Iterator[str]:
    from kubernetes import client

    name = f"tenant-{os.getpid()}-{int(time.time() * 1000) % 100000}"
    kube.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    kubectl("apply", "-f", "-", input=EDITOR.format(ns=name))
    yield name
    kube.custom.delete_collection_namespaced_custom_object("kubesoda.io", "v1alpha1", name, "streamjobs")
    kube.core.delete_namespace(name, grace_period_seconds=0)


def picture(kube: Any, ns: str, name: str) -> tuple[Any, ...]:
    """What must not change: the pods (UID, node, CPU limit, outputs) and the status's decision."""
    st = job(kube, ns, name).get("status") or {}
    pods = sorted((p.metadata.uid, p.spec.node_name, p.spec.containers[0].resources.limits["cpu"],
                   next((e.value for e in p.spec.containers[0].env or [] if e.name == "KUBESODA_OUTPUTS"), None))
                  for p in pe_pods(kube, ns, name))
    pes = sorted((pe["name"], pe.get("goalMips"), tuple(pe.get("candidates") or ())) for pe in st.get("pes") or [])
    return st.get("phase"), st.get("reason"), st.get("chosenTemplate"), st.get("rank"), st.get("revisedRank"), pes, pods


def events(kube: Any, ns: str, name: str) -> list[tuple[str, str, str]]:
    evs = kube.core.list_namespaced_event(ns, field_selector=f"involvedObject.name={name}").items
    return [(e.type, e.reason, e.message) for e in evs]


def test_a_hostile_tenant_costs_the_healthy_namespace_nothing(operator, kube, kubectl, namespace, tenant, wait_for):
    healthy = namespace
    kubectl("apply", "-n", healthy, "-f", str(ROOT / "examples" / "glued"))
    for name in ("features", "alerts"):
        wait_for(lambda n=name: running_as_planned(kube, healthy, n), timeout=90, what=f"healthy {name} running")
    before = {n: picture(kube, healthy, n) for n in ("features", "alerts")}
    assert any("import:" in (pod[-1] or "") for pod in before["features"][-1]), before  # the exporter sends to alerts

    kubectl("apply", "-n", tenant, "--as", "mallory", "-f", "-", input=hostile(healthy))

    def status(name: str) -> dict[str, Any]:
        return job(kube, tenant, name).get("status") or {}

    # the import knot: each of the 12 refused, naming the field and a short cycle
    for i in range(KNOT):
        st = wait_for(lambda i=i: (s := status(f"k{i}")).get("phase") == "Invalid" and s, timeout=60, what=f"k{i} Invalid")
        assert st["message"].startswith("spec.imports: jobs import each other in a cycle") and len(st["message"]) < 600, st
    # the import from the healthy namespace, which never consented
    st = wait_for(lambda: (s := status("spy")).get("phase") == "Invalid" and s, timeout=60, what="spy refused")
    assert st["reason"] == "ImportNotAllowed" and st["message"].startswith("spec.imports[0].job:") and "allowedNamespaces" in st["message"], st
    # owner vip: planned, ranked and charged as the tenant's own namespace, and told so; waited until
    # Running so its Running Event is said before the quiet window below (CI of stop 45 saw it inside)
    st = wait_for(lambda: (s := status("vip")).get("owner") and s.get("phase") == "Running" and s, timeout=90, what="vip Running")
    assert st["owner"] == tenant and st["ownerIgnored"] == "vip", st
    assert any(c["type"] == "OwnerBound" and c["status"] == "False" for c in st["conditions"]), st
    # 253 characters: valid labels, the full name in an annotation, Running
    label = job_label(LONG)

    def long_running() -> list[Any] | bool:
        pods = kube.core.list_namespaced_pod(tenant, label_selector=f"{LABEL_JOB}={label}").items
        return status(LONG).get("phase") == "Running" and bool(pods) and all(p.status.phase == "Running" for p in pods) and pods
    pods = wait_for(long_running, timeout=90, what="the 253-character job Running")
    assert all(p.metadata.annotations["kubesoda.io/job-name"] == LONG for p in pods)
    svcs = kube.core.list_namespaced_service(tenant, label_selector=f"{LABEL_JOB}={label}").items
    assert all(s.spec.selector == {LABEL_JOB: label} for s in svcs)
    # a create the API server refuses: the status says why
    st = wait_for(lambda: (s := status("badenv")).get("reason") == "CreateFailed" and s, timeout=60, what="badenv CreateFailed")
    assert st["phase"] == "Degraded" and "env" in st["message"] and "Invalid" in st["message"], st

    # two macro epochs: the healthy namespace unchanged, each hostile object's answer said once (no Event per epoch)
    names = [*(f"k{i}" for i in range(KNOT)), "spy", "vip", LONG, "badenv"]
    for n in ("vip", LONG):  # the Running Event follows the phase: said before the quiet window opens
        wait_for(lambda n=n: ("Normal", "Running") in [e[:2] for e in events(kube, tenant, n)], timeout=30, what=f"{n[:20]} Running Event")
    said = {n: events(kube, tenant, n) for n in names}
    end = time.monotonic() + EPOCHS_S
    while time.monotonic() < end:
        assert {n: picture(kube, healthy, n) for n in ("features", "alerts")} == before, "a healthy job changed"
        assert operator.proc.poll() is None, operator.output()[-3000:]
        time.sleep(1)
    assert {n: events(kube, tenant, n) for n in names} == said
    assert ("Warning", "Degraded") in [e[:2] for e in said["badenv"]], said["badenv"]
    assert ("Warning", "OwnerNotBound") in [e[:2] for e in said["vip"]], said["vip"]
    assert any(e[:2] == ("Warning", "ImportNotAllowed") and "allowedNamespaces" in e[2] for e in said["spy"]), said["spy"]
    assert all(any(e[:2] == ("Warning", "InvalidSpec") and "cycle" in e[2] for e in said[f"k{i}"]) for i in range(KNOT)), said
    assert status("badenv").get("reason") == "CreateFailed" and status(LONG).get("phase") == "Running"
    assert not any("create pod failed" in line for line in operator.output().splitlines())  # main's silent 422, every epoch
    for n in ("k0", "spy", "vip", LONG, "badenv"):
        st = status(n)
        print(f"\n{n[:20]}: {st.get('phase')} {st.get('reason')} owner={st.get('owner')}: {st.get('message', '')[:200]}")
