"""Hand-worked examples of every policy on tiny inputs, from the paper's definitions (sections 5.1-5.5, 6.3.2)."""

from __future__ import annotations

from collections import Counter

import pytest
from dispatch_helpers import free, jv

from soda_optimizer.dispatch import (
    DeadlinePolicy,
    EdfPolicy,
    PriorityPolicy,
    ProportionPolicy,
    SpeedMatrix,
    WorkerView,
    WorkloadPolicy,
    decide,
    meets_deadline,
)

FAST_SLOW = SpeedMatrix(prior=1.0, table={("k1", "fast"): 2.0, ("k1", "slow"): 1.0})


def counts(out: dict[str, str]) -> dict[str, int]:
    return dict(Counter(out.values()))


def hetero() -> list[WorkerView]:
    return free(2, "fast") + free(3, "slow", start=2)  # w00, w01 fast (th 2); w02..w04 slow (th 1)


# 5.1 -- A (p3, 12 tasks), B (p2), C (p1) on 10 free workers
JOBS_51 = [jv("A", 3, 12), jv("B", 2, 5), jv("C", 1, 5)]


def test_priority_reservation_caps_the_top_job() -> None:
    # r = 0.2: A may use floor(0.8 * 10) = 8; B and C one each
    assert counts(decide(PriorityPolicy(0.2), JOBS_51, free(10), 0.0)) == {"A": 8, "B": 1, "C": 1}


def test_priority_without_reservation_gives_the_top_job_everything() -> None:
    assert counts(decide(PriorityPolicy(0.0), JOBS_51, free(10), 0.0)) == {"A": 10}


def test_priority_caps_by_tasks_then_one_each_then_idle_or_fill() -> None:
    jobs = [jv("A", 3, 3), jv("B", 2, 5), jv("C", 1, 5)]
    assert counts(decide(PriorityPolicy(0.0), jobs, free(10), 0.0)) == {"A": 3, "B": 1, "C": 1}  # 5 idle
    assert counts(decide(PriorityPolicy(0.0, "priority"), jobs, free(10), 0.0)) == {"A": 3, "B": 5, "C": 2}


def test_priority_alg1_line_3_as_written() -> None:
    # line 3: c = min(totalTask, m - floor((1 - r) m)) = min(12, 10 - 8) = 2 at r = 0.2; 0 at r = 0 (the top job
    # gets nothing, every other job one: line 5 starts at the second job)
    assert counts(decide(PriorityPolicy(0.2, reading="pseudo-code"), JOBS_51, free(10), 0.0)) == {"A": 2, "B": 1, "C": 1}
    assert counts(decide(PriorityPolicy(0.0, reading="pseudo-code"), JOBS_51, free(10), 0.0)) == {"B": 1, "C": 1}


def test_proportion_alg2_line_5_as_written() -> None:
    jobs = [jv("A", 3, 10, work=6.0), jv("B", 2, 10, work=3.0), jv("C", 1, 10, work=1.0)]
    assert counts(decide(ProportionPolicy(reading="pseudo-code"), jobs, free(10), 0.0)) == {"A": 1, "B": 1, "C": 1}


def test_priority_non_preemptive_running_workers_count() -> None:
    # A already runs on 6 workers: with r = 0.2 of 10 up workers it may have 8, so 2 more; B runs on 1: no more
    running = [WorkerView(f"r{i}", "a", "A") for i in range(6)] + [WorkerView("rb", "a", "B")]
    jobs = [jv("A", 3, 6, running=6), jv("B", 2, 5, running=1), jv("C", 1, 5)]
    assert counts(decide(PriorityPolicy(0.2), jobs, running + free(3), 0.0)) == {"A": 2, "C": 1}


# 5.2 -- shares ceil(m * w_i / W) in priority order, capped by what is left
def test_proportion_shares() -> None:
    jobs = [jv("A", 3, 10, work=6.0), jv("B", 2, 10, work=3.0), jv("C", 1, 10, work=1.0)]
    assert counts(decide(ProportionPolicy(), jobs, free(10), 0.0)) == {"A": 6, "B": 3, "C": 1}


