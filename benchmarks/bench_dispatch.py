"""Deadline- and priority-aware dispatch (issues 17, 35): section 6 of Lin (NTU 2014), reproduced in simulation.

    hack/fetch-trace.sh                                      # SDSC-Par96 into the cache once (sha256 checked)
    .venv/bin/python benchmarks/bench_dispatch.py            # 10 sampled workloads (seeds 0-9) per trace
    .venv/bin/python benchmarks/bench_dispatch.py --quick    # 2 workloads, one worker model
    .venv/bin/python benchmarks/bench_dispatch.py --swf path/to/SDSC-Par-1996-3.1-cln.swf.gz
    .venv/bin/python benchmarks/bench_dispatch.py --jobs 2   # the simulations in 2 processes

The real trace is read from ``--swf``, else ``$KUBESODA_SDSC_PAR96``, else the cache the fetch script fills
(``$KUBESODA_CACHE/traces/SDSC-Par-1996-3.1-cln.swf.gz``, ``KUBESODA_CACHE`` defaulting to ``~/.cache/kubesoda``);
``.gz`` or plain. It is never committed. Without it only the Lublin-Feitelson model trace (:mod:`swf`) is run;
with it both are run, side by side, on the same seeds. A trace given by ``--swf`` is labelled by its file name (issue
51: not assumed to be SDSC-Par96).

- trace experiment (6.3): 20 worker slots, homogeneous and heterogeneous (:func:`scenarios.slots`); each sampled
  workload (6.3.1's transformations) replayed under every policy of the paper and the other reading of each
  algorithm whose pseudo-code and text disagree, in the four worker models of :mod:`sim` (``plan``, the paper's,
  and the departures ``free``, ``kill`` and ``kill-lower``); the mean over the workloads (the paper averages 5; we
  sample 10, issue 51), the median and the per-seed spread (min, max) of the priority violation rate (time average,
  on the plan and on what runs) and of the deadline penalty sum P_j * M_j; each of the paper's five findings checked
  per cell on the means and on each seed (how many seeds it holds in);
- trace properties (the evidence for the findings that differ): per workload the load, the longest scaled
  runtime, the priority levels, the time with more jobs in the system than workers;
- failure test (6.2): 8 workers, one job, deadline 240 s, deadline-based policy, 6 workers down 55-115 s.

Writes docs/benchmarks/dispatch.json, dispatch.md and, if matplotlib is installed, dispatch_*.png.
"""

from __future__ import annotations

import argparse
import functools
import gzip
import json
import os
import statistics
import sys
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "optimizer"))

from soda_optimizer.dispatch import MODES, DeadlinePolicy, Workload, paper_policies, simulate  # noqa: E402
from soda_optimizer.dispatch.scenarios import failure_scenario, slots  # noqa: E402
from soda_optimizer.dispatch.swf import trace_jobs  # noqa: E402

OUT = ROOT / "docs" / "benchmarks"
TRACE_FILE = "SDSC-Par-1996-3.1-cln.swf.gz"
#: the four policies of figures 6.2-6.5, left (priority first) to right (deadline first)
FIGURE = ("priority(r=0)", "deadline+fill-priority", "deadline+fill-deadline", "edf")
PAPER: dict[str, Any] = {
    "zero_violation": ["priority(r=0)", "deadline+fill-priority"],
    "edf_vs_fill_deadline_violation": 4.0,
    "lowest_penalty": "edf",
    "fill_deadline_vs_fill_priority_penalty": {"homogeneous": 0.004, "heterogeneous": 0.002},
    "trade_off": "left to right (priority, fill-priority, fill-deadline, EDF): violations up, penalty down",
    "priority_vs_edf_penalty": "about 1000x (3 orders of magnitude)",
}


def trace_path(arg: Path | None) -> Path | None:
    if arg is not None:
        return arg
    env = os.environ.get("KUBESODA_SDSC_PAR96")
    if env:
        return Path(env)
    cached = Path(os.environ.get("KUBESODA_CACHE", Path.home() / ".cache" / "kubesoda")) / "traces" / TRACE_FILE
    return cached if cached.exists() else None


def trace_label(path: Path) -> str:
    """The trace's name, from its file: ``SDSC-Par-1996-3.1-cln.swf.gz`` -> ``SDSC-Par-1996-3.1-cln`` (issue 51)."""
    name = path.name
    for suffix in (".gz", ".swf"):
        name = name.removesuffix(suffix)
    return name or path.name


def describe(path: Path) -> str:
    """What the trace is: the Parallel Workloads Archive's SDSC-Par96 only if that is the file's name."""
    if path.name == TRACE_FILE:
        return f"{path.name} (the Parallel Workloads Archive's cleaned SDSC-Par96 log, 32,135 jobs)"
    return f"{path.name} (an SWF trace)"


