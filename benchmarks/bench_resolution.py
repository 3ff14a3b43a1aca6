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

    .venv/bin/python benchmarks/bench_resolution.py --families [--deadline 5] [--no-lsd]

Issue 34: the automatic resolution against fixed 100/200-mips units and the fine-grid optimum on
the families of benchmarks/resolution_families.py (seconds, importance, gap, jobs refused although
they fit), then LSD and 10x LSD times with the defaults. Writes docs/benchmarks/resolution-families.json/.md.
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

    if case["kind"] == "family":  # issue 34: the automatic resolution on one family (the bound, for the baseline)
        from benchmarks.bench_resolution import family

        s = family(case["family"])
        t0 = time.perf_counter()
        q = macroq.solve(s, deadline_s=case["deadline"])
        return {"seconds": time.perf_counter() - t0, "importance": q.importance, "bound": q.report.bound, "gap": q.report.gap,
                "status": q.report.status}
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
    return sidebyside.child(root, "benchmarks.bench_resolution", f"run_case({case!r})")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline", default=BASELINE)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    with sidebyside.baseline_tree(args.baseline, Path(__file__)) as base:  # the baseline runs this file's run_case
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




# ------------------------------------------------------------------ issue 34: the automatic resolution per family

FAMILIES = ["lone", "lone required", "exact fit", "exact fit -1 mips", "exact fit +1 mips", "span 211 jobs", "step 80 jobs",
            "one-PE 500 jobs", "7.1 at 25 nodes", "7.1 at 65 nodes", "7.1 at 85 nodes", "7.1 at 100 nodes", "two-PE step"]


def family(name: str):  # type: ignore[no-untyped-def]
    from benchmarks import resolution_families as F

    return {"lone": lambda: F.lone(), "lone required": lambda: F.lone(True), "exact fit": lambda: F.exact_fit(),
            "exact fit -1 mips": lambda: F.exact_fit(delta=-1.0), "exact fit +1 mips": lambda: F.exact_fit(delta=1.0),
            "span 211 jobs": lambda: F.span(), "step 80 jobs": lambda: F.step(), "one-PE 500 jobs": lambda: F.one_pe(),
            "7.1 at 25 nodes": lambda: F.sec71(25), "7.1 at 65 nodes": lambda: F.sec71(65),
            "7.1 at 85 nodes": lambda: F.sec71(85), "7.1 at 100 nodes": lambda: F.sec71(100),
            "two-PE step": lambda: F.two_pe_step()}[name]()


def families(deadlines: list[float], baseline: Path | None = None) -> list[dict]:
    """Automatic (at each of ``deadlines``; ``auto`` is the last) vs fixed 100/200-mips units vs the
    fine-grid optimum (10 mips; 50 for the 7.1 jobs, whose capacity is too large for 10), each in
    seconds, importance, gap and refused-but-fitting; with ``baseline`` (a checkout) also its
    automatic answer and bound at the last deadline, run in its own process just before this
    checkout's."""
    deadline = deadlines[-1]
    from benchmarks import resolution_families as F
    from soda_optimizer.soda import macroq

    rows = []
    for name in FAMILIES:
        base = child(baseline, {"kind": "family", "family": name, "deadline": deadline}) if baseline else None
        s = family(name)
        fine_unit = 50.0 if name.startswith("7.1") else 10.0
        row: dict = {"family": name, "capacity": s.capacity_mips, "jobs": len(s.jobs), "fine_unit": fine_unit}
        runs = [(f"auto@{dl:g}", None, dl) for dl in deadlines] + [("fixed100", 100.0, 600.0), ("fixed200", 200.0, 600.0),
                                                                 ("fine", fine_unit, 600.0)]
        for key, unit, dl in runs:
            old = macroq.MAX_UNITS
            macroq.MAX_UNITS = max(old, int(s.capacity_mips / fine_unit) + 1)  # the oracle's grid is not clamped
            try:
                t0 = time.perf_counter()
                q = macroq.solve(F.with_unit(s, unit), deadline_s=dl)
                secs = time.perf_counter() - t0
            finally:
                macroq.MAX_UNITS = old
            row[key] = {"seconds": secs, "importance": q.importance, "status": q.report.status, "bound": q.report.bound,
                        "bound_proven": q.report.bound_proven, "gap": q.report.gap, "admitted": sum(d.admitted for d in q.decisions),
                        "refused_but_fitting": len(F.refused_but_fitting(s, q.decisions)), "idle_usable": idle_usable(s, q)}
        row["auto"] = row[f"auto@{deadline:g}"]
        fine = row["fine"]["importance"]
        for key in [f"auto@{dl:g}" for dl in deadlines] + ["fixed100", "fixed200"]:
            row[key]["vs_fine"] = (row[key]["importance"] - fine) / fine if fine > 0 else 0.0
        for x in [row["auto"]] + ([base] if base else []):
            x["bound_vs_fine"] = None if x["bound"] is None or fine <= 0 else (x["bound"] - fine) / fine
        if base:
            base["vs_fine"] = (base["importance"] - fine) / fine if fine > 0 else 0.0
            row["baseline"] = base
        rows.append(row)
        a = row["auto"]
        print(" ".join(f"{dl:g}s: {row[f'auto@{dl:g}']['seconds']:.2f}s {100 * row[f'auto@{dl:g}']['vs_fine']:+.2f}%" for dl in deadlines))
        print(f"{name}: auto {a['seconds']:.2f}s {a['importance']:,.1f} ({100 * a['vs_fine']:+.2f}% vs fine) gap {_pct(a['gap'])} "
              f"rbf {a['refused_but_fitting']} | 100: {row['fixed100']['importance']:,.1f} rbf {row['fixed100']['refused_but_fitting']} | "
              f"200: {row['fixed200']['importance']:,.1f} | fine: {fine:,.1f}", flush=True)
    return rows


