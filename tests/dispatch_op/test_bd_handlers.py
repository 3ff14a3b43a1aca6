"""The dispatch timer (operator/soda_operator/dispatch/handlers.py) driven with plain indexes and a recording API
client: what it writes, the status it patches, and the Events it posts through kube.events (their bodies built in
full); a refused spec gets condition Dispatching False / InvalidSpec naming the field and one Warning Event."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import kopf
from bd_fixtures import bd_body, job_body, node_body, pod_body
from fake_core import RecordingCore

from soda_operator.dispatch import handlers
from soda_operator.memo import Memo


def tick(bd: dict[str, Any], memo: Memo, jobs: list[dict[str, Any]], pods: list[dict[str, Any]],
         nodes: list[dict[str, Any]]) -> kopf.Patch:
    patch = kopf.Patch()
    ix = {
        "dispatch_jobs": {("ns", "default"): jobs},
        "dispatch_pods": {("ns", j["metadata"]["name"]): [p for p in pods if p["metadata"]["ownerReferences"][0]["name"] == j["metadata"]["name"]]
                          for j in jobs},
        "kubesoda_nodes": {n["metadata"]["name"]: [n] for n in nodes},
        "foreign_pods": {}, "kubesoda_pods": {},
    }
    asyncio.run(handlers.dispatch_tick(namespace="ns", name=bd["metadata"]["name"], spec=bd["spec"], status=bd.get("status") or {},
                                       memo=memo, patch=patch, body=bd, **ix))
    return patch


def memo_with(core: RecordingCore) -> Memo:
    return Memo(loops=SimpleNamespace(core=core))  # type: ignore[arg-type]


def scene() -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    jobs = [job_body("j", 2, "600", completions=2)]
    jobs[0].update(apiVersion="batch/v1", kind="Job")  # as dispatch_jobs indexes it
    jobs[0]["metadata"]["uid"] = "uid-job"
    return jobs, [pod_body(f"j-{i}", "j", i) for i in range(2)], [node_body("n1", cpu="4")]


def test_a_decision_is_written_and_its_events_posted() -> None:
    core = RecordingCore()
    jobs, pods, nodes = scene()
    patch = tick(bd_body(), memo_with(core), jobs, pods, nodes)
    assert sorted(n for n, b in core.patches if isinstance(b, dict)) == ["j-0", "j-1"]
    assert [b for n, b in core.patches if n == "j-0"][1] == [{"op": "replace", "path": "/spec/schedulingGates", "value": []}]
    st = patch.status
    assert st["state"] == "dispatching" and st["released"] == 2 and st["slots"] == 4 and st["slotCPU"] == 1.0
    assert st["policy"] == "deadline+fill-deadline" and st["jobs"][0]["running"] == 2
    cond, bounded = st["conditions"]
    assert (cond["type"], cond["status"], cond["reason"], cond["observedGeneration"]) == ("Dispatching", "True", "Dispatching", 1)
    assert (bounded["type"], bounded["status"], bounded["reason"]) == ("WithinBudget", "True", "WithinBudget")
    on_bd, on_job = core.bodies()
    assert on_bd["involvedObject"] == {"apiVersion": "kubesoda.io/v1alpha1", "kind": "BatchDispatch", "name": "default", "namespace": "ns",
                                       "uid": "uid-default"}
    assert (on_bd["reason"], on_bd["type"], on_bd["message"]) == ("Dispatched", "Normal", "2 task(s) released (deadline+fill-deadline): n1 x2")
    assert on_job["involvedObject"] == {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "namespace": "ns", "uid": "uid-job"}
    assert (on_job["reason"], on_job["message"]) == ("Dispatched", "2 task(s) released by BatchDispatch default: n1 x2")
    for ev in core.bodies():
        assert ev["metadata"]["namespace"] == "ns" and ev["source"] == {"component": "kubesoda"} and ev["count"] == 1
        assert ev["firstTimestamp"] == ev["lastTimestamp"]


def test_lost_tasks_are_deleted_with_a_warning() -> None:
    core = RecordingCore()
    jobs, _, _ = scene()
    pods = [pod_body("j-0", "j", 0, gate=False, node="gone", phase="Running")]
    patch = tick(bd_body(), memo_with(core), jobs, pods, [node_body("n1")])
    assert core.deleted == ["j-0"] and patch.status["redispatched"] == 1
    assert [(e["reason"], e["type"]) for e in core.bodies()] == [("Redispatch", "Warning")]


def test_a_deadline_at_risk_is_said_once() -> None:
    core = RecordingCore()
    jobs, pods, nodes = scene()
    ann = jobs[0]["metadata"]["annotations"]
    ann["kubesoda.io/deadline"] = datetime.fromtimestamp(time.time() + 5, tz=UTC).isoformat()
    ann["kubesoda.io/task-work"] = "10"  # 2 tasks x 10 units on 2 slots of speed 1: 10 s, past the deadline
    memo = memo_with(core)
    patch = tick(bd_body(), memo, jobs, pods, nodes)
    assert patch.status["jobs"][0]["meetsDeadline"] is False
    risk = [(e["type"], e["involvedObject"]["kind"]) for e in core.bodies() if e["reason"] == "DeadlineAtRisk"]
    assert risk == [("Warning", "BatchDispatch"), ("Warning", "Job")]
    memo.dispatch.last.clear()  # due again
    tick(bd_body(), memo, jobs, pods, nodes)
    assert sum(e["reason"] == "DeadlineAtRisk" for e in core.bodies()) == 2


def test_invalid_spec_gets_the_field_a_condition_and_one_warning() -> None:
    """Before: ``slotCPU: abc`` raised ValueError out of the timer on every tick (no status, no Event);
    ``intervalSeconds: 0`` was taken as it is. Now both are refused, naming the field."""
    for field, value, says in (("slotCPU", "abc", "spec.slotCPU: 'abc' is not a CPU quantity"),
                               ("intervalSeconds", 0, "spec.intervalSeconds: Input should be greater than or equal to 1 (got 0)")):
        core = RecordingCore()
        jobs, pods, nodes = scene()
        bd = bd_body(**{field: value})
        memo = memo_with(core)
        patch = tick(bd, memo, jobs, pods, nodes)
        assert core.patches == [] and core.deleted == []  # nothing dispatched
        st = dict(patch.status)
        assert st["state"] == "invalid" and st["message"] == says
        (cond,) = st["conditions"]
        assert (cond["type"], cond["status"], cond["reason"], cond["message"]) == ("Dispatching", "False", "InvalidSpec", says)
        (ev,) = core.bodies()
        assert (ev["reason"], ev["type"], ev["message"], ev["involvedObject"]["kind"]) == ("InvalidSpec", "Warning", says, "BatchDispatch")
        # the next tick sees the refusal in the status: no write, no second Event
        bd["status"] = st
        again = tick(bd, memo, jobs, pods, nodes)
        assert not again and len(core.bodies()) == 1
        # fixed: the next tick dispatches, and the condition turns True
        fixed = bd_body()
        fixed["status"] = st
        patch = tick(fixed, memo_with(core), jobs, pods, nodes)
        assert patch.status["state"] == "dispatching" and patch.status["conditions"][0]["status"] == "True"
