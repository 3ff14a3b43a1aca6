"""One macro epoch's optimizer time, this checkout vs a baseline commit, alternating in one run (issue 39).

    .venv/bin/python benchmarks/bench_macro_epoch.py [--baseline REV] [--reps 5] [--cases lsd30,lsd20,lsd50,dac30]

A macro epoch from scratch (no previous candidates) with the operator's default deadlines (the
Policy's: macroQ 2 s since issue 39, 5 s before; macroW 10 s): macroQ -> macroW -> microQ -> microW, on the LSD-like and
DAC-like workloads with the link capacities of ``bench_placement.py`` (rack uplink 2.5 MB/s, zone
uplink 10 MB/s). The baseline is checked out into a temporary git worktree and each run is its own
process, alternating baseline / now, so both see the same machine. Reported per case and side:
median and max of the epoch's seconds (and of each stage), the median macroW objective (lower is
better), in-node traffic share and max link utilisation of the final fractions, and importance.
Writes docs/benchmarks/macro-epoch.json and .md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import sidebyside  # noqa: E402

BASELINE = "afb0ca8"  # main before issue 39's macro-epoch work
CASES = {"lsd30": ("lsd", 30), "lsd20": ("lsd", 20), "lsd50": ("lsd", 50), "dac30": ("dac", 30)}


def run_case(workload: str, n_nodes: int) -> dict:
    """In the child process: one macro epoch from scratch, timed stage by stage."""
    sys.path.insert(0, str(ROOT))
    from benchmarks.metrics import placement_metrics
    from soda_optimizer import workloads
    from soda_optimizer.model import LinkCapacities, Policy
    from soda_optimizer.soda import macroq, macrow, microq, microw

    s = workloads.scenario(getattr(workloads, workload)(), workloads.nodes(n_nodes),
                           Policy(links=LinkCapacities(rack_uplink=2.5e6, zone_uplink=1e7)))
    t: dict[str, float] = {}
    t0 = time.perf_counter()
    q = macroq.solve(s)
    t["macroq"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    w = macrow.solve(s, q)
    t["macrow"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    uq = microq.solve(s, q, w.candidates)
    t["microq"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    uw = microw.solve(s, uq.goals, w.candidates)
    t["microw"] = time.perf_counter() - t0
    m = placement_metrics(s, uw.fractions, q.stream_rates)
    return {"seconds": sum(t.values()), **{f"{k}_s": v for k, v in t.items()}, "objective": w.objective,
            "importance": q.importance, "admitted": sum(d.admitted for d in q.decisions),
            "in_node": m["intra_node_traffic"], "max_link_util": m["max_link_util"], "macrow_detail": w.report.detail}


def child(root: Path, workload: str, n_nodes: int) -> dict:
    return sidebyside.child(root, "benchmarks.bench_macro_epoch", f"run_case({workload!r}, {n_nodes})", timeout=600)


def summary(runs: list[dict]) -> dict:
    keys = ("seconds", "macroq_s", "macrow_s", "microq_s", "microw_s")
    out = {f"{k}_median": statistics.median(r[k] for r in runs) for k in keys}
    out.update({f"{k}_max": max(r[k] for r in runs) for k in keys})
    for k in ("objective", "in_node", "max_link_util", "importance", "admitted"):
        out[f"{k}_median"] = statistics.median(r[k] for r in runs)
    out["under_3s"] = sum(r["seconds"] < 3.0 for r in runs)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline", default=BASELINE)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--cases", default="lsd30,lsd20,lsd50,dac30")
    args = ap.parse_args()
    names = [c for c in args.cases.split(",") if c]
    rows = []
    with sidebyside.baseline_tree(args.baseline, Path(__file__)) as base:
        for name in names:
            wl, n = CASES[name]
            runs: dict[str, list[dict]] = {"baseline": [], "now": []}
            for _ in range(args.reps):  # alternating, so both see the same machine
                runs["baseline"].append(child(base, wl, n))
                runs["now"].append(child(ROOT, wl, n))
            row = {"case": name, "workload": wl, "nodes": n, **{side: summary(rs) for side, rs in runs.items()}, "runs": runs}
            rows.append(row)
            b, m = row["baseline"], row["now"]
            print(f"{name}: baseline {b['seconds_median']:.2f}/{b['seconds_max']:.2f} s obj {b['objective_median']:.4f} "
                  f"in-node {b['in_node_median']:.3f} | now {m['seconds_median']:.2f}/{m['seconds_max']:.2f} s "
                  f"obj {m['objective_median']:.4f} in-node {m['in_node_median']:.3f}", flush=True)
    load = os.getloadavg()
    out = ROOT / "docs" / "benchmarks"
    cmd = f"benchmarks/bench_macro_epoch.py --baseline {args.baseline} --reps {args.reps} --cases {args.cases}"
    (out / "macro-epoch.json").write_text(json.dumps({"command": cmd, "cores": os.cpu_count(), "load_at_end": load,
                                                      "rows": rows}, indent=2))
    lines = [f"# One macro epoch from scratch, {args.baseline} vs this checkout (`{cmd}`)", "",
             f"Alternating runs, each its own process; {os.cpu_count()} cores, load average at the end "
             f"{load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} (1/5/15 min). Seconds: median / max of {args.reps} runs; "
             "objective: macroW's (lower is better); in-node: share of stream traffic inside nodes.", "",
             "| case | side | epoch s (median / max) | runs under 3 s | macroQ | macroW | microQ | microW | macroW objective | "
             "in-node | max link util | importance |", "|---" * 12 + "|"]
    for r in rows:
        for side in ("baseline", "now"):
            x = r[side]
            lines.append(f"| {r['case']} | {side} | {x['seconds_median']:.2f} / {x['seconds_max']:.2f} | {x['under_3s']}/{args.reps} | "
                         f"{x['macroq_s_median']:.2f} | {x['macrow_s_median']:.2f} | {x['microq_s_median']:.2f} | "
                         f"{x['microw_s_median']:.3f} | {x['objective_median']:.4f} | {x['in_node_median']:.3f} | "
                         f"{x['max_link_util_median']:.3f} | {x['importance_median']:.0f} |")
        b, m = r["baseline"], r["now"]
        lines.append(f"| {r['case']} | now / baseline | {m['seconds_median'] / b['seconds_median']:.2f}x | | | | | | "
                     f"{m['objective_median'] / b['objective_median']:.4f}x | | | |")
    (out / "macro-epoch.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
