"""A PE pod kube-scheduler cannot place is surfaced in its StreamJob's status (issue 48, item 4).

Issue 48 saw it with the README's first command: the local scheduler calls the extender on another
port than the one `kubesoda run` served, every PE pod stayed Pending with FailedScheduling
("connection refused"), and the StreamJob stayed ``Admitted`` with no hint. Here the operator runs
without its extender (``--extender-port 0``), as a chart install whose extender is down would: the
job's condition ``Scheduled`` is False, reason ``FailedScheduling``, naming a pod and the scheduler's
message, with one Warning Event; once an extender serves the scheduler's port the pods are placed and
the job runs.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest
from live import ROOT, Operator, job, running_as_planned, start_operator


@pytest.fixture
def operator_without_extender(kubectl: Any, extender_port: int, tmp_path: Any) -> Iterator[Operator]:
    with socket.socket() as s:  # nothing may serve the scheduler's extender port: another module's operator stopped
        assert s.connect_ex(("127.0.0.1", extender_port)) != 0, f"something serves the extender port {extender_port}"
    proc = start_operator(kubectl, 0, log=str(tmp_path / "operator.log"))
    yield proc
    proc.stop()


def _scheduled(st: dict[str, Any]) -> dict[str, Any] | None:
    return next((c for c in st.get("conditions") or [] if c.get("type") == "Scheduled"), None)


def test_unschedulable_pod_named_in_job_status_until_it_runs(operator_without_extender, kube, kubectl, namespace, wait_for, tmp_path,
                                                             extender_port):
    kubectl("apply", "-n", namespace, "-f", str(ROOT / "examples" / "small-pipeline"))

    def failing() -> dict[str, Any] | None:
        st = job(kube, namespace, "clicks").get("status") or {}
        c = _scheduled(st)
        return st if c and c["status"] == "False" else None

    st = wait_for(failing, timeout=90, what="clicks with Scheduled False")
    c = _scheduled(st)
    assert st["phase"] == "Admitted" and c is not None and c["reason"] == "FailedScheduling"
    planned = {i["pod"] for pe in st["pes"] for i in pe["instances"]}
    named = c["message"].split(":", 1)[0].removeprefix("pod ")
    assert named in planned, (c["message"], planned)
    # the scheduler's own words, as the pod's PodScheduled condition has them
    pod = kube.core.read_namespaced_pod(named, namespace)
    cond = next(x for x in pod.status.conditions if x.type == "PodScheduled")
    assert cond.status == "False" and cond.message and cond.message[:80] in c["message"], (cond.message, c["message"])
    running = next(x for x in st["conditions"] if x["type"] == "Running")
    assert running["status"] == "False" and running["reason"] == "FailedScheduling"
    events = [e for e in kube.core.list_namespaced_event(namespace).items
              if e.involved_object.name == "clicks" and e.reason == "FailedScheduling"]
    assert len(events) == 1 and events[0].type == "Warning" and named in events[0].message

    # an extender on the scheduler's port: the pods are placed, the job runs, the condition is gone
    ext = Operator("extender", "--port", str(extender_port), log=str(tmp_path / "extender.log"))
    ext.start()
    try:
        wait_for(lambda: running_as_planned(kube, namespace, "clicks"), timeout=90, what="clicks Running once the extender serves")
        assert _scheduled(job(kube, namespace, "clicks")["status"]) is None
        events = [e for e in kube.core.list_namespaced_event(namespace).items
                  if e.involved_object.name == "clicks" and e.reason == "FailedScheduling"]
        assert len(events) == 1  # one Warning for the episode, not one per scheduler retry
    finally:
        ext.stop()