def read_trace(path: Path) -> str:
    data = path.read_bytes()
    return gzip.decompress(data).decode() if data[:2] == b"\x1f\x8b" else data.decode()


def properties(jobs: Any, workers: int = 20) -> dict[str, float]:
    """What of a sampled workload decides the findings: load, longest runtime, priorities, crowding."""
    span = max(j.deadline for j in jobs) - min(j.arrival for j in jobs)
    work = sum(sum(j.task_work) for j in jobs)
    return {
        "jobs": len(jobs),
        "tasks": sum(j.tasks for j in jobs),
        "load": work / (workers * span),
        "max_runtime": max(max(j.task_work) for j in jobs),
        "median_runtime": statistics.median(max(j.task_work) for j in jobs),
        "max_tasks": max(j.tasks for j in jobs),
        "priority_levels": len({j.priority for j in jobs}),
        "max_priority": max(j.priority for j in jobs),
    }


def crowded(result: Any, workers: int = 20) -> float:
    """Fraction of the non-empty time with more jobs in the system than workers (only then can a plan that serves
    jobs in priority order leave a job without a worker)."""
    tl = result.timeline
    busy = over = 0.0
    for a, b in zip(tl, tl[1:], strict=False):
        if a.in_system:
            busy += b.time - a.time
            over += (b.time - a.time) if a.in_system > workers else 0.0
    return over / busy if busy else 0.0


_SWF: dict[int, str | None] = {}


def _one(args: tuple[int, str, str, str]) -> tuple[float, float, float, float, float, float]:
    """One simulation (a process of the pool): seed, environment, worker model, policy name -> the metrics."""
    seed, env, mode, name = args
    jobs = _jobs(seed)
    r = simulate(Workload(jobs, slots(20, env == "heterogeneous")), paper_policies(readings=True)[name],
                 mode=mode)  # type: ignore[arg-type]
    return (r.violation_rate, r.violation_rate_running, r.penalty, r.missed / len(jobs),
            float(sum(not x.completed for x in r.runs)), crowded(r))


@functools.lru_cache(maxsize=16)
def _jobs(seed: int) -> Any:
    return trace_jobs(_SWF.get(0), seed=seed)


def _init(text: str | None) -> None:
    _SWF[0] = text
    _jobs.cache_clear()


def trace_experiment(samples: int, swf_text: str | None, modes: tuple[str, ...], procs: int = 1,
                     only: list[str] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"cells": {}}
    names = [n for n in paper_policies(readings=True) if only is None or n in only]
    out["workloads"] = [properties(trace_jobs(swf_text, seed=s)) for s in range(samples)]
    keys = [(seed, env, mode, name) for env in ("homogeneous", "heterogeneous") for mode in modes for name in names
            for seed in range(samples)]
    got: dict[tuple[int, str, str, str], tuple[float, ...]]
    if procs > 1:
        with ProcessPoolExecutor(procs, initializer=_init, initargs=(swf_text,)) as ex:
            got = dict(zip(keys, ex.map(_one, keys, chunksize=4), strict=True))
    else:
        _init(swf_text)
        got = {k: _one(k) for k in keys}
    for env in ("homogeneous", "heterogeneous"):
        for mode in modes:
            rows: dict[str, dict[str, Any]] = {}
            for name in names:
                vr, vrun, pen, missed, kills, crowd = (list(x) for x in zip(*(got[(s, env, mode, name)] for s in range(samples)), strict=True))
                rows[name] = {
                    "violation_rate": statistics.fmean(vr),
                    "violation_rate_median": statistics.median(vr),
                    "violation_rate_running": statistics.fmean(vrun),
                    "penalty": statistics.fmean(pen),
                    "penalty_median": statistics.median(pen),
                    "violation_per_workload": vr,
                    "violation_running_per_workload": vrun,
                    "penalty_per_workload": pen,
                    "missed_fraction": statistics.fmean(missed),
                    "killed_runs": statistics.fmean(kills),
                    "crowded_time": statistics.fmean(crowd),
                }
            out["cells"][f"{env}/{mode}"] = rows
    return out


def ratio(a: float, b: float) -> float | None:
    return a / b if b > 0 else None


