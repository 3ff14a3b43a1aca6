"""Names that become labels (issue 45): a StreamJob's name may have 253 characters, a label value 63.
Every label kubesoda writes is valid, and everything that reads the job back from a pod or Service
(the previous placement, the Service's selector, the pods' addressing, ``kubesoda top``) finds
the full name. Plus: a refused create is the job's status and one Event, not a log line per epoch."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from soda_operator import top
from soda_operator.kube import pods
from soda_operator.soda import apply, crd, status
from soda_optimizer.plan import JobDecision, PEPlan, Plan

# what the API server takes (k8s.io/apimachinery validation: IsValidLabelValue, IsDNS1123Subdomain)
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")

segment = st.from_regex(r"\A[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?\Z")
job_names = st.lists(segment, min_size=1, max_size=14).map(".".join).filter(lambda s: len(s) <= 253 and SUBDOMAIN.match(s) is not None)
pe_names = st.from_regex(r"\A[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?\Z")


def _inst(job: str, pe: str = "p", node: str = "n1") -> apply.Instance:
    owner = {"metadata": {"name": job, "namespace": "ns", "uid": "u"}}
    return apply.Instance("ns", job, pe, node, 0.5, 4.0, (node,), {}, owner)


def _valid_labels(md: dict) -> None:
    for k, v in (md.get("labels") or {}).items():
        assert len(v) <= 63 and LABEL_VALUE.match(v), (k, v)


@settings(max_examples=300, deadline=None)
@given(job_names, job_names, pe_names)
def test_every_job_name_makes_valid_labels_that_read_back(a, b, pe):
    body = apply.pod_body(_inst(a, pe))
    md = body["metadata"]
    _valid_labels(md)
    assert len(md["name"]) <= 63 and DNS_LABEL.match(md["name"])
    assert pods.job_of(md) == a and apply.addressed(body)  # not replaced every epoch as another job's pod
    svc = apply.service_body("ns", a, {"metadata": {"name": a, "uid": "u"}})
    _valid_labels(svc["metadata"])
    assert pods.job_of(svc["metadata"]) == a
    assert all(md["labels"].get(k) == v for k, v in svc["spec"]["selector"].items())  # the Service selects the job's pods
    if len(a) <= 63:
        assert md["labels"][pods.LABEL_JOB] == a and pods.ANN_JOB not in md["annotations"]  # short names as before
    if a != b:
        assert pods.job_label(a) != pods.job_label(b)  # a Service never selects another job's pods
        assert apply.pod_name(a, pe, "n1") != apply.pod_name(b, pe, "n1") or f"{a}-{pe}" == f"{b}-{pe}"


def test_two_long_names_with_one_prefix_are_two_jobs():
    a, b = "x" * 200 + "a", "x" * 200 + "b"
    pa, pb = apply.pod_body(_inst(a)), apply.pod_body(_inst(b))
    assert pa["metadata"]["name"] != pb["metadata"]["name"]
    assert pa["metadata"]["labels"][pods.LABEL_JOB] != pb["metadata"]["labels"][pods.LABEL_JOB]
    # the previous placement of each job, read back from its pods
    for p, f in ((pa, "0.25"), (pb, "0.5")):
        p["metadata"]["annotations"][crd.ANN_FRACTION] = f
    prev = crd.previous_from([], [pa, pb])
    assert prev.fractions == {f"ns/{a}:p": {"n1": 0.25}, f"ns/{b}:p": {"n1": 0.5}}
    # kubesoda top counts each job's pods under its own name
    jobs = [{"metadata": {"namespace": "ns", "name": n}, "status": {"phase": "Running"}} for n in (a, b)]
    job_rows, _ = top.rows(jobs, [pa, pb], [])
    assert len(job_rows) == 2 and [r[5] for r in job_rows] == ["1", "1"]


def test_a_forged_annotation_does_not_rename_a_pod():
    md = {"labels": {pods.LABEL_JOB: "mine"}, "annotations": {pods.ANN_JOB: "someone-else"}}
    assert pods.job_of(md) == "mine"


def _plan() -> Plan:
    return Plan(feasible=True, jobs=(JobDecision(job="ns/j", admitted=True, template="ns/t", rank=1, revised_rank=1, importance=1.0, mips=500.0),),
                pes=(PEPlan(pe="ns/j:p", job="ns/j", name="p", goal_mips=500.0, macro_goal_mips=500.0, candidates=("n1",), fractions={"n1": 0.5}),))


def test_a_refused_create_is_the_jobs_status_and_one_event():
    inst = {"p": [{"node": "n1", "fraction": 0.5, "pod": "j-p-1"}]}
    ok = status.planned(_plan(), "ns/j", 1, inst, {"j-p-1": None})
    bad = status.planned(_plan(), "ns/j", 1, inst, {}, create_failure="pod j-p-1: 422 Unprocessable Entity: metadata.labels: Invalid value")
    assert ok["phase"] == "Admitted"
    assert bad["phase"] == "Degraded" and bad["reason"] == "CreateFailed" and "422" in bad["message"]
    running = next(c for c in bad["conditions"] if c["type"] == "Running")
    assert running["status"] == "False" and running["reason"] == "CreateFailed" and "422" in running["message"]
    assert status.event(ok, bad) == ("Degraded", bad["message"], "Warning")
    assert status.event(bad, dict(bad)) is None  # the next epoch, same refusal: no second Event


def test_a_refused_create_is_logged_once_per_reason(caplog):
    first = apply._failures({}, [(("ns", "j"), "pod a: 422 x"), (("ns", "j"), "pod b: 422 x")], "create pod")
    assert first == {("ns", "j"): "pod a: 422 x"}
    again = apply._failures(first, [(("ns", "j"), "pod a: 422 x")], "create pod")
    assert again == first
    assert sum("create pod of StreamJob ns/j failed" in r.getMessage() for r in caplog.records) == 1
    assert apply._failures(again, [], "create pod") == {}  # created at last: the status goes back


def test_an_owner_that_is_not_bound_is_a_condition_and_one_event():
    st1 = status.planned(_plan(), "ns/j", 1, {}, None, owner=("ns", "vip"))
    assert st1["owner"] == "ns" and st1["ownerIgnored"] == "vip"
    cond = next(c for c in st1["conditions"] if c["type"] == "OwnerBound")
    assert cond["status"] == "False" and cond["reason"] == "OwnerNotBound" and "vip" in cond["message"]
    assert status.owner_event(None, st1)[0] == "OwnerNotBound"
    assert status.owner_event(st1, dict(st1)) is None
    assert any(c["type"] == "OwnerBound" for c in status.running(st1, 1)["conditions"])  # kept when its pods run
    fine = status.planned(_plan(), "ns/j", 1, {}, None, owner=("ns", ""))
    assert fine["ownerIgnored"] is None and not any(c["type"] == "OwnerBound" for c in fine["conditions"])