def lsd_times() -> list[dict]:
    from soda_optimizer import workloads
    from soda_optimizer.model import Policy
    from soda_optimizer.soda import macroq

    out = []
    for label, scale, n, cores, dl in (("LSD, 30 nodes", 1, 30, 8, 1.0), ("10x LSD, 300 nodes", 10, 300, 8, 10.0),
                                       ("10x LSD, 2000 nodes x 16 cores", 10, 2000, 16, 10.0)):
        s = workloads.scenario(workloads.lsd(scale=scale), workloads.nodes(n, mips=1000.0 * cores), Policy())
        t0 = time.perf_counter()
        q = macroq.solve(s, deadline_s=dl)
        out.append({"case": label, "deadline": dl, "seconds": time.perf_counter() - t0, "status": q.report.status,
                    "importance": q.importance, "gap": q.report.gap, "admitted": sum(d.admitted for d in q.decisions)})
        print(out[-1], flush=True)
    return out


def _pct(gap: float | None) -> str:
    """A gap in percent; "none" without a bound (issue 49: never shown as 0)."""
    return "none" if gap is None else f"{100 * gap:.2f}%"


def write_families(rows: list[dict], lsd: list[dict], deadlines: list[float], baseline: str | None = None,
                   load: tuple[tuple[float, ...], tuple[float, ...]] | None = None, pinned: bool = False) -> None:
    out = ROOT / "docs" / "benchmarks"
    cmd = ("benchmarks/bench_resolution.py --families" + "".join(f" --deadline {dl:g}" for dl in deadlines)
           + (" --pinned" if pinned else "") + (f" --baseline {baseline}" if baseline else ""))
    (out / "resolution-families.json").write_text(json.dumps({"command": cmd, "rows": rows, "lsd": lsd, "loadavg": load}, indent=2))

    def cell(r: dict, k: str) -> str:
        x = r[k]
        gap = "" if x["gap"] is None else f", gap {100 * x['gap']:.2f}%"
        idle = f", idle {x['idle_usable']:,.0f}" if "idle_usable" in x else ""
        est = "" if x.get("bound_proven", True) or x["gap"] is None else " est."
        return (f"{x['seconds']:.2f} s, {x['importance']:,.1f} ({100 * x.get('vs_fine', 0):+.2f}%{gap}{est}), {x['refused_but_fitting']}"
                f"{idle}")

    lines = [f"Regenerate: `.venv/bin/python {cmd}`. Each cell: seconds, importance (vs the fine-grid optimum; macroQ's "
             "gap to its own upper bound, est.: an estimated bound), jobs refused although they fit, mips left idle that an "
             "admitted PE could turn into importance."
             + (" The whole run is pinned to core 0 (`sched_setaffinity`) beside a busy loop pinned there too: the chart's "
                "one-CPU limit with a busy neighbour (issue 49); the fixed-unit and fine-grid columns have no deadline that bites."
                if pinned else ""), "",
             "| family | capacity (mips) | " + " | ".join(f"automatic {dl:g} s" for dl in deadlines)
             + " | fixed 100 mips | fixed 200 mips | fine grid optimum |", "|---" * (5 + len(deadlines)) + "|"]
    for r in rows:
        f = r["fine"]
        autos = " | ".join(cell(r, f"auto@{dl:g}") for dl in deadlines)
        lines.append(f"| {r['family']} | {r['capacity']:,.0f} | {autos} | {cell(r, 'fixed100')} | {cell(r, 'fixed200')} | "
                     f"{f['seconds']:.2f} s, {f['importance']:,.1f} ({r['fine_unit']:g} mips), {f['refused_but_fitting']} |")
    if any("baseline" in r for r in rows):
        def pct(x: float | None) -> str:
            return "none" if x is None else f"{100 * x:+.2f}%"

        lines += ["", "The upper bound (automatic resolution), above the fine-grid optimum, against the baseline's in the same run "
                  "(the bound also holds for continuous allocations, so it may sit above the 10-mips optimum by what the grid loses):", "",
                  "| family | baseline bound | its gap | bound now | its gap | baseline importance vs fine | now vs fine |", "|---" * 7 + "|"]
        for r in rows:
            b, a = r.get("baseline"), r["auto"]
            if b is None:
                continue
            lines.append(f"| {r['family']} | {pct(b['bound_vs_fine'])} | {_pct(b['gap'])} | {pct(a['bound_vs_fine'])} | "
                         f"{_pct(a['gap'])} | {pct(b['vs_fine'])} | {pct(a['vs_fine'])} |")
    lines += ["", "| case | deadline | seconds | status | importance | gap | admitted |", "|---" * 7 + "|"]
    for x in lsd:
        lines.append(f"| {x['case']} | {x['deadline']:g} s | {x['seconds']:.2f} | {x['status']} | {x['importance']:,.0f} | "
                     f"{_pct(x['gap'])} | {x['admitted']} |")
    if load:
        lines += ["", f"Load average (1/5/15 min) on the 2-core machine shared with other sessions: {'/'.join(f'{x:.1f}' for x in load[0])} "
                  f"at the start, {'/'.join(f'{x:.1f}' for x in load[1])} after the families: every time above is under that load."]
    (out / "resolution-families.md").write_text("\n".join(lines) + "\n")


