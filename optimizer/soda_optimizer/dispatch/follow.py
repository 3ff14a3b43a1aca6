"""The paper's worker model, one step (Lin 2014, figure 3.2 and 3.5.3 "Dispatcher"; 4.4 for the kill): the decision
maker plans over every worker, busy or idle, and the dispatcher follows the plan. Pure: no Kubernetes, no I/O.

This is the one code path of the model: the simulator's ``"plan"`` and ``"kill"`` modes (:mod:`.sim`) and the
Kubernetes operator (``soda_operator.dispatch.decide``) both call :func:`step` at each event, so the cluster
follows exactly the plan the simulator replays.

Input, as the status checker sees the system (3.5.1): each job's ``queued`` tasks (waiting for a worker) and
``running`` tasks, and each worker that is up with the job whose task it runs (``WorkerView.job``, None when idle).
:func:`step`:

1. :func:`plan_views` offers every worker to the policy as free, ``WorkerView.current`` naming the job it runs (so
   the policy keeps a worker on its job among equal choices), and each job offers all its unfinished tasks
   (queued + running): :func:`~.decide` returns the plan, ``{worker: job}`` for every worker the plan uses;
2. a busy worker keeps its task (it finishes it, then follows the plan in force when it ends: the caller decides
   again at that instant); with ``preempt`` (4.4's "kill some low priority running tasks", the simulator's
   ``"kill"``), a busy worker the plan gives to another job has its task killed (back to its job's queue) and is
   idle from then on; a busy worker the plan leaves unused keeps its task either way;
3. each idle worker (and each preempted one), in id order, starts the next queued task of the job the plan gives
   it, while that job has one (a task killed in 2 is queued again first); a worker whose planned job has no task
   waiting stays idle until the next decision.

``deadline_s`` (issue 45): the policy stops before its next job once it passes (:func:`.base.budget`) and the plan
is what it assigned so far; :attr:`Step.timed_out` says so. The dispatcher's steps 2-3 always run on that plan.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from .base import Assignment, Policy, budget, check
from .model import JobView, SpeedMatrix, WorkerView


@dataclass(frozen=True)
class Step:
    """One step of the model: the plan, the workers that start a task now, the busy workers preempted."""

    plan: Assignment = field(default_factory=dict)  #: every worker the plan uses -> its job
    start: Assignment = field(default_factory=dict)  #: worker -> the job whose next queued task it starts now
    preempt: Assignment = field(default_factory=dict)  #: busy worker -> the job the plan gives it (its task is killed)
    timed_out: bool = False  #: the deadline passed: the plan is the policy's best so far (some jobs not planned)


def plan_views(jobs: Sequence[JobView], workers: Sequence[WorkerView]) -> tuple[list[JobView], list[WorkerView]]:
    """What the policy is offered in the paper's model: every worker as free (``current``: the job it runs), each
    job with all its unfinished tasks as ``queued``."""
    pj = [replace(j, queued=j.queued + j.running, running=0) for j in jobs]
    pw = [WorkerView(w.id, w.node_class, None, w.job if w.job is not None else w.current) for w in workers]
    return pj, pw


def step(policy: Policy, jobs: Sequence[JobView], workers: Sequence[WorkerView], now: float,
         speeds: SpeedMatrix | None = None, *, preempt: bool = False, deadline_s: float | None = None) -> Step:
    """The plan over every worker and what the dispatcher does with it now (module docstring)."""
    pj, pw = plan_views(jobs, workers)
    if not pj or not pw:
        return Step()
    with budget(deadline_s) as b:
        plan = policy.assign(pj, pw, now, speeds if speeds is not None else SpeedMatrix())
    check(pj, pw, plan)
    busy = {w.id: w.job for w in workers if w.job is not None}
    killed = {w: j for w, j in sorted(plan.items()) if preempt and w in busy and busy[w] != j}
    waiting = Counter({j.id: j.queued for j in jobs})
    waiting.update(busy[w] for w in killed)
    start: Assignment = {}
    for w, j in sorted(plan.items()):
        if w in busy and w not in killed:
            continue  # busy: it finishes its task first
        if waiting[j] > 0:
            waiting[j] -= 1
            start[w] = j
    return Step(plan, start, killed, b.timed_out)


__all__ = ["Step", "plan_views", "step"]
