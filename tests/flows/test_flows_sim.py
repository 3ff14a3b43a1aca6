"""The fluid simulator against hand-computed tiny cases (utility-ordered service, the map, retraction, deadlines,
backlog and its penalty, waiting jobs)."""

from __future__ import annotations

import pytest
from flows_helpers import FLAT1, admit_all, flow, pool, stats

from soda_optimizer.flows import LoadMap, Plan, PolicyEntry, Problem, Waiting, simulate

APPROX = pytest.approx


def test_underloaded_pool_serves_everything() -> None:
    p = Problem(pools=(pool("X", 10),), flows=(flow("f", ["X"], 5.0),), epochs=1, epoch_length=60)
    r = simulate(p, admit_all(p))
    s = stats(r, "f")
    assert s.arrived == APPROX(300) and s.completed == APPROX(300) and s.dropped == APPROX(0)
    assert r.score == APPROX(0)
    (ps,) = r.pools
    assert ps.load == APPROX(5) and ps.throughput == APPROX(5)


def test_utility_ordered_service() -> None:
    # cap 10: the high class (6) is served first, the low class gets the remaining 4 of its 6
    p = Problem(
        pools=(pool("X", 10),),
        flows=(flow("hi", ["X"], 6.0, utility=2), flow("lo", ["X"], 6.0, utility=1)),
        epochs=1,
        epoch_length=60,
    )
    r = simulate(p, admit_all(p))
    assert stats(r, "hi").completed == APPROX(360)
    assert stats(r, "lo").completed == APPROX(240)
    # the 120 unserved low jobs are still queued at the horizon: charged as dropped, weight 1 in epoch 0
    assert stats(r, "lo").dropped == APPROX(120)
    assert r.left_at_horizon == APPROX(120)
    assert r.score == APPROX(120)


def test_equal_utility_shares_pro_rata() -> None:
    p = Problem(
        pools=(pool("X", 10),),
        flows=(flow("a", ["X"], 9.0), flow("b", ["X"], 3.0)),
        epochs=1,
        epoch_length=60,
    )
    r = simulate(p, admit_all(p))
    assert stats(r, "a").completed == APPROX(9 * 60 * 10 / 12)
    assert stats(r, "b").completed == APPROX(3 * 60 * 10 / 12)


def test_piecewise_map() -> None:
    m = LoadMap(points=((0.0, 0.0), (0.8, 0.8), (1.0, 0.9), (100.0, 0.9)))
    p = Problem(pools=(pool("X", 10, load_map=m),), flows=(flow("f", ["X"], 9.0),), epochs=1, epoch_length=60)
    r = simulate(p, admit_all(p))
    assert r.pools[0].throughput == APPROX(8.5)  # load 0.9 -> 0.8 + 0.5 * 0.1
    assert stats(r, "f").completed == APPROX(8.5 * 60)


def test_retraction_chain_reaction() -> None:
    # L goes X then Y; M uses Y only; all low utility at Y. A high-utility H at X takes throughput from L,
    # L's load at Y falls, and M gets the freed throughput at Y.
    def problem(with_h: bool) -> Problem:
        flows = [flow("L", ["X", "Y"], 8.0), flow("M", ["Y"], 8.0)]
        if with_h:
            flows.append(flow("H", ["X"], 6.0, utility=2))
        return Problem(pools=(pool("X", 10), pool("Y", 10)), flows=tuple(flows), epochs=1, epoch_length=60)

    before = simulate(problem(False), admit_all(problem(False)))
    after = simulate(problem(True), admit_all(problem(True)))
    assert stats(before, "M").completed == APPROX(8 * 60 * 10 / 16)  # Y: 16 offered, 10 served
    assert stats(after, "L").completed == APPROX(4 * 60 * 10 / 12)  # X gives L 4; Y: 12 offered
    assert stats(after, "M").completed == APPROX(8 * 60 * 10 / 12)
    assert stats(after, "M").completed > stats(before, "M").completed


