"""Issue 36: per scenario, the plan returned beside the whole-plan candidates, and the GA against its seeds per epoch.

Usage: PYTHONPATH=optimizer python benchmarks/bench_flows_candidates.py [EVALUATIONS]  (prints; docs/benchmarks/flows.md)
"""

import sys
import time

from soda_optimizer.flows import PlannerParams, plan_flows
from soda_optimizer.flows import fixtures as fx

ev = int(sys.argv[1]) if len(sys.argv) > 1 else 60
for name, make in fx.SCENARIOS.items():
    t = time.monotonic()
    r = plan_flows(make(), PlannerParams(evaluations=ev, seed=1))
    print(
        name, round(r.result.score, 2), r.chosen, {k: round(v, 2) for k, v in r.baselines.items()},
        "seed", [round(x, 1) for x in r.seed_scores], "ga", [round(x, 1) for x in r.ga_scores],
        round(time.monotonic() - t, 2), "s",
    )
    tab: dict[tuple[int, int], list[float]] = {}
    for s in r.result.flows:
        d = tab.setdefault((int(s.flow[1]), s.epoch), [0.0, 0.0, 0.0])
        d[0] += s.backlogged
        d[1] += s.released
        d[2] += s.dropped
    for sp in (1, 2, 3):
        cells = (tab.get((sp, e), [0.0, 0.0, 0.0]) for e in range(6))
        print("  spoke", sp, " ".join(f"B{v[0]:.0f}/R{v[1]:.0f}/D{v[2]:.0f}" for v in cells))
