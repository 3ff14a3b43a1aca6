"""Proportion-based policy, section 5.2 (Algorithm 2, fair-share scheduling). Heterogeneity-unaware.

In priority order, job i's share is ``c_i = min(ceil(m * w_i / W), workers not yet shared out, tasks_i)`` where
``w_i`` is its remaining (nominal) work, ``W`` the total over the jobs in the system and ``m`` the workers that are
up. Because of the ceiling the last jobs may get nothing.

Line 5 and the text disagree (``reading``): line 5 computes ``ceil(w_i / W)``, which is 1 for every job with work
left, so the pseudo-code gives one worker per job in priority order (``"pseudo-code"``); the text ("the number of
all workers multiplies its ratio", "fair share scheduling") has the factor m (``"text"``, the default). As for
Algorithm 1 we do not make the pseudo-code the default: as written it is not proportional at all, the section's
whole point.

Departures from the paper:
- the share is also capped by the job's remaining tasks (section 5's general rule);
- non-preemptive: a job's running workers count towards ``c_i``; it receives ``c_i - running`` free workers (id
  order) if there are that many; ``fill`` (default None) may hand out what the shares leave idle (5.5).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from .base import Assignment, Fill, Ledger, Reading, spare_fill
from .model import JobView, SpeedMatrix, WorkerView, by_priority


@dataclass(frozen=True)
class ProportionPolicy:
    fill: Fill = None
    reading: Reading = "text"

    @property
    def name(self) -> str:
        base = "proportion" if self.reading == "text" else "proportion[alg2]"
        return base if self.fill is None else f"{base}+fill-{self.fill}"

    def shares(self, jobs: Sequence[JobView], up: int) -> dict[str, int]:
        """Algorithm 2's c_i per job (counting running workers), given ``up`` workers."""
        total = sum(j.remaining_work for j in jobs)
        pool = up
        out: dict[str, int] = {}
        for job in sorted(jobs, key=by_priority):
            ratio = job.remaining_work / total if total > 0 else 0.0
            want = math.ceil(up * ratio - 1e-9) if self.reading == "text" else math.ceil(ratio - 1e-12)
            c = min(want, pool, job.remaining_tasks)
            out[job.id] = max(0, c)
            pool -= out[job.id]
        return out

    def assign(
        self, jobs: Sequence[JobView], workers: Sequence[WorkerView], now: float, speeds: SpeedMatrix
    ) -> Assignment:
        led = Ledger(jobs, workers)
        for job_id, c in self.shares(jobs, led.up).items():
            if led.late():
                break
            led.give_first(job_id, c - led.workers_of(job_id))
        spare_fill(led, self.fill, speeds)
        return led.out
