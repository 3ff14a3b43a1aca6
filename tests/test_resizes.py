"""Refused and pending resizes are known (issue 46): the per-pod backoff, the fraction in force read
back from the pod (the planner's previous state and the job's status), the Resized condition. The
refusal by a real API server is e2e/test_faults.py's part."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from soda_operator.soda import crd, resizes


class Clock:
    t = 0.0

    def __call__(self) -> float:
        return self.t


@given(st.lists(st.floats(0, 400), max_size=30))
def test_backoff_doubles_to_its_cap_and_a_new_target_goes_at_once(waits):
    clock = Clock()
    b = resizes.Backoff(clock)
    key = ("ns", "p")
    assert b.due(key, 500)
    assert b.refuse(key, "ns/j", 500, "422 Invalid: denied")  # the first refusal of this target: logged, an Event
    sent, last = 1, 0.0
    for w in waits:
        clock.t += w
        if b.due(key, 500):
            gap = clock.t - last
            expected = min(resizes.CAP_S, resizes.BASE_S * 2 ** (sent - 1))
            assert gap >= expected - 1e-9
            assert not b.refuse(key, "ns/j", 500, "again")
            sent, last = sent + 1, clock.t
        assert b.due(key, 400)  # another CPU: not held back
    b.done(key)
    assert b.due(key, 500) and not b.refused


def _pod(limit: str, actual: str | None = None, cond: str | None = None, reason: str = "Deferred") -> dict:
    p = {"metadata": {"namespace": "ns", "name": "j-a-1", "labels": {crd.LABEL_JOB: "j", crd.LABEL_PE: "a"},
                      "annotations": {crd.ANN_NODE: "n1", crd.ANN_FRACTION: "0.5"}},
         "spec": {"nodeName": "n1", "containers": [{"name": "pe", "resources": {"limits": {"cpu": limit}}}]},
         "status": {"phase": "Running", "conditions": [], "containerStatuses": [{"name": "pe"}]}}
    if actual:
        p["status"]["containerStatuses"][0]["resources"] = {"limits": {"cpu": actual}}
    if cond:
        p["status"]["conditions"].append({"type": cond, "status": "True", "reason": reason, "message": "Node didn't have enough capacity"})
    return p


def test_the_planner_counts_what_a_pending_pod_holds():
    # asked 2 cores (fraction 0.5 of 4), the kubelet deferred it: the pod holds 1 core
    prev = crd.previous_from([], [_pod("2", "1", "PodResizePending")])
    assert prev.fractions["ns/j:a"]["n1"] == 0.25
    # done: as annotated
    assert crd.previous_from([], [_pod("2", "2")]).fractions["ns/j:a"]["n1"] == 0.5
    assert resizes.pending(_pod("2", "1", "PodResizePending", "Infeasible")) == ("Infeasible", "Node didn't have enough capacity")
    assert resizes.in_force(_pod("2", "1")) == 1000 and resizes.in_force(_pod("2")) == 2000


def _status() -> dict:
    return {"phase": "Running", "conditions": [{"type": "Running", "status": "True"}],
            "pes": [{"name": "a", "instances": [{"node": "n1", "fraction": 0.5, "pod": "j-a-1"}, {"node": "n2", "fraction": 0.5, "pod": "j-a-2"}]}]}


def test_status_reports_the_fraction_in_force_and_the_condition():
    b = resizes.Backoff(Clock())
    b.refuse(("ns", "j-a-1"), "ns/j", 2000, "422 Invalid: resize denied")
    found = resizes.problems(b, [_pod("1")])
    assert found["ns/j"]["j-a-1"]["reason"] == "Refused"
    st = resizes.with_resizes(_status(), {}, found["ns/j"], {"n1": 4.0, "n2": 4.0}, 3)
    inst = st["pes"][0]["instances"]
    assert inst[0]["fraction"] == 0.25 and inst[1]["fraction"] == 0.5  # in force: 1 core of 4, the other as planned
    cond = next(c for c in st["conditions"] if c["type"] == "Resized")
    assert cond["status"] == "False" and cond["reason"] == "ResizeRefused" and "j-a-1" in cond["message"] and "denied" in cond["message"]
    # resolved: True once, for a job that had it; a job that never had a problem gets nothing
    again = resizes.with_resizes(_status(), st, None, {"n1": 4.0}, 3)
    assert next(c for c in again["conditions"] if c["type"] == "Resized")["reason"] == "AsPlanned"
    assert all(c["type"] != "Resized" for c in resizes.with_resizes(_status(), {}, None, {}, 3)["conditions"])
    # the pod is gone: its record too
    resizes.problems(b, [])
    assert not b.refused