def main_families() -> bool:
    if "--families" not in sys.argv:
        return False
    ap = argparse.ArgumentParser()
    ap.add_argument("--families", action="store_true")
    ap.add_argument("--deadline", type=float, action="append", default=None,
                    help="macroQ's deadline for the automatic resolution (repeatable; default 5)")
    ap.add_argument("--pinned", action="store_true", help="run pinned to core 0 beside a busy loop pinned there too (issue 49)")
    ap.add_argument("--no-lsd", action="store_true")
    ap.add_argument("--baseline", default=None, help="a commit whose automatic answer and bound are run beside (its own process)")
    args = ap.parse_args()
    sys.path[:0] = [str(ROOT / "optimizer"), str(ROOT)]
    deadlines = args.deadline or [5.0]
    busy = None
    if args.pinned:
        import signal
        import subprocess

        signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # a kill still stops the busy loop
        os.sched_setaffinity(0, {0})
        busy = subprocess.Popen(["taskset", "-c", "0", sys.executable, "-c", "while True: pass"])
    load = os.getloadavg()
    try:
        if args.baseline:  # the same cases and families, on the baseline's code
            with sidebyside.baseline_tree(args.baseline, Path(__file__), ROOT / "benchmarks" / "resolution_families.py") as base:
                rows = families(deadlines, base)
        else:
            rows = families(deadlines, None)
        lsd = [] if args.no_lsd else lsd_times()
    finally:
        if busy is not None:
            busy.kill()
            busy.wait()
    write_families(rows, lsd, deadlines, args.baseline, (load, os.getloadavg()), args.pinned)
    return True


# ------------------------------------------------------------------ issue 49: under the operator's real CPU

PRESSURE_FAMILIES = [f for f in FAMILIES if f not in ("lone required", "exact fit -1 mips", "exact fit +1 mips")]
PRESSURE_DEADLINES = (1.0, 2.0, 5.0)


