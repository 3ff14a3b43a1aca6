"""The fluid data plane, live: ``kubesoda simulate`` plays the PEs of a job that the operator placed on
KWOK nodes, and its /metrics (scraped here over HTTP, as Prometheus does) carries the rates the model
computes for the pods' actual CPU limits; an in-place resize of the sink's pod changes its rate on
the next interval.
"""

from __future__ import annotations

import os
import socket
import time
import urllib.request
from collections.abc import Iterator

import pytest
from live import FAST_POLICY, Simulator, install_crds_and_policy, running_as_planned, start_operator
from prometheus_client.parser import text_string_to_metric_families

INTERVAL = 1.0

# ingest -> parse -> score; the sink saturates at b/a = 2000 mips and is CPU-bound below it
JOB = """apiVersion: kubesoda.io/v1alpha1
kind: StreamTemplate
metadata: {name: chain}
spec:
  pes:
  - {name: ingest, kind: source, minCpu: 250m, resourceFunction: {a: 0.1}}
  - {name: parse, resourceFunction: {a: 0.002, b: 1.0}}
  - {name: score, kind: sink, resourceFunction: {a: 0.0005, b: 1.0}}
  streams:
  - {from: ingest, to: parse, bytesPerTuple: 1000}
  - {from: parse, to: score, bytesPerTuple: 500}
  sinks: [{pe: score, weight: 2, value: {kind: linear, slope: 1}}]
  primalInputs: [{pe: ingest, rate: 200}]
---
apiVersion: kubesoda.io/v1alpha1
kind: StreamJob
metadata: {name: chain}
spec: {templates: [chain], rank: 1}
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def sim_port() -> int:
    return int(os.environ.get("KUBESODA_SIMULATOR_PORT") or _free_port())


@pytest.fixture
def simulator(namespace: str, sim_port: int) -> Iterator[Simulator]:
    sim = Simulator(sim_port, "--namespace", namespace, interval=INTERVAL)
    sim.start()
    try:
        yield sim
    finally:
        sim.stop()


def scrape(port: int) -> tuple[float, dict[tuple[str, tuple[tuple[str, str], ...]], float]]:
    """(time, {(sample name, sorted labels): value}) of one GET /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    t = time.monotonic()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return t, out


def one(m: dict, name: str, **labels: str) -> float | None:
    hits = [v for (n, lab), v in m.items() if n == name and all((k, x) in lab for k, x in labels.items())]
    assert len(hits) <= 1, (name, labels, hits)
    return hits[0] if hits else None


def rates(port: int, seconds: float = 3.0) -> tuple[dict, dict]:
    """Per-second rates of every counter over ``seconds``, and the last scrape."""
    t1, a = scrape(port)
    time.sleep(seconds)
    t2, b = scrape(port)
    return {k: (v - a[k]) / (t2 - t1) for k, v in b.items() if k[0].endswith("_total") and k in a}, b


def expected(namespace: str):
    """The model's own computation for what the cluster holds now (the pods' actual limits)."""
    from soda_operator.dataplane.model import solve
    from soda_operator.dataplane.simulate import Cluster, model_input

    scen, glued, found = model_input(Cluster(namespace).list())
    return solve(glued, [i for i, _ in found], {n.name: n for n in scen.nodes}, scen.policy.links), found


