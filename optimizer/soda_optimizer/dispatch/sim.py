"""A discrete-event simulator of the management system (sections 3.5, 4.1, 4.4) replaying a workload, and the
metrics of section 6.3.2. Pure: no Kubernetes, no I/O, no wall clock.

The workload: jobs (arrival, tasks with their true work), workers (node class, true speed factor) and optional
failures (a worker goes down at ``down`` and comes back at ``up``). A task of work ``w`` of a job of kind ``k``
takes ``w / (worker.speed * true_speed[(k, class)])`` seconds (``true_speed`` defaults to 1). The policy never sees
the true speeds: it is given the :class:`~.model.SpeedMatrix` estimate, updated after every finished task from the
observed time (adaptive adjustment, 4.4; ``adaptive=False`` keeps the prior).

Scheduling happens (4.1) on every job change (arrival, completion of a task or a job) and worker change (failure,
recovery): all events at one instant are applied, then the decision maker is called once and its result applied;
a worker starts the next queued task (FIFO) of the job it is given. A failed worker's running task goes back to the
front of its job's queue and is redone from the start (4.4). Departure: the paper's decision maker runs on a job's
submission or completion and when the status checker reports (3.5.2, 4.4); we also run it when a task ends, the
instant a busy worker would ask the dispatcher for its next task (figure 3.2).

Four worker models (``mode``):
- ``"plan"`` (default: the paper's, figure 3.2 and 3.5.3): the policy plans over every worker that is up, busy or
  idle (each offered as free, ``WorkerView.current`` naming the job whose task it runs), each job offering all its
  unfinished tasks (queued + running). An idle worker starts a task of the job the plan gives it (if that job has a
  queued task; otherwise it stays idle until the next decision); a busy worker finishes its task and then follows
  the plan in force when it ends (a new decision is taken at that instant). Nothing is ever killed. The priority
  violation rate is measured on the plan (6.3.2: a job "not scheduled with any worker");
- ``"free"`` (departure, the dispatcher without a plan): only idle workers are offered; a job's running tasks hold
  their workers and count towards its share; violations are measured on the workers running each job's tasks;
- ``"kill"`` (departure, 4.4's "kill some low priority running tasks" applied at every decision): as ``"plan"``,
  but a busy worker the plan gives to another job has its task killed at once (re-queued at the front, redone
  later) and starts that job's next task; a busy worker the plan leaves idle keeps its task;
- ``"kill-lower"`` (4.4's wording, "kill some low priority running tasks"; issue 51): as ``"kill"``, but a task is
  killed only for a job of strictly higher priority than its own; otherwise its worker finishes it as in ``"plan"``.

In every model but ``"free"`` an idle worker is never left idle while a task the plan released waits for a busy
worker, and nothing is killed while a worker is idle (:func:`.follow.step`, steps 4-5; issue 51).

``"plan"``, ``"kill"`` and ``"kill-lower"`` take their decision through :func:`.follow.step`, the code path the
Kubernetes operator calls too (one model: the cluster follows the plan this simulator replays).

Metrics (6.3.2):
- priority violation rate at an instant: #violated jobs / #jobs in the system (arrived, not finished), where a
  job is violated if it has no worker while some job of strictly lower priority has one or more, counting the
  workers the plan gives each job (``Snapshot.plan``; in ``"free"`` mode the workers running its tasks). Reported
  as the time average over the time the system holds at least one job (``violation_rate``), as the plain mean over
  decision instants (``violation_rate_events``) -- the paper says "average ... during each simulation" without
  saying which -- and, on the workers actually running each job's tasks, as a time average
  (``violation_rate_running``; in ``"plan"`` mode it differs while busy workers finish another job's task);
- deadline penalty: ``sum_j P_j * M_j``, M_j = max(0, finish - deadline) in seconds (0 without a deadline);
  ``missed`` counts the jobs later than their deadline by more than :data:`~.model.TIME_TOL` (float noise from
  summed task times is not a miss).
"""

from __future__ import annotations

import heapq
from collections import Counter, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from .base import Policy, check
from .follow import Preempt, released_waiting, step
from .model import Job, JobView, SpeedMatrix, Worker, WorkerView

