"""The operator and the extender, live: real kube-scheduler calling the extender, KWOK nodes.

The operator runs as a subprocess (`kubesoda run`), exactly as a user starts it, with short epochs
from the SchedulingPolicy.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from live import GROUP, ROOT, VERSION, job, milli, pe_pods, running_as_planned

BRANCHES = """apiVersion: kubesoda.io/v1alpha1
kind: StreamTemplate
metadata: {name: branches}
spec:
  pes:
  - {name: src, kind: source, resourceFunction: {a: 0.1}}
  - {name: hot, kind: sink, resourceFunction: {a: 0.001, b: 1}}
  - {name: cold, kind: sink, minCpu: 100m, resourceFunction: {a: 0.001, b: 1}}
  streams:
  - {from: src, to: hot}
  - {from: src, to: cold}
  sinks: [{pe: hot, weight: 1}, {pe: cold, weight: 1}]
  primalInputs: [{pe: src, rate: 100}]
---
apiVersion: kubesoda.io/v1alpha1
kind: StreamJob
metadata: {name: branchy}
spec: {templates: [branches], rank: 1, required: true}
"""

BIG = """apiVersion: kubesoda.io/v1alpha1
kind: StreamTemplate
metadata: {name: big}
spec:
  pes:
  - {name: a, kind: source, minCpu: "3", resourceFunction: {a: 0.01}}
  - {name: b, kind: sink, minCpu: "3", resourceFunction: {a: 0.001, b: 1}}
  streams: [{from: a, to: b}]
  sinks: [{pe: b, weight: 1}]
  primalInputs: [{pe: a, rate: 60}]
