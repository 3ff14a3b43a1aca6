"""What every policy shares: the decision maker's signature (3.5.2), the per-call bookkeeping, and the spare-worker
fill rules of section 5.5. Pure: no Kubernetes, no I/O.

A decision is ``policy x jobs x workers x time x speed estimates -> assignment``: the assignment maps each worker
offered as free (``WorkerView.job`` None) that it uses to a job (``{worker_id: job_id}``). Who is offered is the
caller's choice: in the paper's model (figure 3.2; the simulator's default ``"plan"``) every worker, busy or idle,
is offered and each job offers all its unfinished tasks, so the assignment is the whole allocation plan; in the
``"free"`` model only idle workers are offered and a worker that runs a task keeps it and counts towards its job's
share. Every policy respects section 5's rule "we don't want to assign workers more than tasks of a job": a job gets
at most its ``queued`` tasks in new workers, so its running plus assigned workers never exceed its remaining tasks.

Spare fill (5.5): jobs that still have tasks without a worker are sorted by priority (``"priority"``) or by closest
deadline (``"deadline"``, jobs without one last) and each in turn takes free workers, up to its tasks, until the
free workers are used up ("allocate the rest workers one by one until workers are used up or every job has obtained
enough workers"; we read "one by one" as one worker at a time to the first job in the order still in need, not as a
round robin over the jobs). The free worker handed out first is the fastest for that job's kind
(heterogeneity-aware; the paper does not say which worker). Among equal workers, one already running the job
(``WorkerView.current``) comes first, then an idle one, then one busy with another job, then id order (issue 51:
ranking a worker busy with another job like an idle one planned an arriving job onto the busy worker and left the
idle one planned for a job with nothing queued: the job waited, and in kill mode the other was killed needlessly).

Budget (issue 45): a decision's trip counts are the caller's numbers (jobs x workers), so every policy loop over the
jobs asks :meth:`Ledger.late` before the next job and stops there when the decision's deadline has passed (and
:meth:`Ledger.give` gives nothing more once it has), returning what it assigned so far (sound: only free workers, never more than a job's queued tasks). The deadline reaches the
policies through :func:`budget` (a context variable, so :class:`Policy`'s signature, shared with the simulator, is
unchanged): :func:`.follow.step` and ``systems.Dispatch`` open one and report :attr:`Budget.timed_out`.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Literal, Protocol

from .model import JobView, SpeedMatrix, WorkerView, by_deadline, by_priority

Assignment = dict[str, str]  #: free worker id -> job id
Fill = Literal["priority", "deadline"] | None
#: where an algorithm's pseudo-code and the text that describes it disagree, which one a policy follows
Reading = Literal["pseudo-code", "text"]


@dataclass
class Budget:
    """A decision's deadline (a ``time.monotonic()`` value; None: none) and whether a policy stopped on it."""

    stop: float | None = None
    timed_out: bool = False

    def late(self) -> bool:
        if not self.timed_out and self.stop is not None and time.monotonic() >= self.stop:
            self.timed_out = True
        return self.timed_out


_BUDGET: ContextVar[Budget | None] = ContextVar("dispatch_budget", default=None)


@contextmanager
def budget(deadline_s: float | None) -> Iterator[Budget]:
    """The budget of the decisions taken inside: ``deadline_s`` seconds from now (None: no deadline)."""
    b = Budget(None if deadline_s is None else time.monotonic() + max(0.0, deadline_s))
    token = _BUDGET.set(b)
    try:
        yield b
    finally:
        _BUDGET.reset(token)


class Policy(Protocol):
    """A decision maker policy: ``assign`` returns the jobs given to free workers."""

    @property
    def name(self) -> str: ...

    def assign(
        self, jobs: Sequence[JobView], workers: Sequence[WorkerView], now: float, speeds: SpeedMatrix
    ) -> Assignment: ...


class Ledger:
    """One decision's bookkeeping: the free workers left, and per job its workers (running + assigned)."""

    def __init__(self, jobs: Sequence[JobView], workers: Sequence[WorkerView]) -> None:
        ids = {j.id for j in jobs}
        self.jobs = {j.id: j for j in jobs}
        self.free: list[WorkerView] = sorted((w for w in workers if w.job is None), key=lambda w: w.id)
        self.held: Counter[str] = Counter(w.job for w in workers if w.job is not None and w.job in ids)
        self.added: Counter[str] = Counter()
        self.out: Assignment = {}
        self.up = len(workers)
        self.budget = _BUDGET.get() or Budget()

    def late(self) -> bool:
        """Whether the decision's deadline has passed (:func:`budget`): the policy stops before its next job."""
        return self.budget.late()

    def workers_of(self, job: str) -> int:
        return self.held[job] + self.added[job]

    def room(self, job: str) -> int:
        """How many more workers ``job`` may take: its queued tasks not yet given a worker."""
        return self.jobs[job].queued - self.added[job]

    def give(self, worker: WorkerView, job: str) -> None:
        """Give ``worker`` to ``job``; nothing once the deadline has passed (a job of many tasks is one trip of a
        policy's loop, but as many gives: the decision stops inside it too)."""
        if self.late():
            return
        self.free.remove(worker)
        self.out[worker.id] = job
        self.added[job] += 1

    def give_first(self, job: str, count: int) -> int:
        """Give ``job`` up to ``count`` free workers in id order (heterogeneity-unaware); returns how many."""
        n = max(0, min(count, self.room(job), len(self.free)))
        for w in sorted(self.free, key=lambda w: idle_first(w, job))[:n]:
            self.give(w, job)
        return n

    def fastest(self, job: JobView, speeds: SpeedMatrix) -> list[WorkerView]:
        """The free workers, fastest first for ``job``'s kind (ties by id)."""
        return sorted(self.free, key=lambda w: (-speeds.throughput(job.kind, w.node_class), *idle_first(w, job.id)))


def idle_first(w: WorkerView, job: str) -> tuple[bool, bool, str]:
    """The order among equal workers for ``job``: one running ``job`` already, then an idle one, then one busy with
    another job (moving it costs that job a task), then id order."""
    return (w.current != job, w.current is not None, w.id)


def spare_fill(ledger: Ledger, fill: Fill, speeds: SpeedMatrix, jobs: Iterable[JobView] | None = None) -> None:
    """Section 5.5: hand the free workers left to jobs still in need, by priority or by closest deadline."""
    if fill is None:
        return
    key = by_priority if fill == "priority" else by_deadline
    for job in sorted(ledger.jobs.values() if jobs is None else jobs, key=key):  # type: ignore[arg-type]
        if not ledger.free or ledger.late():
            return
        room = ledger.room(job.id)
        for w in ledger.fastest(job, speeds)[: max(0, room)]:
            ledger.give(w, job.id)


def check(jobs: Sequence[JobView], workers: Sequence[WorkerView], out: Assignment) -> None:
    """Raise ValueError unless ``out`` gives only free workers, to known jobs, at most each job's queued tasks."""
    free = {w.id for w in workers if w.job is None}
    known = {j.id: j for j in jobs}
    per: Counter[str] = Counter()
    for w, j in out.items():
        if w not in free:
            raise ValueError(f"worker {w} is not free")
        if j not in known:
            raise ValueError(f"unknown job {j}")
        per[j] += 1
    for j, n in per.items():
        if n > known[j].queued:
            raise ValueError(f"job {j}: {n} workers for {known[j].queued} queued tasks")