def test_deadline_carry_over_and_drop() -> None:
    # epoch 0: 15/min offered, 10 served; of the 300 unserved, lifespan 30 min of a 60 min epoch -> half survive.
    # epoch 1: the 150 carried have deadlines uniform on [30, 90]; presented uniformly over [60, 120]:
    # alive fraction = mean G / G(60) = 0.125 / 0.5 = 0.25 -> 37.5 completed, 112.5 dropped.
    p = Problem(
        pools=(pool("X", 10, epochs=2),),
        flows=(flow("f", ["X"], (15.0, 0.0), lifespan=30.0, epochs=2),),
        epochs=2,
        epoch_length=60,
    )
    r = simulate(p, admit_all(p, range(1)))
    e0, e1 = stats(r, "f", epoch=0), stats(r, "f", epoch=1)
    assert e0.completed == APPROX(600) and e0.dropped == APPROX(150)
    assert e1.completed == APPROX(37.5) and e1.dropped == APPROX(112.5)
    assert r.left_at_horizon == APPROX(0)


def test_backlog_release_and_penalty() -> None:
    # P = 0.9 per hour, epochs of one hour: holding costs 0.1 per job and epoch, weighted by P^{t(e)};
    # released jobs count half held in their release epoch.
    p = Problem(
        pools=(pool("X", 10, epochs=2),),
        flows=(flow("f", ["X"], (5.0, 0.0), lifespan=1000.0, epochs=2),),
        epochs=2,
        epoch_length=60,
        discount_per_hour=0.9,
    )
    plan = Plan(
        entries=(
            PolicyEntry(epoch=0, flow="f", cohort=0, step=0, pools={}, backlog=1.0),
            PolicyEntry(epoch=1, flow="f", cohort=0, step=0, pools={"X": 1.0}),
        )
    )
    r = simulate(p, plan)
    assert stats(r, "f", epoch=0).backlogged == APPROX(300)
    assert stats(r, "f", epoch=1).released == APPROX(300)
    assert stats(r, "f", epoch=1).completed == APPROX(300)
    assert r.score == APPROX(300 * 0.1 + 150 * 0.1 * 0.9)


def test_backlogged_short_jobs_expire() -> None:
    p = Problem(
        pools=(pool("X", 10, epochs=2),),
        flows=(flow("f", ["X"], (5.0, 0.0), lifespan=15.0, epochs=2),),
        epochs=2,
        epoch_length=60,
    )
    plan = Plan(
        entries=(
            PolicyEntry(epoch=0, flow="f", cohort=0, step=0, pools={}, backlog=1.0),
            PolicyEntry(epoch=1, flow="f", cohort=0, step=0, pools={"X": 1.0}),
        )
    )
    r = simulate(p, plan)
    # deadlines uniform on [15, 75]: a quarter is alive at 60; of those (deadlines uniform on [60, 75]), re-presented
    # uniformly over [60, 120], the alive fraction is (15 * 15 / 2) / 15 / 60 = 1/8
    assert stats(r, "f", epoch=0).dropped == APPROX(300 * 0.75)
    assert stats(r, "f", epoch=1).completed == APPROX(300 * 0.25 / 8)
    assert stats(r, "f", epoch=1).dropped == APPROX(300 * 0.25 * 7 / 8)


def test_waiting_jobs_at_time_zero() -> None:
    p = Problem(
        pools=(pool("X", 10),),
        flows=(flow("f", ["X", "X"], 0.0),),
        epochs=1,
        epoch_length=60,
        waiting=(Waiting(flow="f", step=1, pool="X", jobs=120, min_remaining=1000, max_remaining=1000),),
    )
    r = simulate(p, Plan(entries=()))
    assert stats(r, "f").completed == APPROX(120)


def test_unplanned_arrivals_are_left_out() -> None:
    p = Problem(pools=(pool("X", 10),), flows=(flow("f", ["X"], 5.0),), epochs=1, epoch_length=60)
    r = simulate(p, Plan(entries=()))
    assert stats(r, "f").arrived == 0 and r.score == 0


def test_bad_inputs_are_rejected() -> None:
    with pytest.raises(ValueError):
        LoadMap(points=((0.0, 0.0), (1.0, 1.2)))
    with pytest.raises(ValueError):
        Problem(pools=(pool("X", 10),), flows=(flow("f", ["Y"], 5.0),), epochs=1)
    with pytest.raises(ValueError):
        PolicyEntry(epoch=0, flow="f", cohort=0, step=0, pools={"X": 0.5})
    assert FLAT1(0.5) == 0.5 and FLAT1(3.0) == 1.0
