"""apply's pure parts: CPU rounding that always fits, valid deterministic names, retries, no-op status writes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from fake_core import RecordingCore, Response
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


_pe = st.fixed_dictionaries({"name": st.sampled_from("ab"), "goalMips": st.sampled_from([1.0, 2.0]),
                             "instances": st.lists(st.sampled_from(["n1", "n2"]), max_size=2)})
_status = st.dictionaries(st.sampled_from(["phase", "mips", "pes"]),
                          st.one_of(st.sampled_from(["Running", "Admitted", 1.0]), st.lists(_pe, max_size=2, unique_by=lambda p: p["name"])))


@settings(max_examples=300, deadline=None)
@given(_status, _status)
def test_the_changed_fields_name_what_a_status_write_changes(old, new):
    """Issue 53: the per-field count of job status writes names a field exactly when the write changes it."""
    fields = apply.changed_fields(old, new)
    assert bool(fields) == apply.status_changed(old, new)
    for k in new:
        moved = any(f == k or f.startswith(k + "[]") for f in fields)
        assert moved == (old.get(k) != new[k]), (k, fields)


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
    assert outputs(scen, "default/features", tmpl["features"], "read", both) == "read->featurize=featurize.features.default.svc:9000"
    assert outputs(scen, "default/features", tmpl["features"], "featurize", both) == "import:default/features/features=model.alerts.default.svc:9000"
    assert outputs(scen, "default/features", tmpl["features"], "featurize", {"default/features"}) == ""  # no admitted importer
    assert outputs(scen, "default/alerts", tmpl["alerts"], "notify", both) == ""  # a sink sends nowhere


@pytest.mark.parametrize(("example", "source_only"), [("glued", None), ("small-pipeline", None)])
def test_every_name_producers_resolve_is_a_pe_under_a_desired_service(example, source_only):
    """Each host some admitted PE's KUBESODA_OUTPUTS names, ``<pe>.<svc>.<ns>.svc``, is answered by
    cluster DNS: a desired headless Service ``svc`` in ``ns`` selects pods whose hostname is ``pe``
    and whose subdomain is ``svc`` (the pod bodies as the operator writes them), and the instances
    behind the name are exactly the PE's. One Service per job with a receiving PE, none other."""
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
    svcs = {(ns, apply.service_name(j)): apply.service_body(ns, j, owner) for ns, j, owner in desired.services(plan, snap, scen)}
    assert len(svcs) == len(desired.services(plan, snap, scen)) <= len(scen.jobs)  # one per job at most
    insts = desired.instances(plan, snap, scen)
    pods = [apply.pod_body(i) for i in insts]
    named = {out.split("=", 1)[1].rsplit(":", 1)[0] for i in insts for out in i.outputs.split(",") if out}
    assert named
    for host in named:
        pe_host, svc, ns, tail = host.split(".")
        assert tail == "svc" and (ns, svc) in svcs, host
        sel = svcs[(ns, svc)]["spec"]["selector"]
        behind = [p for p in pods if p["metadata"]["namespace"] == ns and p["spec"]["subdomain"] == svc
                  and p["spec"]["hostname"] == pe_host and sel.items() <= p["metadata"]["labels"].items()]
        assert behind, host
        assert len({p["metadata"]["labels"]["kubesoda.io/pe"] for p in behind}) == 1, host  # one PE per name
        pe = behind[0]["metadata"]["labels"]["kubesoda.io/pe"]
        assert len(behind) == sum(i.pe == pe and i.namespace == ns and apply.service_name(i.job) == svc for i in insts)
    # every Service is some producer's: no job of sources only gets one
    assert {(h.split(".")[2], h.split(".")[1]) for h in named} == set(svcs)