def test_proportion_ceiling_starves_the_last_job() -> None:
    jobs = [jv("A", 3, 10, work=5.5), jv("B", 2, 10, work=3.5), jv("C", 1, 10, work=1.0)]
    assert counts(decide(ProportionPolicy(), jobs, free(10), 0.0)) == {"A": 6, "B": 4}


# 5.3 -- fastest workers until sum th >= w_i (horizon 1: the paper's literal comparison)
def test_workload_greedy_picks_fastest_until_satisfied() -> None:
    jobs = [jv("A", 2, 5, work=3.0), jv("B", 1, 5, work=2.0)]
    out = decide(WorkloadPolicy(1.0, fill=None), jobs, hetero(), 0.0, FAST_SLOW)
    assert out == {"w00": "A", "w01": "A", "w02": "B", "w03": "B"}  # A: 2 + 2 >= 3; B: 1 + 1 >= 2; w04 idle
    out = decide(WorkloadPolicy(1.0, fill="priority"), jobs, hetero(), 0.0, FAST_SLOW)
    assert out["w04"] == "A"  # line 17: the spare worker goes to A, still in need, highest priority


def test_workload_horizon() -> None:
    # with a 3 s horizon A needs th >= 1 only: one fast worker
    out = decide(WorkloadPolicy(3.0, fill=None), [jv("A", 2, 5, work=3.0)], hetero(), 0.0, FAST_SLOW)
    assert out == {"w00": "A"}


# 5.4 -- sum 1/T >= 1/d
def test_deadline_greedy_meets_each_deadline_with_fewest_fastest_workers() -> None:
    # now = 0. A: work 10, deadline 4 -> need 2.5/s: fast 2 < 2.5, + fast 2 = 4 (sum 1/T = 2/10 + 2/10 >= 1/4)
    # B: work 3, deadline 2 -> need 1.5/s: slow 1 < 1.5, + slow = 2
    jobs = [jv("A", 2, 5, work=10.0, deadline=4.0), jv("B", 1, 4, work=3.0, deadline=2.0)]
    out = decide(DeadlinePolicy(fill=None, reading="text"), jobs, hetero(), 0.0, FAST_SLOW)
    assert out == {"w00": "A", "w01": "A", "w02": "B", "w03": "B"}
    assert meets_deadline(jobs[0], ["fast", "fast"], 0.0, FAST_SLOW)
    assert not meets_deadline(jobs[0], ["slow", "slow"], 0.0, FAST_SLOW)  # 0.1 + 0.1 < 0.25
    assert not meets_deadline(jobs[0], ["fast"], 0.0, FAST_SLOW)  # 0.2 < 0.25


def test_deadline_fill_rules() -> None:
    jobs = [jv("A", 2, 5, work=10.0, deadline=4.0), jv("B", 1, 4, work=3.0, deadline=2.0)]
    by_deadline = decide(DeadlinePolicy(fill="deadline"), jobs, hetero(), 0.0, FAST_SLOW)
    by_priority = decide(DeadlinePolicy(fill="priority"), jobs, hetero(), 0.0, FAST_SLOW)
    assert by_deadline["w04"] == "B"  # B's deadline (2) is the closest
    assert by_priority["w04"] == "A"  # A has the higher priority


def test_deadline_counts_running_workers_and_time_left() -> None:
    # A runs on one fast worker; at now = 2 its 10 units are due in 2 s: need 5/s; has 2; adds fast 2, slow 1 -> 5
    jobs = [jv("A", 2, 5, running=1, work=10.0, deadline=4.0)]
    workers = [WorkerView("r0", "fast", "A"), *free(1, "fast", start=1), *free(3, "slow", start=2)]
    out = decide(DeadlinePolicy(fill=None, reading="text"), jobs, workers, 2.0, FAST_SLOW)
    assert out == {"w01": "A", "w02": "A"}
    assert decide(DeadlinePolicy(fill=None), jobs, workers, 2.0, FAST_SLOW) == {}  # line 11: it runs on one already


