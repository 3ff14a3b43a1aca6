"""The paper's worker model, one step (Lin 2014, figure 3.2 and 3.5.3 "Dispatcher"; 4.4 for the kill): the decision
maker plans over every worker, busy or idle, and the dispatcher follows the plan. Pure: no Kubernetes, no I/O.

This is the one code path of the model: the simulator's ``"plan"``, ``"kill"`` and ``"kill-lower"`` modes (:mod:`.sim`)
and the Kubernetes operator (``soda_operator.dispatch.decide``) all call :func:`step` at each event, so the cluster
follows exactly the plan the simulator replays.

Input, as the status checker sees the system (3.5.1): each job's ``queued`` tasks (waiting for a worker) and
``running`` tasks, and each worker that is up with the job whose task it runs (``WorkerView.job``, None when idle).
:func:`step`:

1. :func:`plan_views` offers every worker to the policy as free, ``WorkerView.current`` naming the job it runs (so
   the policy keeps a worker on its job among equal choices), and each job offers all its unfinished tasks
   (queued + running): :func:`~.decide` returns the plan, ``{worker: job}`` for every worker the plan uses;
2. a busy worker keeps its task (it finishes it, then follows the plan in force when it ends: the caller decides
   again at that instant), unless 5 kills it;
3. each idle worker, in id order, starts the next queued task of the job the plan gives it, while that job has one;
4. (issue 51) a job the plan gives a worker busy with another job's task while it has a task queued has a
   *released-but-waiting* task; each worker still idle (planned for a job with nothing queued, or unplanned) is
   swapped with such a busy worker -- jobs in priority order, the idle worker fastest for the job first, the busy
   workers that 5 would not kill first: the idle one starts the job's task now and takes its place in the plan, the
   busy one takes the idle one's (or none). The plan keeps its counts per job (what the policy decided); only
   *which* worker carries them out changes. The paper's dispatcher would leave the idle worker idle until the busy
   one finishes (and then, on a heterogeneous cluster, the job may get its faster worker later): we do not -- no
   slot is left idle while a task the plan released waits;
5. with ``preempt`` (4.4's "kill some low priority running tasks"), a busy worker the plan still gives to another
   job that has a task waiting has its task killed (back to its job's queue, so that job may in turn kill for it)
   and starts the planned job's task: ``True`` kills for any job (the simulator's ``"kill"``), ``"lower"`` only
   for a job of strictly higher priority than the killed task's (the simulator's ``"kill-lower"``, the paper's
   wording, the operator's ``spec.preemption``). Nothing is killed for a job with no task waiting, and nothing
   while a worker is idle: 4 used every idle worker first.

:func:`released_waiting` measures 4's property on a step (the tests hold it at zero whenever a worker is left idle).

``deadline_s`` (issue 45): the policy stops before its next job once it passes (:func:`.base.budget`) and the plan
is what it assigned so far; :attr:`Step.timed_out` says so. The dispatcher's steps 2-5 always run on that plan.
"""

from __future__ import annotations

import heapq
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from .base import Assignment, Policy, budget, check
from .model import JobView, SpeedMatrix, WorkerView, by_priority

#: who a busy worker's task may be killed for: ``False`` nobody (the paper's dispatcher), ``True`` any job the plan
#: gives its worker to (the simulator's ``"kill"``), ``"lower"`` only a job of strictly higher priority than the
#: task's own (4.4's "kill some low priority running tasks", the simulator's ``"kill-lower"``, the operator's
#: ``spec.preemption``)
Preempt = bool | Literal["lower"]


@dataclass(frozen=True)
class Step:
    """One step of the model: the plan, the workers that start a task now, the busy workers preempted."""

    plan: Assignment = field(default_factory=dict)  #: every worker the plan uses -> its job (as carried out)
    start: Assignment = field(default_factory=dict)  #: worker -> the job whose next queued task it starts now
    preempt: Assignment = field(default_factory=dict)  #: busy worker -> the job the plan gives it (its task is killed)
    timed_out: bool = False  #: the deadline passed: the plan is the policy's best so far (some jobs not planned)


def plan_views(jobs: Sequence[JobView], workers: Sequence[WorkerView]) -> tuple[list[JobView], list[WorkerView]]:
    """What the policy is offered in the paper's model: every worker as free (``current``: the job it runs), each
    job with all its unfinished tasks as ``queued``."""
    pj = [replace(j, queued=j.queued + j.running, running=0) for j in jobs]
    pw = [WorkerView(w.id, w.node_class, None, w.job if w.job is not None else w.current) for w in workers]
    return pj, pw