---
apiVersion: kubesoda.io/v1alpha1
kind: StreamJob
metadata: {name: lowrank}
spec: {templates: [big], rank: 3}
"""


def test_job_admitted_and_instances_run_on_planned_nodes(operator, kube, kubectl, namespace, wait_for):
    kubectl("apply", "-n", namespace, "-f", str(ROOT / "examples" / "small-pipeline"))
    pods = wait_for(lambda: running_as_planned(kube, namespace, "clicks"), timeout=90, what="clicks Running as planned")
    st = job(kube, namespace, "clicks")["status"]
    assert st["chosenTemplate"] == "clickstream" and st["revisedRank"] == 1 and st["importance"] > 0
    assert {p.metadata.labels["kubesoda.io/pe"] for p in pods} == {"ingest", "parse", "enrich", "score"}
    assert all(p.spec.scheduler_name == "kubesoda" for p in pods)
    # one headless Service per job (issue 39); every PE pod is <pe>.clicks.<namespace>.svc by its
    # hostname and subdomain, and no per-PE Service is made
    svcs = {s.metadata.name: s for s in kube.core.list_namespaced_service(namespace).items}
    assert set(svcs) == {"clicks"} and svcs["clicks"].spec.cluster_ip == "None"
    assert {(p.spec.hostname, p.spec.subdomain) for p in pods} == {(pe, "clicks") for pe in ("ingest", "parse", "enrich", "score")}
    events = kube.core.list_namespaced_event(namespace).items
    assert any(e.involved_object.name == "clicks" and e.reason in ("Admitted", "Running") for e in events)


def test_weight_to_zero_shrinks_cpu_in_place(operator, kube, kubectl, namespace, wait_for):
    kubectl("apply", "-n", namespace, "-f", "-", input=BRANCHES)
    wait_for(lambda: running_as_planned(kube, namespace, "branchy"), timeout=90, what="branchy Running")
    before = {p.metadata.labels["kubesoda.io/pe"]: p for p in pe_pods(kube, namespace, "branchy")}
    def cpu(p):
        return milli(p.spec.containers[0].resources.limits["cpu"])

    cold_cpu = cpu(before["cold"])
    kube.custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, "streamjobs", "branchy", {"spec": {"weightOverrides": {"sink:cold": 0}}})

    def shrunk():
        pods = [p for p in pe_pods(kube, namespace, "branchy") if p.metadata.labels["kubesoda.io/pe"] == "cold"]
        return len(pods) == 1 and cpu(pods[0]) < cold_cpu and pods[0]
    cold = wait_for(shrunk, timeout=60, what="cold PE's CPU shrinking")
    assert cpu(cold) <= 250  # its minimum (100m) rounded up to macroQ's resolution
    assert cold.metadata.uid == before["cold"].metadata.uid, "the pod was replaced instead of resized"
    assert cold.status.container_statuses[0].restart_count == 0
    hot = [p for p in pe_pods(kube, namespace, "branchy") if p.metadata.labels["kubesoda.io/pe"] == "hot"][0]
    assert hot.metadata.uid == before["hot"].metadata.uid


def test_bad_job_gets_status_and_others_keep_working(operator, kube, kubectl, namespace, wait_for):
    kubectl("apply", "-n", namespace, "-f", "-", input="apiVersion: kubesoda.io/v1alpha1\nkind: StreamJob\nmetadata: {name: broken}\nspec: {templates: [does-not-exist]}\n")
    kubectl("apply", "-n", namespace, "-f", str(ROOT / "examples" / "glued"))
    st = wait_for(lambda: (job(kube, namespace, "broken").get("status") or {}).get("phase") == "Invalid" and job(kube, namespace, "broken")["status"],
                  timeout=60, what="broken job marked Invalid")
    assert "spec.templates[0]" in st["message"] and "does-not-exist" in st["message"]
    wait_for(lambda: running_as_planned(kube, namespace, "alerts") and running_as_planned(kube, namespace, "features"), timeout=90,
             what="glued jobs running")
    assert job(kube, namespace, "features")["status"]["revisedRank"] == 1  # revised by its dependent


def test_restart_mid_epoch_duplicates_nothing(operator, kube, kubectl, namespace, wait_for):
    kubectl("apply", "-n", namespace, "-f", str(ROOT / "examples" / "small-pipeline"))
    wait_for(lambda: running_as_planned(kube, namespace, "clicks"), timeout=90, what="clicks Running")
    before = {p.metadata.name: p.metadata.uid for p in pe_pods(kube, namespace, "clicks")}
    operator.stop(signal.SIGKILL)
    operator.start()
    time.sleep(10)  # several micro epochs and a macro epoch of the new process
    after = wait_for(lambda: running_as_planned(kube, namespace, "clicks"), timeout=60, what="clicks Running after restart")
    assert {p.metadata.name: p.metadata.uid for p in after} == before


def test_capacity_shrinks_low_rank_rejected_required_stays(operator, kube, kubectl, namespace, wait_for):
    kubectl("apply", "-n", namespace, "-f", "-", input=BRANCHES)
    kubectl("apply", "-n", namespace, "-f", "-", input=BIG)
    wait_for(lambda: running_as_planned(kube, namespace, "lowrank") and running_as_planned(kube, namespace, "branchy"), timeout=90,
             what="both jobs running")
    nodes = sorted(n.metadata.name for n in kube.core.list_node().items if "kubesoda.io/rack" in (n.metadata.labels or {}))
    removed = nodes[1:]
    try:
        for n in removed:
            kube.core.delete_node(n)
        st = wait_for(lambda: (s := job(kube, namespace, "lowrank").get("status") or {}).get("phase") == "Rejected" and s,
                      timeout=90, what="low-rank job rejected")
        assert st["reason"] in ("capacity", "rank-waterline")
        wait_for(lambda: not pe_pods(kube, namespace, "lowrank"), timeout=60, what="rejected job loses its pods")
        wait_for(lambda: running_as_planned(kube, namespace, "branchy"), timeout=90, what="required job still running")
        assert all(p.spec.node_name == nodes[0] for p in pe_pods(kube, namespace, "branchy"))
    finally:
        topo = os.environ.get("KUBESODA_TOPOLOGY", str(ROOT / "hack" / "topologies" / "small.yaml"))
        subprocess.run([sys.executable, str(ROOT / "hack" / "nodes.py"), topo], check=False, timeout=120)


def test_extender_passes_foreign_pods_and_filters_kubesoda_pods(operator, extender_port):
    import json
    import urllib.request

    ctx, scheme = None, "http"
    if os.environ.get("KUBESODA_EXTENDER_TLS_CERT"):  # the local control plane: HTTPS with client certificates
        import ssl

        pki = os.path.dirname(os.environ["KUBESODA_EXTENDER_TLS_CERT"])
        ctx, scheme = ssl.create_default_context(cafile=os.path.join(pki, "ca.crt")), "https"
        ctx.load_cert_chain(os.path.join(pki, "admin.crt"), os.path.join(pki, "admin.key"))

    def post(verb, body):
        req = urllib.request.Request(f"{scheme}://127.0.0.1:{extender_port}/{verb}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        return json.loads(urllib.request.urlopen(req, timeout=5, context=ctx).read())

    foreign = {"Pod": {"metadata": {"name": "x"}}, "NodeNames": ["a", "b"]}
    assert post("filter", foreign)["NodeNames"] == ["a", "b"]
    ours = {"Pod": {"metadata": {"name": "y", "labels": {"kubesoda.io/job": "j"}, "annotations": {"kubesoda.io/node": "b"}}}, "NodeNames": ["a", "b"]}
    res = post("filter", ours)
    assert res["NodeNames"] == ["b"] and res["Error"] == ""
    assert post("prioritize", ours) == [{"Host": "a", "Score": 0}, {"Host": "b", "Score": 10}]


@pytest.mark.parametrize("how", ["cordon", "not-ready", "delete"])
def test_node_cordoned_not_ready_or_gone_loses_its_instances_within_epochs(operator, kube, kubectl, namespace, wait_for, how):
    kubectl("apply", "-n", namespace, "-f", str(ROOT / "examples" / "small-pipeline"))
    pods = wait_for(lambda: running_as_planned(kube, namespace, "clicks"), timeout=90, what="clicks Running")
    victim = pods[0].spec.node_name
    t0 = time.monotonic()
    try:
        if how == "cordon":
            kube.core.patch_node(victim, {"spec": {"unschedulable": True}})
        elif how == "not-ready":  # a failed kubelet: KWOK leaves the node alone while it has this annotation
            kube.core.patch_node(victim, {"metadata": {"annotations": {"kubesoda.io/simulate-not-ready": "true"}}})
            # NotReady for longer than its pods' grace (the default 300 s toleration; a fresher NotReady
            # keeps its pods: e2e/test_faults.py, issue 46)
            since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 301))
            kube.core.patch_node_status(victim, {"status": {"conditions": [{"type": "Ready", "status": "False", "reason": "KubeletDown",
                                                                             "message": "e2e", "lastTransitionTime": since}]}})
        else:
            kube.core.delete_node(victim)
        moved = wait_for(lambda: (p := running_as_planned(kube, namespace, "clicks")) and all(x.spec.node_name != victim for x in p) and p,
                         timeout=60, what=f"clicks running off the {how} node")
        elapsed = time.monotonic() - t0
        print(f"{how}: instances off {victim} and Running again in {elapsed:.1f}s")
        # the policy's micro epoch is 2 s; a PE whose candidates are all gone needs a macro epoch (1 s debounce + deadlines)
        assert elapsed < 20, elapsed
        assert {p.metadata.labels["kubesoda.io/pe"] for p in moved} == {"ingest", "parse", "enrich", "score"}
    finally:
        if how == "cordon":
            kube.core.patch_node(victim, {"spec": {"unschedulable": False}})
        elif how == "not-ready":
            kube.core.patch_node(victim, {"metadata": {"annotations": {"kubesoda.io/simulate-not-ready": None}}})
        else:
            topo = os.environ.get("KUBESODA_TOPOLOGY", str(ROOT / "hack" / "topologies" / "small.yaml"))
            subprocess.run([sys.executable, str(ROOT / "hack" / "nodes.py"), topo], check=False, timeout=120)


LOOP = """apiVersion: kubesoda.io/v1alpha1
kind: StreamTemplate
metadata: {name: loop}
spec:
  pes: [{name: a, kind: source, resourceFunction: {a: 1}}, {name: b}]
  streams: [{from: a, to: b}, {from: b, to: a}]
  primalInputs: [{pe: a, rate: 10}]
