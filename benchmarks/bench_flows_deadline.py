"""Issue 36: the flow planner's deadline and memory at scale (the paper's 10x-flows transform taken to N x 24 flows).

Usage: python benchmarks/bench_flows_deadline.py [N same|distinct DEADLINE_S]
With arguments: one run in this process, printed as one JSON line. Without: the table of issue 36, each run in a
fresh process (so peak RSS is its own), written to docs/benchmarks/flows_deadline.json:
5,016, 10,008 and 20,016 distinct flows (and 20,016 identical ones) with a 5 s deadline.

``same``: the transform as the paper defines it (N copies of each flow, 1/N of its rate: identical flows, planned as
groups); ``distinct``: each copy's lifespan nudged by 0.001 min x its index, so no two flows group.
Reports wall seconds (what the deadline is about), CPU seconds of the process (the machine is shared: wall/CPU
shows the load), the first answer's wall seconds, epochs optimised, peak RSS, the seconds to build the entries of
epoch 0 alone (what the operator applies, ``PlanResult.entries_at``), the compact plan (``PlanResult.compact``: flows
with equal entries listed once; its classes, entries, wall and CPU seconds) and then the whole plan's entries on
first access (all outside the deadline, see PlanResult).
"""

import json
import os
import pathlib
import resource
import subprocess
import sys
import time

from soda_optimizer.flows import PlannerParams, plan_flows
from soda_optimizer.flows import fixtures as fx


def one(n: int, distinct: bool, dl: float) -> dict[str, object]:
    p = fx.scaled(fx.baseline(), flows=n)
    if distinct:
        p = p.model_copy(update={
            "flows": tuple(f.model_copy(update={"lifespan": f.lifespan + 0.001 * i}) for i, f in enumerate(p.flows))
        })
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    c0, t = time.process_time(), time.monotonic()
    r = plan_flows(p, PlannerParams(evaluations=100, deadline_s=dl, seed=1))
    el, cpu = time.monotonic() - t, time.process_time() - c0
    rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t = time.monotonic()
    epoch0 = len(r.entries_at(0))
    epoch0_s = time.monotonic() - t
    rss2 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t, c0 = time.monotonic(), time.process_time()
    cpt = r.compact()
    compact_s, compact_cpu = time.monotonic() - t, time.process_time() - c0
    rss3 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t = time.monotonic()
    entries = len(r.plan.entries)
    plan_s = time.monotonic() - t
    return dict(
        flows=len(p.flows), distinct=distinct, deadline_s=dl, elapsed_s=round(el, 2), cpu_s=round(cpu, 2),
        first_answer_s=round(r.first_answer_s, 2), groups=r.groups, score=round(r.result.score, 1), chosen=r.chosen,
        baselines={k: round(v, 1) for k, v in r.baselines.items()},
        bound=round(r.bound, 1) if r.bound is not None else None, gap=round(r.gap, 4) if r.gap is not None else None,
        epochs_optimised=r.epochs_optimised, timed_out=r.timed_out,
        peak_rss_mib_problem=round(rss0 / 1024), peak_rss_mib_planned=round(rss1 / 1024),
        epoch0_entries=epoch0, epoch0_entries_s=round(epoch0_s, 2), peak_rss_mib_epoch0=round(rss2 / 1024),
        compact_classes=len(cpt.classes), compact_entries=cpt.size, compact_s=round(compact_s, 2),
        compact_cpu_s=round(compact_cpu, 2), peak_rss_mib_compact=round(rss3 / 1024),
        plan_entries=entries, plan_entries_s=round(plan_s, 2),
        peak_rss_mib_with_entries=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    )


if __name__ == "__main__":
    if len(sys.argv) > 1:
        print(json.dumps(one(int(sys.argv[1]), sys.argv[2] == "distinct", float(sys.argv[3]))))
        sys.exit(0)
    rows = []
    load = [" ".join(f"{x:.2f}" for x in os.getloadavg())]
    for n, kind in ((209, "distinct"), (417, "distinct"), (834, "distinct"), (834, "same")):
        out = subprocess.run([sys.executable, __file__, str(n), kind, "5"], capture_output=True, text=True, check=True)
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(rows[-1], flush=True)
    path = pathlib.Path(__file__).resolve().parents[1] / "docs" / "benchmarks" / "flows_deadline.json"
    load.append(" ".join(f"{x:.2f}" for x in os.getloadavg()))
    path.write_text(json.dumps({"command": "python benchmarks/bench_flows_deadline.py", "load_average": load,
                                "runs": rows}, indent=1) + "\n")