def released_waiting(jobs: Sequence[JobView], workers: Sequence[WorkerView], st: Step) -> dict[str, int]:
    """Per job, its released-but-waiting tasks after ``st``: tasks still queued that the plan gives a worker busy
    with another job's task it keeps (issue 51's property: none while a worker is left idle)."""
    busy = {w.id: w.job for w in workers if w.job is not None and w.id not in st.preempt}
    waiting = Counter({j.id: j.queued for j in jobs})
    waiting.update(busy_job for busy_job in (w.job for w in workers if w.id in st.preempt) if busy_job is not None)
    waiting.subtract(Counter(st.start.values()))
    behind = Counter(j for w, j in st.plan.items() if w in busy and busy[w] != j)
    return {j: min(n, waiting[j]) for j, n in behind.items() if min(n, waiting[j]) > 0}


def step(policy: Policy, jobs: Sequence[JobView], workers: Sequence[WorkerView], now: float,
         speeds: SpeedMatrix | None = None, *, preempt: Preempt = False, deadline_s: float | None = None) -> Step:
    """The plan over every worker and what the dispatcher does with it now (module docstring)."""
    pj, pw = plan_views(jobs, workers)
    if not pj or not pw:
        return Step()
    sp = speeds if speeds is not None else SpeedMatrix()
    with budget(deadline_s) as b:
        plan = dict(policy.assign(pj, pw, now, sp))
    check(pj, pw, plan)
    view = {j.id: j for j in jobs}
    busy = {w.id: w.job for w in workers if w.job is not None}

    def killable(w: str, job: str) -> bool:
        if preempt == "lower":
            own = view.get(busy[w])
            return own is not None and own.priority < view[job].priority
        return preempt is True

    waiting = Counter({j.id: j.queued for j in jobs})
    start: Assignment = {}
    for w, j in sorted(plan.items()):  # 3: an idle worker starts its planned job's next task
        if w not in busy and waiting[j] > 0:
            waiting[j] -= 1
            start[w] = j
    idle: dict[str, deque[str]] = {}  # node class -> the workers left idle, id order (a swap costs O(classes))
    for wv in sorted(workers, key=lambda wv: wv.id):
        if wv.job is None and wv.id not in start:
            idle.setdefault(wv.node_class, deque()).append(wv.id)
    lists: dict[str, list[tuple[bool, str]]] = {}
    for w, j in plan.items():
        if w in busy and busy[w] != j:
            lists.setdefault(j, []).append((killable(w, j), w))
    #: job -> busy workers of another job the plan gives it, unkillable first, then id order
    behind = {j: deque(w for _, w in sorted(ws)) for j, ws in lists.items()}
    order = sorted(jobs, key=by_priority)
    for job in order:  # 4: a released task waits for no busy worker while a worker is left idle: swap them
        ws = behind.get(job.id, deque())
        while ws and waiting[job.id] > 0:
            classes = [c for c, q in idle.items() if q]
            if not classes:
                break
            cls = min(classes, key=lambda c: (-sp.throughput(job.kind, c), idle[c][0]))  # noqa: B023
            w2 = idle[cls].popleft()
            w1 = ws.popleft()
            old = plan.pop(w2, None)
            if old is None:
                del plan[w1]
            else:
                plan[w1] = old
            plan[w2] = start[w2] = job.id
            waiting[job.id] -= 1
    killed: Assignment = {}
    if preempt:  # 5: kill for what no idle worker could take (a killed task waits for its own job's workers)
        rank = {j.id: i for i, j in enumerate(order)}
        can = {j: deque(w for w in ws if killable(w, j)) for j, ws in behind.items()}
        heap = [rank[j] for j in can if can[j]]
        heapq.heapify(heap)
        while heap:
            jid = order[heapq.heappop(heap)].id
            while can[jid] and waiting[jid] > 0:
                w1 = can[jid].popleft()
                killed[w1] = start[w1] = jid
                waiting[jid] -= 1
                waiting[busy[w1]] += 1
                if can.get(busy[w1]) and busy[w1] in rank:
                    heapq.heappush(heap, rank[busy[w1]])
    return Step(plan, start, killed, b.timed_out)


__all__ = ["Preempt", "Step", "plan_views", "released_waiting", "step"]
