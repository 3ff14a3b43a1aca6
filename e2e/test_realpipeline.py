"""A real pipeline on a real node: the example PEs (examples/pe, image
``ghcr.io/kubesoda/pe-examples:dev`` built by ``hack/build-image.py pe-examples``) run as kubesoda
places them, pass tuples over TCP between pods (each producer finds its consumer by its DNS name
``<pe>.<job>.<namespace>.svc``: the PE pods' hostname under the job's one headless Service, served
by the real nodes' CoreDNS), and the transform's tuple rate follows the
CPU kubesoda gives it: a second, far more important job arrives on the same node, the next micro
epoch shrinks the transform's CPU limit in place, and its rate falls by about the same ratio, with no
restart; when the rival leaves, the transform grows back in place and its rate with it. Twice
(``CYCLES``), so that the host's noise averages out of the ratio.

The transform spends a calibrated amount of CPU per tuple (``--work`` SHA-256 iterations) and its
declared resource function needs 600 mips for the whole input, while it really needs more: it is
CPU-bound at whatever limit kubesoda sets, so its rate is CPU / (CPU per tuple). The rival job is
made of pause containers: SODA plans for its (declared) CPU, so the node's CPU is contended on
paper without loading a 2-core machine for real.

Needs a real node (``KUBESODA_REAL_NODES=1 hack/cluster-up.sh``); skipped otherwise.
"""

from __future__ import annotations

import json
import statistics
import time
import urllib.request

import pytest
from live import job, milli, start_operator
from prometheus_client.parser import text_string_to_metric_families
from realnode import PE_IMAGE, first_real_node
from test_realnode import container_cgroup, usage_seconds

MICRO = 3  # micro epoch, seconds
POLICY = f"""apiVersion: kubesoda.io/v1alpha1
kind: SchedulingPolicy
metadata: {{name: default}}
spec:
  macroEpochSeconds: 6
  microEpochSeconds: {MICRO}
  macroQDeadlineSeconds: 1
  macroWDeadlineSeconds: 1
"""
WINDOW = 4.0  # seconds per rate measurement window
# windows per phase (medians). The CPU one SHA-256 iteration costs on this 2-core VM varies by
# +-15% from one second to the next with nothing else running, and a phase of several seconds at
# +40% was seen under CI's load; 8 windows per phase and a phase on each side of every shrunk one
# keep such drift out of the ratio.
WINDOWS = 8
TOLERANCE = 0.15  # the CPU used against the limit: the cgroup quota is exact (within 1% in every run seen)
# The rate against the CPU is noisier than the CPU, and biased low. Noise: the same pipeline run by
# hand on this host in a cgroup whose quota alternated 600m/300m (stop 33) gave 2.6-3.7 ms of CPU per
# tuple in phases with the same quota and rate ratios 0.37-0.55 for a CPU ratio of 0.50, while a bare
# SHA-256 loop in that cgroup cost the same per iteration at both quotas (0.363 vs 0.369 us): the
# PE's CPU per tuple drifts about 10% from phase to phase. Bias: every run on a real node but one saw
# the throttled transform spend more CPU per tuple than at 600m (rate ratios 0.387, 0.420 in CI; 0.428,
# 0.456-0.477 locally; 0.523 once), by hand too in one quiet round (3.00 vs 2.68 ms). Why is not
# established; not the SHA work itself: a bare SHA-256 loop in the same cgroup costs the same per
# iteration at both quotas on an idle host and beside two busy processes walking 8 MiB each (0.341-
# 0.351 us), so it lies in the PE's threads (reader, worker, sender) under a quota. So
# the shrunk phases are averaged over CYCLES, each against the alone phases on both sides, and the
# rate ratio may be up to 30% below the CPU ratio and up to 15% above it: a rate that ignores the CPU
# (a ratio of 1.0, 100% above) or a pipeline stalled by the resize still fails.
CYCLES = 2
RATE_BELOW, RATE_ABOVE = 0.30, 0.15
PAUSE = "localhost/kubesoda/pause:3.10.1"  # on every real node: containerd's sandbox image


def pipeline(node: str) -> str:
    on = f"nodeSelector: {{kubernetes.io/hostname: '{node}'}}"
    img = f"image: {PE_IMAGE}"
    return f"""apiVersion: kubesoda.io/v1alpha1
kind: StreamTemplate
metadata: {{name: pipe}}
spec:
  pes:
  - {{name: src, kind: source, {img}, args: [source, --rate, "400", --bytes, "100"], minCpu: 100m, resourceFunction: {{a: 4}}, {on}}}
  - {{name: mid, {img}, args: [transform, --work, "8000"], resourceFunction: {{a: 0.0016667, b: 1}}, {on}}}
  - {{name: snk, kind: sink, {img}, args: [sink], minCpu: 100m, resourceFunction: {{a: 1, b: 1}}, {on}}}
  streams:
  - {{from: src, to: mid, bytesPerTuple: 100}}
  - {{from: mid, to: snk, bytesPerTuple: 100}}
  sinks: [{{pe: snk, weight: 1}}]
  primalInputs: [{{pe: src, rate: 400}}]
---
apiVersion: kubesoda.io/v1alpha1
kind: StreamJob
metadata: {{name: pipe}}
spec: {{templates: [pipe], rank: 1}}
"""


