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