Mode = Literal["plan", "free", "kill", "kill-lower"]
MODES: tuple[Mode, ...] = ("plan", "free", "kill", "kill-lower")
_PREEMPT: dict[str, Preempt] = {"plan": False, "kill": True, "kill-lower": "lower"}


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
    plan: tuple[tuple[str, int], ...] = ()  #: (job, workers the plan gives it), jobs with at least one
    violated_running: int = 0  #: violated jobs counted on ``alloc`` (the workers running tasks) instead of the plan
    released_waiting: int = 0  #: queued tasks the plan gives a busy worker of another job (:func:`.follow.released_waiting`)

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
    violation_rate_running: float
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
    mode: Mode = "plan",
    max_events: int = 10_000_000,
) -> SimResult:
    """Replay ``workload`` under ``policy``; see the module docstring."""
    if mode not in MODES:
        raise ValueError(f"simulate: mode {mode!r} is not one of {', '.join(MODES)}")
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
        # decide: the paper's model (and its "kill" variant) through follow.step, the one code path the operator
        # shares; "free" offers the idle workers only
        views = [
            JobView(
                id=jid,
                priority=jobs[jid].priority,
                arrival=jobs[jid].arrival,
                deadline=jobs[jid].deadline,
                kind=jobs[jid].kind,
                queued=len(q),
                running=running[jid],
                remaining_work=left_work[jid],
            )
            for jid, q in queue.items()
        ]
        wviews = [
            WorkerView(w.id, w.node_class, None if state[w.id] is None else state[w.id][0])  # type: ignore[index]
            for w in workload.workers
            if not is_down[w.id]
        ]
        out: dict[str, str] = {}
        starts: dict[str, str] = {}
        held_back = 0
        if mode == "free":
            if views and any(v.job is None for v in wviews):
                out = starts = policy.assign(views, wviews, now, speeds)
                check(views, wviews, out)
        else:
            st = step(policy, views, wviews, now, speeds, preempt=_PREEMPT[mode])
            out, starts = st.plan, st.start
            held_back = sum(released_waiting(views, wviews, st).values())
            for wid in sorted(st.preempt):  # "kill", "kill-lower": the task is killed and re-queued at the front
                jid, task, start = state[wid]  # type: ignore[misc]
                runs.append(TaskRun(jid, task, wid, start, now, False))
                running[jid] -= 1
                queue[jid].appendleft(task)
                state[wid] = None
                token[wid] += 1
        for wid in sorted(starts):
            jid = starts[wid]
            task = queue[jid].popleft()
            running[jid] += 1
            state[wid] = (jid, task, now)
            token[wid] += 1
            push(now + workload.duration(jobs[jid], task, workers[wid]), _FINISH, wid, token[wid])
        busy = sum(1 for s in state.values() if s is not None)
        ndown = sum(is_down.values())
        alloc = tuple(sorted((jid, n) for jid, n in running.items() if n > 0))
        if mode != "free":
            planned = Counter(out.values())
        else:
            planned = Counter({jid: n for jid, n in running.items() if n > 0})
        violated = violated_count([(jobs[jid].priority, planned[jid]) for jid in queue])
        violated_run = violated_count([(jobs[jid].priority, running[jid]) for jid in queue])
        timeline.append(
            Snapshot(
                now,
                len(queue),
                violated,
                alloc,
                len(workers) - busy - ndown,
                busy,
                ndown,
                tuple(sorted((j, n) for j, n in planned.items() if n > 0)),
                violated_run,
                held_back,
            )
        )

    penalty = sum(jobs[j].penalty(t) for j, t in finish.items())
    missed = sum(1 for j, t in finish.items() if jobs[j].late(t))
    busy_time = 0.0
    weighted = 0.0
    weighted_run = 0.0
    for a, b in zip(timeline, timeline[1:], strict=False):
        if a.in_system:
            busy_time += b.time - a.time
            weighted += a.violation * (b.time - a.time)
            weighted_run += a.violated_running / a.in_system * (b.time - a.time)
    nonempty = [s for s in timeline if s.in_system]
    return SimResult(
        policy=policy.name,
        finish=finish,
        penalty=penalty,
        missed=missed,
        violation_rate=weighted / busy_time if busy_time > 0 else 0.0,
        violation_rate_events=sum(s.violation for s in nonempty) / len(nonempty) if nonempty else 0.0,
        violation_rate_running=weighted_run / busy_time if busy_time > 0 else 0.0,
        makespan=max(finish.values(), default=0.0),
        unfinished=tuple(sorted(queue)),
        runs=tuple(runs),
        timeline=tuple(timeline),
        speeds=speeds,
    )