def rival(node: str, name: str) -> str:
    """Two sources of 700 tuples/s at 1 tuple/s per mips into a sink worth 100 per tuple: 1,500 mips
    of the node's 2,000 by SODA's books (two PEs, so that each fits a candidate node on its own)."""
    on = f"nodeSelector: {{kubernetes.io/hostname: '{node}'}}"
    return f"""apiVersion: kubesoda.io/v1alpha1
kind: StreamTemplate
metadata: {{name: rival}}
spec:
  pes:
  - {{name: src1, kind: source, image: {PAUSE}, resourceFunction: {{a: 1}}, {on}}}
  - {{name: src2, kind: source, image: {PAUSE}, resourceFunction: {{a: 1}}, {on}}}
  - {{name: snk, kind: sink, image: {PAUSE}, minCpu: 100m, resourceFunction: {{a: 1, b: 1}}, {on}}}
  streams: [{{from: src1, to: snk}}, {{from: src2, to: snk}}]
  sinks: [{{pe: snk, weight: 100}}]
  primalInputs: [{{pe: src1, rate: 700}}, {{pe: src2, rate: 700}}]
---
apiVersion: kubesoda.io/v1alpha1
kind: StreamJob
metadata: {{name: {name}}}
spec: {{templates: [rival], rank: 1}}
"""


@pytest.fixture
def real_node(kube) -> str:
    return first_real_node(kube, PE_IMAGE)


def pod_of(kube, namespace: str, jobname: str, pe: str):
    pods = [p for p in kube.core.list_namespaced_pod(namespace, label_selector=f"kubesoda.io/job={jobname}").items
            if (p.metadata.labels or {}).get("kubesoda.io/pe") == pe]
    return pods[0] if len(pods) == 1 else None


def received(ip: str, stream: str) -> float:
    """The PE's ``kubesoda_pe_tuples_received_total`` on ``stream``, read from its /metrics (the
    pod address is reachable from the host through the node's bridge)."""
    with urllib.request.urlopen(f"http://{ip}:9100/metrics", timeout=5) as r:
        text = r.read().decode()
    return sum(s.value for fam in text_string_to_metric_families(text) for s in fam.samples
               if s.name == "kubesoda_pe_tuples_received_total" and s.labels.get("stream") == stream)


def measure(kube, kubectl, node: str, namespace: str) -> tuple[float, float, float]:
    """(limit millicores, CPU used in millicores, tuples/s received) of the transform: medians over
    WINDOWS windows of WINDOW seconds (a start-up burst elsewhere on the 2-core host, or the host's
    own drift, skews a window or two)."""
    pod = pod_of(kube, namespace, "pipe", "mid")
    cgroup = container_cgroup(pod)
    ip = pod.status.pod_ip
    used, rates = [], []
    for _ in range(WINDOWS):
        n0, u0, t0 = received(ip, "src->mid"), usage_seconds(kubectl, node, pod, cgroup), time.monotonic()
        time.sleep(WINDOW)
        n1, u1, t1 = received(ip, "src->mid"), usage_seconds(kubectl, node, pod, cgroup), time.monotonic()
        used.append((u1 - u0) / (t1 - t0) * 1000)
        rates.append((n1 - n0) / (t1 - t0))
    limit = milli(pod.status.container_statuses[0].resources.limits["cpu"])
    print(f"  windows: used {[round(u) for u in used]} m, rates {[round(r, 1) for r in rates]} tuples/s")
    return limit, statistics.median(used), statistics.median(rates)


def grown_back(kube, namespace: str, uid: str, limit: float):
    """The transform's pod (same UID) once its CPU limit is back to ``limit`` in spec and status."""
    p = pod_of(kube, namespace, "pipe", "mid")
    st = p.status.container_statuses[0]
    ok = (p.metadata.uid == uid and milli(p.spec.containers[0].resources.limits["cpu"]) == limit
          and st.resources and st.resources.limits and milli(st.resources.limits["cpu"]) == limit)
    return p if ok else None


