"""One object never hurts the others (issue: one StreamJob that cannot fit stopped every job).

Live: `kubesoda run` against the real API server, kube-scheduler and KWOK nodes. Each test starts
from `clicks` (examples/small-pipeline, required) Running, does one bad thing, and checks that
`clicks` keeps its very pods (same UIDs) while the bad object gets its own status.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import pytest
from live import FAST_POLICY, GROUP, ROOT, VERSION, job, pe_pods, running_as_planned

OOPS = """apiVersion: kubesoda.io/v1alpha1
kind: StreamTemplate
metadata: {name: huge}
spec:
  pes:
  - {name: a, kind: source, minCpu: "100", resourceFunction: {a: 0.01}}
  sinks: [{pe: a, weight: 1}]
  primalInputs: [{pe: a, rate: 60}]
---
apiVersion: kubesoda.io/v1alpha1
kind: StreamJob
metadata: {name: oops}
spec: {templates: [huge], rank: 1, required: true}
"""


def rigid(name: str, cpu: str, required: bool = True) -> str:
    return f"""apiVersion: kubesoda.io/v1alpha1
kind: StreamTemplate
metadata: {{name: {name}}}
spec:
  pes:
  - {{name: a, kind: source, minCpu: "{cpu}", maxCpu: "{cpu}", resourceFunction: {{a: 0.01}}}}
  sinks: [{{pe: a, weight: 1}}]
  primalInputs: [{{pe: a, rate: 60}}]
---
apiVersion: kubesoda.io/v1alpha1
kind: StreamJob
metadata: {{name: {name}}}
spec: {{templates: [{name}], rank: 1, required: {str(required).lower()}}}
"""


OPERATOR_LOG = "/tmp/kubesoda-e2e-isolation.log"  # the conftest's operator fixture logs here (read it after a failure)


def uids(kube, ns, name):
    return {p.metadata.name: p.metadata.uid for p in pe_pods(kube, ns, name)}


def clicks_running(kube, kubectl, ns, wait_for):
    kubectl("apply", "-n", ns, "-f", str(ROOT / "examples" / "small-pipeline"))
    wait_for(lambda: running_as_planned(kube, ns, "clicks"), timeout=90, what="clicks Running as planned")
    return uids(kube, ns, "clicks")


def still_running(kube, ns, before, wait_for, seconds=14):
    """clicks Running with the same pods for ``seconds`` (over two macro epochs of 6 s)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        assert uids(kube, ns, "clicks") == before, "clicks' pods were replaced or deleted"
        assert (job(kube, ns, "clicks").get("status") or {}).get("phase") == "Running"
        time.sleep(1)
    assert wait_for(lambda: running_as_planned(kube, ns, "clicks"), timeout=30, what="clicks as planned")


def restore_nodes():
    topo = os.environ.get("KUBESODA_TOPOLOGY", str(ROOT / "hack" / "topologies" / "small.yaml"))
    subprocess.run([sys.executable, str(ROOT / "hack" / "nodes.py"), topo], check=False, timeout=120)


