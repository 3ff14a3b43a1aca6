"""Job-flow routing and backlog planning (Montana & Zinky, "Optimizing Routing and Backlogs for Job Flows in a
Distributed Computing Environment"). Pure: no Kubernetes, no I/O.

- :mod:`.model` -- flows, pools, problem, plan and simulation result (section 2);
- :mod:`.compiled` -- index view and deadline arithmetic;
- :mod:`.sim` -- the fluid simulator with utility-ordered service and retraction, the score of eq. (2) (2.5, 3);
- :mod:`.route` -- Level 1: splitting, greedy pool choice, DP over (step, epoch), rapid route builder (3.1);
- :mod:`.ga` -- Level 2's steady-state order-based GA (3.2);
- :mod:`.planner` -- Levels 2 and 3 under a deadline (3.2, 3.3);
- :mod:`.fixtures` -- the hub-and-spokes baseline, P1-P3 and the scaling transforms (4).
"""

from .model import (
    BACKLOG,
    Flow,
    FlowEpochStats,
    Hop,
    JobCounts,
    LoadMap,
    Plan,
    PolicyEntry,
    Pool,
    PoolEpochStats,
    Problem,
    Route,
    SimResult,
    Step,
    Waiting,
)
from .planner import PlannerParams, PlanResult, plan_flows
from .sim import simulate

__all__ = [
    "BACKLOG",
    "Flow",
    "FlowEpochStats",
    "Hop",
    "JobCounts",
    "LoadMap",
    "Plan",
    "PlanResult",
    "PlannerParams",
    "PolicyEntry",
    "Pool",
    "PoolEpochStats",
    "Problem",
    "Route",
    "SimResult",
    "Step",
    "Waiting",
    "plan_flows",
    "simulate",
]