def test_a_real_pipeline_runs_and_its_rate_follows_the_cpu_kubesoda_gives_it(real_node, kube, kubectl, namespace,
                                                                            extender_port, wait_for):
    op = start_operator(kubectl, extender_port, policy=POLICY)
    try:
        kubectl("apply", "-n", namespace, "-f", "-", input=pipeline(real_node))

        def flowing():
            st = job(kube, namespace, "pipe").get("status") or {}
            snk = pod_of(kube, namespace, "pipe", "snk")
            if st.get("phase") != "Running" or snk is None or not snk.status.pod_ip:
                return None
            try:
                return received(snk.status.pod_ip, "mid->snk") > 100
            except OSError:
                return None
        wait_for(flowing, timeout=240, interval=2, what="tuples through src -> mid -> snk (pods on the real node, streams by DNS)")
        # the names the tuples flowed through: each PE under the job's one Service (issue 39)
        env = {e.name: e.value for e in pod_of(kube, namespace, "pipe", "src").spec.containers[0].env}
        assert env["KUBESODA_OUTPUTS"] == f"src->mid=mid.pipe.{namespace}.svc:9000", env
        env = {e.name: e.value for e in pod_of(kube, namespace, "pipe", "mid").spec.containers[0].env}
        assert env["KUBESODA_OUTPUTS"] == f"mid->snk=snk.pipe.{namespace}.svc:9000", env
        assert [s.metadata.name for s in kube.core.list_namespaced_service(namespace).items] == ["pipe"]
        mid = pod_of(kube, namespace, "pipe", "mid")
        uid, cid = mid.metadata.uid, mid.status.container_statuses[0].container_id
        time.sleep(3)
        alone = [measure(kube, kubectl, real_node, namespace)]
        limit1, used1, rate1 = alone[0]
        print(f"\nalone: transform limit {limit1}m, used {used1:.0f}m, {rate1:.1f} tuples/s")
        assert abs(used1 - limit1) <= TOLERANCE * limit1, "the transform is not CPU-bound at its limit"
        assert rate1 > 20

        shrunk_phases, target = [], None
        for cycle in range(1, CYCLES + 1):
            rival_name = f"rival-{cycle}"
            # a job worth 100x per tuple arrives on the same node: the transform's CPU shrinks in place
            t_apply = time.monotonic()
            kubectl("apply", "-n", namespace, "-f", "-", input=rival(real_node, rival_name))

            def shrunk():
                p = pod_of(kube, namespace, "pipe", "mid")
                spec_cpu = milli(p.spec.containers[0].resources.limits["cpu"])
                return p if p.metadata.uid == uid and spec_cpu < 0.8 * limit1 else None
            try:
                p = wait_for(shrunk, timeout=90, interval=0.2, what="kubesoda to shrink the transform's CPU limit")
            except BaseException:
                for name in ("pipe", rival_name):
                    print(name, json.dumps((job(kube, namespace, name).get("status") or {}), indent=1)[:3000])
                raise
            t_spec = time.monotonic()
            patched = milli(p.spec.containers[0].resources.limits["cpu"])
            assert target in (None, patched), f"the same rival shrank the transform to {target}m, then to {patched}m"
            target = patched

            def actuated(target: float = target):
                s = pod_of(kube, namespace, "pipe", "mid").status.container_statuses[0]
                return s.resources and s.resources.limits and milli(s.resources.limits["cpu"]) == target
            wait_for(actuated, timeout=30, interval=0.2, what=f"the kubelet to actuate {target}m")
            t_act = time.monotonic()
            print(f"{rival_name} applied -> limit patched to {target}m in {t_spec - t_apply:.1f} s; "
                  f"actuated {t_act - t_spec:.1f} s later")
            assert t_act - t_spec <= MICRO, f"the resize took {t_act - t_spec:.1f} s to take effect (micro epoch {MICRO} s)"

            # once the rival's pods run: their sandboxes' start-up (containerd, runc, CNI) shares the host's 2 cores
            wait_for(lambda name=rival_name: (job(kube, namespace, name).get("status") or {}).get("phase") == "Running",
                     timeout=60, what=f"{rival_name} Running")
            time.sleep(4)
            shrunk_phases.append(measure(kube, kubectl, real_node, namespace))
            limit2, used2, rate2 = shrunk_phases[-1]
            print(f"with {rival_name}: transform limit {limit2}m, used {used2:.0f}m, {rate2:.1f} tuples/s")
            assert (job(kube, namespace, rival_name).get("status") or {}).get("phase") == "Running"

            # the rival leaves: the transform grows back in place, and its rate with it
            kubectl("delete", "-n", namespace, "streamjob", rival_name, "--wait=false")
            wait_for(lambda: grown_back(kube, namespace, uid, limit1), timeout=60, interval=0.5,
                     what=f"the transform's limit back to {limit1}m once {rival_name} is gone")
            time.sleep(2)
            alone.append(measure(kube, kubectl, real_node, namespace))
            limit3, used3, rate3 = alone[-1]
            print(f"alone again: transform limit {limit3}m, used {used3:.0f}m, {rate3:.1f} tuples/s")

        for limit, used, _rate in alone + shrunk_phases:
            assert abs(used - limit) <= TOLERANCE * limit, f"the transform used {used:.0f}m of its {limit}m"
        assert {lim for lim, _, _ in alone} == {limit1} and {lim for lim, _, _ in shrunk_phases} == {target}
        # each shrunk phase against the mean of the alone phases either side (the host's drift cancels),
        # averaged over the cycles (the host's noise from one phase to the next shrinks)
        ratios = [rate / ((alone[k][2] + alone[k + 1][2]) / 2) for k, (_, _, rate) in enumerate(shrunk_phases)]
        cpt = [[used / rate for _, used, rate in phases] for phases in (alone, shrunk_phases)]
        rate_ratio, cpu_ratio = statistics.mean(ratios), target / limit1
        print(f"rate ratio {rate_ratio:.3f} (per cycle {[round(r, 3) for r in ratios]}) vs CPU ratio {cpu_ratio:.3f}; "
              f"CPU per tuple {[round(c, 2) for c in cpt[0]]} ms alone, {[round(c, 2) for c in cpt[1]]} ms shrunk")
        assert 1 - RATE_BELOW <= rate_ratio / cpu_ratio <= 1 + RATE_ABOVE, "the rate did not follow the CPU"

        after = pod_of(kube, namespace, "pipe", "mid")
        st = after.status.container_statuses[0]
        assert (after.metadata.uid, st.container_id, st.restart_count) == (uid, cid, 0), "a resize restarted the transform"
    finally:
        op.stop()