def idle_usable(s, q) -> float:  # type: ignore[no-untyped-def]
    """Mips of ``s`` left idle by macroQ's answer ``q`` that an admitted PE could turn into
    importance (issue 49: room to saturation counted ~31,000 mips on 10x LSD on 2,000 nodes, whose
    answer equals the saturation bound; a capped value stops growing before its PE saturates).

    Per weak component of the admitted set: every PE below its cap (maximum, saturation) raised by
    all it can take of what is idle; when that gains nothing, none of the component's room counts;
    else PEs are lowered back one at a time, the largest room first, while the gain stays whole,
    and the room of those left raised counts (a least set of PEs whose extra mips carry the
    component's gain). At most what is idle."""
    import networkx as nx
    import numpy as np

    from soda_optimizer.importance import Evaluator

    choice = {d.job: d.template for d in q.decisions if d.admitted}
    idle = s.capacity_mips - sum(q.goals.values())
    if not choice or idle <= 1e-6:
        return 0.0
    ev = Evaluator(s.glued(choice))
    cap = np.minimum(np.array([ev.glued.spec(p).max_mips for p in ev.pes], dtype=float), ev.saturation())
    x = np.array([q.goals[p] for p in ev.pes], dtype=float)
    add = np.minimum(np.maximum(cap - x, 0.0), idle)
    usable = 0.0
    for comp in nx.weakly_connected_components(ev.graph):
        pes = sorted(comp)
        idx = np.array([ev.index[p] for p in pes])
        if not (add[idx] > 1e-9).any():
            continue
        sub = Evaluator(ev.glued, pes)
        lo, raised = x[idx], x[idx] + add[idx]
        base, full = sub.importance(np.vstack([lo, raised]))
        tol = 1e-9 * (1.0 + abs(float(full)))
        if full <= base + tol:
            continue
        for i in np.argsort(-add[idx], kind="stable"):
            if add[idx][i] <= 1e-9:
                continue
            trial = raised.copy()
            trial[i] = lo[i]
            if sub.importance(trial[None, :])[0] >= full - tol:
                raised = trial  # its extra mips carry none of the gain
        usable += float((raised - lo).sum())
    return max(0.0, min(idle, usable))


def pressure_case(name: str, deadline: float) -> dict:
    """In the child (pinned to one core beside a busy loop): the automatic resolution on one family."""
    try:
        from soda_optimizer.soda import macroq
    except ImportError:
        from soda_optimizer import macroq  # type: ignore[no-redef]

    s = family(name)
    t0 = time.perf_counter()
    q = macroq.solve(s, deadline_s=deadline)
    secs = time.perf_counter() - t0
    idle = s.capacity_mips - sum(q.goals.values())
    usable = idle_usable(s, q)
    return {"seconds": secs, "importance": q.importance, "status": q.report.status, "bound": q.report.bound, "gap": q.report.gap,
            "bound_proven": getattr(q, "bound_proven", None), "idle": idle, "idle_usable": usable,
            "admitted": sum(d.admitted for d in q.decisions)}


