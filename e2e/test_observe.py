"""Observation, live: the fluid data plane (``kubesoda simulate``) plays the PEs on the KWOK nodes,
the real Prometheus of the local control plane scrapes it, and the operator (``--prometheus-url``)
writes what it observed into the job's status next to the projection.

- a job applied with kubectl shows observed rates and an observed importance close to the
  projection (the simulator's true resource functions are the declared ones);
- the rack uplink into the sink's rack made narrow (the SchedulingPolicy's link capacity, which
  the data plane obeys and the projection does not model): the observed importance drops below the
  projection, the status says so (``MeetsProjection`` False, ``BelowProjection``) with an Event;
- without ``--prometheus-url`` the status says there is no observation source;
- issue 45, with a Prometheus server of its own (no cluster): the chart's PodMonitor, rendered by
  helm and turned into the scrape config the Prometheus operator makes of it, scrapes a tenant's
  pod that exports its counters under the healthy namespace's labels (``namespace``, ``pod``,
  ``streamjob``, ``pe``): the operator's queries and attribution give healthy's PE exactly its own
  pod's rates and its learner nothing of the tenant's.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from live import Simulator, job, start_operator

from soda_operator.soda import crd, observe
from soda_operator.soda.learning import Learning, template_signatures
from soda_optimizer.model import pe_id
from soda_optimizer.plan import JobDecision, Plan

PROM = os.environ.get("KUBESODA_PROMETHEUS_URL")
SIM_PORT = os.environ.get("KUBESODA_SIMULATOR_PORT")

# SODA's policy with short epochs, and rates over 6 s (Prometheus scrapes every 2 s here)
POLICY = """apiVersion: kubesoda.io/v1alpha1
kind: SchedulingPolicy
metadata: {name: default}
spec:
  macroEpochSeconds: 6
  microEpochSeconds: 2
  macroQDeadlineSeconds: 1
  macroWDeadlineSeconds: 1
  observation: {windowSeconds: 6, tolerance: 0.15}
"""
NARROW = POLICY + """  links: {overrides: {"rack:rack-1-0": 20000}}
"""

# the source pinned to rack-0-0, the sink to rack-1-0 (another zone): the last stream crosses racks
JOB = """apiVersion: kubesoda.io/v1alpha1
kind: StreamTemplate
metadata: {name: across}
spec:
  pes:
  - {name: ingest, kind: source, minCpu: 250m, resourceFunction: {a: 0.1}, nodeSelector: {kubesoda.io/rack: rack-0-0}}
  - {name: parse, resourceFunction: {a: 0.002, b: 1.0}}
  - {name: score, kind: sink, resourceFunction: {a: 0.0005, b: 1.0}, nodeSelector: {kubesoda.io/rack: rack-1-0}}
  streams:
  - {from: ingest, to: parse, bytesPerTuple: 1000}
  - {from: parse, to: score, bytesPerTuple: 500}
  sinks: [{pe: score, weight: 2, value: {kind: linear, slope: 1}}]
  primalInputs: [{pe: ingest, rate: 200}]