def cell_findings(rows: dict[str, Any], env: str) -> dict[str, Any]:
    fig = {n: rows[n] for n in FIGURE}
    vr = [fig[n]["violation_rate"] for n in FIGURE]
    pen = [fig[n]["penalty"] for n in FIGURE]
    zero = [n for n, r in rows.items() if r["violation_rate"] == 0.0]
    edf_fd = ratio(vr[3], vr[2])
    fd_fp = ratio(pen[2], pen[1])
    fd_fp_text = ratio(rows["deadline[text]+fill-deadline"]["penalty"], rows["deadline[text]+fill-priority"]["penalty"])
    lowest = min(fig, key=lambda n: fig[n]["penalty"])
    vr_up = all(a <= b for a, b in zip(vr, vr[1:], strict=False))
    pen_down = all(a >= b for a, b in zip(pen, pen[1:], strict=False))
    return {
        "zero_violation": zero,
        "f1_holds": all(n in zero for n in PAPER["zero_violation"]),
        "edf_vs_fill_deadline_violation": edf_fd,
        "edf_vs_fill_deadline_violation_running": ratio(
            rows["edf"]["violation_rate_running"], rows["deadline+fill-deadline"]["violation_rate_running"]
        ),
        "f2_holds": edf_fd is not None and 2.0 <= edf_fd <= 8.0,
        "lowest_penalty": lowest,
        "lowest_penalty_all": min(rows, key=lambda n: rows[n]["penalty"]),
        "f3_holds": fig["edf"]["penalty"] <= min(pen),  # lowest or tied (a seed where two policies are late by 0)
        "fill_deadline_vs_fill_priority_penalty": fd_fp,
        "fill_deadline_vs_fill_priority_penalty_text": fd_fp_text,
        "f4_holds": fd_fp is not None and fd_fp <= 10 * PAPER["fill_deadline_vs_fill_priority_penalty"][env],
        "violations_left_to_right": vr,
        "penalty_left_to_right": pen,
        "f5_holds": vr_up and pen_down and vr[3] > vr[0],
        "priority_vs_edf_penalty": ratio(pen[0], pen[3]),
    }


def seed_rows(rows: dict[str, Any], i: int) -> dict[str, Any]:
    """The cell's rows for the one workload ``i`` (the findings checked on each seed)."""
    return {n: {"violation_rate": r["violation_per_workload"][i], "penalty": r["penalty_per_workload"][i],
                "violation_rate_running": r["violation_running_per_workload"][i]} for n, r in rows.items()}


def findings(trace: dict[str, Any]) -> dict[str, Any]:
    """Per cell: the findings on the means, and per finding the seeds it holds in (``seeds``: "k/N")."""
    out = {}
    for key, rows in trace["cells"].items():
        env = key.split("/")[0]
        f = cell_findings(rows, env)
        n = len(next(iter(rows.values()))["penalty_per_workload"])
        per = [cell_findings(seed_rows(rows, i), env) for i in range(n)]
        f["seeds"] = {k: f"{sum(p[k] for p in per)}/{n}" for k in ("f1_holds", "f2_holds", "f3_holds", "f4_holds", "f5_holds")}
        f["lowest_penalty_per_seed"] = [p["lowest_penalty"] for p in per]
        f["fill_deadline_vs_fill_priority_penalty_per_seed"] = [p["fill_deadline_vs_fill_priority_penalty"] for p in per]
        out[key] = f
    return out


def failure_test() -> dict[str, Any]:
    out = {}
    for label, failed in (("normal", False), ("failure", True)):
        wl, prior = failure_scenario(failed)
        r = simulate(wl, DeadlinePolicy(fill=None, reading="text"), prior)
        out[label] = {"finish": r.finish["cht"], "timeline": r.workers_of("cht")}
    return out


def fmt(x: float | None) -> str:
    return "n/a (0 / 0)" if x is None else f"{x:.3g}"


def yes(b: bool) -> str:
    return "**holds**" if b else "does not hold"


