"""macroQ resolution and admission, side by side: this checkout vs a baseline commit, in one run.

    .venv/bin/python benchmarks/bench_resolution.py [--baseline REV] [--quick]

The baseline (default: the commit before the knapsack admission) is checked out into a temporary
git worktree and run in its own process, alternating with this checkout's process, case by case;
each case's time is the median of ``--reps`` runs. Cases:

- the admission workload of bench_admission.py (19 jobs, ranks 1/2/3, 11,000-mips nodes) at 100
  nodes with fixed units of 1000, 500, 200, 100 mips and at 80 nodes with 200 mips (5 s deadline);
- LSD at 30 nodes with 117-mips units (1 s deadline); 10x LSD at 300 nodes with 500-mips units
  (10 s deadline);
- 10x LSD on 2000 nodes of 16 cores (the local control plane's large topology), macroQ alone with
  the policy's defaults (auto resolution, 5 s deadline): how many PEs of admitted jobs get 0 mips.

Writes docs/benchmarks/resolution.json and resolution.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASELINE = "02b800f"


def cases(quick: bool) -> list[dict]:
    out = [{"name": f"admission 100 nodes, {u:g}-mips units", "kind": "admission", "nodes": 100, "unit": u, "deadline": 5.0}
           for u in (1000.0, 500.0, 200.0, 100.0)]
    out.append({"name": "admission 80 nodes, 200-mips units", "kind": "admission", "nodes": 80, "unit": 200.0, "deadline": 5.0})
    out.append({"name": "LSD 30 nodes, 117-mips units", "kind": "lsd", "scale": 1, "nodes": 30, "units": 2048, "deadline": 1.0})
    if not quick:
        out.append({"name": "10x LSD 300 nodes, 500-mips units", "kind": "lsd", "scale": 10, "nodes": 300, "unit": 500.0, "deadline": 10.0})
        out.append({"name": "10x LSD 2000 nodes x 16 cores, defaults", "kind": "lsd", "scale": 10, "nodes": 2000, "cores": 16,
                    "deadline": 5.0})
    return out


def run_case(case: dict) -> dict:
    """In the child process: build the scenario, run macroQ, measure."""
    sys.path.insert(0, str(ROOT))
    try:
        from soda_optimizer.soda import macroq  # this checkout
    except ImportError:
        from soda_optimizer import macroq  # type: ignore[no-redef]  # the baseline's layout
    from soda_optimizer.model import Node, Policy

    if case["kind"] == "admission":
        from benchmarks.bench_admission import NODE_MIPS, jobs
        from soda_optimizer.model import Scenario

        ts, js = jobs()
        s = Scenario(nodes=tuple(Node(name=f"n{i}", mips=NODE_MIPS) for i in range(case["nodes"])), templates=tuple(ts),
                     jobs=tuple(js), policy=Policy(unit_mips=case["unit"]))
    else:
        from soda_optimizer import workloads

        node_list = workloads.nodes(case["nodes"], mips=1000.0 * case.get("cores", 8))
        pol = Policy(unit_mips=case.get("unit"), resolution_units=case.get("units"))
        s = workloads.scenario(workloads.lsd(scale=case["scale"]), node_list, pol)
    t0 = time.perf_counter()
    q = macroq.solve(s, deadline_s=case["deadline"])
    secs = time.perf_counter() - t0
    ranks = {j.name: j.rank for j in s.jobs}
    admitted = [d for d in q.decisions if d.admitted]
    goals = [q.goals.get(f"{d.job}:{p.name}", 0.0) for d in admitted for p in s.template(d.template).pes]
    by_rank: dict[int, int] = {}
    for d in admitted:
        by_rank[ranks[d.job]] = by_rank.get(ranks[d.job], 0) + 1
    return {"seconds": secs, "status": q.report.status, "importance": q.importance, "resolution_mips": q.resolution_mips,
            "jobs": len(q.decisions), "admitted": len(admitted), "admitted_by_rank": {str(k): v for k, v in sorted(by_rank.items())},
            "pes_admitted": len(goals), "pes_zero": sum(g <= 0 for g in goals), "min_goal_mips": min(goals, default=0.0),
            "detail": q.report.detail[:300]}


def child(root: Path, case: dict) -> dict:
    code = ("import json, sys; sys.path[:0] = [sys.argv[1] + '/optimizer', sys.argv[1]]; "
            "sys.argv = sys.argv[:1]; from benchmarks.bench_resolution import run_case; "
            f"print(json.dumps(run_case({case!r})))")
    env = {"PYTHONPATH": f"{root}/optimizer:{root}", "PATH": "/usr/bin:/bin"}
    p = subprocess.run([sys.executable, "-c", code, str(root)], capture_output=True, text=True, env=env, cwd=root, timeout=900)
    if p.returncode != 0:
        raise RuntimeError(p.stderr[-2000:])
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline", default=BASELINE)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "baseline"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach", str(base), args.baseline], check=True)
        # the baseline runs this file's run_case with its own optimizer
        (base / "benchmarks" / "bench_resolution.py").write_text(Path(__file__).read_text())
        try:
            rows = []
            for case in cases(args.quick):
                runs: dict[str, list[dict]] = {"baseline": [], "now": []}
                reps = 1 if case.get("nodes", 0) >= 300 else args.reps
                for _ in range(reps):  # alternating, so both see the same machine
                    runs["baseline"].append(child(base, case))
                    runs["now"].append(child(ROOT, case))
                row = {"case": case["name"], **case}
                for side, rs in runs.items():
                    row[side] = dict(rs[-1], seconds=statistics.median(r["seconds"] for r in rs), reps=len(rs))
                rows.append(row)
                b, n = row["baseline"], row["now"]
                print(f"{case['name']}: baseline {b['seconds']:.2f}s {b['status']} imp {b['importance']:.0f} adm {b['admitted_by_rank']} "
                      f"zero-PEs {b['pes_zero']} | now {n['seconds']:.2f}s {n['status']} imp {n['importance']:.0f} "
                      f"adm {n['admitted_by_rank']} zero-PEs {n['pes_zero']}", flush=True)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base)], check=False)
    out = ROOT / "docs" / "benchmarks"
    (out / "resolution.json").write_text(json.dumps({"command": "benchmarks/bench_resolution.py", "baseline": args.baseline,
                                                     "rows": rows}, indent=2))
    lines = ["| case | baseline s | now s | ratio | baseline status | now status | baseline importance | now importance | "
             "baseline admitted (by rank) | now admitted (by rank) | baseline PEs at 0 | now PEs at 0 |", "|---" * 12 + "|"]
    for r in rows:
        b, n = r["baseline"], r["now"]
        lines.append(f"| {r['case']} | {b['seconds']:.2f} | {n['seconds']:.2f} | {n['seconds'] / max(b['seconds'], 1e-9):.2f} | "
                     f"{b['status']} | {n['status']} | {b['importance']:,.0f} | {n['importance']:,.0f} | "
                     f"{'/'.join(str(v) for v in b['admitted_by_rank'].values())} | {'/'.join(str(v) for v in n['admitted_by_rank'].values())} | "
                     f"{b['pes_zero']} of {b['pes_admitted']} | {n['pes_zero']} of {n['pes_admitted']} |")
    (out / "resolution.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