def pinned_child(opt_root: Path, name: str, deadline: float) -> dict:
    """:func:`pressure_case` under ``taskset -c 0`` with ``opt_root``'s optimizer and this checkout's families."""
    import subprocess

    code = ("import json, sys; sys.path[:0] = [sys.argv[1] + '/optimizer', sys.argv[2]]; sys.argv = sys.argv[:1]; "
            f"import benchmarks.bench_resolution as m; print(json.dumps(m.pressure_case({name!r}, {deadline!r})))")
    env = {"PYTHONPATH": f"{opt_root}/optimizer:{ROOT}", "PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root")}
    p = subprocess.run(["taskset", "-c", "0", sys.executable, "-c", code, str(opt_root), str(ROOT)], capture_output=True, text=True,
                       env=env, cwd=ROOT, timeout=900)
    if p.returncode != 0:
        raise RuntimeError(p.stderr[-2000:])
    return json.loads(p.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def pressure(baseline_root: Path | None, names: list[str]) -> list[dict]:
    """Per family: the fine-grid optimum and fixed 100-mips units (in this process, unpinned, no
    deadline that bites), then the automatic resolution at each deadline of PRESSURE_DEADLINES in a
    process pinned to core 0 beside a busy loop pinned there too (the chart's one-CPU limit with a
    busy neighbour), this checkout and, with ``baseline_root``, that tree's optimizer just before."""
    import subprocess

    from benchmarks import resolution_families as F
    from soda_optimizer.soda import macroq

    busy = subprocess.Popen(["taskset", "-c", "0", sys.executable, "-c", "while True: pass"])
    rows = []
    try:
        for name in names:
            s = family(name)
            fine_unit = 50.0 if name.startswith("7.1") else 10.0
            row: dict = {"family": name, "capacity": s.capacity_mips, "jobs": len(s.jobs), "fine_unit": fine_unit}
            for key, unit in (("fixed100", 100.0), ("fine", fine_unit)):
                old = macroq.MAX_UNITS
                macroq.MAX_UNITS = max(old, int(s.capacity_mips / unit) + 1)
                try:
                    q = macroq.solve(F.with_unit(s, unit), deadline_s=600.0)
                finally:
                    macroq.MAX_UNITS = old
                row[key] = q.importance
            fine = row["fine"]
            for dl in PRESSURE_DEADLINES:
                for side, root in (("baseline", baseline_root), ("now", ROOT)):
                    if root is None:
                        continue
                    x = pinned_child(root, name, dl)
                    x["vs_fine"] = (x["importance"] - fine) / fine if fine > 0 else 0.0
                    x["vs_fixed100"] = x["importance"] - row["fixed100"]
                    x["load"] = os.getloadavg()[0]
                    row[f"{side}@{dl:g}"] = x
                    print(f"{name} {side} {dl:g}s: {x['seconds']:.2f}s {x['importance']:,.1f} ({100 * x['vs_fine']:+.2f}% vs fine, "
                          f"{x['vs_fixed100']:+,.1f} vs fixed 100) idle usable {x['idle_usable']:,.0f} {x['status']} load {x['load']:.1f}",
                          flush=True)
            rows.append(row)
    finally:
        busy.kill()
        busy.wait()
    return rows


def write_pressure(rows: list[dict], baseline: str | None, load: tuple) -> None:
    out = ROOT / "docs" / "benchmarks"
    cmd = "benchmarks/bench_resolution.py --pressure" + (f" --baseline-root {baseline}" if baseline else "")
    (out / "resolution-pressure.json").write_text(json.dumps({"command": cmd, "rows": rows, "loadavg": load}, indent=2))
    sides = ["baseline", "now"] if baseline else ["now"]

    def cell(x: dict | None) -> str:
        if x is None:
            return ""
        gap = "gap ?" if x["gap"] is None else f"gap {100 * x['gap']:.2f}%{'' if x.get('bound_proven', True) else ' (est.)'}"
        return (f"{x['seconds']:.2f} s, {100 * x['vs_fine']:+.2f}%, {gap}, {x['vs_fixed100']:+,.0f} vs 100, "
                f"idle {x['idle_usable']:,.0f}")

    lines = [f"Regenerate: `.venv/bin/python {cmd}` (issue 49). The automatic resolution in a process pinned to core 0 "
             "(`taskset -c 0`) beside a busy loop pinned there too: the chart's one-CPU limit with a busy neighbour, on the "
             "2-core machine shared with other sessions. Each cell: seconds, importance against the fine-grid optimum (10 mips; "
             "50 for 7.1), macroQ's own gap (est.: an estimated bound), importance minus fixed 100-mips units', mips left idle "
             "that an admitted PE could turn into importance." + (f" Baseline: the optimizer of {baseline}, run just before." if baseline else ""),
             "", "| family | fine optimum | fixed 100 | " + " | ".join(f"{side} {dl:g} s" for dl in PRESSURE_DEADLINES for side in sides) + " |",
             "|---" * (3 + len(PRESSURE_DEADLINES) * len(sides)) + "|"]
    for r in rows:
        lines.append(f"| {r['family']} | {r['fine']:,.1f} | {r['fixed100']:,.1f} | "
                     + " | ".join(cell(r.get(f"{side}@{dl:g}")) for dl in PRESSURE_DEADLINES for side in sides) + " |")
    lines += ["", f"Load average (1/5/15 min): {'/'.join(f'{x:.1f}' for x in load[0])} at the start, "
              f"{'/'.join(f'{x:.1f}' for x in load[1])} at the end (the busy loop counts one)."]
    (out / "resolution-pressure.md").write_text("\n".join(lines) + "\n")


def main_pressure() -> bool:
    if "--pressure" not in sys.argv:
        return False
    ap = argparse.ArgumentParser()
    ap.add_argument("--pressure", action="store_true")
    ap.add_argument("--baseline-root", default=None, help="a checkout whose optimizer runs beside (e.g. the main checkout)")
    ap.add_argument("--only", action="append", default=None, help="a family (repeatable); default: all")
    args = ap.parse_args()
    sys.path[:0] = [str(ROOT / "optimizer"), str(ROOT)]
    import signal

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # a kill still stops the busy loop (pressure's finally)
    load = os.getloadavg()
    rows = pressure(Path(args.baseline_root) if args.baseline_root else None, args.only or PRESSURE_FAMILIES)
    write_pressure(rows, args.baseline_root, (load, os.getloadavg()))
    return True


if __name__ == "__main__":
    if not main_pressure() and not main_families():
        main()
