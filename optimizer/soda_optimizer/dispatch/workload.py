"""Workload-based policy, section 5.3 (Algorithm 3), and the greedy both heterogeneity-aware policies share.

Model (5.3.1): job j_i = (w_i, p_i, n_i) -- remaining work, priority, tasks; a worker s_k = (th_1^k, th_2^k, ...) --
its estimated throughput per job, here read from the :class:`~.model.SpeedMatrix` for (job kind, node class).

Algorithm: jobs by priority, highest first; for each, sort the free workers by throughput for that job, fastest
first, and take them while ``k < n_i`` and the summed throughput is below the job's requirement; then the workers
left go to jobs still in need (line 17, section 5.5: ``fill``, default by priority).

Departures from the paper:
- Algorithm 3 compares a throughput (work/s) with a workload (work): ``th < w_i``. We read the requirement as
  "finish the remaining work within ``horizon`` seconds": ``th * horizon < w_i``; ``horizon = 1`` is the paper's
  literal comparison;
- line 14 ``result[j_i] <- workerSet[0..i]`` is read as ``workerSet[0..k)``, the k workers just summed;
- non-preemptive: the throughput of the workers already running the job's tasks counts towards the requirement,
  and ``k`` counts only new workers, capped by the queued tasks (so running + new <= remaining tasks).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .base import Assignment, Fill, Ledger, spare_fill
from .model import EPS, JobView, SpeedMatrix, WorkerView, by_priority


def greedy_by_rate(
    jobs: Sequence[JobView],
    workers: Sequence[WorkerView],
    speeds: SpeedMatrix,
    required: Callable[[JobView], float],
    fill: Fill,
    one_each: bool = False,
) -> Assignment:
    """Algorithms 3 and 4: per job by priority, fastest free workers until ``sum th >= required(job)`` (a rate);
    with ``one_each`` (Algorithm 4's line 11 as written) the fastest free worker only, and none to a job that
    already runs a task on a worker it keeps (the ``"free"`` worker model)."""
    led = Ledger(jobs, workers)
    classes: dict[str, list[str]] = defaultdict(list)
    for w in workers:
        if w.job is not None:
            classes[w.job].append(w.node_class)
    for job in sorted(jobs, key=by_priority):
        if not led.free or led.late():
            break
        if one_each:
            if not classes[job.id] and led.room(job.id) > 0:
                led.give(led.fastest(job, speeds)[0], job.id)
            continue
        need = required(job)
        th = sum(speeds.throughput(job.kind, c) for c in classes[job.id])
        k = 0
        for w in led.fastest(job, speeds):
            if k >= job.queued or th >= need * (1.0 - EPS):
                break
            led.give(w, job.id)
            th += speeds.throughput(job.kind, w.node_class)
            k += 1
    spare_fill(led, fill, speeds)
    return led.out


@dataclass(frozen=True)
class WorkloadPolicy:
    horizon: float = 1.0
    fill: Fill = "priority"

    def __post_init__(self) -> None:
        if not self.horizon > 0:
            raise ValueError("horizon must be > 0")

    @property
    def name(self) -> str:
        return f"workload(h={self.horizon:g})" + ("" if self.fill is None else f"+fill-{self.fill}")

    def assign(
        self, jobs: Sequence[JobView], workers: Sequence[WorkerView], now: float, speeds: SpeedMatrix
    ) -> Assignment:
        return greedy_by_rate(jobs, workers, speeds, lambda j: j.remaining_work / self.horizon, self.fill)