def test_a_pe_name_under_the_job_service_resolves_to_every_instance(real_node, kube, namespace, wait_for):
    """The addressing kubesoda relies on (issue 39, docs/dataplane.md): two pods sharing one hostname
    under one headless Service are one DNS name with both addresses (the real node's CoreDNS), and the
    PE SDK's producer, given that one name, sends to both: each sink receives tuples. A third pod under
    another hostname of the same Service receives none."""
    svc = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "probe"},
           "spec": {"clusterIP": "None", "selector": {"app": "probe"}, "ports": [{"name": "stream", "port": 9000}]}}
    kube.core.create_namespaced_service(namespace, svc)

    def pod(name: str, hostname: str, args: list[str], outputs: str = "") -> dict:
        env = [{"name": "KUBESODA_JOB", "value": "probe"}, {"name": "KUBESODA_PE", "value": hostname},
               {"name": "KUBESODA_NAMESPACE", "value": namespace}, {"name": "KUBESODA_POD", "value": name},
               {"name": "KUBESODA_RESOLVE_SECONDS", "value": "1"}]
        if outputs:
            env.append({"name": "KUBESODA_OUTPUTS", "value": outputs})
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": "probe"}},
                "spec": {"nodeName": real_node, "hostname": hostname, "subdomain": "probe", "terminationGracePeriodSeconds": 1,
                         "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
                         "containers": [{"name": "pe", "image": PE_IMAGE, "args": args, "env": env,
                                         "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                                         "resources": {"requests": {"cpu": "50m"}, "limits": {"cpu": "200m"}}}]}}
    for name in ("worker-a", "worker-b"):
        kube.core.create_namespaced_pod(namespace, pod(name, "worker", ["sink"]))
    kube.core.create_namespaced_pod(namespace, pod("bystander", "other", ["sink"]))
    kube.core.create_namespaced_pod(namespace, pod("producer", "src", ["source", "--rate", "100", "--bytes", "10"],
                                                   f"src->worker=worker.probe.{namespace}.svc:9000"))

    def ips() -> dict[str, str] | None:
        got = {p.metadata.name: p.status.pod_ip for p in kube.core.list_namespaced_pod(namespace).items
               if p.status.phase == "Running" and p.status.pod_ip}
        return got if len(got) == 4 else None
    addr = wait_for(ips, timeout=120, what="the probe pods Running with addresses")

    def both() -> dict[str, float] | None:
        try:
            got = {n: received(addr[n], "src->worker") for n in ("worker-a", "worker-b")}
        except OSError:
            return None
        return got if all(v > 20 for v in got.values()) else None
    got = wait_for(both, timeout=90, interval=2, what="tuples at both instances behind worker.probe")
    print(f"\nworker.probe.{namespace}.svc -> both instances: {got}")
    assert received(addr["bystander"], "src->worker") == 0