def test_required_job_that_cannot_fit_leaves_the_others_running(operator, kube, kubectl, namespace, wait_for):
    before = clicks_running(kube, kubectl, namespace, wait_for)
    mark = len(operator.output())
    kubectl("apply", "-n", namespace, "-f", "-", input=OOPS)
    st = wait_for(lambda: (s := job(kube, namespace, "oops").get("status") or {}).get("phase") == "Rejected" and s,
                  timeout=60, what="oops Rejected")
    assert st["reason"] == "infeasible-required"
    assert re.search(r"minimum of 100000 mips does not fit: the usable nodes offer 32000 mips, \d+ of them promised to 1 required "
                     r"job\(s\) ahead of it \(" + namespace + r"/clicks\); short by \d+ mips", st["message"]), st["message"]
    t0 = time.monotonic()
    still_running(kube, namespace, before, wait_for)
    # no hot loop: macro epochs come at the policy's 6 s (plus change-triggered ones), not every 2 s micro epoch
    window = operator.output()[mark:]
    macro = len(re.findall(r"macro epoch: \d+/\d+ jobs admitted", window))
    assert macro <= (time.monotonic() - t0) / 6 + 3, f"{macro} macro epochs: {window[-2000:]}"
    assert "macro epoch infeasible" not in window
    events = kube.core.list_namespaced_event(namespace, field_selector="involvedObject.name=oops").items
    assert any(e.type == "Warning" and "short by" in e.message for e in events)
    # `kubesoda explain` reads the same from the cluster, with the job's standing
    out = subprocess.run([sys.executable, "-m", "soda_operator.cli", "explain", f"{namespace}/oops"], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    assert f"{namespace}/oops: Rejected (infeasible-required)" in out and "short by" in out and "standing:" in out, out
    out = subprocess.run([sys.executable, "-m", "soda_operator.cli", "explain", "clicks", "-n", namespace], capture_output=True,
                         text=True, timeout=60, check=True).stdout
    assert f"{namespace}/clicks: Running" in out and "ingest" in out, out


def test_losing_nodes_keeps_the_required_jobs_the_rule_keeps(operator, kube, kubectl, namespace, wait_for):
    # first (earlier creation) and second: both required, 3 cores each, both fit on 8 nodes x 4 cores
    kubectl("apply", "-n", namespace, "-f", "-", input=rigid("first", "3"))
    wait_for(lambda: running_as_planned(kube, namespace, "first"), timeout=90, what="first Running")
    time.sleep(1.1)  # creation timestamps have one-second resolution
    kubectl("apply", "-n", namespace, "-f", "-", input=rigid("second", "3"))
    wait_for(lambda: running_as_planned(kube, namespace, "second"), timeout=90, what="second Running")
    first = uids(kube, namespace, "first")
    nodes = sorted(n.metadata.name for n in kube.core.list_node().items if "kubesoda.io/rack" in (n.metadata.labels or {}))
    keep = {p.spec.node_name for p in pe_pods(kube, namespace, "first")}
    try:
        # leave 4 cores: room for one of the two, never both
        for n in nodes:
            if n not in keep:
                kube.core.delete_node(n)
        st = wait_for(lambda: (s := job(kube, namespace, "second").get("status") or {}).get("phase") == "Rejected" and s,
                      timeout=60, what="second (created later) refused")
        assert st["reason"] == "infeasible-required" and "short by" in st["message"], st
        wait_for(lambda: not pe_pods(kube, namespace, "second"), timeout=60, what="second loses its pods")
        assert wait_for(lambda: running_as_planned(kube, namespace, "first"), timeout=60, what="first still Running")
        assert uids(kube, namespace, "first") == first
    finally:
        restore_nodes()
    # capacity back: the refused job returns at a later macro epoch
    wait_for(lambda: running_as_planned(kube, namespace, "second"), timeout=90, what="second Running again")


def test_only_named_groups_may_mark_a_job_required(kube, kubectl, namespace, wait_for):
    rendered = subprocess.run([str(ROOT / "hack" / "helm.sh"), "template", "kubesoda", str(ROOT / "charts" / "kubesoda"),
                               "--kube-version", "1.35.8", "--show-only", "templates/required-policy.yaml"], capture_output=True, text=True, check=True).stdout
    kubectl("apply", "-f", "-", input=rendered)
    role = f"""apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: streamjob-editor, namespace: {namespace}}}
rules:
- {{apiGroups: [kubesoda.io], resources: [streamjobs, streamtemplates], verbs: [get, list, create, update, patch, delete]}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: streamjob-editors, namespace: {namespace}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: streamjob-editor}}
subjects:
- {{apiGroup: rbac.authorization.k8s.io, kind: User, name: alice}}
- {{apiGroup: rbac.authorization.k8s.io, kind: Group, name: "kubesoda:admins"}}
"""
    kubectl("apply", "-f", "-", input=role)
    job_yaml = "apiVersion: kubesoda.io/v1alpha1\nkind: StreamJob\nmetadata: {{name: {n}}}\nspec: {{templates: [t], required: {r}}}\n"
    try:
        # the policy takes a moment to reach the API server's admission chain
        def refused():
            p = kubectl("create", "-n", namespace, "--as", "alice", "-f", "-", input=job_yaml.format(n="mine", r="true"), check=False)
            if p.returncode == 0:
                kubectl("delete", "-n", namespace, "streamjob", "mine", "--wait=false", check=False)
            return p.returncode != 0 and p.stderr
        err = wait_for(refused, timeout=30, what="alice refused")
        assert "spec.required: only members of system:masters, kubesoda:admins" in err, err
        # an ordinary job is fine, and so is flipping it to required... not for alice
        kubectl("create", "-n", namespace, "--as", "alice", "-f", "-", input=job_yaml.format(n="plain", r="false"))
        p = kubectl("patch", "-n", namespace, "--as", "alice", "streamjob", "plain", "--type", "merge", "-p",
                    '{"spec": {"required": true}}', check=False)
        assert p.returncode != 0 and "spec.required" in p.stderr
        # an administrator may
        kubectl("create", "-n", namespace, "--as", "bob", "--as-group", "kubesoda:admins", "-f", "-",
                input=job_yaml.format(n="promised", r="true"))
        assert kube.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "streamjobs", "promised")["spec"]["required"] is True
        # alice may still edit other fields of a job an administrator made required
        kubectl("patch", "-n", namespace, "--as", "alice", "streamjob", "promised", "--type", "merge", "-p", '{"spec": {"rank": 2}}')
    finally:
        kubectl("delete", "-f", "-", input=rendered, check=False)


# ---------------------------------------------------------------- the audit: every other path


