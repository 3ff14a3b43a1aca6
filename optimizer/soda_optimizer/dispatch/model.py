"""The job/task and worker model of Lin, "Job Dispatching and Scheduling under Heterogeneous Clusters" (NTU 2014),
sections 3.1, 3.4, 3.5.1, 4.4, 5.3.1, 5.4.1 and 6.3.2. Pure: no Kubernetes, no I/O.

- :class:`Job` -- a job of independent tasks (3.1) with a priority (higher = more important), an optional soft
  deadline (absolute time, seconds) whose miss costs ``priority * lateness`` (the penalty of 6.3.2), a job kind
  (the row of the speed matrix) and the true work of each task (seconds at speed 1). ``declared_work`` says whether
  the user gave the per-task workloads (3.1: "summing the workloads (if explicitly provided)"); if not, the
  decision maker only counts tasks, each as one nominal unit of work.
- :class:`Worker` -- one worker slot (3.4: a worker runs at most one task at a time) of a node class, with its true
  speed factor. The true speed is the simulator's business only: policies see a :class:`WorkerView`.
- :class:`SpeedMatrix` -- the per-(job kind, node class) throughput th (work units per second, 5.3.1) and its
  reciprocal, the execution time T (5.4.1), with the adaptive update of 4.4: the prior ("default value") until
  ``min_samples`` tasks of that kind finished on that class, then the mean of the last ``window`` observed times
  per unit of work.
- :class:`JobView`, :class:`WorkerView` -- what the decision maker is given (3.5.1's status checker output).

Departures: the paper keys the estimate by (job, worker) (s_k = (th_1^k, th_2^k, ...)); we key it by (job kind,
node class) so that what one job taught is reused by the next job of the same kind and by every worker of a class.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

EPS = 1e-9
TIME_TOL = 1e-6  #: seconds: a finish this close past a deadline is not a miss (float noise of summed times)
DEFAULT_KIND = "default"


@dataclass(frozen=True)
class Job:
    """A job: ``task_work[i]`` is task i's true work (seconds on a speed-1 worker); arrival/deadline are absolute."""

    id: str
    priority: int
    arrival: float
    task_work: tuple[float, ...]
    deadline: float | None = None
    kind: str = DEFAULT_KIND
    declared_work: bool = True

    def __post_init__(self) -> None:
        if not self.task_work:
            raise ValueError(f"job {self.id}: no tasks")
        if any(not (w > 0 and math.isfinite(w)) for w in self.task_work):
            raise ValueError(f"job {self.id}: task work must be finite and > 0")
        if not math.isfinite(self.arrival) or self.arrival < 0:
            raise ValueError(f"job {self.id}: bad arrival {self.arrival}")
        if self.deadline is not None and not math.isfinite(self.deadline):
            raise ValueError(f"job {self.id}: bad deadline {self.deadline}")

    @property
    def tasks(self) -> int:
        return len(self.task_work)

    def nominal_work(self, task: int) -> float:
        """The work the decision maker believes task ``task`` has: its declared work, else one unit (a count)."""
        return self.task_work[task] if self.declared_work else 1.0

    def penalty(self, finish: float) -> float:
        """Section 6.3.2: P_j * M_j, M_j the seconds by which the deadline was missed (0 if met or no deadline)."""
        if self.deadline is None:
            return 0.0
        return self.priority * max(0.0, finish - self.deadline)

    def late(self, finish: float) -> bool:
        """Whether ``finish`` misses the deadline by more than :data:`TIME_TOL` seconds."""
        return self.deadline is not None and finish > self.deadline + TIME_TOL


@dataclass(frozen=True)
class Worker:
    """A worker slot on a node of class ``node_class``; ``speed`` multiplies the true speed (hidden from policies)."""

    id: str
    node_class: str = "default"
    speed: float = 1.0

    def __post_init__(self) -> None:
        if not (self.speed > 0 and math.isfinite(self.speed)):
            raise ValueError(f"worker {self.id}: speed must be finite and > 0")


@dataclass(frozen=True)
class JobView:
    """A job in the system as the decision maker sees it at one instant.

    ``queued`` tasks wait for a worker, ``running`` tasks hold one (non-preemptive: they keep it), ``remaining_work``
    is the nominal work of the unfinished (queued + running) tasks."""

    id: str
    priority: int
    arrival: float
    deadline: float | None
    kind: str
    queued: int
    running: int
    remaining_work: float

    @property
    def remaining_tasks(self) -> int:
        return self.queued + self.running


@dataclass(frozen=True)
class WorkerView:
    """A worker that is up: ``job`` is the job whose task it runs, None when it is free (available).

    ``current`` is set when the policy plans over every worker (the simulator's ``"plan"`` and ``"kill"`` modes): the
    worker is offered as free (``job`` None) but runs a task of ``current``; policies prefer such a worker for that
    job (among equals) so that the plan moves as few workers as possible."""

    id: str
    node_class: str
    job: str | None = None
    current: str | None = None


@dataclass(frozen=True)
class SpeedMatrix:
    """Estimated throughput per (job kind, node class), in nominal work units per second, adaptively updated (4.4).

    ``prior`` is the default throughput, ``table`` per-pair priors (e.g. a user's execution profile, 3.3).
    ``observed[(kind, cls)]`` holds the last ``window`` observed seconds per unit of nominal work."""

    prior: float = 1.0
    table: Mapping[tuple[str, str], float] = field(default_factory=dict)
    observed: Mapping[tuple[str, str], tuple[float, ...]] = field(default_factory=dict)
    min_samples: int = 1
    window: int = 20

    def __post_init__(self) -> None:
        if not (self.prior > 0 and math.isfinite(self.prior)):
            raise ValueError("prior throughput must be finite and > 0")
        if any(not (v > 0 and math.isfinite(v)) for v in self.table.values()):
            raise ValueError("table throughputs must be finite and > 0")
        if self.min_samples < 1 or self.window < 1:
            raise ValueError("min_samples and window must be >= 1")

    def throughput(self, kind: str, node_class: str) -> float:
        """th: nominal work per second of one worker of ``node_class`` on a job of ``kind``."""
        obs = self.observed.get((kind, node_class), ())
        if len(obs) >= self.min_samples:
            return len(obs) / sum(obs)  # 1 / mean(seconds per unit)
        return self.table.get((kind, node_class), self.prior)

    def exec_time(self, kind: str, node_class: str, work: float) -> float:
        """T: seconds one worker of ``node_class`` needs for ``work`` nominal units of a job of ``kind``."""
        return work / self.throughput(kind, node_class)

    def observe(self, kind: str, node_class: str, work: float, seconds: float) -> SpeedMatrix:
        """The matrix after a task of ``work`` nominal units took ``seconds`` on a worker of ``node_class`` (4.4)."""
        if not (work > 0 and seconds > 0):
            return self
        key = (kind, node_class)
        obs = (*self.observed.get(key, ()), seconds / work)[-self.window :]
        return SpeedMatrix(
            prior=self.prior,
            table=self.table,
            observed={**self.observed, key: obs},
            min_samples=self.min_samples,
            window=self.window,
        )


def by_priority(job: JobView) -> tuple[float, float, str]:
    """Sort key: highest priority first, then earliest arrival, then id (a total order, so decisions are determined)."""
    return (-job.priority, job.arrival, job.id)


def by_deadline(job: JobView) -> tuple[float, float, float, str]:
    """Sort key: closest deadline first (none last), then highest priority, then arrival, then id."""
    return (math.inf if job.deadline is None else job.deadline, -job.priority, job.arrival, job.id)
