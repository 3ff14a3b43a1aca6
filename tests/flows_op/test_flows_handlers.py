"""The flows' Kopf timers driven by hand with fake API clients (soda_operator.flows.handlers): a spec that cannot be
taken is reported in the condition with reason InvalidSpec and a Warning Event naming the field, once; a dropped
job's FlowDropped Event is built and created through the API (kube.events), not through Kopf's poster."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any

import kopf
from fake_core import RecordingCore

from soda_operator import schema
from soda_operator.flows import apply, handlers, jobs
from soda_operator.flows.members import Members
from soda_operator.memo import Memo


class Batch:
    """The BatchV1Api surface of a tick in this cluster; records the writes."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def create_namespaced_job(self, namespace: str, body: dict[str, Any]) -> None:
        self.calls.append(("create", body["metadata"]["name"]))

    def patch_namespaced_job(self, name: str, namespace: str, body: dict[str, Any]) -> None:
        self.calls.append(("patch", name))

    def delete_namespaced_job(self, name: str, namespace: str, **_: Any) -> None:
        self.calls.append(("delete", name))


def memo(core: RecordingCore) -> Memo:
    m = Memo(loops=SimpleNamespace(core=core))  # type: ignore[arg-type]
    m.flows.members = Members(core, namespace="ops")  # type: ignore[arg-type]
    return m


def jobflow(**over: Any) -> dict[str, Any]:
    sp = {"lifespanSeconds": 120, "epochSeconds": 60, "steps": [{"name": "a", "runSeconds": 6, "pools": ["here"],
                                                                "jobTemplate": {"spec": {"template": {"spec": {"containers": []}}}}}],
          "planner": {"evaluations": 5, "deadlineSeconds": 1}, **over}
    return schema.with_defaults({"apiVersion": "kubesoda.io/v1alpha1", "kind": "JobFlow",
                                 "metadata": {"name": "f", "namespace": "ns", "uid": "u-f", "generation": 2}, "spec": sp})


def flowpool(**over: Any) -> dict[str, Any]:
    return schema.with_defaults({"apiVersion": "kubesoda.io/v1alpha1", "kind": "FlowPool", "metadata": {"name": "here", "uid": "u-p", "generation": 1},
                                 "spec": {"nodeSelector": {"zone": "z0"}, "capacity": [3], **over}})


def flow_tick(m: Memo, body: dict[str, Any], status: dict[str, Any], pools: list[dict[str, Any]], local: list[dict[str, Any]]) -> kopf.Patch:
    patch = kopf.Patch()
    asyncio.run(handlers.flow_tick(namespace="ns", name="f", body=body, status=status, memo=m, patch=patch,  # type: ignore[arg-type]
                                   flow_objects={"all": [body]}, flow_pools={p["metadata"]["name"]: [p] for p in pools},
                                   flow_local_jobs={("ns", "f"): local}))
    return patch


def test_an_invalid_jobflow_is_reported_in_its_condition_and_one_warning_event():
    core = RecordingCore()
    m = memo(core)
    body = jobflow(epochSeconds=0.5)  # the old parser made it 1.0 and said nothing
    patch = flow_tick(m, body, {}, [flowpool()], [])
    st = patch["status"]
    assert st["state"] == "invalid" and st["message"].startswith("spec.epochSeconds: ")
    (cond,) = st["conditions"]
    assert (cond["type"], cond["status"], cond["reason"], cond["observedGeneration"]) == ("Routing", "False", "InvalidSpec", 2)
    assert "spec.epochSeconds" in cond["message"]
    ((ns, ev),) = core.events
    assert ns == "ns" and (ev["type"], ev["reason"]) == ("Warning", "InvalidSpec") and ev["message"].startswith("spec.epochSeconds: ")
    assert ev["involvedObject"] == {"apiVersion": "kubesoda.io/v1alpha1", "kind": "JobFlow", "name": "f", "namespace": "ns", "uid": "u-f"}
    # the next tick, the status already saying so: no second Event, nothing to write
    again = flow_tick(m, body, dict(st), [flowpool()], [])
    assert len(core.events) == 1 and not again.get("status")
    assert not m.flows.plans  # nothing was planned


def test_an_invalid_flowpool_is_reported_and_its_flows_wait():
    core = RecordingCore()
    m = memo(core)
    bad = flowpool(capacity=[3, -1])  # the old parser made it 0
    patch = kopf.Patch()
    asyncio.run(handlers.pool_tick(name="here", body=bad, status={}, memo=m, patch=patch))  # type: ignore[arg-type]
    (cond,) = patch["status"]["conditions"]
    assert (cond["type"], cond["status"], cond["reason"]) == ("Reachable", "False", "InvalidSpec") and cond["message"].startswith("spec.capacity[1]: ")
    assert patch["status"]["reachable"] is False
    ((ns, ev),) = core.events
    assert ns == "default" and ev["reason"] == "InvalidSpec" and ev["involvedObject"]["kind"] == "FlowPool"  # cluster-scoped: Events in default
    st = flow_tick(m, jobflow(), {}, [bad], [])["status"]
    assert st["state"] == "waiting" and st["message"].startswith("missing or invalid FlowPools: here (step ")


def test_a_dropped_job_gets_its_event_through_the_api(monkeypatch):
    core, batch = RecordingCore(), Batch()
    monkeypatch.setattr(handlers.client, "BatchV1Api", lambda *_: batch)
    m = memo(core)
    late = {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "old-s0", "namespace": "ns", "labels": {jobs.LABEL_FLOW: "f", jobs.LABEL_JOB: "old", jobs.LABEL_STEP: "0",
                                                                         jobs.LABEL_POOL: "here"},
                         "annotations": {jobs.ANN_ARRIVED: f"{time.time() - 1000:.3f}", jobs.ANN_EPOCH: "0"}},
            "spec": {"template": {}}, "status": {}}
    st = flow_tick(m, jobflow(), {}, [flowpool()], [late])["status"]
    assert ("delete", "old-s0") in batch.calls and st["totals"]["dropped"] == 1 and st["state"] == "routing"
    dropped = [ev for _, ev in core.events if ev["reason"] == "FlowDropped"]
    assert len(dropped) == 1 and dropped[0]["type"] == "Warning" and dropped[0]["message"] == "job old dropped at step 0: lifespan passed"
    assert dropped[0]["involvedObject"]["kind"] == "JobFlow" and dropped[0]["involvedObject"]["uid"] == "u-f"


def test_event_bodies():
    core = RecordingCore()
    apply.post_dropped(core, jobflow(), [(f"j{i}", 1, "step Job failed") for i in range(25)])  # type: ignore[arg-type]
    assert len(core.events) == apply.DROPPED_EVENTS
    ns, ev = core.events[0]
    assert ns == "ns" and ev["metadata"] == {"generateName": "f.", "namespace": "ns"} and ev["source"] == {"component": "kubesoda"}
    assert (ev["reason"], ev["type"], ev["message"], ev["count"]) == ("FlowDropped", "Warning", "job j0 dropped at step 1: step Job failed", 1)
