"""macroQ's first answer: its seconds and what it finds, this checkout beside a baseline tree (issue 49).

    .venv/bin/python benchmarks/bench_first_answer.py [--baseline-root /work/wt/lead] [--reps 3] [--pinned]
        [--only CASE] [--deadline 0 --deadline 1 ...]

Per case and deadline (0: the deadline already passed, so the first answer alone and what finishes
it; 1 and 2 s: LSD's and the product's deadlines), macroQ's wall seconds and CPU seconds (the
process's own: a figure the neighbours' load does not inflate), the median of ``--reps`` runs, each
in a process of its own, alternating with the baseline's; the importance, the status, and the mips
left idle that an admitted PE could turn into importance (``bench_resolution.idle_usable``), of the last run; the 1-minute load average
beside each cell. ``--pinned``: every run under ``taskset -c 0`` beside a busy loop pinned there too
(the chart's one-CPU limit with a busy neighbour). Writes docs/benchmarks/first-answer.json and .md
(first-answer-pinned.* with ``--pinned``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CASES = ["one-PE 500 jobs", "step 80 jobs", "7.1 at 85 nodes", "LSD 30 nodes", "10x LSD 300 nodes", "10x LSD 2000 nodes x 16 cores"]
DEADLINES = [0.0, 1.0, 2.0]


def scenario(name: str):  # type: ignore[no-untyped-def]
    from benchmarks import resolution_families as F
    from soda_optimizer import workloads
    from soda_optimizer.model import Policy

    if name == "one-PE 500 jobs":
        return F.one_pe()
    if name == "step 80 jobs":
        return F.step()
    if name == "7.1 at 85 nodes":
        return F.sec71(85)
    scale, nodes, cores = {"LSD 30 nodes": (1, 30, 8), "10x LSD 300 nodes": (10, 300, 8),
                           "10x LSD 2000 nodes x 16 cores": (10, 2000, 16)}[name]
    return workloads.scenario(workloads.lsd(scale=scale), workloads.nodes(nodes, mips=1000.0 * cores), Policy())


def run(name: str, deadline: float) -> dict:
    """In the child: macroQ once with the automatic resolution."""
    from benchmarks.bench_resolution import idle_usable
    from soda_optimizer.soda import macroq

    s = scenario(name)
    c0, t0 = time.process_time(), time.perf_counter()
    q = macroq.solve(s, deadline_s=deadline)
    secs, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"seconds": secs, "cpu": cpu, "importance": q.importance, "status": q.report.status, "idle_usable": idle_usable(s, q),
            "admitted": sum(d.admitted for d in q.decisions), "jobs": len(q.decisions), "detail": q.report.detail[:400]}


def child(opt_root: Path, name: str, deadline: float, pinned: bool) -> dict:
    """:func:`run` in a process of its own with ``opt_root``'s optimizer and this checkout's benchmarks."""
    code = ("import json, sys; sys.path[:0] = [sys.argv[1] + '/optimizer', sys.argv[2]]; sys.argv = sys.argv[:1]; "
            f"import benchmarks.bench_first_answer as m; print(json.dumps(m.run({name!r}, {deadline!r})))")
    env = {"PYTHONPATH": f"{opt_root}/optimizer:{ROOT}", "PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root")}
    cmd = (["taskset", "-c", "0"] if pinned else []) + [sys.executable, "-c", code, str(opt_root), str(ROOT)]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=900)
    if p.returncode != 0:
        raise RuntimeError(p.stderr[-2000:])
    out = json.loads(p.stdout.strip().splitlines()[-1])
    out["load"] = os.getloadavg()[0]
    return out  # type: ignore[no-any-return]


def measure(names: list[str], deadlines: list[float], reps: int, baseline: Path | None, pinned: bool) -> list[dict]:
    sides = [("baseline", baseline)] if baseline else []
    sides.append(("now", ROOT))
    rows = []
    for name in names:
        for dl in deadlines:
            runs: dict[str, list[dict]] = {side: [] for side, _ in sides}
            for _ in range(reps):  # alternating, so both see the same machine
                for side, root in sides:
                    runs[side].append(child(root, name, dl, pinned))  # type: ignore[arg-type]
            row: dict = {"case": name, "deadline": dl}
            for side, rs in runs.items():
                row[side] = dict(rs[-1], seconds=statistics.median(r["seconds"] for r in rs), cpu=statistics.median(r["cpu"] for r in rs),
                                 runs=[round(r["seconds"], 3) for r in rs], loads=[round(r["load"], 1) for r in rs])
            rows.append(row)
            print(f"{name} @{dl:g}s: " + " | ".join(
                f"{side} {row[side]['seconds']:.2f}s (cpu {row[side]['cpu']:.2f}) {row[side]['importance']:,.1f} {row[side]['status']} "
                f"idle {row[side]['idle_usable']:,.0f} load {row[side]['loads']}" for side, _ in sides), flush=True)
    return rows


def write(rows: list[dict], cmd: str, baseline: str | None, load: tuple, pinned: bool) -> None:
    out = ROOT / "docs" / "benchmarks"
    name = "first-answer-pinned" if pinned else "first-answer"
    (out / f"{name}.json").write_text(json.dumps({"command": cmd, "baseline": baseline, "pinned": pinned, "rows": rows,
                                                       "loadavg": load}, indent=2))
    sides = ["baseline", "now"] if baseline else ["now"]

    def cell(x: dict) -> str:
        return (f"{x['seconds']:.2f} s (cpu {x['cpu']:.2f}), {x['importance']:,.1f}, {x['status']}, idle {x['idle_usable']:,.0f}, "
                f"load {'/'.join(f'{v:.1f}' for v in x['loads'])}")

    lines = [f"Regenerate: `.venv/bin/python {cmd}` (issue 49). macroQ with the automatic resolution, each run in a process "
             "of its own" + (f", alternating with the optimizer of {baseline} (baseline)" if baseline else "")
             + (", pinned to core 0 beside a busy loop pinned there too (the chart's one-CPU limit with a busy neighbour)" if pinned else "")
             + ". Deadline 0: the deadline already passed, so the first answer alone and what finishes it. Each cell: wall seconds "
             "(median of the runs) with the process's CPU seconds (median), importance, status, mips left idle that an admitted "
             "PE could turn into importance (last run), and the 1-minute load average after each run.", "",
             "| case | deadline | " + " | ".join(sides) + " |", "|---" * (2 + len(sides)) + "|"]
    for r in rows:
        lines.append(f"| {r['case']} | {r['deadline']:g} s | " + " | ".join(cell(r[s]) for s in sides) + " |")
    lines += ["", f"Load average (1/5/15 min) on the 2-core machine shared with other sessions: "
              f"{'/'.join(f'{x:.1f}' for x in load[0])} at the start, {'/'.join(f'{x:.1f}' for x in load[1])} at the end"
              + (" (the busy loop counts one)." if pinned else ".")]
    (out / f"{name}.md").write_text("\n".join(lines) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline-root", default=None, help="a checkout whose optimizer runs beside (e.g. main's worktree)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--pinned", action="store_true")
    ap.add_argument("--only", action="append", default=None, help="a case (repeatable); default: all")
    ap.add_argument("--deadline", type=float, action="append", default=None, help="repeatable; default 0, 1, 2")
    args = ap.parse_args()
    sys.path[:0] = [str(ROOT / "optimizer"), str(ROOT)]
    names = args.only or CASES
    deadlines = args.deadline or DEADLINES
    cmd = ("benchmarks/bench_first_answer.py" + (f" --baseline-root {args.baseline_root}" if args.baseline_root else "")
           + f" --reps {args.reps}" + (" --pinned" if args.pinned else "") + "".join(f" --only '{n}'" for n in args.only or [])
           + "".join(f" --deadline {d:g}" for d in args.deadline or []))
    busy = None
    if args.pinned:
        import signal

        signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # a kill still stops the busy loop
        busy = subprocess.Popen(["taskset", "-c", "0", sys.executable, "-c", "while True: pass"])
    load0 = os.getloadavg()
    try:
        rows = measure(names, deadlines, args.reps, Path(args.baseline_root) if args.baseline_root else None, args.pinned)
    finally:
        if busy is not None:
            busy.kill()
            busy.wait()
    write(rows, cmd, args.baseline_root, (load0, os.getloadavg()), args.pinned)


if __name__ == "__main__":
    main()