---
apiVersion: kubesoda.io/v1alpha1
kind: StreamJob
metadata: {name: across}
spec: {templates: [across], rank: 1}
"""

needs_prometheus = pytest.mark.skipif(not (PROM and SIM_PORT), reason="no Prometheus in this cluster's env (KUBESODA_PROMETHEUS_URL, "
                                      "KUBESODA_SIMULATOR_PORT: the local control plane sets them)")


@pytest.fixture
def simulator() -> Iterator[Simulator]:
    sim = Simulator(str(SIM_PORT))
    sim.start()
    try:
        yield sim
    finally:
        sim.stop()


def _cond(st: dict, kind: str) -> dict:
    return next((c for c in st.get("conditions") or [] if c.get("type") == kind), {})


@needs_prometheus
def test_observed_next_to_projected_and_below_it_over_a_narrow_link(kube, kubectl, namespace, extender_port, wait_for, simulator):
    op = start_operator(kubectl, extender_port, policy=POLICY, extra=("--prometheus-url", str(PROM)))
    try:
        kubectl("apply", "-n", namespace, "-f", "-", input=JOB)

        def observed(pred):
            def check():
                st = job(kube, namespace, "across").get("status") or {}
                ob = st.get("observed") or {}
                return st if st.get("phase") == "Running" and ob.get("source") == "prometheus" and pred(st, ob) else None
            return check

        st = wait_for(observed(lambda st, ob: ob.get("ratio") is not None and ob["importance"] > 0 and abs(ob["ratio"] - 1) < 0.15),
                      timeout=120, what="observed importance within 15% of the projection")
        ob = st["observed"]
        assert ob["ingestRate"] == pytest.approx(200, rel=0.15), ob  # the primal rate: ingest is not CPU-bound at its floor
        assert ob["observedPEs"] == 3
        score = next(p for p in ob["pes"] if p["name"] == "score")
        assert score["received"].get("parse->score", 0) > 0 and score["emitted"].get("sink", 0) > 0
        assert all(p.get("mips", 0) > 0 for p in ob["pes"]), ob["pes"]
        assert _cond(st, "MeetsProjection").get("status") == "True"
        out = kubectl("get", "sj", "-n", namespace, "across").stdout
        assert "OBSERVED" in out

        # the uplink of the sink's rack carries 20 kB/s: parse -> score needs ~80 kB/s (or more,
        # wherever parse runs), so the sink gets a quarter of its tuples at most
        kubectl("apply", "-f", "-", input=NARROW)
        st = wait_for(observed(lambda st, ob: ob.get("ratio") is not None and ob["ratio"] < 0.5), timeout=90,
                      what="observed importance below half the projection over the narrow link")
        c = _cond(st, "MeetsProjection")
        assert c.get("status") == "False" and c.get("reason") == "BelowProjection", c
        assert "of the projected" in c.get("message", "")
        wait_for(lambda: "BelowProjection" in kubectl("get", "events", "-n", namespace, "--field-selector",
                                                       "involvedObject.name=across").stdout, timeout=30, what="a BelowProjection Event")
    finally:
        op.stop()


def test_without_prometheus_the_status_says_so(kube, kubectl, namespace, extender_port, wait_for):
    op = start_operator(kubectl, extender_port, policy=POLICY)
    try:
        kubectl("apply", "-n", namespace, "-f", "-", input=JOB)
        st = wait_for(lambda: (s := job(kube, namespace, "across").get("status") or {}).get("phase") == "Running" and s, timeout=90,
                      what="across Running")
        assert st["observed"]["source"] == "none" and "--prometheus-url" in st["observed"]["message"]
        assert not _cond(st, "MeetsProjection")
        assert st["importance"] > 0  # the projection as before
    finally:
        op.stop()


# ------------------------------------------------------------------------------------ issue 45

ROOT = Path(__file__).resolve().parent.parent


def _binaries() -> Path:
    """The cached pinned binaries' directory (hack/build-binaries.sh's, without building anything)."""
    v = dict(line.split("=", 1) for line in (ROOT / "hack/versions.env").read_text().splitlines() if "=" in line and not line.startswith("#"))
    cache = Path(os.environ.get("KUBESODA_CACHE", Path.home() / ".cache/kubesoda"))
    return cache / "bin" / f"k8s-{v['K8S_VERSION']}_etcd-{v['ETCD_VERSION']}_kwok-{v['KWOK_VERSION']}_helm-{v['HELM_VERSION']}"


PROMETHEUS_BIN = _binaries() / f"prometheus-{dict(line.split('=', 1) for line in (ROOT / 'hack/versions.env').read_text().splitlines() if line.startswith('PROMETHEUS_VERSION='))['PROMETHEUS_VERSION']}"
HELM_BIN = _binaries() / "helm"


class Exposition:
    """A PE pod's /metrics on loopback: its received counter of ``stream`` growing at ``rate``
    tuples/s and its emitted counter of ``parse->out`` at half of it, under whatever labels the PE
    chooses to export."""

    def __init__(self, labels: dict[str, str], rate: float):
        self.labels, self.rate, self.t0 = labels, rate, time.time()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                lab = ",".join(f'{k}="{v}"' for k, v in sorted(outer.labels.items()))
                out = ",".join(f'{k}="{v}"' for k, v in sorted({**outer.labels, "stream": "parse->out"}.items()))
                n = outer.rate * (time.time() - outer.t0)
                body = ("# TYPE kubesoda_pe_tuples_received_total counter\n"
                        f"kubesoda_pe_tuples_received_total{{{lab}}} {n:.3f}\n"
                        "# TYPE kubesoda_pe_tuples_emitted_total counter\n"
                        f"kubesoda_pe_tuples_emitted_total{{{out}}} {n / 2:.3f}\n").encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pod_monitor_endpoint() -> dict[str, Any]:
    """The chart's PodMonitor endpoint, as helm renders it."""
    out = subprocess.run([str(HELM_BIN), "template", "kubesoda", str(ROOT / "charts/kubesoda"), "--kube-version", "1.35.0", "--set", "observation.podMonitor.enabled=true",
                          "--show-only", "templates/extras.yaml"], capture_output=True, text=True, check=True, timeout=60)
    monitors = [d for d in yaml.safe_load_all(out.stdout) if d and d.get("kind") == "PodMonitor"]
    assert len(monitors) == 1, out.stdout
    (ep,) = monitors[0]["spec"]["podMetricsEndpoints"]
    return dict(ep)


