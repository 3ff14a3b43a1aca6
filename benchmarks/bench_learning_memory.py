"""The learner's memory at scale (issue 52 item 4): 7,000 distinct PEs with a full window of 256
samples each, main's code and this branch's side by side in one run, no API server.

    .venv/bin/python benchmarks/bench_learning_memory.py [--pes 7000] [--window 256] [--base main]

Each arm runs in processes of its own with the ``optimizer`` and ``operator`` packages of its tree
(``before``: ``git archive`` of ``--base``; ``after``: this worktree), on the same workload: the
templates of ``benchmarks/bench_learning_scale.py`` (1,000 templates of 7 PEs, every PE its own
image: 3 signature nodes each plus a root per kind, 21,002 nodes), each PE observed ``--window``
times (a sample of its behaviour as there: offered rate, allocation, output, CPU reading, processed
rate), ``--chunk`` samples a call (the levels of a PE share what one call adds, as with one sample a
call; fewer calls only to build faster). Then, per arm:

- ``traced``: the learner's memory by :mod:`tracemalloc` (what it holds once built and collected),
  per sample held (the PEs' own windows: ``pes x window``), and the objects the cyclic garbage
  collector tracks (``len(gc.get_objects())``), in a process of its own (tracing slows the build);
- ``plain``: the process's RSS growth over the build; the seconds (wall and CPU) of a full
  ``gc.collect()`` with the learner alive, ``--collections`` times (median, min, max); the seconds of
  one micro epoch's observations (one sample per PE, every node updated; median of ``--epochs``)
  and of ``--refits`` refits of PEs' own nodes (the learner's ``_refit``: the family fit and its
  trust checks, the samples read from the window), per node.

The 1-minute load average is recorded beside every timing (the machine may be shared: wall seconds
are loaded figures, CPU seconds much less so). Writes docs/benchmarks/learning-memory.{json,md}.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "benchmarks"
sys.path.insert(0, str(ROOT))
from benchmarks.bench_learning_scale import export, rss_mb, templates  # noqa: E402

MICRO_S = 10.0


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def prepare(args: argparse.Namespace) -> tuple[list[Any], Any, list[float]]:
    """The PEs (signature, cost per tuple, nominal rate), the sample maker and the clock (the modules
    imported here, before any memory is counted)."""
    import numpy as np

    from soda_operator.soda import learning
    from soda_optimizer.learn import Sample

    rng = np.random.default_rng(args.seed)
    pes = []
    for t in templates(args.pes):
        for sig in learning.template_signatures(t).values():
            pes.append((sig, float(np.exp(rng.uniform(np.log(0.005), np.log(0.05)))), float(np.exp(rng.uniform(np.log(50), np.log(500))))))

    def sample(cost: float, r0: float, t: float) -> Any:
        r = r0 * float(np.exp(rng.uniform(np.log(0.5), np.log(2.0))))
        m = cost * r * float(rng.uniform(0.3, 1.5))
        p = min(r, m / cost)
        return Sample(r_i=r, m=m, r_o=p * float(np.exp(rng.normal(0, 0.05))), m_used=cost * p * float(np.exp(rng.normal(0, 0.05))),
                      t=t, r_p=p)

    return pes, sample, [1.0e6]


def build(args: argparse.Namespace, pes: list[Any], sample: Any, now: list[float]) -> Any:
    """The learner with every PE's window full."""
    from soda_optimizer.learn import Learner

    lrn = Learner()
    for k in range(0, args.window, args.chunk):
        n = min(args.chunk, args.window - k)
        ts = [now[0] + MICRO_S * (i + 1) for i in range(n)]
        now[0] = ts[-1]
        for sig, cost, r0 in pes:
            lrn.observe(sig, [sample(cost, r0, t) for t in ts], now[0])
    return lrn


