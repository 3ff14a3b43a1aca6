"""Issue 36: the flow planner's deadline and memory at scale (the paper's 10x-flows transform taken to N x 24 flows).

Usage: python benchmarks/bench_flows_deadline.py N same|distinct DEADLINE_S
``same``: the transform as the paper defines it (N copies of each flow, 1/N of its rate: identical flows, planned as
groups); ``distinct``: each copy's lifespan nudged by 0.001 min x its index, so no two flows group. Prints one line.
"""

import resource
import sys
import time

from soda_optimizer.flows import PlannerParams, plan_flows
from soda_optimizer.flows import fixtures as fx

n = int(sys.argv[1])
distinct = sys.argv[2] == "distinct"
dl = float(sys.argv[3])
p = fx.scaled(fx.baseline(), flows=n)
if distinct:
    p = p.model_copy(
        update={"flows": tuple(f.model_copy(update={"lifespan": f.lifespan + 0.001 * i}) for i, f in enumerate(p.flows))}
    )
t = time.monotonic()
r = plan_flows(p, PlannerParams(evaluations=100, deadline_s=dl, seed=1))
el = time.monotonic() - t
print(
    dict(
        flows=len(p.flows), distinct=distinct, deadline=dl, elapsed=round(el, 2), first_answer_s=round(r.first_answer_s, 2),
        groups=r.groups, score=round(r.result.score, 1), chosen=r.chosen, epochs_optimised=r.epochs_optimised,
        timed_out=r.timed_out, maxrss_mib=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    )
)
