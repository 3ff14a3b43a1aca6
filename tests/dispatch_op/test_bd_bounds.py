"""A BatchDispatch's numbers are bounded and its decision is bounded in work and time (issue 45, rows "slotCPU: 1n"):
the CRD states a minimum and a maximum for every number (the table soda_optimizer.dispatch.limits holds), the
operator refuses what was stored before them, a node offers no more slots than it holds pods, the policy stops at the
decision's deadline and says so, and a hostile BatchDispatch in another namespace leaves a healthy one's decision
identical."""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import kopf
import yaml
from bd_fixtures import T0, bd_body, job_body, node_body, pod_body, spec_of
from fake_core import RecordingCore
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from soda_operator.dispatch import decide, handlers
from soda_operator.memo import Memo
from soda_optimizer import dispatch as dp
from soda_optimizer import systems
from soda_optimizer.dispatch import limits

CRD = Path(__file__).resolve().parents[2] / "crds" / "batchdispatches.yaml"


def crd_props() -> dict[str, Any]:
    doc = yaml.safe_load(CRD.read_text())
    return doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]  # type: ignore[no-any-return]


def test_every_number_has_the_tables_minimum_and_maximum() -> None:
    props = crd_props()
    numbers = {k for k, v in props.items() if v.get("type") in ("number", "integer")}
    assert numbers == set(limits.RANGES)
    for k in numbers:
        lo, hi = limits.RANGES[k]
        assert (props[k]["minimum"], props[k]["maximum"]) == (lo, hi), k
        assert bool(props[k].get("exclusiveMinimum")) == (k in limits.EXCLUSIVE_MINIMUM), k
    # slotCPU is a quantity: a CEL rule (kube >= 1.29's quantity library) holds it within MIN..MAX_SLOT_CPU
    (rule,) = props["slotCPU"]["x-kubernetes-validations"]
    assert "quantity('10m')" in rule["rule"] and "quantity('100k')" in rule["rule"]
    assert (limits.MIN_SLOT_CPU, limits.MAX_SLOT_CPU) == (0.01, 1e5)


def many_jobs(n: int, tasks: int, ns: str = "ns") -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    jobs, pods = [], []
    for j in range(n):
        b = job_body(f"j{j}", j % 5, "600", completions=tasks)
        b["metadata"]["namespace"] = ns
        b.update(apiVersion="batch/v1", kind="Job")
        jobs.append(b)
        pods += [pod_body(f"j{j}-{i}", f"j{j}", i, cpu="10m") for i in range(tasks)]
    return jobs, pods


def test_a_node_offers_no_more_slots_than_it_holds_pods() -> None:
    """``slotCPU: 100u`` stored before the bound (the parser refuses it now): 40,000 slots on a 4-core node were one
    worker each; now the node's allocatable pods cap them, and the status says which field."""
    hostile = spec_of().model_copy(update={"slot_cpu": 1e-4})
    jobs, pods = many_jobs(2, 3)
    node = node_body("n1", cpu="4")
    node["status"]["allocatable"]["pods"] = "110"
    out = decide.decide(hostile, jobs, {j["metadata"]["name"]: [p for p in pods if p["metadata"]["ownerReferences"][0]["name"] == j["metadata"]["name"]]
                                        for j in jobs}, [node], [], {}, "ns", set(), T0)
    assert out.decision.slots == {"n1": 110}
    assert out.slot_cpu == limits.MIN_SLOT_CPU  # and a slot is never below 10m
    (note,) = out.decision.capped
    assert note.startswith("spec.slotCPU:")
    assert len(out.decision.place) == 6  # every task still dispatched


def test_a_decision_over_its_deadline_stops_and_says_so() -> None:
    """The policy stops before its next Job once the deadline passed (here at once): the plan is the best so far
    (nothing), the Step and the entry say ``deadline``, the status names the fields."""
    views = [dp.JobView(f"j{i}", i % 3, 0.0, 100.0, "default", 5, 0, 5.0) for i in range(50)]
    workers = [dp.WorkerView(f"n/{i:03d}", "default") for i in range(40)]
    for name in ("deadline", "workload", "priority", "proportion", "edf"):
        d = systems.decide("dispatch", name, systems.DispatchStep(views, workers, 1.0), deadline_s=0.0)
        assert d.status == "deadline" and d.result.timed_out and "deadline" in d.detail, name
        full = systems.decide("dispatch", name, systems.DispatchStep(views, workers, 1.0), deadline_s=None)
        assert full.status == "feasible" and not full.result.timed_out and full.result.plan, name
    jobs, pods = many_jobs(3, 2)
    by_job = {j["metadata"]["name"]: [p for p in pods if p["metadata"]["ownerReferences"][0]["name"] == j["metadata"]["name"]] for j in jobs}
    out = decide.decide(spec_of(), jobs, by_job, [node_body("n1")], [], {}, "ns", set(), T0, deadline_s=0.0)
    assert out.decision.timed_out and not out.decision.place
    from soda_operator.dispatch import status

    cond = status.budget(out, 1, {})
    assert (cond["type"], cond["status"], cond["reason"]) == ("WithinBudget", "False", "DeadlinePassed")
    assert "spec.slotCPU" in cond["message"]


