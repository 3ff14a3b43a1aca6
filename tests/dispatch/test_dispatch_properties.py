"""Hypothesis properties of the decision maker and the simulator."""

from __future__ import annotations

from collections import Counter

from dispatch_helpers import ALL_POLICIES, decision_inputs, speeds_st, workloads
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from soda_optimizer.dispatch import DeadlinePolicy, PriorityPolicy, decide, meets_deadline, simulate
from soda_optimizer.dispatch.model import by_priority
from soda_optimizer.dispatch.sim import MODES

PROPS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPS
@given(decision_inputs(), speeds_st, st.sampled_from(ALL_POLICIES))
def test_never_more_workers_than_remaining_tasks(inp, speeds, policy) -> None:  # type: ignore[no-untyped-def]
    jobs, workers, now = inp
    out = decide(policy, jobs, workers, now, speeds)
    free = {w.id for w in workers if w.job is None}
    assert set(out) <= free  # non-preemptive: running workers are never reassigned
    got = Counter(out.values())
    held = Counter(w.job for w in workers if w.job is not None)
    for j in jobs:
        assert got[j.id] <= j.queued
        assert got[j.id] + held[j.id] <= j.remaining_tasks


@PROPS
@given(decision_inputs(), speeds_st, st.sampled_from([None, "priority", "deadline"]))
def test_priority_policy_never_serves_lower_while_higher_waits(inp, speeds, fill) -> None:  # type: ignore[no-untyped-def]
    jobs, workers, now = inp
    out = decide(PriorityPolicy(0.0, fill=fill), jobs, workers, now, speeds)
    has = Counter(out.values()) + Counter(w.job for w in workers if w.job is not None)
    for low in set(out.values()):
        p = next(j.priority for j in jobs if j.id == low)
        for high in jobs:
            if high.priority > p and high.queued > 0:
                assert has[high.id] >= 1, (high, low)


@PROPS
@given(decision_inputs(), speeds_st)
def test_deadline_policy_meets_deadlines_where_feasible(inp, speeds) -> None:  # type: ignore[no-untyped-def]
    jobs, workers, now = inp
    out = decide(DeadlinePolicy(fill=None, reading="text"), jobs, workers, now, speeds)
    pool = sorted((w for w in workers if w.job is None), key=lambda w: w.id)  # replay the priority order on what is left
    for job in sorted(jobs, key=by_priority):
        mine = [w for w in workers if out.get(w.id) == job.id or w.job == job.id]
        classes = [w.node_class for w in mine]
        best = sorted(pool, key=lambda w: -speeds.throughput(job.kind, w.node_class))[: job.queued]
        pinned = [w.node_class for w in workers if w.job == job.id]
        if meets_deadline(job, pinned + [w.node_class for w in best], now, speeds) and job.deadline is not None:
            assert meets_deadline(job, classes, now, speeds), job
            new = [w for w in mine if w.job is None]
            if new:  # minimal: without its slowest new worker the job would miss
                slowest = min(new, key=lambda w: speeds.throughput(job.kind, w.node_class))
                rest = list(classes)
                rest.remove(slowest.node_class)
                assert not meets_deadline(job, rest, now, speeds)
        pool = [w for w in pool if w.id not in out or out[w.id] != job.id]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads(), st.sampled_from(ALL_POLICIES), st.sampled_from(MODES))
def test_simulator_conserves_tasks(wl, policy, mode) -> None:  # type: ignore[no-untyped-def]
    r = simulate(wl, policy, mode=mode)
    if mode == "plan":
        assert all(x.completed for x in r.runs if not any(f.worker == x.worker for f in wl.failures))  # none killed
    assert not r.unfinished  # issue 51: the text reading of Algorithm 4 no longer leaves a no-deadline job unserved
    done = Counter((x.job, x.task) for x in r.runs if x.completed)
    assert done == Counter((j.id, i) for j in wl.jobs for i in range(j.tasks))  # every task exactly once
    for j in wl.jobs:
        last = max(x.end for x in r.runs if x.job == j.id and x.completed)
        assert r.finish[j.id] == last and last >= j.arrival
        assert all(x.start >= j.arrival for x in r.runs if x.job == j.id)
    by_worker: dict[str, list[tuple[float, float]]] = {}
    for x in r.runs:
        by_worker.setdefault(x.worker, []).append((x.start, x.end))
    for w, spans in by_worker.items():  # one task at a time per worker, never while down
        spans.sort()
        assert all(a[1] <= b[0] + 1e-9 for a, b in zip(spans, spans[1:], strict=False)), w
        for f in wl.failures:
            if f.worker == w:
                assert all(e <= f.down + 1e-9 or s >= (f.up or 1e18) - 1e-9 for s, e in spans)
    for s in r.timeline:
        assert sum(n for _, n in s.alloc) == s.busy
        assert s.busy + s.free + s.down == len(wl.workers)