def write_md(res: dict[str, Any]) -> str:
    lines = ["# Dispatch benchmark (issues 17, 35, 51; Lin 2014, section 6)", ""]
    lines.append(f"Generated by `{res['command']}` in {res['seconds']:.0f} s. Traces: "
                 + "; ".join(f"**{k}**: {v['source']}" for k, v in res["traces"].items()) + ".")
    n = len(next(iter(res["traces"].values()))["workloads"])
    lines.append(f"Figures are the mean over {n} sampled workloads (seeds 0-{n - 1}; the paper averages 5), with the"
                 " per-seed range [min, max]; medians and every seed's value in the JSON. Violation rate = time"
                 " average on the plan (6.3.2), `on runs` = on the workers running each job's tasks. Each finding is"
                 " checked on the means and on each seed (`seeds`: how many it holds in). Which finding holds, and the"
                 " mechanism behind each verdict: docs/dispatch.md, 'Findings'.")
    lines.append("")
    for tname, tr in res["traces"].items():
        lines += [f"## {tname}: finding 4 by worker model (fill-deadline / fill-priority penalty)", "",
                  "| worker model | homogeneous: mean ratio | per seed [min, median, max] | heterogeneous: mean ratio |"
                  " per seed [min, median, max] |", "|---|---|---|---|---|"]
        modes = sorted({k.split("/")[1] for k in tr["cells"]}, key=lambda m: ["plan", "kill", "kill-lower", "free"].index(m))
        for mode in modes:
            row = [mode]
            for env in ("homogeneous", "heterogeneous"):
                f = tr["findings"][f"{env}/{mode}"]
                per = sorted(x for x in f["fill_deadline_vs_fill_priority_penalty_per_seed"] if x is not None)
                row.append(fmt(f["fill_deadline_vs_fill_priority_penalty"]))
                row.append(f"[{fmt(per[0])}, {fmt(statistics.median(per))}, {fmt(per[-1])}]" if per else "n/a")
            lines.append("| " + " | ".join(row) + " |")
        lines.append("")
    for tname, tr in res["traces"].items():
        lines += [f"## Trace {tname}", "", "Sampled workloads (6.3.1): "
                  + "; ".join(f"{w['jobs']} jobs, {w['tasks']} tasks, load {w['load']:.2f}, longest runtime"
                              f" {w['max_runtime']:.0f} s, {w['priority_levels']} priority levels"
                              for w in tr["workloads"]) + ".", ""]
        for key, rows in tr["cells"].items():
            lines += [f"### {tname}: {key}", "",
                      "| policy | violation rate [min, max] | on runs | penalty (mean) [min, max] | penalty (median) | missed |"
                      " killed runs |",
                      "|---|---|---|---|---|---|---|"]
            for name, r in rows.items():
                vr, pen = r["violation_per_workload"], r["penalty_per_workload"]
                lines.append(f"| {name} | {r['violation_rate']:.4f} [{min(vr):.4f}, {max(vr):.4f}] |"
                             f" {r['violation_rate_running']:.4f} | {r['penalty']:.1f} [{min(pen):.0f}, {max(pen):.0f}] |"
                             f" {r['penalty_median']:.1f} | {r['missed_fraction']:.3f} | {r['killed_runs']:.0f} |")
            f = tr["findings"][key]
            env, mode = key.split("/")
            sd = f["seeds"]
            fd0 = all(v == 0.0 for v in rows["deadline+fill-deadline"]["violation_per_workload"])
            f2 = ("untestable: fill-deadline's violation on the plan is 0 on every seed, by construction"
                  if fd0 and mode != "free" else f"{yes(f['f2_holds'])}; seeds {sd['f2_holds']}")
            lowest = Counter(f["lowest_penalty_per_seed"])
            lines += [
                "",
                "| finding (paper) | ours (means) | verdict (means; seeds it holds in) |",
                "|---|---|---|",
                f"| 1. zero violations: priority-based, deadline+fill-priority | zero: {', '.join(f['zero_violation']) or 'none'}"
                f" | {yes(f['f1_holds'])}; seeds {sd['f1_holds']} |",
                f"| 2. EDF about 4x the violations of fill-deadline | {fmt(f['edf_vs_fill_deadline_violation'])}"
                f" (on runs {fmt(f['edf_vs_fill_deadline_violation_running'])}) | {f2} |",
                f"| 3. EDF lowest penalty (of the four) | {f['lowest_penalty']} (of all: {f['lowest_penalty_all']});"
                f" lowest per seed (a tie to the left one): {', '.join(f'{k} {v}' for k, v in lowest.most_common())} |"
                f" {yes(f['f3_holds'])}; seeds {sd['f3_holds']} |",
                f"| 4. fill-deadline / fill-priority penalty {PAPER['fill_deadline_vs_fill_priority_penalty'][env]} |"
                f" {fmt(f['fill_deadline_vs_fill_priority_penalty'])} (text reading"
                f" {fmt(f['fill_deadline_vs_fill_priority_penalty_text'])}) | {yes(f['f4_holds'])} (within 10x);"
                f" seeds {sd['f4_holds']} |",
                f"| 5. trade-off, left to right | violations {', '.join(f'{v:.4f}' for v in f['violations_left_to_right'])};"
                f" penalty {', '.join(f'{v:.0f}' for v in f['penalty_left_to_right'])} | {yes(f['f5_holds'])};"
                f" seeds {sd['f5_holds']} |",
                f"| priority-based / EDF penalty about 1000x | {fmt(f['priority_vs_edf_penalty'])} | |",
                "",
            ]
    ft = res["failure"]
    lines += [
        "## Failure test (6.2)",
        "",
        f"Job finished at {ft['normal']['finish']:.1f} s without failure, {ft['failure']['finish']:.1f} s with 6 of 8"
        " workers down 55-115 s (deadline 240 s; deadline-based policy, text reading -- figure 6.1 follows the"
        " deadline). Workers allocated (time s: workers), with the failure:",
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
    # figures 6.2-6.5: the four policies, per environment, in the paper's worker model, one bar per trace
    labels = ["priority", "deadline+\nfill-priority", "deadline+\nfill-deadline", "EDF"]
    for metric, title, figs in (("violation_rate", "Average priority violation rate", "6.2 / 6.3"),
                                ("penalty", "Deadline miss penalty", "6.4 / 6.5")):
        fig, axes = plt.subplots(1, 2, figsize=(10, 4))
        for ax, env in zip(axes, ("homogeneous", "heterogeneous"), strict=True):
            names = list(res["traces"])
            width = 0.8 / len(names)
            for i, tname in enumerate(names):
                rows = res["traces"][tname]["cells"][f"{env}/plan"]
                vals = [rows[n][metric] for n in FIGURE]
                ax.bar([x + i * width for x in range(len(FIGURE))], vals, width, label=tname)
            ax.set_xticks([x + width * (len(names) - 1) / 2 for x in range(len(FIGURE))], labels, fontsize=8)
            ax.set_title(f"{env} (figure {figs.split(' / ')[env == 'heterogeneous']})", fontsize=9)
            if metric == "penalty":
                ax.set_yscale("log")
            ax.legend(fontsize=7)
        fig.suptitle(f"{title}, paper's worker model (plan), 20 workers")
        fig.tight_layout()
        fig.savefig(OUT / f"dispatch_{metric}.png", dpi=100)
        plt.close(fig)
        made.append(f"dispatch_{metric}.png")
    return made


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="2 sampled workloads, the paper's worker model only")
    ap.add_argument("--swf", type=Path, help="the SDSC-Par96 SWF trace (.swf or .swf.gz); default: see above")
    ap.add_argument("--samples", type=int, help="sampled workloads per trace (default 10, --quick 2)")
    ap.add_argument("--jobs", type=int, default=1, help="simulations run in this many processes (default 1)")
    ap.add_argument("--modes", help="comma-separated worker models (default: all)")
    ap.add_argument("--figure-only", action="store_true",
                    help="only the policies the findings use: the four of figures 6.2-6.5 and deadline[text]+fill-*")
    ap.add_argument("--render", action="store_true", help="rewrite dispatch.md from dispatch.json (no simulation)")
    args = ap.parse_args()
    if args.render:
        old: dict[str, Any] = json.loads((OUT / "dispatch.json").read_text())
        for tr in old["traces"].values():
            tr["findings"] = findings(tr)
        (OUT / "dispatch.md").write_text(write_md(old))
        return
    t0 = time.time()
    samples = args.samples or (2 if args.quick else 10)
    modes = tuple(args.modes.split(",")) if args.modes else ("plan",) if args.quick else MODES
    only = [*FIGURE, "deadline[text]+fill-priority", "deadline[text]+fill-deadline"] if args.figure_only else None
    path = trace_path(args.swf)
    sources: dict[str, tuple[str, str | None]] = {}
    if path is not None:
        sources[trace_label(path)] = (describe(path), read_trace(path))
    sources["model"] = ("Lublin-Feitelson model trace (swf.lublin_swf), synthetic", None)
    res: dict[str, Any] = {
        "command": "python benchmarks/bench_dispatch.py" + (" --quick" if args.quick else "")
        + (f" --samples {args.samples}" if args.samples else "") + (f" --swf {args.swf.name}" if args.swf else "")
        + (f" --modes {args.modes}" if args.modes else "") + (" --figure-only" if args.figure_only else "")
        + (f" --jobs {args.jobs}" if args.jobs > 1 else ""),
        "paper": PAPER,
        "traces": {},
    }
    for tname, (source, text) in sources.items():
        tr = trace_experiment(samples, text, modes, args.jobs, only)
        tr["source"] = source
        tr["findings"] = findings(tr)
        res["traces"][tname] = tr
    res["failure"] = failure_test()
    res["seconds"] = time.time() - t0
    OUT.mkdir(parents=True, exist_ok=True)
    res["plots"] = plots(res)
    (OUT / "dispatch.json").write_text(json.dumps(res, indent=1) + "\n")
    (OUT / "dispatch.md").write_text(write_md(res))
    print(write_md(res))


if __name__ == "__main__":
    main()
