"""Reproduction of the macroQ job-admission experiment (SODA paper 7.1; macroQ admission paper).

    .venv/bin/python benchmarks/bench_admission.py

19 jobs A-S, not interconnected: A-G required of rank 1, H-M rank 2, N-S rank 3; 100 nodes of
11,000 mips, removing 5 at a time down to 20. The papers do not publish the jobs' resource
functions, so they are designed here: each job is a 3-PE pipeline whose PEs have minimum mips
(admitted jobs must get them) and saturate (more mips buy nothing) so that the 19 jobs together
saturate at 97% of the 100-node system. Minimum totals: rank 1 7 x 34,000, rank 2 6 x 40,000,
rank 3 6 x 40,000 mips. Fixed resolution of 1,000 mips (Policy.unit_mips) for reproducibility.
Writes docs/benchmarks/admission.json, admission.md (table) and admission.png.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from soda_optimizer.model import PE, Job, Node, Policy, PrimalInput, ResourceFunction, Scenario, Sink, Stream, Template  # noqa: E402
from soda_optimizer.soda import macroq  # noqa: E402

NODE_MIPS = 11000.0
SPLIT = (0.5, 0.3, 0.2)  # share of a job's minimum and saturation per PE


def job_template(letter: str, min_total: float, sat_total: float, weight: float) -> Template:
    rate = 1000.0
    pes = []
    for i, (kind, share) in enumerate(zip(("source", "transform", "sink"), SPLIT)):
        sat = sat_total * share
        rf = ResourceFunction(a=rate / sat) if kind == "source" else ResourceFunction(a=1.0 / sat, b=1.0)
        pes.append(PE(name=f"p{i}", kind=kind, rf=rf, min_mips=min_total * share))
    return Template(
        name=f"t{letter}",
        pes=tuple(pes),
        streams=(Stream(src="p0", dst="p1"), Stream(src="p1", dst="p2")),
        sinks=(Sink(pe="p2", weight=weight),),
        primal_inputs=(PrimalInput(pe="p0", rate=rate),),
    )


def jobs() -> tuple[list[Template], list[Job]]:
    letters = [chr(ord("A") + i) for i in range(19)]
    spec = []
    for i, L in enumerate(letters):
        if i < 7:
            spec.append((L, 1, True, 34000.0, 60000.0, 1.0 + 0.1 * i))
        elif i < 13:
            spec.append((L, 2, False, 40000.0, 50000.0, 1.0 + 0.1 * (i - 7)))
        else:
            spec.append((L, 3, False, 40000.0, 57833.0, 1.0 + 0.1 * (i - 13)))
    ts = [job_template(L, m, s, w) for L, _, _, m, s, w in spec]
    js = [Job(name=L, rank=r, required=req, templates=(f"t{L}",)) for L, r, req, *_ in spec]
    return ts, js


def main() -> None:
    ts, js = jobs()
    rows = []
    for n in range(100, 15, -5):
        s = Scenario(nodes=tuple(Node(name=f"n{i}", mips=NODE_MIPS) for i in range(n)), templates=tuple(ts), jobs=tuple(js),
                     policy=Policy(unit_mips=1000.0))
        t0 = time.perf_counter()
        q = macroq.solve(s, deadline_s=30)
        dt = time.perf_counter() - t0
        mips = {d.job: d.mips for d in q.decisions}
        adm = {d.job for d in q.decisions if d.admitted}
        by_rank = {r: sorted(j.name for j in js if j.rank == r and j.name in adm) for r in (1, 2, 3)}
        imp_rank = {r: sum(d.importance for d in q.decisions if d.admitted and d.rank == r) for r in (1, 2, 3)}
        rows.append({
            "nodes": n, "capacity_mips": s.capacity_mips, "feasible": q.report.status != "infeasible",
            "used_mips": sum(mips.values()), "utilisation": sum(mips.values()) / s.capacity_mips,
            "admitted_by_rank": by_rank, "importance_by_rank": imp_rank, "mips_per_job": mips, "seconds": dt,
            "message": q.report.detail if q.report.status == "infeasible" else "",
        })
        print(f"{n:3d} nodes: feasible={rows[-1]['feasible']} util={rows[-1]['utilisation']:.3f} "
              f"admitted r1={len(by_rank[1])} r2={len(by_rank[2])} r3={len(by_rank[3])} ({dt:.2f}s)", flush=True)
    out = ROOT / "docs" / "benchmarks"
    out.mkdir(parents=True, exist_ok=True)
    (out / "admission.json").write_text(json.dumps({"command": "benchmarks/bench_admission.py", "rows": rows}, indent=2))
    letters = [j.name for j in js]
    lines = ["| nodes | feasible | used | rank 1 | rank 2 | rank 3 | " + " | ".join(letters) + " |",
             "|---" * (6 + len(letters)) + "|"]
    for r in rows:
        lines.append(f"| {r['nodes']} | {'yes' if r['feasible'] else 'no'} | {r['utilisation']:.1%} | "
                     + " | ".join(str(len(r["admitted_by_rank"][k])) for k in (1, 2, 3)) + " | "
                     + " | ".join(f"{r['mips_per_job'].get(L, 0) / 1000:.0f}k" if r["mips_per_job"].get(L) else "-" for L in letters) + " |")
    (out / "admission.md").write_text("\n".join(lines) + "\n")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    xs = [r["nodes"] for r in rows]
    for ax, key, ylabel in zip(axes, ("admitted_by_rank", "importance_by_rank"), ("admitted jobs", "importance")):
        bottom = [0.0] * len(rows)
        for k in (1, 2, 3):
            v = [r[key][k] for r in rows]
            ys = [len(x) if isinstance(x, list) else x for x in v]
            ax.bar(xs, ys, width=4, bottom=bottom, label=f"rank {k}")
            bottom = [b + y for b, y in zip(bottom, ys)]
        ax.set_xlabel("nodes")
        ax.set_ylabel(ylabel)
        ax.invert_xaxis()
        ax.legend()
    fig.tight_layout()
    fig.savefig(out / "admission.png", dpi=90)


if __name__ == "__main__":
    main()