def _scrape_job(ep: dict[str, Any], targets: list[tuple[int, str, str]]) -> dict[str, Any]:
    """The scrape job the Prometheus operator generates from a PodMonitor endpoint, with the pods
    kubernetes_sd would discover given as static targets carrying the same __meta_ labels (this
    Prometheus is built without service discovery): honor_labels and the endpoint's relabelings as
    they are, nothing else of the namespace or pod than what the chart states."""
    snake = {"sourceLabels": "source_labels", "targetLabel": "target_label", "action": "action", "regex": "regex",
             "replacement": "replacement", "separator": "separator", "modulus": "modulus"}
    return {
        "job_name": "podMonitor/kubesoda/kubesoda-pe/0",
        "scrape_interval": "1s", "scrape_timeout": "1s", "metrics_path": ep.get("path", "/metrics"),
        "honor_labels": bool(ep.get("honorLabels", False)),
        "static_configs": [{"targets": [f"127.0.0.1:{port}"],
                            "labels": {"__meta_kubernetes_namespace": ns, "__meta_kubernetes_pod_name": pod,
                                       "__meta_kubernetes_pod_container_name": "pe"}} for port, ns, pod in targets],
        "relabel_configs": [{snake[k]: v for k, v in r.items()} for r in ep.get("relabelings") or []],
    }


