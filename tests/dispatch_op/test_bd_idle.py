"""Issue 51 in the operator's decisions (:func:`soda_operator.dispatch.decide.plan`): no slot is left idle while a
task the plan released waits, no pod is evicted while a slot is idle, and with ``preemption`` a pod is evicted only
for a Job of strictly higher priority (4.4's wording).

The minimal cases: one node of 2 slots, ``low`` running one pod, ``urgent`` one gated pod (the issue's case; main's
tie-break, idle first, already places it); and its cross-class form, a fast node running ``low`` and a slow node
idle, which main still got wrong (``urgent`` planned on the busy fast slot, nothing placed, and with preemption
``low-0`` evicted beside the idle slot). The property counts per Job, from the objects alone: a Job with a gated pod
left and more slots in the plan than it holds (its pods running or placed) has a released task waiting."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from bd_fixtures import T0, job_body, pod_body
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from soda_operator.dispatch import decide
from soda_operator.dispatch import objects as ob
from soda_optimizer import dispatch as dp

SPEEDS = dp.SpeedMatrix(prior=1.0, table={("default", "fast"): 4.0, ("default", "slow"): 1.0})


def urgent_beside(low_node: str) -> tuple[dict[str, ob.DispatchedJob], list[ob.Task]]:
    jobs = {j.name: j for j in (ob.job_of(job_body("low", 1, completions=1)),
                                ob.job_of(job_body("urgent", 5, deadline="2027-01-15T08:00:30Z", completions=1))) if j}
    pods = [pod_body("low-0", "low", 0, gate=False, node=low_node, phase="Running"), pod_body("urgent-0", "urgent", 0)]
    return jobs, [t for t in map(ob.task_of, pods) if t]


@pytest.mark.parametrize("policy", ["deadline", "edf", "priority", "workload", "proportion"])
@pytest.mark.parametrize("preemption", [False, True])
def test_an_urgent_job_takes_the_idle_slot_of_its_node(policy: str, preemption: bool) -> None:
    jobs, tasks = urgent_beside("n0")
    nodes = [ob.Node("n0", "default", 2.0, True, False)]
    d = decide.plan(jobs, tasks, nodes, {"n0": 2}, dp.policy(policy), dp.SpeedMatrix(), T0, preemption)
    assert d.place == {"urgent-0": "n0"} and d.evict == {}, d


@pytest.mark.parametrize("policy", ["deadline", "edf", "workload"])
@pytest.mark.parametrize("preemption", [False, True])
def test_an_urgent_job_takes_a_slower_idle_slot_at_once(policy: str, preemption: bool) -> None:
    jobs, tasks = urgent_beside("fast")
    nodes = [ob.Node("fast", "fast", 1.0, True, False), ob.Node("slow", "slow", 1.0, True, False)]
    d = decide.plan(jobs, tasks, nodes, {"fast": 1, "slow": 1}, dp.policy(policy), SPEEDS, T0, preemption)
    assert d.place == {"urgent-0": "slow"} and d.evict == {}, d
    assert sorted(d.plan.values()) == ["low", "urgent"]


def test_preemption_evicts_only_for_a_strictly_higher_priority_job() -> None:
    """One one-slot node running ``low``; the other Job's gated pod gets the slot's plan (EDF: its deadline is the
    earlier). Priority 5 > 1: ``low-0`` is evicted; priority 1 = 1: it finishes."""
    for prio, evicted in ((5, {"low-0": "other"}), (1, {})):
        jobs = {j.name: j for j in (ob.job_of(job_body("low", 1, deadline="2027-01-15T09:00:00Z", completions=1)),
                                    ob.job_of(job_body("other", prio, deadline="2027-01-15T08:00:30Z", completions=1))) if j}
        pods = [pod_body("low-0", "low", 0, gate=False, node="n0", phase="Running"), pod_body("other-0", "other", 0)]
        tasks = [t for t in map(ob.task_of, pods) if t]
        d = decide.plan(jobs, tasks, [ob.Node("n0", "default", 1.0, True, False)], {"n0": 1}, dp.policy("edf"),
                        dp.SpeedMatrix(), T0, True)
        assert d.evict == evicted and d.place == {}, (prio, d)


@st.composite
def scenes(draw: Any) -> tuple[dict[str, ob.DispatchedJob], list[ob.Task], list[ob.Node], dict[str, int]]:
    nodes = [ob.Node(f"n{i}", draw(st.sampled_from(["fast", "slow"])), 4.0, True, False) for i in range(draw(st.integers(1, 4)))]
    slots = {n.name: draw(st.integers(0, 3)) for n in nodes}
    jobs: dict[str, ob.DispatchedJob] = {}
    tasks: list[ob.Task] = []
    held: Counter[str] = Counter()
    for j in range(draw(st.integers(1, 4))):
        name = f"j{j}"
        deadline = draw(st.one_of(st.none(), st.floats(T0 - 5, T0 + 100)))
        jobs[name] = ob.DispatchedJob(name, draw(st.integers(0, 3)), T0 + j, deadline, 1.0, "default", None, None, 0, None)
        for k in range(draw(st.integers(0, 4))):
            cand = [n for n in sorted(slots) if held[n] < slots[n]]
            node = draw(st.sampled_from(cand)) if cand and draw(st.booleans()) else None
            if node is not None:
                held[node] += 1
            tasks.append(ob.Task(f"{name}-{k}", f"u{name}{k}", name, k, 1.0, node is None, node, None,
                                 "Pending" if node is None else "Running", None if node is None else T0))
    return jobs, tasks, nodes, slots


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenes(), st.sampled_from(dp.names()), st.booleans())
def test_no_idle_slot_while_a_released_task_waits_and_no_eviction_beside_one(scene: Any, policy: str, preemption: bool) -> None:
    jobs, tasks, nodes, slots = scene
    d = decide.plan(jobs, tasks, nodes, slots, dp.policy(policy), SPEEDS, T0 + 10, preemption)
    running = Counter(t.node for t in tasks if t.node)  # an evicted pod holds its slot until it is gone
    placed = Counter(d.place.values())
    idle = sum(slots[n] - running[n] - placed[n] for n in slots)
    assert all(slots[n] - running[n] - placed[n] >= 0 for n in slots), d
    job_of = {t.name: t.job for t in tasks}
    gated = Counter(t.job for t in tasks if t.gated)
    holds = Counter(t.job for t in tasks if t.node and t.name not in d.evict) + Counter(job_of[p] for p in d.place)
    planned = Counter(d.plan.values())
    waiting = {j: min(gated[j] - Counter(job_of[p] for p in d.place)[j], planned[j] - holds[j]) for j in jobs}
    if idle:
        assert all(n <= 0 for n in waiting.values()), (waiting, d)  # no slot idle while a released task waits
        assert d.evict == {}, d  # no eviction beside an idle slot
    if not preemption:
        assert d.evict == {}
    for p, j in d.evict.items():  # 4.4: only for a Job of strictly higher priority
        assert jobs[j].priority > jobs[job_of[p]].priority, (p, j, d)
