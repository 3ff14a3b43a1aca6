"""apply's pure parts: CPU rounding that always fits, valid deterministic names, retries, no-op status writes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kubernetes.client.rest import ApiException

from soda_operator.kube import api as kapi
from soda_operator.soda import apply

ROOT = Path(__file__).resolve().parents[1]

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


@settings(max_examples=300)
@given(st.lists(st.floats(0.0001, 1.0), min_size=1, max_size=40), st.sampled_from([1, 2, 4, 7.5, 8, 16, 96]))
def test_instances_planned_on_a_node_always_fit_it(weights, cores):
    """Fractions summing to <= 1 on a node never ask for more millicores than it has (the rounding
    bug the LSD run found left 12 pods Pending on "Insufficient cpu")."""
    total = sum(weights)
    fractions = [w / total for w in weights] if total > 1 else weights
    asked = sum(apply.millicores(f, cores) for f in fractions)
    below_1m = sum(f * cores * 1000 < 1 for f in fractions)  # these get the 1m floor: at most 1m over each
    assert asked <= cores * 1000 + below_1m


@given(st.text(min_size=1, max_size=80), st.text(min_size=1, max_size=80), st.text(min_size=1, max_size=80))
def test_pod_names_are_valid_and_deterministic(job, pe, node):
    name = apply.pod_name(job, pe, node)
    assert len(name) <= 63 and DNS_LABEL.match(name), name
    assert name == apply.pod_name(job, pe, node)


def test_pod_names_differ_per_node():
    assert apply.pod_name("j", "p", "node-a") != apply.pod_name("j", "p", "node-b")


def failing(codes: list[int]):
    calls = []

    def fn() -> str:
        calls.append(1)
        if len(calls) <= len(codes):
            raise ApiException(status=codes[len(calls) - 1])
        return "ok"

    return fn, calls


def test_retry_rides_out_transient_errors(monkeypatch):
    monkeypatch.setattr(kapi.time, "sleep", lambda s: None)
    fn, calls = failing([503, 429, 500])
    assert kapi.retry(fn, "x") == "ok" and len(calls) == 4


def test_retry_retries_conflicts_only_when_asked(monkeypatch):
    monkeypatch.setattr(kapi.time, "sleep", lambda s: None)
    fn, calls = failing([409])
    with pytest.raises(ApiException):
        kapi.retry(fn, "x")
    assert len(calls) == 1
    fn, calls = failing([409, 409])
    assert kapi.retry(fn, "x", codes=kapi.TRANSIENT + (409,)) == "ok" and len(calls) == 3


@pytest.mark.parametrize("code", [400, 403, 404, 422])
def test_retry_never_retries_permanent_errors(monkeypatch, code):
    monkeypatch.setattr(kapi.time, "sleep", lambda s: None)
    fn, calls = failing([code])
    with pytest.raises(ApiException) as e:
        kapi.retry(fn, "x", codes=kapi.TRANSIENT + (409,))
    assert e.value.status == code and len(calls) == 1


def test_retry_gives_up_after_its_attempts(monkeypatch):
    slept = []
    monkeypatch.setattr(kapi.time, "sleep", slept.append)
    fn, calls = failing([503] * 10)
    with pytest.raises(ApiException):
        kapi.retry(fn, "x", attempts=4)
    assert len(calls) == 4 and slept == [0.2, 0.4, 0.8]  # exponential backoff


def test_status_written_only_when_a_merge_patch_would_change_it():
    old = {"phase": "Running", "reason": "Admitted", "pes": [{"name": "a", "instances": []}], "extra": 1}
    assert not apply.status_changed(old, {"phase": "Running", "pes": [{"name": "a", "instances": []}]})
    assert apply.status_changed(old, {"phase": "Degraded"})
    assert apply.status_changed(old, {"pes": [{"name": "a", "instances": [{"node": "n"}]}]})
    assert apply.status_changed(None, {"phase": "Pending"})


def test_pe_outputs_name_each_consumer_service_and_importer():
    """KUBESODA_OUTPUTS (docs/pe-metrics.md): a template stream to its consumer's headless Service,
    an export to each admitted importer's PE, with the stream labels the observation reads."""
    from soda_operator import manifests
    from soda_operator.soda.crd import scenario_from_objects
    from soda_operator.soda.desired import outputs

    m = manifests.load([str(ROOT / "examples" / "glued")])
    scen, errors = scenario_from_objects(m.nodes, m.templates, m.jobs, m.policy)
    assert not errors
    tmpl = {t["metadata"]["name"]: t for t in m.templates}
    both = {"default/features", "default/alerts"}
    assert outputs(scen, "default/features", tmpl["features"], "read", both) == "read->featurize=features-featurize.default.svc:9000"
    assert outputs(scen, "default/features", tmpl["features"], "featurize", both) == "import:default/features/features=alerts-model.default.svc:9000"
    assert outputs(scen, "default/features", tmpl["features"], "featurize", {"default/features"}) == ""  # no admitted importer
    assert outputs(scen, "default/alerts", tmpl["alerts"], "notify", both) == ""  # a sink sends nowhere


@pytest.mark.parametrize(("example", "source"), [("glued", "features-read.default.svc"), ("small-pipeline", "clicks-ingest.default.svc")])
def test_services_are_exactly_the_names_producers_resolve(example, source):
    """A headless Service for every host some admitted PE's KUBESODA_OUTPUTS names (a stream's
    consumer, an importer's PE) and for nothing else: a source has none."""
    from soda_operator import manifests
    from soda_operator.soda import desired
    from soda_operator.soda.crd import scenario_from_objects
    from soda_operator.soda.state import Snapshot
    from soda_optimizer import pipeline

    m = manifests.load([str(ROOT / "examples" / example), str(ROOT / "examples" / "nodes" / "small-8.yaml")])
    scen, errors = scenario_from_objects(m.nodes, m.templates, m.jobs, m.policy)
    assert not errors and m.nodes
    plan = pipeline.run(scen, 5)
    snap = Snapshot(nodes=m.nodes, templates=m.templates, jobs=m.jobs, policy=m.policy, pods=[])
    got = {apply.service_host(ns, j, pe) for ns, j, pe, _ in desired.services(plan, snap, scen)}
    named = {out.split("=", 1)[1].rsplit(":", 1)[0] for i in desired.instances(plan, snap, scen) for out in i.outputs.split(",") if out}
    assert named and got == named and source not in got
