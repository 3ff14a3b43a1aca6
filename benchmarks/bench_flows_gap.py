"""Issue 36: how far from optimal the flow planner's plans may be -- the LP bound (soda_optimizer.flows.bound) and
the gap per paper case (baseline, P1-P3), with the paper's 100 GA evaluations per epoch, seed 1.

Usage: python benchmarks/bench_flows_gap.py   (writes docs/benchmarks/flows_gap.json, prints one line per case)
"""

import json
import pathlib
import time

from soda_optimizer.flows import PlannerParams, plan_flows
from soda_optimizer.flows import fixtures as fx
from soda_optimizer.flows.bound import lp_bound
from soda_optimizer.flows.compiled import compile_problem

rows = []
for name in ("baseline", "p1", "p2", "p3"):
    prob = getattr(fx, name)()
    t = time.monotonic()
    r = plan_flows(prob, PlannerParams(evaluations=100, seed=1))
    el = time.monotonic() - t
    b = lp_bound(compile_problem(prob))
    assert b is not None and r.bound is not None
    row = dict(case=name, score=round(r.result.score, 2), first_answer=round(r.first_score, 2),
               admit_on_arrival=round(r.baselines["admit"], 2), lp_candidate=round(r.baselines.get("lp", float("nan")), 2),
               bound=round(r.bound, 2),
               gap=round(r.gap or 0.0, 4), lp_variables=b.variables, lp_constraints=b.constraints,
               lp_s=round(b.solve_s, 2), planner_s=round(el, 2), left_at_horizon=round(r.result.left_at_horizon, 1),
               chosen=r.chosen)
    rows.append(row)
    print(row, flush=True)
path = pathlib.Path(__file__).resolve().parents[1] / "docs" / "benchmarks" / "flows_gap.json"
path.write_text(json.dumps({"command": "python benchmarks/bench_flows_gap.py", "rows": rows}, indent=1) + "\n")
