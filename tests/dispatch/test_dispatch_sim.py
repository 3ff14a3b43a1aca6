"""The simulator's metrics on tiny traces worked by hand, the failure test of 6.2, and the SWF transformations."""

from __future__ import annotations

import pytest

from soda_optimizer.dispatch import Job, PriorityPolicy, Worker, Workload, simulate, violated_count
from soda_optimizer.dispatch.scenarios import failure_scenario
from soda_optimizer.dispatch.swf import format_swf, lublin_swf, parse_swf, priorities, to_jobs

# one worker; A (priority 1, 4 s, deadline 3) at 0; B (priority 2, 2 s, deadline 4) at 1
TINY = Workload(
    jobs=(
        Job("A", 1, 0.0, (4.0,), deadline=3.0),
        Job("B", 2, 1.0, (2.0,), deadline=4.0),
    ),
    workers=(Worker("w", "std"),),
)


def test_metrics_by_hand_plan() -> None:
    r = simulate(TINY, PriorityPolicy(0.0))  # the paper's model is the default
    # at 1 the plan gives the worker to B (higher priority); it finishes A's task first (4), then runs B 4-6
    assert r.finish == {"A": 4.0, "B": 6.0}
    assert r.penalty == pytest.approx(1 * 1.0 + 2 * 2.0)
    assert r.violation_rate == 0.0  # on the plan: B has the worker from 1 on, A (lower) has none -> no violation
    assert r.violation_rate_running == pytest.approx(0.5 * 3 / 6)  # on what runs: B waits while A runs, [1, 4)
    assert [(s.time, s.plan, s.alloc) for s in r.timeline] == [
        (0.0, (("A", 1),), (("A", 1),)),
        (1.0, (("B", 1),), (("A", 1),)),
        (4.0, (("B", 1),), (("B", 1),)),
        (6.0, (), ()),
    ]
    assert all(x.completed for x in r.runs)  # nothing is killed


def test_missed_has_a_time_tolerance() -> None:
    wl = Workload((Job("A", 1, 0.0, (0.1,) * 3, deadline=0.1 + 0.1 + 0.1 - 1e-9),), (Worker("w"),))
    r = simulate(wl, PriorityPolicy(0.0))
    assert r.finish["A"] > wl.jobs[0].deadline  # type: ignore[operator]
    assert r.missed == 0 and r.penalty < 1e-6


def test_unknown_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="mode 'preemptive'"):
        simulate(TINY, PriorityPolicy(0.0), mode="preemptive")  # type: ignore[arg-type]


def test_metrics_by_hand_non_preemptive() -> None:
    r = simulate(TINY, PriorityPolicy(0.0), mode="free")
    # A runs 0-4; B waits with no worker while lower-priority A holds one (violated, 1 of 2 jobs) on [1, 4); 4-6 B
    assert r.finish == {"A": 4.0, "B": 6.0}
    assert r.penalty == pytest.approx(1 * 1.0 + 2 * 2.0)  # P_A * M_A + P_B * M_B = 1*1 + 2*2
    assert r.missed == 2
    assert r.violation_rate == pytest.approx((0 * 1 + 0.5 * 3 + 0 * 2) / 6)  # time-weighted over [0, 6)
    assert r.violation_rate_events == pytest.approx((0 + 0.5 + 0) / 3)  # decisions at 0, 1, 4
    assert [(s.time, s.violated, s.in_system) for s in r.timeline] == [(0, 0, 1), (1, 1, 2), (4, 0, 1), (6, 0, 0)]


def test_metrics_by_hand_kill() -> None:
    r = simulate(TINY, PriorityPolicy(0.0), mode="kill")
    # at 1 B takes the worker, A's task is killed; B 1-3; A redone 3-7
    assert r.finish == {"A": 7.0, "B": 3.0}
    assert r.penalty == pytest.approx(1 * 4.0)
    assert r.violation_rate == 0.0
    assert [(x.job, x.start, x.end, x.completed) for x in r.runs] == [
        ("A", 0.0, 1.0, False),
        ("B", 1.0, 3.0, True),
        ("A", 3.0, 7.0, True),
    ]


def test_violated_count_definition() -> None:
    assert violated_count([(3, 0), (2, 1), (1, 0)]) == 1  # 3 waits while 2 runs; 1 waits but nothing lower runs
    assert violated_count([(3, 0), (2, 0)]) == 0
    assert violated_count([(3, 1), (3, 0)]) == 0  # equal priority is no violation


def test_failure_scenario_6_2() -> None:
    normal = simulate(*_sc(False))
    failed = simulate(*_sc(True))
    alloc = failed.workers_of("cht")
    assert alloc[0] == (0.0, 4)  # the prior asks for the paper's default 4 workers
    assert all(n <= 2 for t, n in alloc if 55.0 <= t < 115.0)  # only 2 workers up
    assert max(n for t, n in alloc if t >= 115.0) > max(n for t, n in normal.workers_of("cht") if t >= 115.0) - 1
    assert sum(not x.completed for x in failed.runs) >= 1  # a running task was cut short and redone
    assert failed.unfinished == () and normal.unfinished == ()


def _sc(with_failure: bool):  # type: ignore[no-untyped-def]
    from soda_optimizer.dispatch import DeadlinePolicy

    wl, prior = failure_scenario(with_failure)
    return wl, DeadlinePolicy(fill=None, reading="text"), prior  # figure 6.1 follows the deadline: the text's reading


SWF = """; tiny
1 0 -1 2000 1 -1 -1 -1 -1 -1 1 7 -1 -1 -1 -1 -1 -1
2 5 -1 4000 8 -1 -1 -1 -1 -1 1 7 -1 -1 -1 -1 -1 -1
3 100 -1 1000 2 -1 -1 -1 -1 -1 1 9 -1 -1 -1 -1 -1 -1
4 110 -1 0 2 -1 -1 -1 -1 -1 0 9 -1 -1 -1 -1 -1 -1
"""


def test_swf_transformations_by_hand() -> None:
    jobs = to_jobs(parse_swf(SWF))
    assert [j.id for j in jobs] == ["j1", "j2", "j3"]  # job 4 has no runtime
    a, b, c = jobs
    assert b.arrival == 0.0  # 5 s gap x 0.1 = 0.5 s: same 1 s batch as job 1
    assert c.arrival == pytest.approx(10.0)  # 100 s x 0.1
    assert a.task_work == (2.0,) and b.task_work == (4.0,) * 8  # runtime x 0.001, tasks = processors
    assert a.deadline == pytest.approx(4.0)  # 2 x runtime (1 task < 4)
    assert b.deadline == pytest.approx(2 * 4.0 * 8 / 4)  # 2 x runtime x tasks / 4
    assert c.deadline == pytest.approx(10.0 + 2 * 1.0)
    assert (a.priority, c.priority) == (1, 2)  # user 7 has 2 jobs, user 9 one: the smaller group ranks higher


def test_swf_round_trip_and_model() -> None:
    trace = lublin_swf(500, seed=1)
    assert parse_swf(format_swf(trace, ["Version: 2"])) == trace
    assert all(1 <= j.procs <= 416 and j.run >= 1 for j in trace)
    assert sum(j.procs == 1 for j in trace) / len(trace) == pytest.approx(0.244, abs=0.06)
    assert max(priorities(trace).values()) >= 2
