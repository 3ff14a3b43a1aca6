"""Placement benchmark (issue 4; SODA paper 7.2): SODA vs RAND vs RR vs spread.

    .venv/bin/python benchmarks/bench_placement.py [--quick] [--toplevel]

For LSD-like and DAC-like workloads at node counts from under- to over-provisioned: macroW time
and objective at its deadline, microW time, a macro epoch's optimizer time (macroQ + macroW +
microQ + microW), stream affinity (share of traffic staying inside
nodes, share of streams whose ends share a node) and the maximum link utilisation. Baselines place
macroQ's goals without stream knowledge. Writes docs/benchmarks/placement.json and .png.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.metrics import placement_metrics  # noqa: E402
from soda_optimizer import baselines, workloads  # noqa
from soda_optimizer.model import LinkCapacities, Policy  # noqa: E402
from soda_optimizer.soda import macroq, macrow, microq, microw  # noqa: E402


def run_case(name: str, wl, n_nodes: int, macrow_deadline: float, reps: int) -> dict:
    pol = Policy(links=LinkCapacities(rack_uplink=2.5e6, zone_uplink=1e7))
    s = workloads.scenario(wl, workloads.nodes(n_nodes), pol)
    t0 = time.perf_counter()
    q = macroq.solve(s, deadline_s=2.0)
    tq = time.perf_counter() - t0
    # macroW side by side: run to the deadline (stall=False, the paper's miniW and the previous
    # behaviour) vs stopping when the search stalls (the default)
    t0 = time.perf_counter()
    w_full = macrow.solve(s, q, deadline_s=macrow_deadline, stall=False)
    tw_full = time.perf_counter() - t0
    t0 = time.perf_counter()
    w = macrow.solve(s, q, deadline_s=macrow_deadline)
    tw = time.perf_counter() - t0
    uq_full = microq.solve(s, q, w_full.candidates)
    full_metrics = placement_metrics(s, microw.solve(s, uq_full.goals, w_full.candidates).fractions, q.stream_rates)
    t_first = time.perf_counter()
    w1 = macrow.solve(s, q, deadline_s=0.01)  # how fast a first feasible solution exists
    t_first = time.perf_counter() - t_first
    t0 = time.perf_counter()
    uq = microq.solve(s, q, w.candidates)
    tuq = time.perf_counter() - t0
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        uw = microw.solve(s, uq.goals, w.candidates)
        times.append(time.perf_counter() - t0)
    traffic = q.stream_rates
    row = {
        "workload": name,
        "nodes": n_nodes,
        "capacity_mips": s.capacity_mips,
        "demand_mips": sum(q.goals.values()),
        "admitted_jobs": sum(d.admitted for d in q.decisions),
        "macroq_s": tq,
        "macrow_s": tw,
        "macrow_status": w.report.status,
        "macrow_objective": w.objective,
        "macrow_detail": w.report.detail,
        "macrow_to_deadline": {"s": tw_full, "status": w_full.report.status, "objective": w_full.objective, **full_metrics},
        "macrow_first_solution_s": t_first,
        "macrow_first_objective": w1.objective,
        "microw_median_s": statistics.median(times),
        # one macro epoch's optimizer time: macroQ + macroW (the default, stopping when stalled) +
        # microQ + microW
        "macro_epoch_s": tq + tw + tuq + statistics.median(times),
        "microw_deviation_mips": uw.deviation,
        "soda": placement_metrics(s, uw.fractions, traffic),
    }
    for b, fn in (("rand", lambda: baselines.rand(s, q.goals)), ("rr", lambda: baselines.rr(s, q.goals)), ("spread", lambda: baselines.spread(s, q.goals))):
        row[b] = placement_metrics(s, fn(), traffic)
    return row


def toplevel_compare(reps: int = 3) -> None:
    """TopLevelMILP with SCIP vs CP-SAT on LSD at 30 and 82 nodes (docs/macrow.md): the solver alone
    at macroW's share of the deadline (its racks after BottomLevel) and the whole macroW with that
    solver; medians of ``reps`` runs on one macroQ result per node count."""
    from soda_optimizer.soda.macrow import TOP_SHARE, milp, problem, search

    pol = Policy(links=LinkCapacities(rack_uplink=2.5e6, zone_uplink=1e7))
    for n in (30, 82):
        s = workloads.scenario(workloads.lsd(), workloads.nodes(n), pol)
        q = macroq.solve(s, deadline_s=2.0)
        prob = problem.Problem(s, q)
        greedy = milp._greedy_racks(prob)
        print(f"LSD n={n}: greedy racks start {search._build(prob, greedy).objective():.3f}", flush=True)  # type: ignore[union-attr]
        for dl in (3.0, 5.0):
            for k in ("scip", "cpsat"):
                top, whole = [], []
                for _ in range(reps):
                    t0 = time.perf_counter()
                    racks = milp._top_level_milp(prob, TOP_SHARE * dl) if k == "scip" else milp._top_level_cpsat(prob, TOP_SHARE * dl, greedy)
                    t_top = time.perf_counter() - t0
                    built = search._build(prob, racks) if racks else None
                    top.append((t_top, built.objective() if built else float("nan")))
                    t0 = time.perf_counter()
                    w = macrow.solve(s, q, deadline_s=dl, toplevel=k)
                    t_w = time.perf_counter() - t0
                    uq = microq.solve(s, q, w.candidates)
                    intra = placement_metrics(s, microw.solve(s, uq.goals, w.candidates).fractions, q.stream_rates)["intra_node_traffic"]
                    whole.append((t_w, w.objective, intra))
                med = statistics.median
                print(f"LSD n={n} deadline {dl:g} s {k}: TopLevel {med(t for t, _ in top):.2f} s, start {med(o for _, o in top):.3f} "
                      f"{[round(o, 3) for _, o in top]} | macroW {med(r[0] for r in whole):.2f} s, objective {med(r[1] for r in whole):.3f} "
                      f"{[round(r[1], 3) for r in whole]}, in-node {med(r[2] for r in whole):.2f}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer node counts, 2 s macroW deadline")
    ap.add_argument("--toplevel", action="store_true", help="only compare the TopLevelMILP solvers (SCIP vs CP-SAT)")
    args = ap.parse_args()
    if args.toplevel:
        toplevel_compare()
        return
    counts = [20, 30, 50, 82, 100] if not args.quick else [30, 82]
    deadline = 2.0 if args.quick else 5.0
    rows = []
    for name, wl in (("lsd", workloads.lsd()), ("dac", workloads.dac())):
        for n in counts:
            r = run_case(name, wl, n, deadline, reps=5)
            rows.append(r)
            full = r["macrow_to_deadline"]
            print(f"{name} n={n}: macroW to the deadline {full['s']:.2f}s obj {full['objective']:.4f} intra {full['intra_node_traffic']:.3f} | "
                  f"stalled {r['macrow_s']:.2f}s obj {r['macrow_objective']:.4f} intra {r['soda']['intra_node_traffic']:.3f}", flush=True)
            print(f"{name} n={n}: macro epoch {r['macro_epoch_s']:.2f}s (macroQ {r['macroq_s']:.2f}s) macroW {r['macrow_s']:.2f}s ({r['macrow_status']}, first {r['macrow_first_solution_s']:.2f}s) "
                  f"microW {r['microw_median_s'] * 1000:.1f}ms  intra-node traffic SODA {r['soda']['intra_node_traffic']:.2f} "
                  f"RAND {r['rand']['intra_node_traffic']:.2f} RR {r['rr']['intra_node_traffic']:.2f} spread {r['spread']['intra_node_traffic']:.2f}", flush=True)
    out = ROOT / "docs" / "benchmarks"
    out.mkdir(parents=True, exist_ok=True)
    (out / "placement.json").write_text(json.dumps({"command": "benchmarks/bench_placement.py" + (" --quick" if args.quick else ""), "rows": rows}, indent=2))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, 3, figsize=(15, 4))
        for ax, metric, title in zip(axes, ("intra_node_traffic", "colocated_streams", "max_link_util"),
                                     ("share of traffic inside nodes", "share of streams with both ends on a node", "max link utilisation")):
            for alg in ("soda", "rand", "rr", "spread"):
                xs = [r["nodes"] for r in rows if r["workload"] == "lsd"]
                ax.plot(xs, [r[alg][metric] for r in rows if r["workload"] == "lsd"], marker="o", label=alg.upper())
            ax.set_title(f"LSD: {title}")
            ax.set_xlabel("nodes")
            ax.legend()
        fig.tight_layout()
        fig.savefig(out / "placement.png", dpi=90)
    except ImportError:
        pass


if __name__ == "__main__":
    main()
