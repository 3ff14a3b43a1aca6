"""The exact MILP against brute force, and every heuristic against the MILP (sections 2.5, 3, 5.1)."""

from __future__ import annotations

import numpy as np
import pytest
from fy_helpers import brute_force, instances
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from soda_optimizer.fair_yield import ALGORITHMS, allocate, lp_bound, solve_milp, violations
from soda_optimizer.fair_yield.generator import Spec, generate
from soda_optimizer.fair_yield.model import Instance

HEURISTICS = [a for a in ALGORITHMS if a != "milp"]
SLOW = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SLOW
@given(instances(hosts=(2, 3), jobs=(1, 6), max_tasks=1))
def test_milp_matches_brute_force(inst: Instance) -> None:
    exact = brute_force(inst)
    r = solve_milp(inst, deadline_s=20)
    if exact is None:
        assert r.status == "infeasible" and not r.ok
        return
    assert r.status == "optimal"
    assert r.min_yield == pytest.approx(exact, abs=1e-6)
    assert violations(inst, r) == []


@settings(max_examples=15, deadline=None)
@given(instances(hosts=(2, 3), jobs=(1, 3), max_tasks=3, max_mem=0.6))
def test_milp_parallel_jobs_matches_brute_force(inst: Instance) -> None:
    if inst.tasks().n > 7:
        return
    exact = brute_force(inst)
    r = solve_milp(inst, deadline_s=20)
    if exact is None:
        assert not r.ok
        return
    assert r.min_yield == pytest.approx(exact, abs=1e-6)
    assert violations(inst, r) == []


@settings(max_examples=15, deadline=None)
@given(instances(hosts=(2, 3), jobs=(1, 5), unequal=True))
def test_milp_unequal_hosts_matches_brute_force(inst: Instance) -> None:
    exact = brute_force(inst)
    r = solve_milp(inst, deadline_s=20)
    if exact is None:
        assert not r.ok
        return
    assert r.min_yield == pytest.approx(exact, abs=1e-6)
    assert exact <= lp_bound(inst) + 1e-6


@SLOW
@given(instances(hosts=(2, 4), jobs=(1, 8)), st.sampled_from(HEURISTICS))
def test_heuristics_never_beat_the_milp(inst: Instance, algorithm: str) -> None:
    opt = solve_milp(inst, deadline_s=20)
    r = allocate(inst, algorithm, deadline_s=5)
    assert opt.status in ("optimal", "infeasible")
    assert opt.min_yield <= lp_bound(inst) + 1e-6
    if r.ok:
        assert opt.ok, f"{algorithm} placed an instance the MILP calls infeasible"
        assert r.min_yield <= opt.min_yield + 1e-6
        assert violations(inst, r) == []
    if r.status == "optimal":  # a heuristic claiming optimality reached the upper bound
        assert r.min_yield == pytest.approx(opt.min_yield, abs=1e-6)


# MCB8 against the exact optimum on section 4.1's small instances. The paper reports the MILP 2% better than
# MCB8 on average (section 4.2.2) and MCB8 failing on 1 of 1,380 feasible instances; we allow an average gap of 5%
# and failures on at most 10% of the feasible instances of this sample.
MCB8_AVG_GAP = 0.05
MCB8_FAIL_RATE = 0.10


def test_mcb8_within_tolerance_of_milp_on_generated_instances() -> None:
    rng = np.random.default_rng(20260)
    gaps, fails, feasible = [], 0, 0
    for k in range(24):
        spec = Spec(4, (6, 8)[k % 2], (0.2, 0.4, 0.6, 0.8)[(k // 2) % 4], (0.25, 0.75)[(k // 8) % 2], 0.25)
        inst = generate(spec, rng)
        opt = solve_milp(inst, deadline_s=20)
        mcb = allocate(inst, "mcb8", deadline_s=5)
        if not opt.ok:
            assert not mcb.ok
            continue
        feasible += 1
        if not mcb.ok:
            fails += 1
            continue
        assert mcb.min_yield <= opt.min_yield + 1e-6
        gaps.append((opt.min_yield - mcb.min_yield) / opt.min_yield)
    assert feasible >= 12
    assert fails <= MCB8_FAIL_RATE * feasible
    assert float(np.mean(gaps)) <= MCB8_AVG_GAP
