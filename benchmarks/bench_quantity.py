"""Quantity-side benchmark (issue 3): macroQ and microQ times on LSD, DAC and 10x LSD.

    .venv/bin/python benchmarks/bench_quantity.py

macroQ is run with a 1 s deadline (the issue's target) and with the default 5 s (the granularity
loop refines while time allows), 10x LSD with a 10 s deadline; each timing is the median of
several runs. Writes docs/benchmarks/quantity.json.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from soda_optimizer import workloads  # noqa: E402
from soda_optimizer.soda import macroq, macrow, microq  # noqa: E402


def timed(fn, reps):
    out, ts = None, []
    for _ in range(reps):
        t0 = time.perf_counter()
        out = fn()
        ts.append(time.perf_counter() - t0)
    return out, statistics.median(ts)


def main() -> None:
    rows = []
    cases = [("lsd", workloads.lsd(), 30, [1.0, 5.0], 3), ("dac", workloads.dac(), 30, [1.0, 5.0], 3), ("lsd-10x", workloads.lsd(scale=10), 300, [10.0], 1)]
    for name, wl, n, deadlines, reps in cases:
        s = workloads.scenario(wl, workloads.nodes(n))
        for dl in deadlines:
            q, tq = timed(lambda s=s, dl=dl: macroq.solve(s, deadline_s=dl), reps)
            w = macrow.solve(s, q, deadline_s=2.0)
            uq, tu = timed(lambda s=s, q=q, w=w: microq.solve(s, q, w.candidates), 5)
            row = {
                "workload": name, "nodes": n, "pes": sum(len(s.template(t).pes) for t in q.choice.values()),
                "macroq_deadline_s": dl, "macroq_median_s": tq, "macroq_status": q.report.status,
                "macroq_importance": q.importance, "resolution_mips": q.resolution_mips,
                "admitted": sum(d.admitted for d in q.decisions), "jobs": len(q.decisions),
                "microq_median_s": tu, "microq_importance": uq.importance, "microq_status": uq.report.status,
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
    out = ROOT / "docs" / "benchmarks"
    out.mkdir(parents=True, exist_ok=True)
    (out / "quantity.json").write_text(json.dumps({"command": "benchmarks/bench_quantity.py", "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
