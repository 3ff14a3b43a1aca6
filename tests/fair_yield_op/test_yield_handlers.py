"""A YieldGroup's epoch timer (soda_operator.fair_yield.handlers.yield_epoch) driven with a fake
API client: its Events are posted through the API (kopf.info posted nothing at the operator's
posting level), and a refused spec gives the InvalidSpec condition and one Warning Event instead
of an epoch run with a clamped or defaulted value."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from unittest.mock import MagicMock

import kopf

from soda_operator.fair_yield import handlers
from soda_operator.fair_yield.tasks import GATE, LABEL
from soda_operator.memo import Memo
from soda_operator.schema import with_defaults

NODE = {"metadata": {"name": "n0"}, "status": {"allocatable": {"cpu": "4", "memory": "8Gi"},
                                                "conditions": [{"type": "Ready", "status": "True"}]}}


def group(**spec):
    return with_defaults({"apiVersion": "kubesoda.io/v1alpha1", "kind": "YieldGroup",
                          "metadata": {"name": "g", "namespace": "ns", "uid": "u-g", "generation": 3}, "spec": spec})


def gated(name, cpu="2", mem="1Gi"):
    res = {"cpu": cpu, "memory": mem}
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"u-{name}", "labels": {LABEL: "g"}},
            "spec": {"schedulingGates": [{"name": GATE}], "containers": [{"name": "c", "resources": {"requests": res, "limits": res}}]},
            "status": {"phase": "Pending"}}


def epoch(obj, core, status=None, memo=None, pods=None):
    """The status patch of one tick of the group ``obj`` with ``pods`` (two gated 2-core pods) on NODE."""
    memo = memo or Memo(loops=SimpleNamespace(core=core))  # type: ignore[arg-type]
    patch = kopf.Patch()
    asyncio.run(handlers.yield_epoch(
        namespace="ns", name="g", spec=obj["spec"], status=status or {}, memo=memo, patch=patch, body=obj,
        yield_pods={("ns", "g"): pods or [gated("a"), gated("b")]}, foreign_pods={}, kubesoda_pods={}, kubesoda_nodes={"n0": [NODE]}))
    return dict(patch.get("status") or {})


def posted(core):
    return [c.args[1] for c in core.create_namespaced_event.call_args_list]


def test_placed_event_is_posted_through_the_api():
    core = MagicMock()
    status = epoch(group(), core)
    assert core.patch_namespaced_pod.called  # placed: nodeSelector, then the gate removed
    (ev,) = posted(core)
    assert ev["reason"] == "Placed" and ev["type"] == "Normal" and ev["message"].startswith("2 pod(s) placed, 0 evicted")
    assert ev["involvedObject"] == {"apiVersion": "kubesoda.io/v1alpha1", "kind": "YieldGroup", "name": "g", "namespace": "ns", "uid": "u-g"}
    assert ev["metadata"]["namespace"] == "ns"
    (cond,) = status["conditions"]
    assert (cond["type"], cond["status"], cond["reason"], cond["observedGeneration"]) == ("Allocated", "True", "Allocated", 3)
    assert status["pods"] == 2 and status["minYield"] == 1.0


def test_infeasible_is_a_warning():
    core = MagicMock()
    status = epoch(group(), core, pods=[gated("a", mem="6Gi"), gated("b", mem="6Gi")])  # 12Gi on an 8Gi node
    assert [(e["reason"], e["type"]) for e in posted(core)] == [("Infeasible", "Warning")]
    assert status["conditions"][0]["reason"] == "Infeasible" and not core.patch_namespaced_pod.called


def test_invalid_spec_is_refused_with_the_field_not_clamped():
    """A negative integer budget passes the CRD's schema; it was read as 0 and the epoch ran."""
    core = MagicMock()
    obj = group(migrationBudget=-1)
    status = epoch(obj, core)
    assert not core.patch_namespaced_pod.called and not core.delete_namespaced_pod.called  # nothing planned
    (cond,) = status["conditions"]
    assert (cond["type"], cond["status"], cond["reason"]) == ("Allocated", "False", "InvalidSpec")
    assert cond["message"].startswith("spec.migrationBudget: ") and status["state"] == "invalid"
    (ev,) = posted(core)
    assert ev["type"] == "Warning" and ev["reason"] == "InvalidSpec" and ev["message"] == cond["message"]
    # the next tick with that status already written: no second Event, no patch
    again = epoch(obj, core, status=status)
    assert again == {} and len(posted(core)) == 1