def test_more_workers_than_a_decision_takes_are_refused_by_the_entry() -> None:
    workers = [dp.WorkerView(f"w{i}", "default") for i in range(limits.MAX_WORKERS + 1)]
    try:
        systems.decide("dispatch", "edf", systems.DispatchInputs([], workers, 0.0))
    except ValueError as e:
        assert "cap the slots" in str(e)
    else:
        raise AssertionError("accepted")


# ------------------------------------------------------------------ a hostile BatchDispatch beside a healthy one


def tick(ns: str, bd: dict[str, Any], memo: Memo, jobs: list[dict[str, Any]], pods: list[dict[str, Any]],
         nodes: list[dict[str, Any]]) -> kopf.Patch:
    patch = kopf.Patch()
    ix = {
        "dispatch_jobs": {(ns, "default"): jobs},
        "dispatch_pods": {(ns, j["metadata"]["name"]): [p for p in pods if p["metadata"]["ownerReferences"][0]["name"] == j["metadata"]["name"]]
                          for j in jobs},
        "kubesoda_nodes": {n["metadata"]["name"]: [n] for n in nodes},
        "foreign_pods": {}, "kubesoda_pods": {},
    }
    asyncio.run(handlers.dispatch_tick(namespace=ns, name=bd["metadata"]["name"], spec=bd["spec"], status=bd.get("status") or {},
                                       memo=memo, patch=patch, body=bd, **ix))
    return patch


def _healthy(memo: Memo, nodes: list[dict[str, Any]]) -> tuple[dict[str, Any], list[Any]]:
    jobs, pods = many_jobs(2, 3, "healthy")
    for p in pods:
        p["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "1"
    bd = bd_body(slotCPU="1")
    bd["metadata"]["namespace"] = "healthy"
    patch = tick("healthy", bd, memo, jobs, pods, nodes)
    core = memo.loops.core
    st = {k: v for k, v in patch.status.items() if k not in ("conditions", "jobs")}
    # each Job's row, less what moves with the wall clock (the projection from now, the penalty so far)
    st["jobs"] = [{k: v for k, v in j.items() if k not in ("projectedFinish", "meetsDeadline", "penalty")} for j in patch.status["jobs"]]
    conds = [{k: v for k, v in c.items() if k != "lastTransitionTime"} for c in patch.status["conditions"]]
    return {**st, "conditions": conds}, copy.deepcopy(core.patches)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(slot=st.sampled_from(["1n", "1u", "100u", "9m", "10m", "0.01"]), n_jobs=st.integers(1, 40), tasks=st.integers(1, 8))
def test_a_hostile_batchdispatch_leaves_a_healthy_ones_decision_identical(slot: str, n_jobs: int, tasks: int) -> None:
    nodes = [node_body(f"n{i}", cpu="4") for i in range(8)]
    for n in nodes:
        n["status"]["allocatable"]["pods"] = "110"
    alone = _healthy(Memo(loops=SimpleNamespace(core=RecordingCore())), nodes)  # type: ignore[arg-type]
    memo = Memo(loops=SimpleNamespace(core=RecordingCore()))  # type: ignore[arg-type]
    jobs, pods = many_jobs(n_jobs, tasks, "tenant")
    hostile = bd_body()
    hostile["spec"]["slotCPU"] = slot  # as stored before the CRD's bound (the API server refuses below 10m now)
    hostile["metadata"]["namespace"] = "tenant"
    tp = tick("tenant", hostile, memo, jobs, pods, nodes)
    st_h = dict(tp.status)
    if slot in ("1n", "1u", "100u", "9m"):
        assert st_h["state"] == "invalid" and st_h["message"].startswith("spec.slotCPU:"), st_h
    else:  # at the bound: 400 slots of 10m per 4-core node, cut to the 110 pods it holds (and on a loaded machine
        # the 1 s deadline may stop the policy too: the message names the cap either way)
        assert st_h["slots"] == 8 * 110 and st_h["conditions"][1]["reason"] in ("Capped", "DeadlinePassed"), st_h
        assert "spec.slotCPU" in st_h["conditions"][1]["message"]
    memo.loops.core.patches.clear()
    assert _healthy(memo, nodes) == alone


def test_a_ledger_gives_nothing_once_the_deadline_passed() -> None:
    """A Job of many queued tasks is one trip of a policy's loop but as many gives: the decision stops inside it."""
    import time

    from soda_optimizer.dispatch.base import Ledger

    job = dp.JobView("j", 0, 0.0, None, "default", 3, 0, 3.0)
    workers = [dp.WorkerView(f"w{i}", "default") for i in range(3)]
    with dp.budget(60.0) as b:
        led = Ledger([job], workers)
        led.give(workers[0], "j")
        b.stop = time.monotonic() - 1
        led.give(workers[1], "j")
        assert led.give_first("j", 2) == 2  # asked, none given
    assert led.out == {"w0": "j"} and b.timed_out and len(led.free) == 2


def test_a_job_annotation_beyond_1e12_counts_as_absent() -> None:
    """A penalty of 1e308 x seconds late was an infinity in the status (which JSON cannot carry to the API server)."""
    from bd_fixtures import job_body

    from soda_operator.dispatch import objects as ob

    j = ob.job_of(job_body("j", 3, "600", **{ob.ANN_PENALTY: "1e308", ob.ANN_WORK: "-1e300"}))
    assert j is not None and j.penalty == 3.0 and j.work is None  # the priority, and tasks counted
    assert ob.job_of(job_body("j", 3, "1e300")).deadline is None  # type: ignore[union-attr]
