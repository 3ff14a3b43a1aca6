"""Deadline- and priority-aware dispatch of batch tasks on heterogeneous workers (Lin, "Job Dispatching and
Scheduling under Heterogeneous Clusters", NTU master thesis, 2014). Pure: no Kubernetes, no I/O.

- :mod:`.model` -- jobs of independent tasks, workers, the (job kind x node class) speed matrix and its adaptive
  update (3.1, 3.4, 4.4, 5.3.1, 5.4.1), the penalty of a missed soft deadline (6.3.2);
- :mod:`.base` -- the decision maker's signature, bookkeeping, the spare-worker fill rules (3.5.2, 5.5);
- :mod:`.priority` -- priority-based with a reservation rate (5.1);
- :mod:`.proportion` -- proportion-based (5.2);
- :mod:`.workload` -- workload-based (5.3) and the greedy it shares with the deadline-based policy;
- :mod:`.deadline` -- deadline-based (5.4) and EDF (the comparison of 6.3.2);
- :mod:`.follow` -- the paper's worker model, one step: the plan over every worker and what the dispatcher does
  with it (figure 3.2, 3.5.3; shared by the simulator and the operator);
- :mod:`.sim` -- the discrete-event simulator, priority violation rate and deadline penalty (4.1, 4.4, 6.3.2);
- :mod:`.swf` -- SWF traces, a Lublin-Feitelson synthetic trace, the transformations of 6.3.1;
- :mod:`.scenarios` -- the 20 slots of 6.3 and the failure test of 6.2;
- :mod:`.limits` -- the range of every BatchDispatch number and the work caps of a decision (issue 45);
- :mod:`.registry` -- the policies by name: ``policy(name, **params)`` (5.1-5.5, 6.3.2), ``paper_policies()``.

``decide(policy, jobs, workers, now, speeds)`` is the decision maker: it returns ``{free worker id: job id}`` and
checks that only workers offered as free are used and that no job gets more workers than its queued tasks. In the
paper's model (figure 3.2, the simulator's default ``mode="plan"``) every worker is offered, busy or idle, and each
job offers all its unfinished tasks: the result is the allocation plan, which a busy worker follows once its task
ends.
"""

from __future__ import annotations

from collections.abc import Sequence

from . import limits
from .base import Assignment, Budget, Fill, Policy, Reading, budget, check
from .deadline import DeadlinePolicy, EdfPolicy, meets_deadline, required_rate
from .follow import Preempt, Step, plan_views, released_waiting, step
from .model import Job, JobView, SpeedMatrix, Worker, WorkerView
from .priority import PriorityPolicy
from .proportion import ProportionPolicy
from .registry import names, paper_policies, policy
from .sim import MODES, Failure, Mode, SimResult, Snapshot, TaskRun, Workload, simulate, violated_count
from .workload import WorkloadPolicy


def decide(
    policy: Policy,
    jobs: Sequence[JobView],
    workers: Sequence[WorkerView],
    now: float,
    speeds: SpeedMatrix | None = None,
) -> Assignment:
    """The decision maker (3.5.2): ``policy`` x jobs x workers x time -> assignment of free workers to jobs. Inside
    a :func:`budget`, the policy stops before its next job once the deadline passed (best so far)."""
    out = policy.assign(jobs, workers, now, speeds if speeds is not None else SpeedMatrix())
    check(jobs, workers, out)
    return out


__all__ = [
    "Assignment",
    "Budget",
    "DeadlinePolicy",
    "EdfPolicy",
    "Failure",
    "Fill",
    "Job",
    "JobView",
    "MODES",
    "Mode",
    "Policy",
    "Preempt",
    "PriorityPolicy",
    "ProportionPolicy",
    "Reading",
    "SimResult",
    "Snapshot",
    "SpeedMatrix",
    "Step",
    "TaskRun",
    "Worker",
    "WorkerView",
    "Workload",
    "WorkloadPolicy",
    "budget",
    "decide",
    "limits",
    "meets_deadline",
    "names",
    "paper_policies",
    "plan_views",
    "policy",
    "released_waiting",
    "required_rate",
    "simulate",
    "step",
    "violated_count",
]