def test_epoch_seconds_below_the_crds_minimum_is_refused():
    """epochSeconds 0 ran an epoch every tick."""
    core = MagicMock()
    status = epoch(group(epochSeconds=0), core)
    assert status["conditions"][0]["message"].startswith("spec.epochSeconds: ") and not core.patch_namespaced_pod.called


def test_an_epoch_waits_for_its_seconds():
    core = MagicMock()
    memo = Memo(loops=SimpleNamespace(core=core))  # type: ignore[arg-type]
    epoch(group(), core, memo=memo)
    calls = core.patch_namespaced_pod.call_count
    assert epoch(group(), core, memo=memo) == {} and core.patch_namespaced_pod.call_count == calls


def test_a_fixed_spec_is_planned_at_once():
    core = MagicMock()
    memo = Memo(loops=SimpleNamespace(core=core))  # type: ignore[arg-type]
    epoch(group(), core, memo=memo)
    refused = epoch(group(epochSeconds=0), core, memo=memo)
    assert refused["state"] == "invalid"
    fixed = epoch(group(), core, memo=memo, status=refused)
    assert fixed["state"] != "invalid" and fixed["conditions"][0]["reason"] != "InvalidSpec"


def test_a_blocked_move_is_reported_and_the_gauges_set():
    """A pod with a controller on a node that went away is evicted; a PDB refuses (429): the status
    names it, a Warning Event says so, the next epoch tries again; the group's gap is a metric."""
    from kubernetes.client.exceptions import ApiException

    from soda_operator.kube import metrics

    core = MagicMock()
    refused = ApiException(status=429, reason="Too Many Requests")
    refused.body = '{"message": "Cannot evict pod as it would violate the pod\'s disruption budget."}'
    core.create_namespaced_pod_eviction.side_effect = refused
    lost = gated("lost")
    lost["spec"].pop("schedulingGates")
    lost["spec"]["nodeName"] = "gone"
    lost["metadata"]["annotations"] = {"kubesoda.io/yield-node": "gone"}
    lost["metadata"]["ownerReferences"] = [{"uid": "rs", "controller": True, "kind": "ReplicaSet", "name": "rs"}]
    lost["status"]["phase"] = "Running"
    memo = Memo(loops=SimpleNamespace(core=core))  # type: ignore[arg-type]
    status = epoch(group(epochSeconds=1), core, memo=memo, pods=[gated("a"), lost])
    assert status["blockedMoves"] == [{"pod": "lost", "reason": "Cannot evict pod as it would violate the pod's disruption budget."}]
    assert status["lost"] == ["lost"] and status["algorithm"] == "anytime" and status["gap"] == 0.0 and status["bound"] == 1.0
    reasons = {e["reason"]: e for e in posted(core)}
    assert reasons["MoveBlocked"]["type"] == "Warning" and "lost: Cannot evict" in reasons["MoveBlocked"]["message"]
    assert reasons["NodeLost"]["type"] == "Warning" and set(reasons) == {"Placed", "MoveBlocked", "NodeLost"}
    labels = {"namespace": "ns", "group": "g"}
    assert metrics.YIELD_GAP.labels(**labels)._value.get() == 0.0 and metrics.YIELD_BOUND.labels(**labels)._value.get() == 1.0
    memo.fair_yield.last.clear()  # the next epoch, due: the move is tried again
    epoch(group(epochSeconds=1), core, memo=memo, pods=[gated("a"), lost])
    assert core.create_namespaced_pod_eviction.call_count == 2
