"""Observation, live: the fluid data plane (``kubesoda simulate``) plays the PEs on the KWOK nodes,
the real Prometheus of the local control plane scrapes it, and the operator (``--prometheus-url``)
writes what it observed into the job's status next to the projection.

- a job applied with kubectl shows observed rates and an observed importance close to the
  projection (the simulator's true resource functions are the declared ones);
- the rack uplink into the sink's rack made narrow (the SchedulingPolicy's link capacity, which
  the data plane obeys and the projection does not model): the observed importance drops below the
  projection, the status says so (``MeetsProjection`` False, ``BelowProjection``) with an Event;
- without ``--prometheus-url`` the status says there is no observation source.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from live import Simulator, job, start_operator

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
