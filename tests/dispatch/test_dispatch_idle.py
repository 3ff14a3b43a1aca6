"""Issue 51: in the paper's worker model (every worker planned, :mod:`soda_optimizer.dispatch.follow`) a waiting job is
never planned behind a worker busy with another job while a worker of the same class sits idle planned for a job with
nothing waiting, and no task is killed for such a plan. Main's tie-break ranked "busy with another job" like "idle"
(id order won): the minimal case below planned ``{w00: A, w01: B}``, started nothing, and in kill mode killed B."""

from __future__ import annotations

import pytest
from dispatch_helpers import jv
from hypothesis import given, settings
from hypothesis import strategies as st

from soda_optimizer.dispatch import WorkerView, names, policy
from soda_optimizer.dispatch.follow import step

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
