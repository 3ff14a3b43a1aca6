"""Priority-based policy, section 5.1 (Algorithm 1). Heterogeneity-unaware: free workers are taken in id order.

The highest-priority job gets up to ``floor((1 - r) * m)`` workers (``m`` the workers that are up, ``r`` the
reservation rate), capped by its remaining tasks; then every following job, in priority order, gets one worker
("one job receives one worker") until the free workers run out. With ``r = 0`` no job gets a free worker while a
higher-priority job with queued tasks is left with none.

Departures from the paper:
- Algorithm 1 line 3 reads ``min(totalTask, size - floor((1 - r) * size))`` and the text says "x is the maximum of
  the idle workers and the tasks"; both contradict "the job with highest priorities can use at most the 1 - r of
  all workers". We implement the sentence: ``min(tasks, floor((1 - r) * m))``, and at least 1 (so that r = 1 does
  not leave the top job with less than every other job);
- non-preemptive: workers already running a job's tasks count towards its share; only free workers are assigned;
- Algorithm 1 leaves workers idle once every job has one; ``fill`` (default None = the paper) may hand them out by
  section 5.5's rules instead.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from .base import Assignment, Fill, Ledger, spare_fill
from .model import JobView, SpeedMatrix, WorkerView, by_priority


@dataclass(frozen=True)
class PriorityPolicy:
    reservation: float = 0.0
    fill: Fill = None

    def __post_init__(self) -> None:
        if not 0.0 <= self.reservation <= 1.0:
            raise ValueError("reservation rate must be in [0, 1]")

    @property
    def name(self) -> str:
        base = f"priority(r={self.reservation:g})"
        return base if self.fill is None else f"{base}+fill-{self.fill}"

    def assign(
        self, jobs: Sequence[JobView], workers: Sequence[WorkerView], now: float, speeds: SpeedMatrix
    ) -> Assignment:
        led = Ledger(jobs, workers)
        order = sorted(jobs, key=by_priority)
        if not order or not led.free:
            return led.out
        top = order[0]
        cap = min(top.remaining_tasks, max(1, math.floor((1.0 - self.reservation) * led.up + 1e-9)))
        led.give_first(top.id, cap - led.workers_of(top.id))
        for job in order[1:]:
            if not led.free:
                break
            led.give_first(job.id, 1 - led.workers_of(job.id))
        spare_fill(led, self.fill, speeds)
        return led.out