@given(st.text(min_size=1, max_size=300), st.text(min_size=1, max_size=300))
def test_service_and_hostname_labels_are_valid_and_distinct(a, b):
    """A job's Service name and a PE's hostname are DNS-1035 labels; a valid name is kept as it is;
    two names never map to one label (a sanitised name carries a hash of the original)."""
    la = apply.service_name(a)
    assert len(la) <= 63 and re.match(r"^[a-z]([-a-z0-9]*[a-z0-9])?$", la), la
    assert apply.pe_label(a) == la == apply.service_name(a)
    if re.fullmatch(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?", a):
        assert la == a
    if a != b:
        assert la != apply.service_name(b)


class ServiceCore(RecordingCore):
    """RecordingCore with the Service calls the applier makes."""

    def __init__(self) -> None:
        super().__init__()
        self.services: list[tuple[str, dict]] = []
        self.deleted_services: list[tuple[str, str]] = []

    def create_namespaced_service(self, namespace, body, **_):
        self.services.append((namespace, body))
        return Response()

    def delete_namespaced_service(self, name, namespace, **_):
        self.deleted_services.append((namespace, name))
        return Response()

    def create_namespaced_pod(self, namespace, body, **_):
        self.services.append((namespace, body))  # every create, in order
        return Response()

    def delete_namespaced_pod(self, name, namespace, **_):
        super().delete_namespaced_pod(name, namespace)
        return Response()

    def patch_namespaced_pod(self, name, namespace, body, **_):
        super().patch_namespaced_pod(name, namespace, body)
        return Response()


def _applier(core):
    from kubernetes import client

    a = apply.Applier(client.ApiClient(), workers=4)
    a.core = core
    return a


def test_upgrade_deletes_the_per_pe_services_and_creates_one_per_job():
    """On upgrade the per-PE Services an earlier version made (owned, labelled with the job) are
    deleted, the job's one Service created; a job not managed this epoch (quarantined) keeps its
    Services; a Service already there is not written again."""
    from soda_operator.kube import metrics

    def writes(kind):
        return metrics.WRITES.labels(kind)._value.get()

    owner = {"metadata": {"name": "clicks", "uid": "u1"}}
    existing = {("team", "clicks-parse"): "clicks", ("team", "clicks-score"): "clicks",
                ("team", "held-parse"): "held", ("other", "clicks-parse"): "clicks"}
    core = ServiceCore()
    before = writes("service_delete"), writes("service_create")
    counts = _applier(core).sync_services([("team", "clicks", owner)], existing, {("team", "clicks"), ("other", "x")})
    assert sorted(core.deleted_services) == [("team", "clicks-parse"), ("team", "clicks-score")]
    assert [(ns, b["metadata"]["name"], b["spec"]["selector"]) for ns, b in core.services] == [("team", "clicks", {"kubesoda.io/job": "clicks"})]
    assert core.services[0][1]["metadata"]["ownerReferences"][0]["uid"] == "u1"
    assert counts == {"service": 1, "service-delete": 2}
    assert (writes("service_delete"), writes("service_create")) == (before[0] + 2, before[1] + 1)
    # the next epoch: the job's Service is there, the old ones gone: nothing is written
    core2 = ServiceCore()
    now = {("team", "clicks"): "clicks", ("team", "held-parse"): "held", ("other", "clicks-parse"): "clicks"}
    assert _applier(core2).sync_services([("team", "clicks", owner)], now, {("team", "clicks")}) == {"service": 0, "service-delete": 0}
    assert core2.services == core2.deleted_services == []
    # job "clicks" had PE "score": its old Service "clicks-score" is named like a job "clicks-score";
    # that job's Service replaces it (deleted first, then created), never taken for its own
    core3 = ServiceCore()
    other = {"metadata": {"name": "clicks-score", "uid": "u2"}}
    got = _applier(core3).sync_services([("team", "clicks", owner), ("team", "clicks-score", other)],
                                        {("team", "clicks"): "clicks", ("team", "clicks-score"): "clicks"},
                                        {("team", "clicks"), ("team", "clicks-score")})
    assert core3.deleted_services == [("team", "clicks-score")]
    assert [(b["metadata"]["name"], b["spec"]["selector"]) for _, b in core3.services] == [("clicks-score", {"kubesoda.io/job": "clicks-score"})]
    assert got == {"service": 1, "service-delete": 1}


def test_upgrade_replaces_the_pods_of_the_per_pe_services():
    """A pod made before one Service per job (hostname = its name, subdomain ``<job>-<pe>``, both
    immutable) is deleted and created again with the new ones; a pod already addressed so is left
    alone (no write at all)."""
    owner = {"metadata": {"name": "clicks", "uid": "u1"}}
    old_inst = apply.Instance("team", "clicks", "parse", "n1", 0.25, 4.0, ("n1",), {}, owner, "parse->score=x:9000")
    new_inst = apply.Instance("team", "clicks", "score", "n2", 0.25, 4.0, ("n2",), {}, owner, "")
    old_pod = apply.pod_body(old_inst)
    old_pod["spec"].update(hostname=old_pod["metadata"]["name"], subdomain="clicks-parse")
    new_pod = apply.pod_body(new_inst)
    assert not apply.addressed(old_pod) and apply.addressed(new_pod)
    core = ServiceCore()
    counts = _applier(core).sync_pods([old_inst, new_inst], [old_pod, new_pod], {("team", "clicks")})
    assert core.deleted == [old_inst.name] and core.patches == []
    assert [(b["metadata"]["name"], b["spec"]["hostname"], b["spec"]["subdomain"]) for _, b in core.services] == [(old_inst.name, "parse", "clicks")]
    assert counts == {"delete": 1, "resize": 0, "create": 1}