"""


def test_templates_and_policy_carry_counts_and_a_valid_condition(operator, kube, kubectl, namespace, wait_for):
    kubectl("apply", "-n", namespace, "-f", "-", input=LOOP)
    kubectl("apply", "-n", namespace, "-f", str(ROOT / "examples" / "small-pipeline"))

    def cond(obj):
        return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == "Valid"), None)

    def tmpl(name):
        return kube.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "streamtemplates", name)

    bad = wait_for(lambda: cond(tmpl("loop")) and tmpl("loop"), timeout=60, what="the loop template's Valid condition")
    c = cond(bad)
    assert c["status"] == "False" and c["reason"] == "InvalidSpec" and "cycle" in c["message"], c
    assert c["observedGeneration"] == bad["metadata"]["generation"] and c["lastTransitionTime"]
    good = wait_for(lambda: cond(tmpl("clickstream")) and tmpl("clickstream"), timeout=60, what="clickstream's Valid condition")
    assert cond(good)["status"] == "True"
    assert good["status"]["pes"] == 4 and good["status"]["streams"] == 3
    out = kubectl("get", "streamtemplates", "-n", namespace).stdout
    assert "VALID" in out and "False" in out and "True" in out
    pol = kube.custom.get_cluster_custom_object(GROUP, VERSION, "schedulingpolicies", "default")
    assert cond(pol) and cond(pol)["status"] == "True"
    # fixing the template flips the condition (a new transition time) without anyone else's help
    t0 = c["lastTransitionTime"]
    kubectl("apply", "-n", namespace, "-f", "-", input=LOOP.replace("allowCycles", "x").replace("pes: [", "allowCycles: true\n  pes: ["))
    fixed = wait_for(lambda: (cc := cond(tmpl("loop"))) and cc["status"] == "True" and cc, timeout=60, what="loop Valid after allowCycles")
    assert fixed["lastTransitionTime"] >= t0


def test_kubectl_soda_plugin_top_and_explain(operator, kube, kubectl, namespace, wait_for):
    """The package installs kubectl-soda: real kubectl finds it on PATH and runs top and explain."""
    kubectl("apply", "-n", namespace, "-f", str(ROOT / "examples" / "small-pipeline"))
    wait_for(lambda: running_as_planned(kube, namespace, "clicks"), timeout=90, what="clicks Running")
    env = dict(os.environ, PATH=f"{os.path.dirname(sys.executable)}:{os.environ.get('PATH', '')}")
    plugins = subprocess.run(["kubectl", "plugin", "list"], capture_output=True, text=True, env=env).stdout
    assert "kubectl-soda" in plugins
    top = subprocess.run(["kubectl", "soda", "top", "-n", namespace], capture_output=True, text=True, env=env, check=True).stdout
    row = next(line.split() for line in top.splitlines() if line.startswith(f"{namespace}/clicks"))
    pods = pe_pods(kube, namespace, "clicks")
    assert row[1] == "Running" and int(row[5]) == len(pods)
    assert float(row[4]) == pytest.approx(sum(milli(p.spec.containers[0].resources.limits["cpu"]) for p in pods) / 1000, abs=0.005)
    out = subprocess.run(["kubectl", "soda", "explain", "clicks", "-n", namespace], capture_output=True, text=True, env=env, check=True).stdout
    assert "clicks" in out and "admitted" in out.lower()
