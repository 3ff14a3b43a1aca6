"""Deadline-based policy, section 5.4 (Algorithm 4), and EDF, the baseline of section 6.3.2.

Model (5.4.1): j_i = (d_i, p_i, n_i); worker s_k = (T_1^k, T_2^k, ...), T_i^k the time worker k alone would take to
finish job i's remaining work (remaining nominal work / throughput of k's node class for i's kind). A set S of
workers meets the deadline iff ``sum_{k in S} 1 / T_i^k >= 1 / d_i``, d_i the time left to the deadline.

Algorithm 4: jobs by priority, highest first; for each, the free workers fastest first (largest 1/T), taken while
``k < n_i`` and the loop condition of line 11 holds; then the workers left go to jobs still in need, by priority or
by closest deadline (section 5.5, ``fill``; default ``"deadline"``, the combination the paper recommends).

Line 11 and the text disagree (``reading``):
- ``"pseudo-code"`` (default): line 11 stops at ``th < 1/w_i.execTime[j_i]``, a worker's own speed, not the
  deadline. The workers are sorted fastest first (line 8), so after the first one ``th = 1/T`` of the fastest
  worker, which no worker's ``1/T`` exceeds: the loop takes exactly one worker (if ``n_i >= 1``). The main pass
  gives every job, in priority order, its fastest free worker; the deadline only enters through the spare fill
  (5.5) -- which is what makes the fill rule decide the penalty, the comparison of 6.3.2;
- ``"text"``: "assign the top k workers that can finish J_m before its deadline", i.e. ``th < 1/d_i`` (5.4.2's
  ``sum 1/T >= 1/d_i``), d_i the time left, ``deadline - now``; when it is <= 0 the condition cannot be met and
  the job takes every free worker it can use (up to n_i). A job without a deadline is read as one whose deadline is
  infinitely far (issue 51): for any finite d_i the loop takes its first worker (``th = 0 < 1/d_i``) and stops
  there, so the limit is one worker in the main pass, in priority order like every other job, and the spare fill
  may give it more. Read literally (``1/d_i = 0``: it needs nothing, served only by the spare fill) a high-priority
  job without a deadline had no worker while a lower-priority job with one had some -- a priority violation the
  paper's own finding (fill-priority: zero violations, 6.3.2) rules out.

Departures from the paper:
- line 15 ``result[j_i] <- workerSet[0..i]`` is read as ``workerSet[0..k)``, the k workers the loop summed;
- n_i is the job's tasks not yet given a worker: its unfinished tasks when the policy plans over every worker (the
  simulator's default ``"plan"`` model), its queued tasks in the ``"free"`` model, where the 1/T of the workers
  already running the job's tasks count towards the sum (``"text"``), or the job gets no new worker in the main pass
  if it runs on one (``"pseudo-code"``).

EDF (the paper's comparison, "an optimal scheduling policy in real-time systems"): jobs by earliest deadline
(none last; ties by arrival then id -- priority is ignored), each taking free workers, fastest first, up to its
queued tasks.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from .base import Assignment, Fill, Ledger, Reading
from .model import JobView, SpeedMatrix, WorkerView
from .workload import greedy_by_rate

#: the rate a job without a deadline requires: the least positive one (its deadline infinitely far), so the main
#: pass of the ``"text"`` reading gives it exactly one worker (module docstring)
NO_DEADLINE_RATE = sys.float_info.min


def required_rate(job: JobView, now: float) -> float:
    """1/d_i expressed as a throughput: the remaining work divided by the time left (inf if none is left;
    :data:`NO_DEADLINE_RATE` without a deadline)."""
    if job.deadline is None:
        return NO_DEADLINE_RATE
    left = job.deadline - now
    return math.inf if left <= 0 else job.remaining_work / left


def meets_deadline(job: JobView, classes: Sequence[str], now: float, speeds: SpeedMatrix) -> bool:
    """``sum_{k in S} 1/T_i^k >= 1/d_i`` for workers of the given node classes (section 5.4.2)."""
    if job.deadline is None:
        return True
    left = job.deadline - now
    if left <= 0:
        return False
    inv_t = sum(1.0 / speeds.exec_time(job.kind, c, job.remaining_work) for c in classes)
    return inv_t >= (1.0 / left) * (1.0 - 1e-9)


@dataclass(frozen=True)
class DeadlinePolicy:
    fill: Fill = "deadline"
    reading: Reading = "pseudo-code"

    @property
    def name(self) -> str:
        base = "deadline" if self.reading == "pseudo-code" else "deadline[text]"
        return base + ("" if self.fill is None else f"+fill-{self.fill}")

    def assign(
        self, jobs: Sequence[JobView], workers: Sequence[WorkerView], now: float, speeds: SpeedMatrix
    ) -> Assignment:
        return greedy_by_rate(
            jobs, workers, speeds, lambda j: required_rate(j, now), self.fill, one_each=self.reading == "pseudo-code"
        )


def _edf_key(job: JobView) -> tuple[float, float, str]:
    return (math.inf if job.deadline is None else job.deadline, job.arrival, job.id)


@dataclass(frozen=True)
class EdfPolicy:
    @property
    def name(self) -> str:
        return "edf"

    def assign(
        self, jobs: Sequence[JobView], workers: Sequence[WorkerView], now: float, speeds: SpeedMatrix
    ) -> Assignment:
        led = Ledger(jobs, workers)
        for job in sorted(jobs, key=_edf_key):
            if not led.free or led.late():
                break
            for w in led.fastest(job, speeds)[: max(0, job.queued)]:
                led.give(w, job.id)
        return led.out