def run_arm(args: argparse.Namespace) -> dict[str, Any]:
    import tracemalloc

    out: dict[str, Any] = {"mode": args.mode}
    pes, sample, now = prepare(args)
    gc.collect()
    if args.mode == "traced":
        objects0 = len(gc.get_objects())
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        t0 = time.perf_counter()
        lrn = build(args, pes, sample, now)
        out["build_s"], out["build_load"] = round(time.perf_counter() - t0, 1), _load()
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - base
        tracemalloc.stop()
        held_samples = sum(len(m.samples) for m in lrn.models.values() if m.level.value == "flowspec")
        out.update(nodes=len(lrn.models), samples_held=held_samples, traced_mb=round(held / 2**20, 1),
                   bytes_per_sample=round(held / held_samples, 1), tracked_objects=len(gc.get_objects()) - objects0)
        return out
    rss0 = rss_mb()
    t0 = time.perf_counter()
    lrn = build(args, pes, sample, now)
    out["build_s"], out["build_load"] = round(time.perf_counter() - t0, 1), _load()
    gc.collect()
    out.update(nodes=len(lrn.models), rss_growth_mb=round(rss_mb() - rss0, 1), rss_mb=round(rss_mb(), 1),
               tracked_objects_process=len(gc.get_objects()))
    walls, cpus, loads = [], [], []
    for _ in range(args.collections):
        w0, c0 = time.perf_counter(), time.process_time()
        gc.collect()
        walls.append(time.perf_counter() - w0)
        cpus.append(time.process_time() - c0)
        loads.append(_load())
    out["gc_full"] = {"wall_s_median": round(statistics.median(walls), 4), "cpu_s_median": round(statistics.median(cpus), 4),
                      "cpu_s_min": round(min(cpus), 4), "cpu_s_max": round(max(cpus), 4), "n": len(cpus), "load": [min(loads), max(loads)]}
    # one micro epoch's observations (the epoch thread's share of the learning), the collector off
    # (a full pass landing in one of them is what the figure above measures)
    gc.disable()
    walls, cpus, loads = [], [], []
    for _ in range(args.epochs):
        now[0] += MICRO_S
        batches = [(sig, [sample(cost, r0, now[0])]) for sig, cost, r0 in pes]
        w0, c0 = time.perf_counter(), time.process_time()
        for sig, batch in batches:
            lrn.observe(sig, batch, now[0])
        walls.append(time.perf_counter() - w0)
        cpus.append(time.process_time() - c0)
        loads.append(_load())
    out["observe_epoch"] = {"wall_s_median": round(statistics.median(walls), 3), "cpu_s_median": round(statistics.median(cpus), 3),
                            "n": len(cpus), "load": [min(loads), max(loads)]}
    own = [m for m in lrn.models.values() if m.level.value == "flowspec"][: args.refits]
    cpus, loads = [], []
    for m in own:
        m.stale = True
        c0 = time.process_time()
        lrn._refit(m)
        cpus.append(time.process_time() - c0)
    loads.append(_load())
    gc.enable()
    out["refit"] = {"cpu_ms_median": round(1000 * statistics.median(cpus), 2), "cpu_ms_mean": round(1000 * statistics.fmean(cpus), 2),
                    "n": len(cpus), "fitted": sum(1 for m in own if m.fit is not None), "load": loads}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pes", type=int, default=7000)
    ap.add_argument("--window", type=int, default=256, help="samples per PE (LearnConfig.max_samples: 256)")
    ap.add_argument("--chunk", type=int, default=32, help="samples per observe call while building")
    ap.add_argument("--collections", type=int, default=9)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--refits", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--base", default="main", help="the git revision of the 'before' arm")
    ap.add_argument("--arms", default="before,after")
    ap.add_argument("--mode", help=argparse.SUPPRESS)
    ap.add_argument("--json", default=str(OUT / "learning-memory.json"))
    ap.add_argument("--md", default=str(OUT / "learning-memory.md"))
    ap.add_argument("--render", action="store_true", help="only write --md again from --json")
    args = ap.parse_args()
    if args.render:
        write_md(json.loads(Path(args.json).read_text()), Path(args.md))
        return
    if args.mode:
        print(json.dumps(run_arm(args)))
        return
    base_rev = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", args.base], check=True, capture_output=True,
                              text=True).stdout.strip()
    head_rev = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], check=True, capture_output=True,
                              text=True).stdout.strip()
    results: dict[str, Any] = {}
    load0 = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-learning-memory-") as tmp:
        trees = {"before": Path(tmp), "after": ROOT}
        if "before" in args.arms:
            export(args.base, Path(tmp))
        for mode in ("traced", "plain"):
            for arm in args.arms.split(","):
                tree = trees[arm]
                env = {**os.environ, "PYTHONPATH": f"{tree}/optimizer:{tree}/operator:{tree}/pe"}
                cmd = [sys.executable, str(Path(__file__).resolve()), "--mode", mode, "--pes", str(args.pes), "--window", str(args.window),
                       "--chunk", str(args.chunk), "--collections", str(args.collections), "--epochs", str(args.epochs),
                       "--refits", str(args.refits), "--seed", str(args.seed)]
                print(f"arm {arm} {mode} ({tree}), load {_load()}", file=sys.stderr, flush=True)
                t0 = time.monotonic()
                p = subprocess.run(cmd, env=env, check=True, stdout=subprocess.PIPE, text=True)
                row = json.loads(p.stdout.strip().splitlines()[-1])
                row["wall_s"] = round(time.monotonic() - t0, 1)
                results.setdefault(arm, {})[mode] = row
                print(json.dumps({arm: row}), file=sys.stderr, flush=True)
    out = {"pes": args.pes, "window": args.window, "base": f"{args.base} ({base_rev})", "head": head_rev, "argv": sys.argv[1:],
           "host": {"cpus": os.cpu_count(), "load_start": load0, "load_end": os.getloadavg()}, "arms": results}
    Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    write_md(out, Path(args.md))
    print(Path(args.md).read_text())


