"""The Helm chart for real, from the release artifacts (hack/release.py: the image's OCI archive, the
packaged chart whose default image tag is the release's version, the CRDs, SHA256SUMS), as a platform
team installs it after pushing the image to its registry: its operator (two replicas,
one leader) and its extender run as pods on the real nodes (hack/real-node.sh), with the chart's
RBAC, probes and metrics, while the KWOK nodes keep providing the scale the PE pods land on.

The local control plane's API server listens on loopback only and runs no kube-proxy, so the
chart runs with ``operator.hostNetwork`` and ``apiServerOverride`` (127.0.0.1 and the API port),
and the extender with ``extender.hostNetwork`` on ``KUBESODA_EXTENDER_PORT``, serving the local
PKI's certificate. The chart's own scheduler (``scheduler.image``, built from the pinned
kube-scheduler by ``hack/build-image.py kube-scheduler`` where a cluster would pull it) runs in a
container on a real node under the name ``kubesoda-chart`` (the local control plane's scheduler has
a ``kubesoda`` profile of its own) and calls the extender there over TLS with the local PKI's
scheduler client certificate; the chart's operator gives PE pods that schedulerName. The real nodes are cordoned while the chart runs: the chart's pods tolerate that
(``node.kubernetes.io/unschedulable``), the planner leaves unschedulable nodes out, so PE pods go
to the KWOK nodes only (their image does not exist on a real node).

Replicas on the host's network share the host's ports, so each real node takes one operator
replica (they bind their node's address): two replicas need ``KUBESODA_REAL_NODES=2``; with one
real node the chart runs one replica, which must lead. Skipped without a real node.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from live import running_as_planned
from realnode import NO_REAL_NODE, REPO, real_nodes

HELM = str(REPO / "hack" / "helm.sh")
NS = "kubesoda-realnode"
REL = "sodareal"
SCHEDULER = "kubesoda-chart"  # the chart's scheduler.name in this test
UNSCHEDULABLE = {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([HELM, *args], capture_output=True, text=True, timeout=300)
    if check and proc.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)}: {proc.stderr}")
    return proc


def release(out: Path) -> dict[str, Any]:
    """hack/release.py into ``out``; every artifact checked against SHA256SUMS, the chart's appVersion
    and the archive's digest against what the release says."""
    proc = subprocess.run([sys.executable, str(REPO / "hack" / "release.py"), "--out", str(out)],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    made = json.loads(proc.stdout.strip().splitlines()[-1])
    sums = dict(reversed(line.split("  ", 1)) for line in (out / "SHA256SUMS").read_text().splitlines())
    assert set(sums) == set(made["files"]), (sums, made)
    for name, want in sums.items():
        assert hashlib.sha256((out / name).read_bytes()).hexdigest() == want, name
    version = made["version"]
    with tarfile.open(out / f"kubesoda-{version}.tgz") as tar:
        chart_yaml = yaml.safe_load(tar.extractfile("kubesoda/Chart.yaml").read())  # type: ignore[union-attr]
    assert chart_yaml["version"] == chart_yaml["appVersion"] == version, chart_yaml
    assert (out / f"kubesoda-image-{version}.digest").read_text().strip() == made["digest"]
    return {"archive": out / f"kubesoda-image-{version}.oci.tar", "chart": out / f"kubesoda-{version}.tgz",
            "crds": out / f"kubesoda-crds-{version}.yaml", "image": made["image"], "digest": made["digest"]}


def component_pods(kube, component: str) -> list:
    sel = f"app.kubernetes.io/instance={REL},app.kubernetes.io/component={component}"
    return [p for p in kube.core.list_namespaced_pod(NS, label_selector=sel).items if not p.metadata.deletion_timestamp]


def ready(pod) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in (pod.status.conditions or []))


