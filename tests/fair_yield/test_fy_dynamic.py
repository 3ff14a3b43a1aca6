"""Section 6.1: re-optimisation never moves more than the budget; the heuristic never beats the exact MILP."""

from __future__ import annotations

import numpy as np
import pytest
from fy_helpers import brute_force, instances
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from soda_optimizer.fair_yield import allocate, reallocate, violations
from soda_optimizer.fair_yield.dynamic import migration_cost
from soda_optimizer.fair_yield.model import Instance

DYN = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@DYN
@given(instances(hosts=(2, 10), jobs=(1, 40), max_mem=0.5), st.data(), st.booleans())
def test_heuristic_respects_budget(inst: Instance, data: st.DataObject, by_count: bool) -> None:
    t = inst.tasks()
    prev = np.array(data.draw(st.lists(st.integers(-1, t.hosts - 1), min_size=t.n, max_size=t.n)))
    budget = data.draw(st.floats(0.0, 3.0))
    r = reallocate(inst, prev, budget, by_count=by_count, deadline_s=2)
    assert violations(inst, r) == []
    if r.ok:
        assert migration_cost(t, prev, np.array(r.placement), by_count) <= budget + 1e-9


@settings(max_examples=20, deadline=None)
@given(instances(hosts=(2, 3), jobs=(1, 6), max_mem=0.6), st.data())
def test_milp_matches_brute_force_and_bounds_heuristic(inst: Instance, data: st.DataObject) -> None:
    t = inst.tasks()
    prev = np.array(data.draw(st.lists(st.integers(-1, t.hosts - 1), min_size=t.n, max_size=t.n)))
    budget = data.draw(st.floats(0.0, 1.5))
    exact = brute_force(inst, prev, budget)
    r = reallocate(inst, prev, budget, method="milp", deadline_s=20)
    h = reallocate(inst, prev, budget, deadline_s=2)
    if exact is None:
        assert not r.ok and not h.ok
        return
    assert r.min_yield == pytest.approx(exact, abs=1e-6)
    assert migration_cost(t, prev, np.array(r.placement)) <= budget + 1e-9
    if h.ok:
        assert h.min_yield <= r.min_yield + 1e-6


def test_unlimited_budget_recovers_a_static_answer_and_zero_budget_keeps_placement() -> None:
    rng = np.random.default_rng(11)
    inst = Instance.sequential(rng.uniform(0.1, 0.9, 30), rng.uniform(0.0, 0.2, 30), hosts=6)
    t = inst.tasks()
    prev = np.zeros(t.n, dtype=np.int64)
    prev[: t.n // 2] = rng.integers(0, 6, t.n // 2)  # half crowded on host 0 (memory still fits)
    prev[prev == 0] = 0
    if not t.memory_fits(prev):
        prev = rng.integers(0, 6, t.n)
    stay = reallocate(inst, prev, 0.0)
    assert stay.ok and np.array_equal(np.array(stay.placement), prev)
    free = reallocate(inst, prev, budget=1e9)
    assert free.min_yield >= stay.min_yield - 1e-12
    assert free.min_yield >= 0.9 * allocate(inst, "mcb8").min_yield