def test_shared_template_broken_or_deleted_only_its_jobs_notice(operator, kube, kubectl, namespace, wait_for):
    before = clicks_running(kube, kubectl, namespace, wait_for)
    kubectl("apply", "-n", namespace, "-f", "-", input=rigid("shared", "500m", required=False))
    kubectl("apply", "-n", namespace, "-f", "-", input=rigid("shared", "500m", required=False).split("---")[1].replace("name: shared}", "name: also}"))
    wait_for(lambda: running_as_planned(kube, namespace, "shared") and running_as_planned(kube, namespace, "also"), timeout=90,
             what="two jobs of one template running")
    before = uids(kube, namespace, "clicks")
    # edited to nonsense that the schema lets through (it cannot see cycles)
    kube.custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, "streamtemplates", "shared", {"spec": {
        "pes": [{"name": "a", "kind": "source", "resourceFunction": {"a": 0.01}}, {"name": "b"}],
        "streams": [{"from": "a", "to": "b"}, {"from": "b", "to": "a"}]}})
    for name in ("shared", "also"):
        st = wait_for(lambda n=name: (s := job(kube, namespace, n).get("status") or {}).get("phase") == "Invalid" and s,
                      timeout=60, what=f"{name} Invalid")
        assert "cycle" in st["message"], st
    still_running(kube, namespace, before, wait_for, seconds=8)
    kubectl("delete", "-n", namespace, "streamtemplate", "shared")
    st = wait_for(lambda: (s := job(kube, namespace, "also").get("status") or {}).get("phase") == "Invalid"
                  and "not found" in s.get("message", "") and s, timeout=60, what="also Invalid: template gone")
    assert "spec.templates[0]" in st["message"]
    still_running(kube, namespace, before, wait_for, seconds=8)


def test_glued_exporter_deleted_only_its_importer_notices(operator, kube, kubectl, namespace, wait_for):
    before = clicks_running(kube, kubectl, namespace, wait_for)
    kubectl("apply", "-n", namespace, "-f", str(ROOT / "examples" / "glued"))
    wait_for(lambda: running_as_planned(kube, namespace, "alerts"), timeout=90, what="glued jobs running")
    before = uids(kube, namespace, "clicks")
    kubectl("delete", "-n", namespace, "streamjob", "features")
    st = wait_for(lambda: (s := job(kube, namespace, "alerts").get("status") or {}).get("phase") == "Invalid" and s,
                  timeout=60, what="alerts Invalid")
    assert "spec.imports[0].job" in st["message"] and "features" in st["message"]
    still_running(kube, namespace, before, wait_for, seconds=8)


@pytest.mark.parametrize("spec", [{"unitMips": 0.001}, {"resolutionUnits": 16384}, {"microEpochSeconds": 0.001}])
def test_policy_edited_to_nonsense_keeps_jobs_running(operator, kube, kubectl, namespace, wait_for, spec):
    before = clicks_running(kube, kubectl, namespace, wait_for)
    kube.custom.patch_cluster_custom_object(GROUP, VERSION, "schedulingpolicies", "default", {"spec": spec})
    try:
        still_running(kube, namespace, before, wait_for)
        assert operator.proc.poll() is None, "the operator died"
    finally:
        kubectl("apply", "-f", "-", input=FAST_POLICY)
        kube.custom.patch_cluster_custom_object(GROUP, VERSION, "schedulingpolicies", "default",
                                                {"spec": {k: None for k in spec} | {"microEpochSeconds": 2}})


@pytest.mark.parametrize("value", ["garbage", "inf", "nan", "0", "1e400"])
def test_node_label_garbage_ignores_that_node_only(operator, kube, kubectl, namespace, wait_for, value):
    clicks_running(kube, kubectl, namespace, wait_for)
    # a node that no PE of clicks has among its candidates (losing a candidate may move an instance, by design)
    used = {c for pe in job(kube, namespace, "clicks")["status"]["pes"] for c in pe["candidates"]}
    victim = sorted(n.metadata.name for n in kube.core.list_node().items
                    if "kubesoda.io/rack" in (n.metadata.labels or {}) and n.metadata.name not in used)[0]
    try:
        kube.core.patch_node(victim, {"metadata": {"labels": {"kubesoda.io/mips-per-core": value}}})
        # the node is left out of the plan, like a lost node: the capacity changes, so macroQ's
        # resolution (H/128) and with it an instance may move; clicks is never torn down
        end = time.monotonic() + 8
        while time.monotonic() < end:
            assert (job(kube, namespace, "clicks").get("status") or {}).get("phase") in ("Running", "Admitted")
            assert pe_pods(kube, namespace, "clicks")
            time.sleep(0.5)
        assert wait_for(lambda: running_as_planned(kube, namespace, "clicks"), timeout=30, what="clicks as planned")
        events = kube.core.list_event_for_all_namespaces(field_selector=f"involvedObject.name={victim},involvedObject.kind=Node").items
        assert any("kubesoda.io/mips-per-core" in (e.message or "") for e in events), [e.message for e in events]
    finally:
        kube.core.patch_node(victim, {"metadata": {"labels": {"kubesoda.io/mips-per-core": "1000"}}})
