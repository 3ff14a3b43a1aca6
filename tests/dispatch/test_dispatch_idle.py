"""Issue 51: in the paper's worker model (every worker planned, :mod:`soda_optimizer.dispatch.follow`) a waiting job is
never planned behind a worker busy with another job while a worker of the same class sits idle planned for a job with
nothing waiting, and no task is killed for such a plan. Main's tie-break ranked "busy with another job" like "idle"
(id order won): the minimal case below planned ``{w00: A, w01: B}``, started nothing, and in kill mode killed B."""

from __future__ import annotations

from collections import Counter

import pytest
from dispatch_helpers import ALL_POLICIES, jv, workloads
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from soda_optimizer.dispatch import SpeedMatrix, WorkerView, names, policy, released_waiting, simulate
from soda_optimizer.dispatch.follow import plan_views, step

POLICIES = names()


@pytest.mark.parametrize("name", POLICIES)
@pytest.mark.parametrize("preempt", [False, True])
def test_an_urgent_job_starts_on_the_idle_worker_at_once(name, preempt):
    """w00 runs B (priority 1, 10 s), w01 idle; A (priority 5, 1 s, deadline 3) arrives at t=1: A starts on w01 now,
    B keeps w00 (never killed beside an idle worker)."""
    jobs = [jv("B", priority=1, queued=0, running=1, work=9.0, deadline=100.0), jv("A", priority=5, queued=1, work=1.0, deadline=3.0, arrival=1.0)]
    workers = [WorkerView("w00", "a", "B"), WorkerView("w01", "a", None)]
    got = step(policy(name), jobs, workers, 1.0, preempt=preempt)
    assert got.start == {"w01": "A"}, (name, got)
    assert got.preempt == {}, (name, got)


def swappable(jobs, workers, got):
    """Pairs (busy w1 running X, planned for Y != X and not starting it; idle w2 of w1's class planned for X, which has
    nothing waiting for it): swapping them would start Y now and move nobody."""
    busy = {w.id: w.job for w in workers if w.job is not None}
    cls = {w.id: w.node_class for w in workers}
    waiting = {j.id: j.queued for j in jobs}
    for w in got.preempt:
        waiting[busy[w]] = waiting.get(busy[w], 0) + 1
    started: dict[str, int] = {}
    for j in got.start.values():
        started[j] = started.get(j, 0) + 1
    out = []
    for w1, y in got.plan.items():
        x = busy.get(w1)
        if x is None or x == y or w1 in got.start:
            continue
        for w2, j2 in got.plan.items():
            if w2 not in busy and j2 == x and w2 not in got.start and cls[w2] == cls[w1] and waiting.get(x, 0) - started.get(x, 0) <= 0:
                out.append((w1, w2))
    return out


job = st.tuples(st.integers(1, 5), st.integers(0, 3), st.integers(0, 3), st.sampled_from([None, 2.0, 5.0, 50.0]))


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(POLICIES), st.lists(job, min_size=1, max_size=4), st.lists(st.tuples(st.sampled_from("ab"), st.integers(-1, 3)), min_size=1, max_size=6),
       st.booleans())
def test_no_waiting_job_is_planned_behind_a_busy_worker_beside_an_idle_one(name, js, ws, preempt):
    jobs = [jv(f"J{i}", priority=p, queued=q, running=0, deadline=d) for i, (p, q, _, d) in enumerate(js)]
    # workers busy with a job (index into jobs, -1: idle); running counts follow the workers
    running = {}
    workers = []
    for k, (c, i) in enumerate(ws):
        j = jobs[i].id if 0 <= i < len(jobs) else None
        workers.append(WorkerView(f"w{k:02d}", c, j))
        if j is not None:
            running[j] = running.get(j, 0) + 1
    jobs = [jv(j.id, priority=j.priority, queued=j.queued, running=running.get(j.id, 0), deadline=j.deadline) for j in jobs]
    got = step(policy(name), jobs, workers, 1.0, preempt=preempt)
    assert swappable(jobs, workers, got) == [], (name, got)


# ---- issue 51 item 1 (rest): across node classes, and the properties over the step and the simulator


def test_an_urgent_job_starts_on_a_slower_idle_worker_at_once() -> None:
    """Heterogeneous: w00 (fast) runs B, w01 (slow) idle; A (priority 5) arrives. The deadline policy plans A on the
    fast w00 and B on the slow w01. Main left w01 idle (B has nothing queued) and A waited for w00 -- in kill mode B
    was killed beside the idle w01. Now A starts on w01 at once and B keeps w00; the plan's counts are the policy's."""
    speeds = SpeedMatrix(prior=1.0, table={("k1", "fast"): 4.0, ("k1", "slow"): 1.0})
    jobs = [jv("B", priority=1, queued=0, running=1, work=9.0, deadline=100.0), jv("A", priority=5, queued=1, work=1.0, deadline=3.0, arrival=1.0)]
    workers = [WorkerView("w00", "fast", "B"), WorkerView("w01", "slow", None)]
    for preempt in (False, True, "lower"):
        got = step(policy("deadline"), jobs, workers, 1.0, speeds, preempt=preempt)
        assert got.start == {"w01": "A"} and got.preempt == {}, (preempt, got)
        assert sorted(got.plan.values()) == ["A", "B"]