def test_sink_rates_follow_the_model_and_a_resize(kube, kubectl, namespace, extender_port, wait_for, simulator, sim_port):
    op = start_operator(kubectl, extender_port)
    try:
        kubectl("apply", "-n", namespace, "-f", "-", input=JOB)
        pods = wait_for(lambda: running_as_planned(kube, namespace, "chain"), timeout=120, what="chain Running as planned")
    finally:
        op.stop()  # nothing moves the pods from here on but this test
    sink = next(p.metadata.name for p in pods if p.metadata.labels["kubesoda.io/pe"] == "score")
    wait_for(lambda: one(scrape(sim_port)[1], "kubesoda_pe_tuples_emitted_total", pod=sink, stream="sink") is not None,
             timeout=30, what="the sink's series on the simulator's /metrics")
    time.sleep(2 * INTERVAL)

    # 1. every pod's rates are the model's for the pods' limits as the API server has them
    dp, found = expected(namespace)
    assert {i.pod for i, _ in found} == {p.metadata.name for p in pods}
    got, last = rates(sim_port)
    for f in dp.pods:
        for stream, r in f.emitted.items():
            assert got[("kubesoda_pe_tuples_emitted_total", (("namespace", namespace), ("pe", f.instance.pe), ("pod", f.instance.pod),
                                                             ("stream", stream), ("streamjob", "chain")))] == pytest.approx(r, rel=0.03, abs=1e-6)
        for stream, r in f.received_bytes.items():
            assert got[("kubesoda_pe_bytes_received_total", (("namespace", namespace), ("pe", f.instance.pe), ("pod", f.instance.pod),
                                                             ("stream", stream), ("streamjob", "chain")))] == pytest.approx(r, rel=0.03, abs=1e-6)
        assert one(got, "container_cpu_usage_seconds_total", pod=f.instance.pod, container="pe") == pytest.approx(f.cpu_cores, rel=0.03)
    before = one(got, "kubesoda_pe_tuples_emitted_total", pod=sink, stream="sink")
    assert before == pytest.approx(dp.sinks[f"{namespace}/chain:score"], rel=0.03) and before > 0
    assert one(last, "kubesoda_dataplane_importance", namespace=namespace, streamjob="chain") == pytest.approx(dp.importance, rel=1e-6)
    print(f"\nsink {sink}: {before:.3f} tuples/s (model {dp.sinks[f'{namespace}/chain:score']:.3f}), importance {dp.importance:.3f}")

    # 2. the sink's pod resized in place to 100m: CPU-bound, min(a r_i m, b r_i) = 0.0005 x r_i x 100
    body = {"spec": {"containers": [{"name": "pe", "resources": {"requests": {"cpu": "100m"}, "limits": {"cpu": "100m"}}}]}}
    kube.core.patch_namespaced_pod_resize(sink, namespace, body)
    wait_for(lambda: (s := kube.core.read_namespaced_pod(sink, namespace).status.container_statuses[0]).resources
             and s.resources.limits["cpu"] == "100m", timeout=30, what="the resize actuated in the pod's status")
    time.sleep(INTERVAL + 0.5)  # the next interval
    got, last = rates(sim_port)
    after = one(got, "kubesoda_pe_tuples_emitted_total", pod=sink, stream="sink")
    r_in = one(got, "kubesoda_pe_tuples_received_total", pod=sink, stream="parse->score")
    mpc = float(kube.core.read_node(kube.core.read_namespaced_pod(sink, namespace).spec.node_name).metadata.labels.get(
        "kubesoda.io/mips-per-core", 1000))
    m = 0.1 * mpc
    assert after == pytest.approx(min(0.0005 * r_in * m, 1.0 * r_in), rel=0.03)
    dp2, _ = expected(namespace)
    assert after == pytest.approx(dp2.sinks[f"{namespace}/chain:score"], rel=0.03)
    assert after < 0.5 * before
    assert one(got, "container_cpu_usage_seconds_total", pod=sink) == pytest.approx(0.1, rel=0.03)  # CPU-bound: all of its limit
    print(f"after the resize to 100m: {after:.3f} tuples/s (hand {min(0.0005 * r_in * m, r_in):.3f}, model "
          f"{dp2.sinks[f'{namespace}/chain:score']:.3f}), importance {dp2.importance:.3f}")