def test_deadline_past_takes_all_it_can_and_no_deadline_takes_one() -> None:
    # issue 51: B (no deadline, the higher priority) is read as a deadline infinitely far: one worker in the main
    # pass, before A; main read it as needing nothing and left it without a worker while A had 3 (a violation)
    jobs = [jv("A", 2, 3, work=1.0, deadline=1.0), jv("B", 5, 4, work=1.0)]
    out = decide(DeadlinePolicy(fill=None, reading="text"), jobs, free(5), 2.0)
    assert counts(out) == {"A": 3, "B": 1}
    assert counts(decide(DeadlinePolicy(fill=None, reading="text"), jobs, free(1), 2.0)) == {"B": 1}
    assert counts(decide(DeadlinePolicy(fill="priority", reading="text"), jobs, free(5), 2.0)) == {"A": 3, "B": 2}


def test_deadline_pseudo_code_line_11_one_worker_each_then_fill() -> None:
    # line 11 as written: the fastest free worker for each job in priority order (A, then B), whatever the deadline;
    # then the spare workers by the fill rule
    jobs = [jv("A", 2, 5, work=10.0, deadline=4.0), jv("B", 1, 4, work=3.0, deadline=2.0)]
    assert decide(DeadlinePolicy(fill=None), jobs, hetero(), 0.0, FAST_SLOW) == {"w00": "A", "w01": "B"}
    by_deadline = decide(DeadlinePolicy(fill="deadline"), jobs, hetero(), 0.0, FAST_SLOW)
    assert counts(by_deadline) == {"A": 1, "B": 4}  # B (deadline 2) fills up to its 4 tasks first
    assert counts(decide(DeadlinePolicy(fill="priority"), jobs, hetero(), 0.0, FAST_SLOW)) == {"A": 4, "B": 1}
    assert counts(decide(DeadlinePolicy(fill=None), jobs, free(1), 0.0)) == {"A": 1}  # workers run out: priority


# 6.3.2 -- EDF ignores priority
def test_edf_earliest_deadline_first() -> None:
    jobs = [jv("A", 5, 3, deadline=10.0), jv("B", 1, 2, deadline=5.0), jv("C", 9, 4)]
    assert counts(decide(EdfPolicy(), jobs, free(4), 0.0)) == {"B": 2, "A": 2}
    assert counts(decide(EdfPolicy(), jobs, free(9), 0.0)) == {"B": 2, "A": 3, "C": 4}


def test_edf_gives_fastest_workers_to_the_earliest_deadline() -> None:
    jobs = [jv("A", 5, 1, deadline=10.0), jv("B", 1, 1, deadline=5.0)]
    assert decide(EdfPolicy(), jobs, free(1, "slow") + free(1, "fast", start=1), 0.0, FAST_SLOW) == {
        "w01": "B",
        "w00": "A",
    }


def test_decide_rejects_a_policy_that_breaks_the_rules() -> None:
    class Greedy:
        name = "bad"

        def assign(self, jobs, workers, now, speeds):  # type: ignore[no-untyped-def]
            return {w.id: jobs[0].id for w in workers}

    with pytest.raises(ValueError):
        decide(Greedy(), [jv("A", 1, 1)], free(2), 0.0)
    with pytest.raises(ValueError):
        PriorityPolicy(reservation=1.5)


def test_speed_matrix_adaptive_update() -> None:
    m = SpeedMatrix(prior=0.5, min_samples=2, window=2)
    assert m.throughput("k", "c") == 0.5
    m = m.observe("k", "c", work=2.0, seconds=1.0)  # 0.5 s per unit, but only one sample: prior still used
    assert m.throughput("k", "c") == 0.5
    m = m.observe("k", "c", work=1.0, seconds=1.5)  # mean(0.5, 1.5) = 1 s per unit
    assert m.throughput("k", "c") == pytest.approx(1.0)
    m = m.observe("k", "c", work=1.0, seconds=0.5)  # window 2: mean(1.5, 0.5)
    assert m.throughput("k", "c") == pytest.approx(1.0)
    m = m.observe("k", "c", work=1.0, seconds=0.5)
    assert m.throughput("k", "c") == pytest.approx(2.0)
    assert m.exec_time("k", "c", 4.0) == pytest.approx(2.0)
    assert m.throughput("k", "other") == 0.5
