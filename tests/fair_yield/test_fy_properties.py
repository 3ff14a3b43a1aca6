"""Section 2.3's constraints on every answer, the LP bound, equal yields of parallel jobs, the average phase."""

from __future__ import annotations

import time

import numpy as np
import pytest
from fy_helpers import instances
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from soda_optimizer.fair_yield import ALGORITHMS, allocate, generate, lp_bound, violations
from soda_optimizer.fair_yield.average import greedy_fill, job_lp
from soda_optimizer.fair_yield.generator import Spec, truncated_normal
from soda_optimizer.fair_yield.model import Instance

FAST = [a for a in ALGORITHMS if a not in ("anytime", "milp", "rrnd", "rrnz")]  # anytime: test_fy_anytime.py
PROPS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def check(inst: Instance, algorithm: str) -> None:
    r = allocate(inst, algorithm, deadline_s=5)
    assert violations(inst, r) == [], algorithm
    if r.ok:
        t = inst.tasks()
        assert len(r.placement) == t.n  # each task on exactly one host
        assert 0.0 <= r.min_yield <= r.avg_yield + 1e-9 <= 1.0 + 1e-9
        assert r.min_yield <= lp_bound(inst) + 1e-6
        # independent recomputation of the constraints
        p, y = np.array(r.placement), np.array(r.task_yield)
        for j in range(t.hosts):
            assert t.mem[p == j].sum() <= t.mem_cap[j] + 1e-6
            assert (t.alpha[p == j] * y[p == j]).sum() <= t.cpu_cap[j] + 1e-6
        for i in range(t.n_jobs):
            assert np.ptp(y[t.job == i]) <= 1e-9


@PROPS
@given(instances(hosts=(2, 16), jobs=(1, 60), max_mem=0.5), st.sampled_from(FAST))
def test_constraints_hold_on_larger_instances(inst: Instance, algorithm: str) -> None:
    check(inst, algorithm)


@settings(max_examples=10, deadline=None)
@given(instances(hosts=(2, 8), jobs=(1, 20), max_mem=0.5), st.sampled_from(["rrnd", "rrnz"]))
def test_rounding_constraints(inst: Instance, algorithm: str) -> None:
    check(inst, algorithm)


@PROPS
@given(instances(hosts=(2, 12), jobs=(1, 12), max_tasks=8, max_mem=0.4), st.sampled_from(["mcb8", "sg", "gr"]))
def test_parallel_jobs_share_one_yield(inst: Instance, algorithm: str) -> None:
    check(inst, algorithm)


@PROPS
@given(instances(hosts=(2, 10), jobs=(1, 30), unequal=True), st.sampled_from(["mcb8", "mcb5", "sgb", "gr"]))
def test_unequal_hosts(inst: Instance, algorithm: str) -> None:
    check(inst, algorithm)


@settings(max_examples=40, deadline=None)
@given(instances(hosts=(1, 6), jobs=(1, 25)), st.data())
def test_average_greedy_is_optimal(inst: Instance, data: st.DataObject) -> None:
    """Section 3.5's greedy equals the LP optimum of the second phase (an exact oracle) for any placement."""
    t = inst.tasks()
    p = np.array(data.draw(st.lists(st.integers(0, t.hosts - 1), min_size=t.n, max_size=t.n)))
    y_min = t.max_min_yield(p)
    g = greedy_fill(t, p, y_min)
    lp = job_lp(t, p, y_min)
    assert lp is not None
    assert g.min() >= y_min - 1e-9 and g.max() <= 1 + 1e-9
    cpu = np.bincount(p, weights=t.alpha * g, minlength=t.hosts)
    assert np.all(cpu <= t.cpu_cap + 1e-9)
    assert g.sum() == pytest.approx(lp.sum(), abs=1e-6)


def test_generator_follows_section_4_1() -> None:
    rng = np.random.default_rng(3)
    x = truncated_normal(rng, 0.5, 0.75, 20000, 0.0, 1.0, open_low=True)
    assert x.min() > 0 and x.max() <= 1
    inst = generate(Spec(64, 500, 0.3, 0.25, 0.25), rng)
    t = inst.tasks()
    assert t.n == 500 and t.hosts == 64
    assert t.alpha.mean() == pytest.approx(0.5, abs=0.02)
    assert t.mem.sum() == pytest.approx(64 * 0.7, rel=0.03)  # memory slack 0.3
    par = generate(Spec(64, 500, 0.3, 0.25, 0.25), rng, parallel=True)
    assert par.tasks().n == 500 and len(par.jobs) < 500


def test_deadline_is_honoured() -> None:
    inst = generate(Spec(64, 500, 0.1, 0.75, 0.75), np.random.default_rng(5))
    for algorithm in ("mcb8", "sgb", "gb"):
        t0 = time.monotonic()
        r = allocate(inst, algorithm, deadline_s=0.05)
        assert time.monotonic() - t0 < 1.0, algorithm
        assert violations(inst, r) == []