def test_kill_lower_kills_only_for_a_strictly_higher_priority_job() -> None:
    """4.4's wording: a task is killed only for a job of strictly higher priority. One worker, B (priority 3) runs,
    A waits: killed for A of priority 5, kept for A of priority 3 (equal) -- ``True`` kills for both."""
    workers = [WorkerView("w00", "a", "B")]
    for prio, lower in ((5, {"w00": "A"}), (3, {})):
        jobs = [jv("B", priority=3, queued=0, running=1, work=9.0), jv("A", priority=prio, queued=1, work=1.0, deadline=2.0)]
        got = step(policy("edf"), jobs, workers, 1.0, preempt="lower")
        assert got.preempt == lower, (prio, got)
        assert step(policy("edf"), jobs, workers, 1.0, preempt=True).preempt == {"w00": "A"}


def after(jobs, workers, got):
    """Written from the definitions: the workers left idle, each job's tasks still waiting, and per job the workers
    the plan gives it that are busy with another job's task they keep."""
    busy = {w.id: w.job for w in workers if w.job is not None}
    idle = [w.id for w in workers if w.job is None and w.id not in got.start]
    waiting = {j.id: j.queued for j in jobs}
    for w in got.preempt:
        waiting[busy[w]] += 1
    for j in got.start.values():
        waiting[j] -= 1
    behind: dict[str, int] = {}
    for w, j in got.plan.items():
        if w in busy and w not in got.preempt and busy[w] != j:
            behind[j] = behind.get(j, 0) + 1
    return idle, waiting, behind


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(POLICIES), st.lists(job, min_size=1, max_size=4),
       st.lists(st.tuples(st.sampled_from("abc"), st.integers(-1, 3)), min_size=1, max_size=7),
       st.sampled_from([False, True, "lower"]), st.lists(st.floats(0.25, 4.0), min_size=3, max_size=3))
def test_no_worker_idle_while_a_released_task_waits_and_no_kill_beside_an_idle_worker(name, js, ws, preempt, th):
    speeds = SpeedMatrix(prior=1.0, table={("k1", c): t for c, t in zip("abc", th, strict=True)})
    jobs = [jv(f"J{i}", priority=p, queued=q, running=0, deadline=d) for i, (p, q, _, d) in enumerate(js)]
    running: dict[str, int] = {}
    workers = []
    for k, (c, i) in enumerate(ws):
        j = jobs[i].id if 0 <= i < len(jobs) else None
        workers.append(WorkerView(f"w{k:02d}", c, j))
        if j is not None:
            running[j] = running.get(j, 0) + 1
    jobs = [jv(j.id, priority=j.priority, queued=j.queued, running=running.get(j.id, 0), deadline=j.deadline) for j in jobs]
    got = step(policy(name), jobs, workers, 1.0, speeds, preempt=preempt)
    idle, waiting, behind = after(jobs, workers, got)
    held_back = {j: min(n, waiting[j]) for j, n in behind.items() if min(n, waiting[j]) > 0}
    assert not idle or not held_back, (name, got)  # no idle worker while a released task waits
    assert not idle or not got.preempt, (name, got)  # no kill while a worker is idle
    assert held_back == released_waiting(jobs, workers, got)
    # sound: the plan keeps the policy's counts per job, starts only idle or killed workers, never more than waits
    pj, pw = plan_views(jobs, workers)
    assert Counter(got.plan.values()) == Counter(policy(name).assign(pj, pw, 1.0, speeds).values())
    busy = {w.id: w.job for w in workers if w.job is not None}
    assert all(w not in busy or w in got.preempt for w in got.start)
    assert all(got.plan[w] == j for w, j in got.start.items()) and all(n >= 0 for n in waiting.values())
    prio = {j.id: j.priority for j in jobs}
    for w, j in got.preempt.items():
        assert got.start[w] == j and busy[w] != j
        assert preempt is True or (preempt == "lower" and prio[j] > prio[busy[w]]), (preempt, got)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads(), st.sampled_from(ALL_POLICIES), st.sampled_from(["plan", "kill", "kill-lower"]))
def test_simulator_leaves_no_worker_idle_while_a_released_task_waits(wl, pol, mode):
    r = simulate(wl, pol, mode=mode)
    last = {s.time: s for s in r.timeline}  # the state after the decision at each instant
    downs = {(f.worker, f.down) for f in wl.failures}
    prio = {j.id: j.priority for j in wl.jobs}
    for s in r.timeline:
        assert s.free == 0 or s.released_waiting == 0, s
    for x in r.runs:
        if x.completed or (x.worker, x.end) in downs:
            continue
        assert mode != "plan", x  # killed: only in the kill modes ...
        assert last[x.end].free == 0, (x, last[x.end])  # ... and never beside an idle worker
        nxt = next(y for y in r.runs if y.worker == x.worker and y.start == x.end)
        assert mode == "kill" or prio[nxt.job] > prio[x.job], (x, nxt)