@pytest.mark.skipif(not (PROMETHEUS_BIN.exists() and HELM_BIN.exists()), reason=f"no {PROMETHEUS_BIN} / {HELM_BIN} (hack/build-binaries.sh)")
def test_a_pe_cannot_report_under_another_namespaces_labels():
    """healthy's parse pod receives 10 tuples/s; a tenant's pod exports 1000 tuples/s under
    healthy's namespace, pod, streamjob and pe labels. Through the chart's PodMonitor and the
    operator's queries healthy's PE observes its own 10/s, the tenant's rate is its own pod's,
    and a sample the learner takes of healthy's PE says 10/s. (Before issue 45 the PodMonitor
    honoured the PE's labels and the queries grouped by them: healthy's PE observed 1010/s.)"""
    forged = {"namespace": "healthy", "pod": "feat-parse-0", "streamjob": "feat", "pe": "parse", "stream": "src->parse"}
    honest = Exposition(forged, 10.0)  # healthy's own pod exports what the SDK exports for it
    spy = Exposition(forged, 1000.0)
    ep = _pod_monitor_endpoint()
    port = _free_port()
    work = Path(tempfile.mkdtemp(prefix="kubesoda-e2e-prom-"))
    cfg = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
           "scrape_configs": [_scrape_job(ep, [(honest.port, "healthy", "feat-parse-0"), (spy.port, "tenant", "spy-0")])]}
    (work / "prometheus.yml").write_text(yaml.safe_dump(cfg))
    proc = subprocess.Popen([str(PROMETHEUS_BIN), "--config.file", str(work / "prometheus.yml"), "--storage.tsdb.path", str(work / "data"),
                             "--web.listen-address", f"127.0.0.1:{port}", "--log.level", "warn"],
                            stdout=subprocess.DEVNULL, stderr=open(work / "prometheus.log", "w"))  # noqa: SIM115
    try:
        prom = observe.Prometheus(f"http://127.0.0.1:{port}")
        window = 6
        q = observe.Q_RECEIVED.format(w=window)
        rows: list[tuple[dict[str, str], float]] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                rows = prom.query(q)
            except observe.ObservationError:
                rows = []
            # rate() divides by the whole window: wait until both targets' samples cover it
            covered = prom.query(f"count_over_time(kubesoda_pe_tuples_received_total[{window}s])") if len(rows) == 2 else []
            if len(covered) == 2 and all(v >= window - 1 for _, v in covered):
                rows = prom.query(q)
                break
            time.sleep(0.5)
        assert len(rows) == 2, (rows, (work / "prometheus.log").read_text()[-2000:])
        # the series are the scraped pods', whatever they claimed
        raw = prom.query("kubesoda_pe_tuples_received_total")
        assert {(lab.get("namespace"), lab.get("pod")) for lab, _ in raw} == {("healthy", "feat-parse-0"), ("tenant", "spy-0")}, raw
        pods = [{"metadata": {"namespace": ns, "name": pod, "labels": {crd.LABEL_JOB: jb, crd.LABEL_PE: pe}}, "spec": {"nodeName": "n1"}}
                for ns, pod, jb, pe in (("healthy", "feat-parse-0", "feat", "parse"), ("tenant", "spy-0", "spy", "parse"))]
        obs = observe.pe_observations(rows, prom.query(observe.Q_EMITTED.format(w=window)), [], pods, {"n1": 1000.0})
        assert obs[pe_id("healthy/feat", "parse")].received["src->parse"] == pytest.approx(10.0, rel=0.25), obs
        assert obs[pe_id("healthy/feat", "parse")].emitted["parse->out"] == pytest.approx(5.0, rel=0.25), obs
        assert obs[pe_id("tenant/spy", "parse")].received["src->parse"] == pytest.approx(1000.0, rel=0.25), obs
        assert set(obs) == {pe_id("healthy/feat", "parse"), pe_id("tenant/spy", "parse")}

        # what healthy's learner takes of it: a sample at its own 10 tuples/s
        template = {"metadata": {"name": "feat", "namespace": "healthy"},
                    "spec": {"pes": [{"name": "src", "kind": "source"}, {"name": "parse"}, {"name": "out", "kind": "sink"}],
                             "streams": [{"from": "src", "to": "parse"}, {"from": "parse", "to": "out", "selectivity": 0.5}]}}
        scen, errors = crd.scenario_from_objects(
            [{"metadata": {"name": "n1"}, "status": {"allocatable": {"cpu": "4"}}}], [template],
            [{"metadata": {"name": "feat", "namespace": "healthy"}, "spec": {"templates": ["feat"]}}])
        assert not errors, errors
        plan = Plan(feasible=True, jobs=(JobDecision(job="healthy/feat", admitted=True, template="healthy/feat"),))
        running = [{**p, "spec": {"nodeName": "n1", "containers": [{"name": "pe", "resources": {"limits": {"cpu": "500m"}}}]},
                    "status": {"phase": "Running"}} for p in pods[:1]]
        now = [0.0]
        lrn = Learning(None, clock=lambda: now[0])
        policy = {"spec": {"observation": {"windowSeconds": window}, "learning": {"enabled": True}}}
        lrn.observe(scen, plan, [template], running, policy, obs)
        now[0] = 60.0
        assert lrn.observe(scen, plan, [template], running, policy, obs) == 1
        node = lrn.learner.models[template_signatures(template)["parse"].key]
        assert [s.r_i for s in node.samples] == [pytest.approx(10.0, rel=0.25)]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        for x in (honest, spy):
            x.server.shutdown()
        shutil.rmtree(work, ignore_errors=True)
