"""A YieldGroup's epoch through the one entry (issue 45 item 1): ``systems.decide("fair_yield",
FairYieldSpec(algorithm, previous, budget, fixed), instance, deadline)`` re-places from where the pods run within
the budget, keeps fixed tasks and each task's hosts, and says what ran; checked against brute force."""

from __future__ import annotations

import numpy as np
from fy_helpers import brute_force, instances
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from soda_optimizer import systems
from soda_optimizer.fair_yield import violations
from soda_optimizer.fair_yield.dynamic import migration_cost
from soda_optimizer.fair_yield.model import Instance, Job


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances(hosts=(2, 3), jobs=(1, 5), max_mem=0.6, restrict=True), st.data(), st.sampled_from(["anytime", "dynamic", "mcb8", "sg"]))
def test_the_epoch_through_the_entry(inst: Instance, data: st.DataObject, algorithm: str) -> None:
    t = inst.tasks()
    prev = np.array(data.draw(st.lists(st.integers(-1, t.hosts - 1), min_size=t.n, max_size=t.n)))
    fixed = np.array(data.draw(st.lists(st.booleans(), min_size=t.n, max_size=t.n)))
    budget = data.draw(st.floats(0.0, 1.5))
    spec = systems.FairYieldSpec(algorithm=algorithm, previous=tuple(int(p) for p in prev), budget=budget, fixed=tuple(bool(f) for f in fixed))
    d = systems.decide("fair_yield", spec, inst, 2.0)
    a = d.result
    assert d.system == "fair_yield" and d.algorithm.split()[0] in (algorithm, "dynamic") and d.status == a.status
    assert violations(inst, a) == []
    exact = brute_force(inst, prev, budget, fixed)
    if exact is None:
        assert not a.ok
        return
    if a.ok:
        p = np.array(a.placement)
        assert migration_cost(t, prev, p) <= budget + 1e-9
        assert np.all(p[fixed & (prev >= 0)] == prev[fixed & (prev >= 0)])
        assert a.min_yield <= exact + 1e-6


def test_a_named_algorithm_beyond_the_budget_falls_back_and_says_so() -> None:
    inst = Instance(jobs=(Job(alpha=1.0, mem=0.4), Job(alpha=1.0, mem=0.4)), hosts=2)
    spec = systems.FairYieldSpec(algorithm="mcb8", previous=(0, 0), budget=0.0, fixed=(False, False))
    d = systems.decide("fair_yield", spec, inst, 1.0)
    assert d.algorithm == "dynamic (mcb8: moves beyond the migration budget)" and d.result.placement == (0, 0)
    moved = systems.decide("fair_yield", spec.model_copy(update={"budget": 1.0}), inst, 1.0)
    assert moved.algorithm == "mcb8" and sorted(moved.result.placement) == [0, 1] and moved.result.min_yield == 1.0