def proxy_get(kubectl, pod: str, port: int, path: str, scheme: str = "") -> str:
    """GET a pod's port through the API server's pod proxy (it dials the pod address itself)."""
    target = f"{scheme}:{pod}:{port}" if scheme else f"{pod}:{port}"
    return kubectl("get", "--raw", f"/api/v1/namespaces/{NS}/pods/{target}/proxy/{path}").stdout


def metric(text: str, name: str, **labels: str) -> float | None:
    """The sum of ``name``'s samples whose labels include ``labels`` (None: no sample)."""
    total = None
    for line in text.splitlines():
        if line.startswith("#") or not (line.startswith(name + "{") or line.startswith(name + " ")):
            continue
        head, value = line.rsplit(" ", 1)
        if all(f'{k}="{v}"' in head for k, v in labels.items()):
            total = (total or 0.0) + float(value)
    return total


@pytest.fixture(scope="module")
def chart(kube, kubectl, wait_for, tmp_path_factory):
    nodes = real_nodes(kube)
    if not nodes:
        pytest.skip(NO_REAL_NODE)
    for var in ("KUBESODA_API_PORT", "KUBESODA_EXTENDER_PORT", "KUBESODA_EXTENDER_TLS_CERT"):
        if not os.environ.get(var):
            pytest.skip(f"{var} is unset: source the local control plane's env (hack/cluster-up.sh)")
    # the release of these sources, checked against its SHA256SUMS, its image imported into every real
    # node's containerd (what a pull from the platform's registry leaves there)
    dist = release(tmp_path_factory.mktemp("dist"))
    subprocess.run([sys.executable, str(REPO / "hack" / "build-image.py"), "load", str(dist["archive"])], check=True, timeout=600)
    # the chart's own scheduler (scheduler.image, upstream's kube-scheduler): built from the same pinned
    # binary and imported, where a cluster would pull it
    subprocess.run([sys.executable, str(REPO / "hack" / "build-image.py"), "kube-scheduler"], check=True, timeout=600)
    names = [n.metadata.name for n in nodes]
    replicas = min(2, len(names))
    base = int(os.environ["KUBESODA_API_PORT"]) - 2  # KUBESODA_PORT_BASE (cluster-up.sh: api = base+2)
    health_port, metrics_port = base + 20, base + 21  # free in the cluster's port range (docs/local-control-plane.md); +22 the extender's health port
    ext_port = int(os.environ["KUBESODA_EXTENDER_PORT"])
    pki = Path(os.environ["KUBESODA_EXTENDER_TLS_CERT"]).parent

    # the real nodes: cordoned, so kubesoda plans no PE instance there; the chart's pods tolerate it
    for n in names:
        kubectl("cordon", n)
    # the CRDs first and Established (helm then skips its crds/): on a fresh cluster helm's own CRD
    # install can race the SchedulingPolicy it creates next ("already exists" on a retried create)
    kubectl("apply", "--server-side", "-f", str(dist["crds"]))
    kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
    kubectl("delete", "schedulingpolicy", "default", "--ignore-not-found", check=False)  # the chart owns it
    wait_for(lambda: "Terminating" not in kubectl("get", "namespace", NS, "--ignore-not-found", check=False).stdout,
             timeout=120, interval=2, what=f"a previous run's {NS} to be gone")
    kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}))
    # the extender serves the local PKI's certificate (SAN 127.0.0.1, as the scheduler dials it) and
    # requires the scheduler's client certificate, signed by the same CA
    kubectl("create", "secret", "generic", f"{REL}-local-tls", "-n", NS, f"--from-file=tls.crt={pki / 'extender.crt'}",
            f"--from-file=tls.key={pki / 'extender.key'}", f"--from-file=ca.crt={pki / 'ca.crt'}",
            f"--from-file=client.crt={pki / 'scheduler.crt'}", f"--from-file=client.key={pki / 'scheduler.key'}")
    placement = {"nodeSelector": {"type": "real"}, "tolerations": [UNSCHEDULABLE], "hostNetwork": True}
    values = {
        # no image values: the packaged chart's default (its appVersion, the release's version), IfNotPresent
        "operator": {"replicas": replicas, "healthPort": health_port, "metricsPort": metrics_port,
                     "peeringLifetimeSeconds": 20, "resources": {"requests": {"cpu": "100m", "memory": "256Mi"},
                                                                 "limits": {"memory": "1Gi"}}, **placement},
        "apiServerOverride": {"host": "127.0.0.1", "port": base + 2},
        "extender": {"replicas": 1, "port": ext_port, "healthPort": base + 22, "tls": {"enabled": True, "secretName": f"{REL}-local-tls",
                                                               "requireClientCert": True}, **placement},
        # the chart's own scheduler in a container on a real node, under a name of its own (the local control
        # plane's scheduler has a `kubesoda` profile too): the chart's operator gives PE pods this schedulerName
        "scheduler": {"enabled": True, "name": SCHEDULER, "hostNetwork": True, "nodeSelector": {"type": "real"},
                      "tolerations": [UNSCHEDULABLE], "extenderHost": "127.0.0.1", "securePort": base + 23,
                      "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "512Mi"}}},
        "policy": {"macroEpochSeconds": 6, "microEpochSeconds": 2, "macroQDeadlineSeconds": 1, "macroWDeadlineSeconds": 1},
    }
    vfile = tmp_path_factory.mktemp("chart") / "values.yaml"
    vfile.write_text(yaml.safe_dump(values))
    t0 = time.monotonic()
    try:
        helm("upgrade", "--install", REL, str(dist["chart"]), "-n", NS, "-f", str(vfile), "--wait=false")

        def all_ready():
            ops, exts, sched = (component_pods(kube, c) for c in ("operator", "extender", "scheduler"))
            return (len(ops) == replicas and len(exts) == 1 and len(sched) == 1 and all(ready(p) for p in ops + exts + sched)
                    and (ops, exts[0], sched[0]))
        ops, ext, sched = wait_for(all_ready, timeout=240, interval=2, what=f"{replicas} operator, 1 extender, 1 scheduler pods Ready")
        print(f"\nchart pods Ready {time.monotonic() - t0:.0f} s after helm install: "
              + ", ".join(f"{p.metadata.name} on {p.spec.node_name}" for p in [*ops, ext, sched]))
        yield {"image": dist["image"], "scheduler": sched.metadata.name, "operators": [p.metadata.name for p in ops], "extender": ext.metadata.name, "metrics_port": metrics_port,
               "health_port": health_port, "ext_port": ext_port, "real": names, "replicas": replicas}
    finally:
        for p in kube.core.list_namespaced_pod(NS).items:  # for the record, when something failed
            if p.metadata.labels.get("app.kubernetes.io/component") == "operator":
                log = kubectl("logs", "-n", NS, p.metadata.name, "--tail", "30", check=False).stdout
                print(f"--- {p.metadata.name} (last lines)\n{log}")
        helm("uninstall", REL, "-n", NS, "--wait", "--timeout", "120s", check=False)
        kubectl("delete", "secret", f"{REL}-local-tls", "-n", NS, "--ignore-not-found", check=False)
        kubectl("delete", "namespace", NS, "--ignore-not-found", check=False, timeout=120)
        for n in names:
            kubectl("uncordon", n, check=False)


def test_chart_pods_run_on_the_real_node_with_their_service_accounts(chart, kube, kubectl):
    pods = [kube.core.read_namespaced_pod(n, NS) for n in [*chart["operators"], chart["extender"]]]
    for p in pods:
        assert p.spec.node_name in chart["real"] and p.spec.host_network, (p.metadata.name, p.spec.node_name)
        c = p.status.container_statuses[0]
        assert c.image.endswith(chart["image"]) and c.ready and c.restart_count == 0, (p.metadata.name, c)
        assert p.spec.containers[0].image == chart["image"] and p.spec.containers[0].image_pull_policy == "IfNotPresent"
    # the operators on distinct nodes (they share the host's network: one replica per node address)
    assert len({p.spec.node_name for p in pods[:-1]}) == chart["replicas"]
    ops = pods[:-1]
    assert {p.spec.service_account_name for p in ops} == {f"{REL}-operator"}
    assert pods[-1].spec.service_account_name == f"{REL}-extender" and pods[-1].spec.automount_service_account_token is False
    # RBAC: the operator's identity is the chart's, and the chart gives it no more than it needs
    sa = f"system:serviceaccount:{NS}:{REL}-operator"
    for args, want in ((("create", "pods", "-n", "default"), "yes"), (("patch", "streamjobs.kubesoda.io/status", "-n", "default"), "yes"),
                       (("list", "secrets", "-A"), "no"), (("delete", "nodes"), "no"),
                       (("create", "clusterrolebindings"), "no")):
        assert kubectl("auth", "can-i", *args, "--as", sa, check=False).stdout.strip() == want, (args, want)
    # probes are the kubelet's: the readiness probe's port is the operator's own health port
    for p in ops:
        probe = p.spec.containers[0].readiness_probe.http_get
        assert probe.path == "/healthz" and probe.port == "health"
        assert {"name": "health", "port": chart["health_port"]} in [{"name": x.name, "port": x.container_port} for x in p.spec.containers[0].ports]
        assert proxy_get(kubectl, p.metadata.name, chart["health_port"], "healthz")


def leaders(kubectl, pods: list[str], port: int) -> dict[str, float] | None:
    """kubesoda_leader of each replica, when exactly one of them leads."""
    found = {}
    for pod in pods:
        proc = kubectl("get", "--raw", f"/api/v1/namespaces/{NS}/pods/{pod}:{port}/proxy/metrics", check=False)
        found[pod] = metric(proc.stdout, "kubesoda_leader") if proc.returncode == 0 else None
    return found if None not in found.values() and sum(v or 0.0 for v in found.values()) == 1 else None


def test_one_leader_among_the_operator_replicas(chart, kube, kubectl, wait_for):
    port = chart["metrics_port"]
    found = wait_for(lambda: leaders(kubectl, chart["operators"], port), timeout=120, interval=2,
                     what="exactly one replica with kubesoda_leader 1")
    print(f"\nkubesoda_leader: {found}")
    # the peering object names both replicas (Kopf's identities are the pod names, POD_ID)
    peering = json.loads(kubectl("get", "clusterkopfpeering", f"{REL}-{NS}", "-o", "json").stdout)
    seen = json.dumps(peering.get("status") or {})
    assert all(pod in seen for pod in chart["operators"]), seen
    if chart["replicas"] < 2:
        return
    # failover: the leader killed (no goodbye in the peering object); once its keep-alive is older
    # than the peering lifetime (20 s here), the live replica with the highest priority leads: the
    # standby, or the Deployment's replacement if that drew a higher one
    leader = next(p for p, v in found.items() if v == 1)
    t0 = time.monotonic()
    kubectl("delete", "pod", leader, "-n", NS, "--grace-period=0", "--force", "--wait=false")

    def replaced():
        pods = component_pods(kube, "operator")
        return len(pods) == 2 and leader not in {p.metadata.name for p in pods} and all(ready(p) for p in pods) and pods
    pods = wait_for(replaced, timeout=120, interval=2, what="the replacement replica Ready")
    chart["operators"] = [p.metadata.name for p in pods]
    found = wait_for(lambda: leaders(kubectl, chart["operators"], port), timeout=120, interval=2,
                     what=f"exactly one leader among {chart['operators']} after {leader} was killed")
    now = next(p for p, v in found.items() if v == 1)
    print(f"failover: {now} leads {time.monotonic() - t0:.0f} s after {leader} was killed")
    # the leader is the live replica of the highest priority (Kopf's rule; priorities are in the peering object)
    status = json.loads(kubectl("get", "clusterkopfpeering", f"{REL}-{NS}", "-o", "json").stdout).get("status") or {}
    prio = {pod: (status.get(pod) or {}).get("priority") for pod in chart["operators"]}
    print(f"priorities: {prio}")
    assert None not in prio.values() and max(prio, key=lambda p: prio[p]) == now, (prio, now)


def test_extender_answers_on_its_host_port(chart, kubectl):
    assert proxy_get(kubectl, chart["extender"], chart["ext_port"], "healthz", scheme="https").strip() == "ok"
    text = proxy_get(kubectl, chart["extender"], chart["ext_port"], "metrics", scheme="https")
    assert "kubesoda_extender_seconds" in text


def test_a_pipeline_runs_on_the_kwok_nodes_placed_by_the_charts_extender(chart, kube, kubectl, namespace, wait_for):
    def filtered() -> float:
        text = proxy_get(kubectl, chart["extender"], chart["ext_port"], "metrics", scheme="https")
        return metric(text, "kubesoda_extender_seconds_count", verb="filter") or 0.0
    before = filtered()
    t0 = time.monotonic()
    kubectl("apply", "-n", namespace, "-f", str(REPO / "examples" / "small-pipeline"))
    pods = wait_for(lambda: running_as_planned(kube, namespace, "clicks"), timeout=180, interval=2,
                    what="clicks Running, every PE pod on its planned node (planned by the chart's operator)")
    print(f"\nclicks Running as planned {time.monotonic() - t0:.0f} s after apply: "
          + ", ".join(f"{p.metadata.name}->{p.spec.node_name}" for p in pods))
    assert not {p.spec.node_name for p in pods} & set(chart["real"]), "a PE pod on a (cordoned) real node"
    assert all(p.spec.scheduler_name == SCHEDULER for p in pods)
    # bound by the chart's scheduler (its container on the real node), not the local control plane's
    scheduled = {e.involved_object.name: (e.reporting_component or (e.source and e.source.component))
                 for e in kube.core.list_namespaced_event(namespace).items if e.reason == "Scheduled"}
    assert all(scheduled.get(p.metadata.name) == SCHEDULER for p in pods), scheduled
    sched = kube.core.read_namespaced_pod(chart["scheduler"], NS)
    assert sched.spec.node_name in chart["real"] and sched.status.container_statuses[0].restart_count == 0
    after = filtered()
    assert after - before >= len(pods), f"the chart's extender filtered {after - before} times for {len(pods)} pods"
    print(f"the chart's extender: {after - before:.0f} filter calls")
    # the operator did it with the chart's ServiceAccount: no call was denied
    for pod in chart["operators"]:
        log = kubectl("logs", "-n", NS, pod, check=False).stdout.lower()
        assert "forbidden" not in log, pod


def test_uninstall_leaves_the_namespace_empty(chart, kube, kubectl, wait_for):
    helm("uninstall", REL, "-n", NS, "--wait", "--timeout", "120s")
    kubectl("delete", "secret", f"{REL}-local-tls", "-n", NS)

    def empty():
        left = kubectl("get", "all,configmaps,secrets,serviceaccounts,roles,rolebindings,leases", "-n", NS,
                       "-o", "name", check=False).stdout.split()
        # what every namespace has: the root CA ConfigMap and the default ServiceAccount
        left = [x for x in left if x not in ("configmap/kube-root-ca.crt", "serviceaccount/default")]
        return not left or None
    wait_for(empty, timeout=120, interval=2, what=f"nothing of the release left in {NS}")
    assert not kubectl("get", "clusterkopfpeering", f"{REL}-{NS}", check=False).stdout.strip()
    assert not [cr for cr in kubectl("get", "clusterroles", "-o", "name").stdout.split() if f"/{REL}-" in cr]
    kubectl("delete", "namespace", NS, "--wait=true", timeout=120)