def test_one_service_per_job_names_every_pe_and_the_old_per_pe_service_goes(kube, kubectl, namespace, extender_port, wait_for):
    """Issue 39: the job gets one headless Service; its EndpointSlices carry every pod's hostname (its
    PE's name), so ``<pe>.chain.<namespace>.svc`` is each PE's DNS name, the one its producer's
    KUBESODA_OUTPUTS names; the per-PE Service an earlier version made (owned by the job) is
    deleted on upgrade, a Service kubesoda does not own (no StreamJob owner) is left alone."""
    install_crds_and_policy(kubectl, FAST_POLICY)
    kubectl("apply", "-n", namespace, "-f", "-", input=JOB)
    uid = kube.custom.get_namespaced_custom_object("kubesoda.io", "v1alpha1", namespace, "streamjobs", "chain")["metadata"]["uid"]

    def svc(name: str, owned: bool) -> dict:
        return {"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": name, "labels": {"kubesoda.io/job": "chain", "kubesoda.io/pe": "parse"},
                             "ownerReferences": [{"apiVersion": "kubesoda.io/v1alpha1", "kind": "StreamJob", "name": "chain", "uid": uid}]
                             if owned else []},
                "spec": {"clusterIP": "None", "selector": {"kubesoda.io/job": "chain", "kubesoda.io/pe": "parse"},
                         "ports": [{"name": "stream", "port": 9000}]}}
    kube.core.create_namespaced_service(namespace, svc("chain-parse", True))  # what the operator made before issue 39
    kube.core.create_namespaced_service(namespace, svc("users-own", False))
    op = start_operator(kubectl, extender_port)
    try:
        pods = wait_for(lambda: running_as_planned(kube, namespace, "chain"), timeout=120, what="chain Running as planned")

        def services() -> set[str] | None:
            got = {s.metadata.name for s in kube.core.list_namespaced_service(namespace).items}
            return got if got == {"chain", "users-own"} else None
        wait_for(services, timeout=30, what="the job's one Service, the per-PE one deleted, the user's kept")
        s = kube.core.read_namespaced_service("chain", namespace)
        assert s.spec.cluster_ip == "None" and s.spec.selector == {"kubesoda.io/job": "chain"}
        assert s.metadata.owner_references[0].uid == uid

        by_pod = {p.metadata.name: p for p in pods}
        for p in pods:
            assert (p.spec.hostname, p.spec.subdomain) == (p.metadata.labels["kubesoda.io/pe"], "chain")

        from kubernetes import client

        discovery = client.DiscoveryV1Api(kube.api_client)
        # KWOK's pods get no address (the nodes have no pod CIDR, hack/kwok.yaml): give each one, as a
        # CNI would, so that the EndpointSlice controller lists it (KWOK leaves a Running pod's status alone)
        for k, p in enumerate(pods):
            ip = f"10.254.{k // 250}.{k % 250 + 1}"
            kube.core.patch_namespaced_pod_status(p.metadata.name, namespace, {"status": {"podIP": ip, "podIPs": [{"ip": ip}]}})

        def endpoints() -> dict[str, str] | None:
            eps = [e for sl in discovery.list_namespaced_endpoint_slice(namespace, label_selector="kubernetes.io/service-name=chain").items
                   for e in sl.endpoints or [] if e.addresses and (e.conditions is None or e.conditions.ready is not False)]
            got = {e.target_ref.name: e.hostname for e in eps if e.target_ref}
            return got if set(got) == set(by_pod) else None
        hosts = wait_for(endpoints, timeout=60, what="every pod a ready endpoint of the job's Service")
        # the DNS name of each endpoint is <hostname>.chain.<namespace>.svc: its PE's name
        assert hosts == {name: p.metadata.labels["kubesoda.io/pe"] for name, p in by_pod.items()}
        outs = {p.metadata.labels["kubesoda.io/pe"]: next((e.value for e in p.spec.containers[0].env if e.name == "KUBESODA_OUTPUTS"), "")
                for p in pods}
        assert outs == {"ingest": f"ingest->parse=parse.chain.{namespace}.svc:9000",
                        "parse": f"parse->score=score.chain.{namespace}.svc:9000", "score": ""}
    finally:
        op.stop()

    # an upgrade with a pod of the earlier version running (hostname = its name, subdomain chain-parse,
    # both immutable) and its per-PE Service: the pod is replaced, the Service deleted, the job runs
    old = next(p for p in pods if p.metadata.labels["kubesoda.io/pe"] == "parse")
    body = kube.api_client.sanitize_for_serialization(old)
    body["metadata"] = {k: body["metadata"][k] for k in ("name", "labels", "annotations", "ownerReferences")}
    body["spec"].update(hostname=old.metadata.name, subdomain="chain-parse", nodeName=old.spec.node_name)
    body.pop("status", None)
    kube.core.delete_namespaced_pod(old.metadata.name, namespace, grace_period_seconds=0)
    wait_for(lambda: not [p for p in kube.core.list_namespaced_pod(namespace).items if p.metadata.name == old.metadata.name],
             timeout=30, what="the parse pod gone")
    legacy = kube.core.create_namespaced_pod(namespace, body)
    kube.core.create_namespaced_service(namespace, svc("chain-parse", True))
    op = start_operator(kubectl, extender_port)
    try:
        def replaced():
            p = next((p for p in kube.core.list_namespaced_pod(namespace).items if p.metadata.name == old.metadata.name), None)
            return p if p and p.metadata.uid != legacy.metadata.uid and p.spec.subdomain == "chain" and p.status.phase == "Running" else None
        p = wait_for(replaced, timeout=90, what="the earlier version's pod replaced by one addressed parse.chain")
        assert p.spec.hostname == "parse"
        wait_for(services, timeout=30, what="the per-PE Service deleted again")
        wait_for(lambda: running_as_planned(kube, namespace, "chain"), timeout=60, what="chain Running as planned after the upgrade")
    finally:
        op.stop()
