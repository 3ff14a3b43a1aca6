"""The pure translation of batch dispatch (operator/soda_operator/dispatch/): pods, Jobs and nodes as the
paper's jobs and workers, and which gated pods are released onto which node."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from soda_operator.dispatch import decide as bd
from soda_optimizer import dispatch as dp

T0 = 1_800_000_000.0


def job_body(name: str, prio: int = 0, deadline: str | None = None, gate: bool = True, completions: int = 4, **ann: str) -> dict[str, Any]:
    a = {bd.ANN_PRIORITY: str(prio), **ann}
    if deadline is not None:
        a[bd.ANN_DEADLINE] = deadline
    tmpl: dict[str, Any] = {"containers": [{"name": "c"}]}
    if gate:
        tmpl["schedulingGates"] = [{"name": bd.GATE}]
    return {"metadata": {"name": name, "namespace": "ns", "annotations": a, "creationTimestamp": "2027-01-15T08:00:00Z"},
            "spec": {"completions": completions, "template": {"spec": tmpl}}, "status": {}}


def pod_body(name: str, job: str, index: int, cpu: str = "1", gate: bool = True, node: str | None = None, phase: str = "Pending",
             cls: str | None = None) -> dict[str, Any]:
    ann = {}
    if node:
        ann = {bd.ANN_NODE: node, bd.ANN_CLASS: cls or "default"}
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]}
    if gate:
        spec["schedulingGates"] = [{"name": bd.GATE}]
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": name, "uid": f"uid-{name}", "annotations": ann,
                         "labels": {"batch.kubernetes.io/job-completion-index": str(index)},
                         "ownerReferences": [{"kind": "Job", "name": job, "controller": True}]},
            "spec": spec, "status": {"phase": phase}}


def node_body(name: str, cpu: str = "4", cls: str | None = None, mips: str | None = "1000", ready: bool = True,
              unschedulable: bool = False) -> dict[str, Any]:
    labels = {}
    if cls:
        labels[bd.LABEL_CLASS] = cls
    if mips:
        labels[bd.LABEL_MIPS] = mips
    return {"metadata": {"name": name, "labels": labels}, "spec": {"unschedulable": unschedulable},
            "status": {"allocatable": {"cpu": cpu}, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def test_node_class_and_prior() -> None:
    assert bd.node_class({bd.LABEL_CLASS: "fast", bd.LABEL_MIPS: "3000"}) == "fast"
    assert bd.node_class({bd.LABEL_MIPS: "2000"}) == "mips-2000"
    assert bd.node_class({}) == "default"
    assert bd.class_speed({bd.LABEL_MIPS: "2000"}) == 2.0 and bd.class_speed({}) is None
    n = bd.node_of(node_body("a", ready=False))
    assert n is not None and n.failed and not n.usable
    out = bd.node_of(node_body("a"), {"pool": "batch"})  # not selected: no new tasks, but its tasks are not lost
    assert not out.usable and not out.failed
    assert bd.slots_for([out], [], set(), 1.0) == {}


def test_job_and_task_translation() -> None:
    j = bd.job_of(job_body("j", prio=3, deadline="120s", **{bd.ANN_WORK: "5", bd.ANN_KIND: "render"}))
    assert j is not None and j.priority == 3 and j.penalty == 3 and j.work == 5 and j.kind == "render"
    assert j.deadline is not None and j.deadline - j.arrival == 120
    assert bd.job_of(job_body("k", gate=False)) is None
    assert bd.job_of(job_body("k", **{bd.ANN_PENALTY: "10"})).penalty == 10  # type: ignore[union-attr]
    t = bd.task_of(pod_body("p", "j", 2))
    assert t is not None and t.gated and t.index == 2 and t.cpu == 1.0 and t.node is None
    # not ours: no gate and never released
    assert bd.task_of(pod_body("q", "j", 0, gate=False)) is None
    bare = pod_body("b", "j", 0)
    bare["metadata"]["ownerReferences"] = []
    assert bd.task_of(bare) is None


def test_slots_exclude_other_pods() -> None:
    nodes = [bd.Node("a", "default", 4, True, False), bd.Node("b", "default", 4, False, False)]
    bound = [("a", "ns/other", 1.5, 0.0), ("a", "ns/mine", 1.0, 0.0)]
    assert bd.slots_for(nodes, bound, {"ns/mine"}, 1.0) == {"a": 2}


def test_fast_nodes_first_and_waiting() -> None:
    jobs = {j.name: j for j in (bd.job_of(job_body("hi", prio=2, deadline="60")), bd.job_of(job_body("lo", prio=1))) if j}
    pods = [pod_body(f"hi-{i}", "hi", i) for i in range(4)] + [pod_body(f"lo-{i}", "lo", i) for i in range(4)]
    tasks = [t for t in map(bd.task_of, pods) if t]
    nn = [bd.node_of(node_body("slow", mips="1000")), bd.node_of(node_body("fast", cls="fast", mips="3000"))]
    speeds = bd.speeds_from({}, {}, {"mips-1000": 1.0, "fast": 3.0}, ["default"])
    # two slots on each node; the top job needs 4 units in (deadline - now) = 10 s: 0.4 units/s, one fast slot suffices
    d = bd.plan(jobs, tasks, nn, {"slow": 2, "fast": 2}, dp.DeadlinePolicy(fill=None), speeds, jobs["hi"].arrival + 50)
    assert d.place == {"hi-0": "fast"}
    d = bd.plan(jobs, tasks, nn, {"slow": 2, "fast": 2}, dp.DeadlinePolicy(fill="deadline"), speeds, jobs["hi"].arrival + 50)
    assert len(d.place) == 4 and sorted(d.place.values()) == ["fast", "fast", "slow", "slow"]
    st_ = {s["job"]: s for s in d.jobs}
    assert st_["hi"]["waiting"] + st_["hi"]["running"] == 4 and st_["lo"]["waiting"] + st_["lo"]["running"] == 4
    assert st_["hi"]["meetsDeadline"] is True and st_["lo"]["meetsDeadline"] is None


def test_failed_node_tasks_deleted_and_not_counted() -> None:
    jobs = {"j": bd.job_of(job_body("j"))}
    pods = [pod_body("j-0", "j", 0, gate=False, node="a", phase="Running"), pod_body("j-1", "j", 1, gate=False, node="b", phase="Running"),
            pod_body("j-2", "j", 2)]
    tasks = [t for t in map(bd.task_of, pods) if t]
    nodes = [bd.Node("a", "default", 1, True, False), bd.Node("b", "default", 1, False, True)]
    d = bd.plan(jobs, tasks, nodes, {"a": 1}, dp.PriorityPolicy(fill="priority"), dp.SpeedMatrix(), T0)  # type: ignore[arg-type]
    assert d.delete == ["j-1"] and d.place == {}  # a's only slot is held by j-0


def test_measure_feeds_matrix_once() -> None:
    jobs = {"j": bd.job_of(job_body("j", **{bd.ANN_WORK: "2"}))}
    p = pod_body("j-0", "j", 0, gate=False, node="a", phase="Succeeded", cls="fast")
    p["status"]["containerStatuses"] = [{"state": {"terminated": {"startedAt": "2027-01-15T08:00:00Z", "finishedAt": "2027-01-15T08:00:04Z"}}}]
    t = bd.task_of(p)
    assert t is not None and t.finished is not None and t.started is not None
    m, new = bd.measure(dp.SpeedMatrix(), jobs, [t], set())  # type: ignore[arg-type]
    assert new == ["uid-j-0"] and abs(m.throughput("default", "fast") - 0.5) < 1e-9
    m2, new2 = bd.measure(m, jobs, [t], set(new))  # type: ignore[arg-type]
    assert new2 == [] and m2 is m
    back = bd.speeds_from({"speeds": bd.speeds_status(m)}, {}, {}, ["default"])
    assert abs(back.throughput("default", "fast") - 0.5) < 1e-9


def test_policy_of() -> None:
    assert bd.policy_of({}).name == "deadline+fill-deadline"
    assert bd.policy_of({"policy": "priority", "reservation": 0.2}).name == "priority(r=0.2)"
    assert bd.policy_of({"policy": "deadline", "fill": "none"}).name == "deadline"
    assert bd.policy_of({"policy": "edf"}).name == "edf"


@st.composite
def scenes(draw: Any) -> tuple[dict[str, bd.JobSpec], list[bd.Task], list[bd.Node], dict[str, int]]:
    nn = draw(st.integers(1, 4))
    nodes = [bd.Node(f"n{i}", draw(st.sampled_from(["a", "b"])), 4, draw(st.booleans()) or i == 0, False) for i in range(nn)]
    slots = {n.name: draw(st.integers(0, 3)) for n in nodes if n.usable}
    jobs: dict[str, bd.JobSpec] = {}
    tasks: list[bd.Task] = []
    held: dict[str, int] = {}
    for j in range(draw(st.integers(1, 4))):
        name = f"j{j}"
        jobs[name] = bd.JobSpec(name, draw(st.integers(0, 3)), T0 + j, draw(st.one_of(st.none(), st.floats(T0, T0 + 100))), 1.0,
                                "default", None, None, 0, None)
        for k in range(draw(st.integers(0, 5))):
            run = draw(st.booleans())
            node = None
            if run:
                cand = [n for n in slots if held.get(n, 0) < slots[n]]
                if not cand:
                    run = False
                else:
                    node = draw(st.sampled_from(cand))
                    held[node] = held.get(node, 0) + 1
            tasks.append(bd.Task(f"{name}-{k}", f"u{name}{k}", name, k, 1.0, not run, node, "a", "Running" if run else "Pending"))
    return jobs, tasks, nodes, slots


@settings(max_examples=150, deadline=None)
@given(scenes(), st.sampled_from(["priority", "proportion", "workload", "deadline", "edf"]))
def test_never_more_released_than_free_slots(scene: Any, policy: str) -> None:
    jobs, tasks, nodes, slots = scene
    d = bd.plan(jobs, tasks, nodes, slots, bd.policy_of({"policy": policy}), dp.SpeedMatrix(), T0 + 10)
    running: dict[str, int] = {}
    for t in tasks:
        if t.node:
            running[t.node] = running.get(t.node, 0) + 1
    placed: dict[str, int] = {}
    for p, n in d.place.items():
        placed[n] = placed.get(n, 0) + 1
        assert any(t.name == p and t.gated for t in tasks)
    for n, c in placed.items():
        assert c <= slots.get(n, 0) - running.get(n, 0), (n, c, slots, running)


@settings(max_examples=150, deadline=None)
@given(scenes())
def test_priority_policy_respects_priority_order(scene: Any) -> None:
    """With r = 0 and no running tasks (Algorithm 1, optimizer/soda_optimizer/dispatch/priority.py): the top job gets
    what it can use, and no job gets a worker while a higher-priority job is left with none. (Not: while a
    higher-priority job keeps a waiting task: after the top job, every job in priority order gets one worker, so a
    second job of the top priority may wait while a lower one runs one task; a random example found that.)"""
    jobs, tasks, nodes, slots = scene
    tasks = [bd.Task(t.name, t.uid, t.job, t.index, t.cpu, True, None, None, "Pending") for t in tasks]
    d = bd.plan(jobs, tasks, nodes, slots, dp.PriorityPolicy(reservation=0.0, fill="priority"), dp.SpeedMatrix(), T0 + 10)
    got: dict[str, int] = {}
    for p in d.place:
        j = next(t.job for t in tasks if t.name == p)
        got[j] = got.get(j, 0) + 1
    queued = {j: sum(1 for t in tasks if t.job == j) for j in jobs}
    free = sum(slots.get(n.name, 0) for n in nodes if n.usable)
    top = min((j for j in jobs.values() if queued[j.name]), key=lambda j: (-j.priority, j.arrival, j.name), default=None)
    if top is not None and free:
        assert got.get(top.name, 0) == min(queued[top.name], free), (top, got)
    for a in jobs.values():
        for b in jobs.values():
            if a.priority > b.priority and got.get(b.name, 0) > 0 and queued[a.name]:
                assert got.get(a.name, 0) >= 1, (a, b, got)


def test_algorithm4_first_decision_as_in_e2e() -> None:
    """e2e/test_dispatch.py's first decision: 2 fast slots x 2 nodes (prior 2), 2 slow x 2; each job in priority
    order takes the fastest slots its deadline needs, then the spare slots go by closest deadline."""
    bodies = [job_body("high", 3, "45", completions=6, **{bd.ANN_WORK: "8"}), job_body("mid", 2, "70", completions=6, **{bd.ANN_WORK: "8"}),
              job_body("low", 1, "110", completions=6, **{bd.ANN_WORK: "8"})]
    jobs = {j.name: j for j in map(bd.job_of, bodies) if j}
    tasks = [t for j in jobs for t in (bd.task_of(pod_body(f"{j}-{i}", j, i, cpu="2")) for i in range(6)) if t]
    nb = [node_body(n, cls="fast", mips="2000") for n in ("f0", "f1")] + [node_body(n) for n in ("s0", "s1")]
    nodes = list(map(bd.node_of, nb))
    priors = {n.node_class: bd.class_speed(b["metadata"]["labels"]) or 1.0 for n, b in zip(nodes, nb, strict=True)}
    slots = bd.slots_for(nodes, [], set(), 2.0)
    assert slots == {"f0": 2, "f1": 2, "s0": 2, "s1": 2}
    d = bd.plan(jobs, tasks, nodes, slots, bd.policy_of({"policy": "deadline"}), bd.speeds_from({}, {}, priors, ["default"]), jobs["high"].arrival + 5)
    on: dict[str, list[str]] = {}
    for p, n in d.place.items():
        on.setdefault(n[0], []).append(p.split("-")[0])
    assert sorted(on["f"]) == ["high", "high", "low", "mid"] and on["s"] == ["high"] * 4
    assert {s["job"]: s["waiting"] for s in d.jobs} == {"high": 0, "mid": 5, "low": 5}


def test_projection_flags_a_deadline_at_risk() -> None:
    jobs = {"j": bd.job_of(job_body("j", 1, "10", completions=4, **{bd.ANN_WORK: "10"}))}
    tasks = [t for t in (bd.task_of(pod_body(f"j-{i}", "j", i)) for i in range(4)) if t]
    nodes = [bd.Node("a", "default", 1, True, False)]
    d = bd.plan(jobs, tasks, nodes, {"a": 1}, bd.policy_of({}), dp.SpeedMatrix(), jobs["j"].arrival)  # type: ignore[union-attr]
    (s,) = d.jobs
    assert s["running"] == 1 and s["waiting"] == 3 and s["meetsDeadline"] is False and s["penalty"] == 0
    late = bd.plan(jobs, tasks, nodes, {"a": 0}, bd.policy_of({}), dp.SpeedMatrix(), jobs["j"].arrival + 15)  # type: ignore[union-attr]
    assert late.jobs[0]["meetsDeadline"] is None and late.jobs[0]["penalty"] == 5.0  # priority 1 x 5 s late so far
