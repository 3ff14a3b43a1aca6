"""A discrete-event simulator of the management system (sections 3.5, 4.1, 4.4) replaying a workload, and the
metrics of section 6.3.2. Pure: no Kubernetes, no I/O, no wall clock.

The workload: jobs (arrival, tasks with their true work), workers (node class, true speed factor) and optional
failures (a worker goes down at ``down`` and comes back at ``up``). A task of work ``w`` of a job of kind ``k``
takes ``w / (worker.speed * true_speed[(k, class)])`` seconds (``true_speed`` defaults to 1). The policy never sees
the true speeds: it is given the :class:`~.model.SpeedMatrix` estimate, updated after every finished task from the
observed time (adaptive adjustment, 4.4; ``adaptive=False`` keeps the prior).

Scheduling happens (4.1) on every job change (arrival, completion of a task or a job) and worker change (failure,
recovery): all events at one instant are applied, then the decision maker is called once with the free workers and
the chosen free workers start the next queued task of their job (FIFO). A failed worker's running task goes back to
the front of its job's queue and is redone from the start (4.4).

Two ways to apply a decision:
- ``preemptive=False`` (default, the dispatcher of 3.5.3 / figure 3.2): a running task keeps its worker; only free
  workers are assigned, and each job's running workers count towards its share;
- ``preemptive=True`` (the "kill" option of 4.4, for emergency jobs): the policy plans over every worker that is
  up, as if all were free (each job offering its queued and running tasks); a busy worker planned for another job
  has its task killed (re-queued at the front, redone later) and starts that job's next task; a busy worker the
  plan leaves idle keeps its task. This is the allocation plan the paper's metrics are computed on.

Metrics (6.3.2):
- priority violation rate at an instant: #violated jobs / #jobs in the system (arrived, not finished), where a
  job is violated if it has no worker while some job of strictly lower priority has one or more. Reported as the
  time average over the time the system holds at least one job (``violation_rate``), and as the plain mean over
  decision instants (``violation_rate_events``). The paper says "average ... during each simulation" without
  saying which; we state both;
- deadline penalty: ``sum_j P_j * M_j``, M_j = max(0, finish - deadline) in seconds (0 without a deadline).
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from .base import Policy, check
from .model import Job, JobView, SpeedMatrix, Worker, WorkerView


@dataclass(frozen=True)
class Failure:
    worker: str
    down: float
    up: float | None = None

    def __post_init__(self) -> None:
        if self.up is not None and self.up <= self.down:
            raise ValueError("a worker must come back after it went down")


@dataclass(frozen=True)
class Workload:
    jobs: tuple[Job, ...]
    workers: tuple[Worker, ...]
    true_speed: Mapping[tuple[str, str], float] = field(default_factory=dict)
    failures: tuple[Failure, ...] = ()

    def __post_init__(self) -> None:
        if len({j.id for j in self.jobs}) != len(self.jobs):
            raise ValueError("duplicate job ids")
        if len({w.id for w in self.workers}) != len(self.workers):
            raise ValueError("duplicate worker ids")
        known = {w.id for w in self.workers}
        if any(f.worker not in known for f in self.failures):
            raise ValueError("failure of an unknown worker")

    def duration(self, job: Job, task: int, worker: Worker) -> float:
        return job.task_work[task] / (worker.speed * self.true_speed.get((job.kind, worker.node_class), 1.0))


@dataclass(frozen=True)
class TaskRun:
    """One execution of a task on a worker; ``completed`` is False when a failure cut it short at ``end``."""

    job: str
    task: int
    worker: str
    start: float
    end: float
    completed: bool


@dataclass(frozen=True)
class Snapshot:
    """The state right after the decision at ``time``; it holds until the next snapshot."""

    time: float
    in_system: int
    violated: int
    alloc: tuple[tuple[str, int], ...]  #: (job, workers running its tasks), jobs with at least one
    free: int
    busy: int
    down: int

    @property
    def violation(self) -> float:
        return self.violated / self.in_system if self.in_system else 0.0


@dataclass(frozen=True)
class SimResult:
    policy: str
    finish: Mapping[str, float]
    penalty: float
    missed: int
    violation_rate: float
    violation_rate_events: float
    makespan: float
    unfinished: tuple[str, ...]  #: jobs the policy never finished (left idle, or every worker down for good)
    runs: tuple[TaskRun, ...]
    timeline: tuple[Snapshot, ...]
    speeds: SpeedMatrix

    def workers_of(self, job: str) -> list[tuple[float, int]]:
        """(time, workers running ``job``'s tasks) at every snapshot: a step function for a plot."""
        return [(s.time, dict(s.alloc).get(job, 0)) for s in self.timeline]


_ARRIVE, _DOWN, _UP, _FINISH = 0, 1, 2, 3  # order of events at one instant (finish last is immaterial)


def violated_count(in_system: Sequence[tuple[int, int]]) -> int:
    """Section 6.3.2: given (priority, workers) per job in the system, the jobs with no worker while a job of
    strictly lower priority has at least one."""
    served = [p for p, n in in_system if n > 0]
    if not served:
        return 0
    lowest = min(served)
    return sum(1 for p, n in in_system if n == 0 and p > lowest)


def simulate(
    workload: Workload,
    policy: Policy,
    prior: SpeedMatrix | None = None,
    *,
    adaptive: bool = True,
    preemptive: bool = False,
    max_events: int = 10_000_000,
) -> SimResult:
    """Replay ``workload`` under ``policy``; see the module docstring."""
    speeds = prior if prior is not None else SpeedMatrix()
    jobs = {j.id: j for j in workload.jobs}
    workers = {w.id: w for w in workload.workers}
    queue: dict[str, deque[int]] = {}
    running: dict[str, int] = {}
    left_work: dict[str, float] = {}
    done: dict[str, int] = {}
    finish: dict[str, float] = {}
    state: dict[str, tuple[str, int, float] | None] = {w: None for w in workers}  # (job, task, start)
    is_down: dict[str, bool] = {w: False for w in workers}
    token: dict[str, int] = {w: 0 for w in workers}
    runs: list[TaskRun] = []
    timeline: list[Snapshot] = []

    events: list[tuple[float, int, int, str, int]] = []
    seq = 0

    def push(t: float, kind: int, who: str, tok: int = 0) -> None:
        nonlocal seq
        heapq.heappush(events, (t, kind, seq, who, tok))
        seq += 1

    for j in workload.jobs:
        push(j.arrival, _ARRIVE, j.id)
    for f in workload.failures:
        push(f.down, _DOWN, f.worker)
        if f.up is not None:
            push(f.up, _UP, f.worker)

    count = 0
    while events:
        now = events[0][0]
        while events and events[0][0] <= now:
            t, kind, _, who, tok = heapq.heappop(events)
            count += 1
            if count > max_events:
                raise RuntimeError("too many events")
            if kind == _ARRIVE:
                job = jobs[who]
                queue[who] = deque(range(job.tasks))
                running[who] = 0
                done[who] = 0
                left_work[who] = sum(job.nominal_work(i) for i in range(job.tasks))
            elif kind == _FINISH:
                if tok != token[who] or state[who] is None:
                    continue  # the run was cut short by a failure
                jid, task, start = state[who]  # type: ignore[misc]
                job = jobs[jid]
                state[who] = None
                token[who] += 1
                runs.append(TaskRun(jid, task, who, start, now, True))
                running[jid] -= 1
                done[jid] += 1
                left_work[jid] = max(0.0, left_work[jid] - job.nominal_work(task))
                if adaptive:
                    speeds = speeds.observe(job.kind, workers[who].node_class, job.nominal_work(task), now - start)
                if done[jid] == job.tasks:
                    finish[jid] = now
                    del queue[jid], running[jid], left_work[jid]
            elif kind == _DOWN:
                if is_down[who]:
                    continue
                is_down[who] = True
                token[who] += 1
                cur = state[who]
                if cur is not None:
                    jid, task, start = cur
                    runs.append(TaskRun(jid, task, who, start, now, False))
                    running[jid] -= 1
                    queue[jid].appendleft(task)
                    state[who] = None
            else:  # _UP
                is_down[who] = False
        # decide
        views = [
            JobView(
                id=jid,
                priority=jobs[jid].priority,
                arrival=jobs[jid].arrival,
                deadline=jobs[jid].deadline,
                kind=jobs[jid].kind,
                queued=len(q) + (running[jid] if preemptive else 0),
                running=0 if preemptive else running[jid],
                remaining_work=left_work[jid],
            )
            for jid, q in queue.items()
        ]
        wviews = []
        for w in workload.workers:
            if is_down[w.id]:
                continue
            cur = state[w.id]
            on = None if cur is None else cur[0]
            wviews.append(
                WorkerView(w.id, w.node_class, None, on) if preemptive else WorkerView(w.id, w.node_class, on)
            )
        if views and any(v.job is None for v in wviews):
            out = policy.assign(views, wviews, now, speeds)
            check(views, wviews, out)
            start_on = []
            for wid in sorted(out):
                cur = state[wid]
                if cur is not None:
                    if cur[0] == out[wid]:
                        continue  # planned for the job it already runs
                    jid, task, start = cur  # preemptive plan: kill and re-queue
                    runs.append(TaskRun(jid, task, wid, start, now, False))
                    running[jid] -= 1
                    queue[jid].appendleft(task)
                    state[wid] = None
                    token[wid] += 1
                start_on.append(wid)
            for wid in start_on:
                jid = out[wid]
                if not queue[jid]:
                    continue
                task = queue[jid].popleft()
                running[jid] += 1
                state[wid] = (jid, task, now)
                token[wid] += 1
                push(now + workload.duration(jobs[jid], task, workers[wid]), _FINISH, wid, token[wid])
        busy = sum(1 for s in state.values() if s is not None)
        ndown = sum(is_down.values())
        alloc = tuple(sorted((jid, n) for jid, n in running.items() if n > 0))
        violated = violated_count([(jobs[jid].priority, running[jid]) for jid in queue])
        timeline.append(Snapshot(now, len(queue), violated, alloc, len(workers) - busy - ndown, busy, ndown))

    penalty = sum(jobs[j].penalty(t) for j, t in finish.items())
    missed = sum(1 for j, t in finish.items() if jobs[j].penalty(t) > 0)
    busy_time = 0.0
    weighted = 0.0
    for a, b in zip(timeline, timeline[1:], strict=False):
        if a.in_system:
            busy_time += b.time - a.time
            weighted += a.violation * (b.time - a.time)
    nonempty = [s for s in timeline if s.in_system]
    return SimResult(
        policy=policy.name,
        finish=finish,
        penalty=penalty,
        missed=missed,
        violation_rate=weighted / busy_time if busy_time > 0 else 0.0,
        violation_rate_events=sum(s.violation for s in nonempty) / len(nonempty) if nonempty else 0.0,
        makespan=max(finish.values(), default=0.0),
        unfinished=tuple(sorted(queue)),
        runs=tuple(runs),
        timeline=tuple(timeline),
        speeds=speeds,
    )
