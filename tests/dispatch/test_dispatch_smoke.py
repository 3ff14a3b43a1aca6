"""Smoke: every paper policy replays a small synthetic trace and finishes every job."""

from __future__ import annotations

from soda_optimizer.dispatch import Workload, paper_policies, simulate
from soda_optimizer.dispatch.scenarios import slots
from soda_optimizer.dispatch.swf import trace_jobs


def test_every_policy_finishes_a_trace() -> None:
    jobs = trace_jobs(seed=3, model_jobs=3000, sample_rate=0.02)
    for policy in paper_policies().values():
        r = simulate(Workload(jobs, slots(20, True)), policy)
        assert set(r.finish) == {j.id for j in jobs}, policy.name
        assert r.unfinished == ()
