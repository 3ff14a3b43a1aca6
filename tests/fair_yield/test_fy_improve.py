"""The local search of the anytime default's first step (:mod:`soda_optimizer.fair_yield.improve`, issue 47):
never a lower minimum yield, every task on a host it may use within memory, and at its end no single move or swap
(any task, any host, checked by brute force) raises the minimum yield."""

from __future__ import annotations

import itertools

import numpy as np
from fy_helpers import brute_force, instances
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from soda_optimizer.fair_yield import solve_anytime, solve_mcb, violations
from soda_optimizer.fair_yield.improve import improve
from soda_optimizer.fair_yield.model import Instance, Tasks

PROPS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


def _valid(t: Tasks, p: np.ndarray) -> bool:
    return t.memory_fits(p) and bool(t.may()[np.arange(t.n), p].all())


@PROPS
@given(instances(hosts=(2, 5), jobs=(2, 10), restrict=True), st.data())
def test_local_search_is_sound_and_locally_optimal(inst: Instance, data: st.DataObject) -> None:
    t = inst.tasks()
    start = np.array(data.draw(st.lists(st.integers(0, t.hosts - 1), min_size=t.n, max_size=t.n)))
    if not _valid(t, start):
        m8 = solve_mcb(t, 8, deadline_s=None)
        if not m8.ok:
            return
        start = np.array(m8.placement)
    p = improve(t, start)
    assert _valid(t, p)
    y = t.max_min_yield(p)
    assert y >= t.max_min_yield(start) - 1e-12
    if y >= 1.0:
        return
    for k, j in itertools.product(range(t.n), range(t.hosts)):  # every single move
        q = p.copy()
        q[k] = j
        if _valid(t, q):
            assert t.max_min_yield(q) <= y + 1e-9, (k, j)
    for a, b in itertools.combinations(range(t.n), 2):  # every swap
        q = p.copy()
        q[a], q[b] = p[b], p[a]
        if _valid(t, q):
            assert t.max_min_yield(q) <= y + 1e-9, (a, b)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances(hosts=(2, 3), jobs=(1, 6), restrict=True, unequal=True))
def test_anytime_with_the_local_search_stays_exact(inst: Instance) -> None:
    """The first step's better start changes nothing the MILP proves: the brute-force optimum, valid answers."""
    want = brute_force(inst)
    r = solve_anytime(inst, deadline_s=None)
    if want is None:
        assert not r.ok
        return
    assert violations(inst, r) == []
    assert abs(r.min_yield - want) <= 1e-6


def test_an_ejection_chain_where_no_move_or_swap_helps() -> None:
    """Issue 47, memory-tight: host 0 holds A and B (load 1.2); no move of A or B fits another host's memory and
    no swap fits host 0's, but A to host 1 with C (host 1's) to host 3 does: every host then at most 0.7 (yield
    1). Before the chains the search stopped at yield 1/1.2."""
    from soda_optimizer.fair_yield.model import Job

    jobs = (Job(alpha=0.6, mem=0.5), Job(alpha=0.6, mem=0.5), Job(alpha=0.7, mem=0.4), Job(alpha=0.1, mem=0.5),
            Job(alpha=0.5, mem=0.6))
    inst = Instance(jobs=jobs, hosts=4, cpu=(1.0, 1.0, 1.0, 1.0), mem=(1.0, 1.0, 1.0, 0.45))
    t = inst.tasks()
    start = np.array([0, 0, 1, 1, 2])
    assert _valid(t, start) and t.max_min_yield(start) < 0.84
    p = improve(t, start)
    assert _valid(t, p) and t.max_min_yield(p) == 1.0


@PROPS
@given(instances(hosts=(2, 5), jobs=(2, 10), restrict=True), st.data())
def test_iterated_search_is_sound_and_never_below_its_starts(inst: Instance, data: st.DataObject) -> None:
    """The iterated search (kicks, then the local search; issue 47): every placement it returns keeps every task
    on a host it may use within memory, and is at least as good as the best of its starts. Stopped after a drawn
    number of rounds (no clock)."""
    from soda_optimizer.fair_yield.improve import search

    t = inst.tasks()
    m8 = solve_mcb(t, 8, deadline_s=None)
    if not m8.ok:
        return
    starts = [np.array(m8.placement)]
    other = np.array(data.draw(st.lists(st.integers(0, t.hosts - 1), min_size=t.n, max_size=t.n)))
    if _valid(t, other):
        starts.append(other)
    rounds = data.draw(st.integers(0, 30))
    calls = iter(range(rounds + 1))
    p = search(t, starts, float("inf"), stop=lambda: next(calls, rounds) >= rounds, seed=data.draw(st.integers(0, 99)))
    assert _valid(t, p)
    assert t.max_min_yield(p) >= max(t.max_min_yield(s) for s in starts) - 1e-12
