"""A PE pod kube-scheduler cannot place, in its StreamJob's status (issue 48, item 4): the pod's
``PodScheduled`` condition read back (:func:`.indexes.unscheduled`), the job's ``Scheduled``
condition and its one Warning per episode (:func:`.status.with_scheduling`, :func:`.status.scheduling_event`).
The live path (the real scheduler, the extender away) is e2e/test_scheduling_status.py."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from soda_operator.soda import indexes, status

PODS = st.dictionaries(st.sampled_from([f"j-pe{i}-abc" for i in range(6)]), st.text(min_size=0, max_size=900), max_size=6)
PHASES = st.sampled_from(["Admitted", "Degraded", "Running", "Rejected", "Pending"])


def _pod(phase: str | None, node: str | None, cond: dict | None) -> dict:
    return {"metadata": {"name": "p"}, "spec": {"nodeName": node} if node else {},
            "status": {**({"phase": phase} if phase else {}), "conditions": [cond] if cond else []}}


def test_unscheduled_reads_the_scheduler_condition_of_pending_pods_only():
    refused = {"type": "PodScheduled", "status": "False", "reason": "SchedulerError",
               "message": 'Post "https://127.0.0.1:27006/filter": dial tcp 127.0.0.1:27006: connect: connection refused'}
    assert indexes.unscheduled(_pod("Pending", None, refused)) == f"SchedulerError: {refused['message']}"
    assert indexes.unscheduled(_pod(None, None, dict(refused, reason="Unschedulable", message="0/8 nodes are available"))) == \
        "Unschedulable: 0/8 nodes are available"
    assert indexes.unscheduled(_pod("Pending", None, dict(refused, status="True"))) is None
    assert indexes.unscheduled(_pod("Pending", "n1", refused)) is None  # bound since: the condition is stale
    assert indexes.unscheduled(_pod("Running", None, refused)) is None
    assert indexes.unscheduled(_pod("Pending", None, None)) is None


def _job(phase: str) -> dict:
    return status._finish({"phase": phase, "reason": "Admitted" if phase != "Rejected" else "NoRoom", "message": ""}, 3)


def _cond(st_: dict) -> dict | None:
    return next((c for c in st_.get("conditions") or [] if c["type"] == status.SCHEDULED), None)


@given(PHASES, PODS, st.booleans())
def test_condition_false_exactly_while_a_pod_of_an_admitted_job_fails(phase, failures, had):
    old = status.with_scheduling(_job("Admitted"), None, {"x": "Unschedulable: earlier"}, 3) if had else _job(phase)
    new = status.with_scheduling(_job(phase), old, failures, 3)
    c = _cond(new)
    failing = bool(failures) and phase in ("Admitted", "Degraded")
    if failing:
        first = sorted(failures)[0]
        assert c is not None and c["status"] == "False" and c["reason"] == "FailedScheduling"
        assert c["message"].startswith(f"pod {first}: {failures[first][:status.MAX_SCHEDULER_MESSAGE]}")
        assert len(c["message"]) <= status.MAX_SCHEDULER_MESSAGE + 200  # bounded whatever the scheduler wrote
        assert (f"{len(failures) - 1} more" in c["message"]) == (len(failures) > 1)
        run = next(x for x in new["conditions"] if x["type"] == "Running")
        assert run["status"] == "False" and (run["reason"], run["message"]) == ("FailedScheduling", c["message"])
    elif had and phase in ("Admitted", "Degraded"):
        assert c is not None and c["status"] == "True"  # cleared, and says so
    else:
        assert c is None  # never had a problem: nothing added; or it runs (or was rejected): gone
        assert new == _job(phase) or had
    assert c is None or c["observedGeneration"] == 3


@given(st.lists(PODS, min_size=1, max_size=8))
def test_one_warning_per_episode_not_per_message(seq):
    st_, events = _job("Admitted"), []
    for failures in seq:
        new = status.with_scheduling(st_, st_, failures, 3)
        ev = status.scheduling_event(st_, new)
        if ev:
            events.append(ev)
        st_ = new
    # an episode: a run of non-empty failure maps; each starts exactly one Warning
    episodes = sum(1 for i, f in enumerate(seq) if f and (i == 0 or not seq[i - 1]))
    assert len(events) == episodes
    assert all(kind == "Warning" and reason == "FailedScheduling" and msg.startswith("pod ") for reason, msg, kind in events)


def test_running_drops_the_condition():
    failing = status.with_scheduling(_job("Admitted"), None, {"j-pe0-abc": "Unschedulable: 0/8 nodes"}, 3)
    assert _cond(failing) is not None
    assert _cond(status.running(failing, 3)) is None
    # a job the epoch finds Running while its last status said Scheduled (False or True): no condition kept
    assert _cond(status.with_scheduling(_job("Running"), failing, {}, 3)) is None
    assert _cond(status.with_scheduling(dict(_job("Running"), conditions=failing["conditions"]), failing, {}, 3)) is None