def write_md(out: dict[str, Any], path: Path) -> None:
    arms = out["arms"]

    def get(arm: str, *keys: str) -> Any:
        v: Any = arms.get(arm, {})
        for k in keys:
            v = v.get(k) if isinstance(v, dict) else None
        return "" if v is None else v

    rows = [
        ("nodes", ("traced", "nodes")),
        ("samples in the PEs' own windows", ("traced", "samples_held")),
        ("learner's memory (tracemalloc), MB", ("traced", "traced_mb")),
        ("... per sample held, bytes", ("traced", "bytes_per_sample")),
        ("objects the GC tracks, the learner's", ("traced", "tracked_objects")),
        ("RSS growth over the build, MB", ("plain", "rss_growth_mb")),
        ("full gc.collect(), CPU s (median)", ("plain", "gc_full", "cpu_s_median")),
        ("... min / max", ("plain", "gc_full", "cpu_s_min")),
        ("full gc.collect(), wall s (median)", ("plain", "gc_full", "wall_s_median")),
        ("... load (1 min) during them", ("plain", "gc_full", "load")),
        ("one micro epoch's observe (a sample per PE), CPU s (median)", ("plain", "observe_epoch", "cpu_s_median")),
        ("... wall s (median)", ("plain", "observe_epoch", "wall_s_median")),
        ("... load", ("plain", "observe_epoch", "load")),
        ("one node's refit, CPU ms (median)", ("plain", "refit", "cpu_ms_median")),
        ("... mean", ("plain", "refit", "cpu_ms_mean")),
        ("build (traced / plain), wall s", ("traced", "build_s")),
    ]
    names = [a for a in ("before", "after") if a in arms]
    lines = [f"# The learner's memory: {out['pes']:,} PEs x {out['window']} samples (issue 52 item 4)", "",
             f"`{' '.join(['.venv/bin/python benchmarks/bench_learning_memory.py', *out['argv']])}`: before = {out['base']}, "
             f"after = {out['head']}; {out['host']['cpus']} CPUs, load (1 min) {out['host']['load_start'][0]:.1f} at the start, "
             f"{out['host']['load_end'][0]:.1f} at the end (a shared machine: wall seconds are loaded figures).", "",
             "| | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for label, keys in rows:
        vals = []
        for a in names:
            v = get(a, *keys)
            if keys[-1] == "cpu_s_min":
                v = f"{v} / {get(a, *keys[:-1], 'cpu_s_max')}"
            elif keys[-1] == "build_s":
                v = f"{v} / {get(a, 'plain', 'build_s')}"
            vals.append(f"{v:,}" if isinstance(v, int) else str(v))
        lines.append(f"| {label} | " + " | ".join(vals) + " |")
    lines += ["", "The learner's memory and the objects it adds to the collector are counted in a process that traces "
              "(tracemalloc, the build only: the modules imported before); RSS, the collections, the observations and the "
              "refits in another that does not. \"Per sample held\" divides everything the learner holds (its nodes, none "
              "fitted yet, and the kind roots' windows) by the samples of the PEs' own windows. A full collection walks "
              "every tracked object of the process (the interpreter's and the libraries' too: 0.05 CPU s with this "
              "branch at --pes 350 --window 64). The observe and refit rows run with the collector off (its passes are "
              "the rows above)."]
    path.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
