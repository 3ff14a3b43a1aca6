"""Deadline- and priority-aware dispatch (issue 17): section 6 of Lin (NTU 2014), reproduced in simulation.

    .venv/bin/python benchmarks/bench_dispatch.py           # full: 5 sampled workloads (the paper's count)
    .venv/bin/python benchmarks/bench_dispatch.py --quick   # 2 workloads
    .venv/bin/python benchmarks/bench_dispatch.py --swf SDSC-Par-1996-3.1-cln.swf   # a real trace

- trace experiment (6.3): 20 worker slots, homogeneous and heterogeneous (:func:`scenarios.slots`), each sampled
  workload (6.3.1's transformations of an SWF trace: the real one if ``--swf``, else the Lublin-Feitelson model
  trace of :mod:`swf`) replayed under every policy, non-preemptive (figure 3.2's dispatcher) and preemptive (4.4's
  kill option, the allocation plan); the average over the workloads of the priority violation rate (time average)
  and of the deadline penalty sum P_j * M_j;
- failure test (6.2): 8 workers, one job, deadline 240 s, deadline-based policy, 6 workers down 55-115 s; the
  workers allocated to the job against time, with and without the failure.

Writes docs/benchmarks/dispatch.json, dispatch.md and, if matplotlib is installed, dispatch_*.png.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "optimizer"))

from soda_optimizer.dispatch import DeadlinePolicy, Workload, paper_policies, simulate  # noqa: E402
from soda_optimizer.dispatch.scenarios import failure_scenario, slots  # noqa: E402
from soda_optimizer.dispatch.swf import trace_jobs  # noqa: E402

OUT = ROOT / "docs" / "benchmarks"
PAPER = {
    "violation_zero": ["priority(r=0)", "deadline+fill-priority"],
    "edf_vs_fill_deadline_violation": 4.0,
    "fill_deadline_vs_fill_priority_penalty": {"homogeneous": 0.004, "heterogeneous": 0.002},
    "priority_vs_edf_penalty": "about 1000x (3 orders of magnitude)",
    "lowest_penalty": "edf",
}


def trace_experiment(samples: int, swf_text: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    policies = paper_policies()
    workloads = [trace_jobs(swf_text, seed=s) for s in range(samples)]
    for env in ("homogeneous", "heterogeneous"):
        workers = slots(20, env == "heterogeneous")
        for mode in ("non-preemptive", "preemptive"):
            rows: dict[str, dict[str, float]] = {}
            for name, policy in policies.items():
                vr, pen, missed, kills = [], [], [], []
                for jobs in workloads:
                    r = simulate(Workload(jobs, workers), policy, preemptive=mode == "preemptive")
                    vr.append(r.violation_rate)
                    pen.append(r.penalty)
                    missed.append(r.missed / len(jobs))
                    kills.append(sum(not x.completed for x in r.runs))
                rows[name] = {
                    "violation_rate": sum(vr) / len(vr),
                    "penalty": sum(pen) / len(pen),
                    "missed_fraction": sum(missed) / len(missed),
                    "killed_runs": sum(kills) / len(kills),
                }
            out[f"{env}/{mode}"] = rows
    out["workloads"] = [{"jobs": len(w), "tasks": sum(j.tasks for j in w)} for w in workloads]
    return out


def ratio(a: float, b: float) -> float | None:
    return a / b if b > 0 else None


def findings(trace: dict[str, Any]) -> dict[str, Any]:
    f: dict[str, Any] = {}
    for key, rows in trace.items():
        if key == "workloads":
            continue
        f[key] = {
            "zero_violation": [n for n, r in rows.items() if r["violation_rate"] == 0.0],
            "edf_vs_fill_deadline_violation": ratio(
                rows["edf"]["violation_rate"], rows["deadline+fill-deadline"]["violation_rate"]
            ),
            "fill_deadline_vs_fill_priority_penalty": ratio(
                rows["deadline+fill-deadline"]["penalty"], rows["deadline+fill-priority"]["penalty"]
            ),
            "priority_vs_edf_penalty": ratio(rows["priority(r=0)"]["penalty"], rows["edf"]["penalty"]),
            "lowest_penalty": min(rows, key=lambda n: rows[n]["penalty"]),
        }
    return f


def failure_test() -> dict[str, Any]:
    out = {}
    for label, failed in (("normal", False), ("failure", True)):
        wl, prior = failure_scenario(failed)
        r = simulate(wl, DeadlinePolicy(fill=None, reading="text"), prior)
        out[label] = {"finish": r.finish["cht"], "timeline": r.workers_of("cht")}
    return out


def fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.4g}"


def write_md(res: dict[str, Any]) -> str:
    lines = ["# Dispatch benchmark (issue 17; Lin 2014, section 6)", ""]
    lines.append(f"Run: `{res['command']}` in {res['seconds']:.0f} s; workloads: {res['trace']['workloads']}.")
    lines.append(f"Trace source: {res['source']}.")
    lines.append("")
    for key, rows in res["trace"].items():
        if key == "workloads":
            continue
        lines += [
            f"## {key}",
            "",
            "| policy | violation rate | penalty | missed | killed runs |",
            "|---|---|---|---|---|",
        ]
        for n, r in rows.items():
            lines.append(
                f"| {n} | {r['violation_rate']:.4f} | {r['penalty']:.1f} | {r['missed_fraction']:.3f} |"
                f" {r['killed_runs']:.0f} |"
            )
        f = res["findings"][key]
        env = key.split("/")[0]
        lines += [
            "",
            "| finding | paper | ours |",
            "|---|---|---|",
            f"| zero violations | priority-based, deadline+fill-priority | {', '.join(f['zero_violation']) or 'none'} |",
            f"| EDF / fill-deadline violations | about 4x | {fmt(f['edf_vs_fill_deadline_violation'])} |",
            f"| fill-deadline / fill-priority penalty | {PAPER['fill_deadline_vs_fill_priority_penalty'][env]} |"
            f" {fmt(f['fill_deadline_vs_fill_priority_penalty'])} |",
            f"| priority-based / EDF penalty | about 1000x | {fmt(f['priority_vs_edf_penalty'])} |",
            f"| lowest penalty | EDF | {f['lowest_penalty']} |",
            "",
        ]
    ft = res["failure"]
    lines += [
        "## Failure test (6.2)",
        "",
        f"Job finished at {ft['normal']['finish']:.1f} s without failure, {ft['failure']['finish']:.1f} s with 6 of 8"
        " workers down 55-115 s (deadline 240 s). Workers allocated (time s: workers), with the failure:",
        "",
        ", ".join(f"{t:.0f}:{n}" for t, n in ft["failure"]["timeline"]),
        "",
        "without:",
        "",
        ", ".join(f"{t:.0f}:{n}" for t, n in ft["normal"]["timeline"]),
        "",
    ]
    return "\n".join(lines)


def plots(res: dict[str, Any]) -> list[str]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    made = []
    fig, ax = plt.subplots(figsize=(7, 3.5))
    for label, color in (("normal", "tab:blue"), ("failure", "tab:red")):
        tl = res["failure"][label]["timeline"]
        ax.step([t for t, _ in tl], [n for _, n in tl], where="post", color=color, label=label)
    ax.axvspan(55, 115, color="grey", alpha=0.2, label="6 workers down")
    ax.set_xlabel("time (s)")
    ax.set_ylabel("workers allocated")
    ax.set_title("Failure test (section 6.2), deadline-based policy, deadline 240 s")
    ax.legend()
    fig.tight_layout()
    fig.savefig(OUT / "dispatch_failure.png", dpi=100)
    plt.close(fig)
    made.append("dispatch_failure.png")
    for metric in ("violation_rate", "penalty"):
        keys = [k for k in res["trace"] if k != "workloads"]
        fig, axes = plt.subplots(1, len(keys), figsize=(4 * len(keys), 4), sharey=metric == "violation_rate")
        for ax, key in zip(axes, keys, strict=True):
            rows = res["trace"][key]
            ax.bar(range(len(rows)), [r[metric] for r in rows.values()])
            ax.set_xticks(range(len(rows)), list(rows), rotation=70, fontsize=7)
            ax.set_title(key, fontsize=9)
            if metric == "penalty":
                ax.set_yscale("symlog")
        fig.suptitle(metric.replace("_", " "))
        fig.tight_layout()
        fig.savefig(OUT / f"dispatch_{metric}.png", dpi=100)
        plt.close(fig)
        made.append(f"dispatch_{metric}.png")
    return made


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="2 sampled workloads instead of 5")
    ap.add_argument("--swf", type=Path, help="a real SWF trace (e.g. SDSC-Par96) instead of the model trace")
    args = ap.parse_args()
    t0 = time.time()
    swf_text = args.swf.read_text() if args.swf else None
    res: dict[str, Any] = {
        "command": "bench_dispatch.py"
        + (" --quick" if args.quick else "")
        + (f" --swf {args.swf}" if args.swf else ""),
        "source": str(args.swf) if args.swf else "Lublin-Feitelson model trace (swf.lublin_swf), not SDSC-Par96",
        "paper": PAPER,
    }
    res["trace"] = trace_experiment(2 if args.quick else 5, swf_text)
    res["findings"] = findings(res["trace"])
    res["failure"] = failure_test()
    res["seconds"] = time.time() - t0
    OUT.mkdir(parents=True, exist_ok=True)
    res["plots"] = plots(res)
    (OUT / "dispatch.json").write_text(json.dumps(res, indent=1) + "\n")
    (OUT / "dispatch.md").write_text(write_md(res))
    print(write_md(res))


if __name__ == "__main__":
    main()
