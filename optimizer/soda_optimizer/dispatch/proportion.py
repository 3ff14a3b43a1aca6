"""Proportion-based policy, section 5.2 (Algorithm 2, fair-share scheduling). Heterogeneity-unaware.

In priority order, job i's share is ``c_i = min(ceil(m * w_i / W), workers not yet shared out, tasks_i)`` where
``w_i`` is its remaining (nominal) work, ``W`` the total over the jobs in the system and ``m`` the workers that are
up. Because of the ceiling the last jobs may get nothing.

Departures from the paper:
- Algorithm 2 line 5 omits the factor m (``ceil(w_i / W)`` is always 1); the text ("the number of all workers
  multiplies its ratio") has it, and we follow the text;
- the share is also capped by the job's remaining tasks (section 5's general rule);
- non-preemptive: a job's running workers count towards ``c_i``; it receives ``c_i - running`` free workers (id
  order) if there are that many; ``fill`` (default None) may hand out what the shares leave idle (5.5).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from .base import Assignment, Fill, Ledger, spare_fill
from .model import JobView, SpeedMatrix, WorkerView, by_priority


@dataclass(frozen=True)
class ProportionPolicy:
    fill: Fill = None

    @property
    def name(self) -> str:
        return "proportion" if self.fill is None else f"proportion+fill-{self.fill}"

    def shares(self, jobs: Sequence[JobView], up: int) -> dict[str, int]:
        """Algorithm 2's c_i per job (counting running workers), given ``up`` workers."""
        total = sum(j.remaining_work for j in jobs)
        pool = up
        out: dict[str, int] = {}
        for job in sorted(jobs, key=by_priority):
            ratio = job.remaining_work / total if total > 0 else 0.0
            c = min(math.ceil(up * ratio - 1e-9), pool, job.remaining_tasks)
            out[job.id] = max(0, c)
            pool -= out[job.id]
        return out

    def assign(
        self, jobs: Sequence[JobView], workers: Sequence[WorkerView], now: float, speeds: SpeedMatrix
    ) -> Assignment:
        led = Ledger(jobs, workers)
        for job_id, c in self.shares(jobs, led.up).items():
            led.give_first(job_id, c - led.workers_of(job_id))
        spare_fill(led, self.fill, speeds)
        return led.out
