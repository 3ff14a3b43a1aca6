"""The live learner at scale (issue 38 item 4): 7,000 distinct PEs (21,002 ResourceProfiles) against
a real API server, main's code and this branch's side by side on the same samples.

    KUBESODA_PORT_BASE=28700 KUBESODA_STATE=$PWD/.local/cluster-i38-scale KUBESODA_TOPOLOGY=hack/topologies/tiny.yaml \\
      hack/with-cluster.sh .venv/bin/python benchmarks/bench_learning_scale.py [--pes 7000] [--base main]

(the control plane only: the CRDs are applied here, no node is used). Each arm runs in a process of
its own with the ``optimizer`` and ``operator`` packages of its tree (``before``: ``git archive`` of
``--base``; ``after``: this worktree), on the same workload:

- 1,000 templates of 7 PEs (a source and a chain of 6 transforms), every PE its own image: 7,000
  distinct PEs, 3 signature nodes each plus a root per kind: 21,002 nodes;
- a true behaviour per PE (a cost per tuple of 0.005-0.05 mips x s, output = processed rate), the
  offered rate 0.5-2 x its nominal rate, the allocation 30-150% of the need, 5% noise on the
  output and the CPU reading; the offered rate known (the SDK's input queue series);
- 30 samples per PE first (a warm operator: 5 macro epochs' worth), then a first macro epoch (the
  profiles created; this branch's first cycle without a fit budget, to catch up), then
  ``--steady`` macro epochs of 6 micro epochs (60 s at 10 s) each in which ``--drift`` (1%) of the
  PEs change behaviour (the cost per tuple halved or doubled: their fits must follow), then a
  restarted operator's first macro epoch (main's restart, which refits every window on the epoch
  lock, only with ``--restart-before``: at 7,000 PEs it takes longer than the rest together).

Per macro epoch: the seconds the epoch thread spends in ``Learning.macro`` (the epoch lock: main
does everything there), the seconds of this branch's cycle on its own thread (``Learning.sync``:
list, refits, choice, writes), the API calls (counted on the client's REST layer), the bytes of
status written, the bytes listed, the process's RSS; issue 52 item 4: the CPU seconds of the
process over the macro epoch's learning (``time.process_time`` from ``Learning.macro`` until its
cycle is idle: every thread, the garbage collector's passes included; the full passes counted
apart, ``gc2``: at 7,000 PEs one costs 0.5-0.7 CPU s over the samples), of the epoch thread in
``Learning.macro`` and of the cycle's own thread (``stats["cycle_cpu_s"]``, this branch), the
templates chosen and left waiting, and the 1-minute load average at the end of each macro epoch
(wall seconds on a shared machine are loaded figures; CPU seconds much less so). Writes JSON and a
markdown table to docs/benchmarks/learning-scale.{json,md}.
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
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "benchmarks"
PES_PER_TEMPLATE = 7
MICRO_S = 10.0
MICRO_PER_MACRO = 6
POLICY = {"spec": {"learning": {"enabled": True}, "observation": {"windowSeconds": 30}}}
OVER_S = 6.0  # the done-means: at most 10% of a 60 s macro epoch


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    return float("nan")


class Counted:
    """Counts the API calls of an ApiClient at its REST layer (the real calls, to the real server)."""

    def __init__(self, api: Any):
        self.calls = 0
        self.by_method: dict[str, int] = {}
        self.sent = 0  # request body bytes
        self.status_sent = 0  # of which status patches
        self.received = 0  # response bytes
        self._lock = threading.Lock()
        orig = api.rest_client.request

        def request(method: str, url: str, *a: Any, **kw: Any) -> Any:
            body = kw.get("body")
            n = len(json.dumps(body)) if body is not None else 0
            got = 0
            try:
                r = orig(method, url, *a, **kw)
                got = len(r.read() or b"") if hasattr(r, "read") else 0
                return r
            finally:  # failed calls (409, 422) count too
                with self._lock:
                    self.calls += 1
                    self.by_method[method] = self.by_method.get(method, 0) + 1
                    self.sent += n
                    if url.endswith("/status"):
                        self.status_sent += n
                    self.received += got

        api.rest_client.request = request

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {"calls": self.calls, "by_method": dict(self.by_method), "sent": self.sent, "status_sent": self.status_sent,
                    "received": self.received}


def delta(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    return {"calls": b["calls"] - a["calls"], "status_bytes": b["status_sent"] - a["status_sent"], "sent_bytes": b["sent"] - a["sent"],
            "received_bytes": b["received"] - a["received"],
            "by_method": {k: v - a["by_method"].get(k, 0) for k, v in b["by_method"].items() if v - a["by_method"].get(k, 0)}}


# ------------------------------------------------------------------------------------ CPU pressure

_THROTTLER = """
import os, select, signal, sys, time
pid, share, period = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
on = False
try:
    while True:
        if select.select([sys.stdin], [], [], 0 if on else None)[0]:
            line = sys.stdin.readline()
            if not line:
                break
            on = line.strip() == "1"
        if on:
            time.sleep(period * share)
            os.kill(pid, signal.SIGSTOP)
            time.sleep(period * (1.0 - share))
            os.kill(pid, signal.SIGCONT)
finally:
    os.kill(pid, signal.SIGCONT)
"""


class Throttle:
    """Issue 52 item 4: CPU pressure on this process alone, as a loaded machine puts it, without
    loading the shared machine: while on, a child process lets this one run for ``share`` of every
    ``period`` and stops it (SIGSTOP) for the rest, as ``cpulimit`` does. A share of 0.1 is one
    tenth of a core: the process's wall seconds are about ten times its CPU seconds, as on 2 cores
    at a load average of about 20. On around each macro epoch's learning only (the benchmark's
    own micro epochs, 7,000 samples each, are not the learning's)."""

    def __init__(self, share: float, period: float = 0.1):
        self.proc = None if share >= 1.0 else subprocess.Popen(
            [sys.executable, "-c", _THROTTLER, str(os.getpid()), str(share), str(period)], stdin=subprocess.PIPE, text=True)

    def set(self, on: bool) -> None:
        if self.proc is not None and self.proc.stdin is not None:
            self.proc.stdin.write("1\n" if on else "0\n")
            self.proc.stdin.flush()


# ------------------------------------------------------------------------------------ one arm


def templates(n_pes: int) -> list[dict[str, Any]]:
    out = []
    for j in range(n_pes // PES_PER_TEMPLATE):
        names = [f"s{j}"] + [f"t{j}-{k}" for k in range(PES_PER_TEMPLATE - 1)]
        pes = [{"name": names[0], "kind": "source", "image": f"bench.example/src{j}:1"}] + \
              [{"name": nm, "image": f"bench.example/op{j}-{k}:1"} for k, nm in enumerate(names[1:])]
        streams = [{"from": a, "to": b} for a, b in zip(names, names[1:])]
        out.append({"metadata": {"namespace": "bench", "name": f"tpl{j}"},
                    "spec": {"pes": pes, "streams": streams, "primalInputs": [{"pe": names[0], "rate": 100}]}})
    return out


def run_arm(args: argparse.Namespace) -> dict[str, Any]:
    import numpy as np
    from kubernetes import client, config

    from soda_operator.soda import crd, learning
    from soda_optimizer.learn import Sample

    config.load_kube_config()
    api = client.ApiClient()
    counter = Counted(api)
    custom = client.CustomObjectsApi(api)
    t_deleted = time.monotonic()
    while not args.restart_only and cast(dict[str, Any], custom.list_cluster_custom_object(crd.GROUP, crd.VERSION, learning.PLURAL,
                                                                                         limit=1))["items"]:
        try:  # 21,000 profiles take longer than the server's request timeout (504): it goes on, we ask again
            custom.delete_collection_cluster_custom_object(crd.GROUP, crd.VERSION, learning.PLURAL, _request_timeout=300)
        except client.ApiException as e:
            if e.status != 504:
                raise
        if time.monotonic() - t_deleted > 900:
            raise SystemExit("the old profiles are not going away")
        time.sleep(1)
    tpls = templates(args.pes)
    sigs = []  # (signature, cost per tuple, nominal rate)
    rng = np.random.default_rng(args.seed)
    for t in tpls:
        for name, sig in learning.template_signatures(t).items():
            sigs.append((sig, float(np.exp(rng.uniform(np.log(0.005), np.log(0.05)))), float(np.exp(rng.uniform(np.log(50), np.log(500))))))
    now = [1.0e6]
    scen = SimpleNamespace(templates=[SimpleNamespace(name=f"bench/{t['metadata']['name']}") for t in tpls])
    after = hasattr(learning.Learning, "take")

    def make() -> Any:
        kw: dict[str, Any] = {"clock": lambda: now[0]}
        return learning.Learning(custom, **kw)

    lrn = make()

    def micro_epoch() -> float:
        t0 = time.perf_counter()
        now[0] += MICRO_S
        for sig, cost, r0 in sigs:
            r = r0 * float(np.exp(rng.uniform(np.log(0.5), np.log(2.0))))
            m = cost * r * float(rng.uniform(0.3, 1.5))
            p = min(r, m / cost)
            s = Sample(r_i=r, m=m, r_o=p * float(np.exp(rng.normal(0, 0.05))), m_used=cost * p * float(np.exp(rng.normal(0, 0.05))),
                       t=now[0], r_p=p)
            if after:
                lrn.take(sig, [s], now[0])
            else:
                lrn.dirty.update(lrn.learner.observe(sig, [s], now[0]))
        return time.perf_counter() - t0

    throttle = Throttle(args.cpu_share)
    collections: list[float] = []  # the garbage collector's full (generation 2) passes: their CPU seconds
    started: list[float] = []

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if info.get("generation") == 2:
            if phase == "start":
                started[:] = [time.process_time()]
            elif started:
                collections.append(time.process_time() - started[0])

    gc.callbacks.append(on_gc)

    def macro_epoch(label: str) -> dict[str, Any]:
        c0 = counter.snapshot()
        n_gc = len(collections)
        throttle.set(True)
        p0, th0 = time.process_time(), time.thread_time()
        t0 = time.perf_counter()
        fns = lrn.macro(scen, tpls, POLICY)
        on_lock = time.perf_counter() - t0
        on_lock_cpu = time.thread_time() - th0
        cycle = None
        stats: dict[str, Any] = {}
        if after:
            lrn.wait_idle()
            stats = dict(lrn.stats)
            cycle = stats.get("cycle_s")
        cpu = time.process_time() - p0  # every thread of the process: the epoch's, the cycle's, the writers'
        throttle.set(False)
        c1 = counter.snapshot()
        learned = sum(1 for c in fns.values() if c.source.startswith("learned"))
        row = {"epoch": label, "on_lock_s": round(on_lock, 3), "cycle_s": None if cycle is None else round(cycle, 3),
               "learning_s": round(on_lock + (cycle or 0.0), 3), "on_lock_cpu_s": round(on_lock_cpu, 3), "cpu_s": round(cpu, 3),
               "load": round(os.getloadavg()[0], 1), "gc2": len(collections) - n_gc, "gc2_cpu_s": round(sum(collections[n_gc:]), 3),
               **delta(c0, c1), "rss_mb": round(rss_mb(), 1),
               "learned_pes": learned, "pes": len(fns), "profiles": len(lrn.learner.models),
               **{k: (round(v, 3) if isinstance(v, float) else v) for k, v in stats.items()}}
        print(json.dumps(row), file=sys.stderr, flush=True)
        return row

    rss0 = rss_mb()
    if args.restart_only:  # a restarted operator, in a process of its own: its first macro epoch loads the profiles
        rows = [macro_epoch("restart")]
        while getattr(lrn, "tiers", None) and len(rows) < 6:  # the rest of them, a tier per cycle (this branch)
            [micro_epoch() for _ in range(MICRO_PER_MACRO)]
            rows.append(macro_epoch(f"restart +{len(rows)}"))
        return {"arm": "after" if after else "before", "pes": len(sigs), "rss_start_mb": round(rss0, 1), "rows": rows}
    observe_s = [micro_epoch() for _ in range(args.warm)]  # a warm operator: --warm samples per PE
    rows = []
    if after and args.first_unbudgeted:  # the first cycle catches up with every PE's first fit (as measured before)
        lrn.fit_budget_s = float("inf")
        if hasattr(lrn, "write_budget_s"):
            lrn.write_budget_s = lrn.cycle_budget_s = float("inf")
    rows.append(macro_epoch("first"))
    if after:
        lrn.fit_budget_s = learning.FIT_BUDGET_S
        if hasattr(lrn, "write_budget_s"):
            lrn.write_budget_s, lrn.cycle_budget_s = learning.WRITE_BUDGET_S, learning.CYCLE_BUDGET_S
    # the cold start's catch-up: macro epochs (no drift) until no refit waits and no profile is left
    # to write, at most --catch-up of them
    k = 0
    while after and k < args.catch_up and rows[-1].get("deferred", 0) + rows[-1].get("unwritten", 0) > 0:
        k += 1
        observe_s += [micro_epoch() for _ in range(MICRO_PER_MACRO)]
        rows.append(macro_epoch(f"catch-up {k}"))
    for i in range(args.steady):
        # a share of the PEs changes behaviour (the cost per tuple x 0.5 or x 2) each macro epoch
        for k in rng.choice(len(sigs), size=int(round(args.drift * len(sigs))), replace=False):
            sig, cost, r0 = sigs[k]
            sigs[k] = (sig, cost * float(rng.choice([0.5, 2.0])), r0)
        observe_s += [micro_epoch() for _ in range(MICRO_PER_MACRO)]
        rows.append(macro_epoch(f"steady {i + 1}"))
    return {"arm": "after" if after else "before", "pes": len(sigs), "rss_start_mb": round(rss0, 1),
            "rss_before_restart_mb": round(rss_mb(), 1), "observe_s_median": round(statistics.median(observe_s), 3), "rows": rows}


# ------------------------------------------------------------------------------------ both, side by side


def export(rev: str, into: Path) -> None:
    p = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "optimizer", "operator", "pe", "crds"], check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=p.stdout, check=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pes", type=int, default=7000)
    ap.add_argument("--steady", type=int, default=3, help="macro epochs measured after the first")
    ap.add_argument("--steady-before", type=int, default=None, help="the same for the before arm (default --steady)")
    ap.add_argument("--base", default="main", help="the git revision of the 'before' arm")
    ap.add_argument("--arms", default="before,after")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--drift", type=float, default=0.01, help="share of the PEs whose behaviour changes each steady macro epoch")
    ap.add_argument("--no-restart", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--restart-only", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--warm", type=int, default=30, help="samples per PE before the first macro epoch")
    ap.add_argument("--catch-up", type=int, default=60,
                    help="at most this many macro epochs after the first until no refit waits and no profile is left unwritten")
    ap.add_argument("--first-unbudgeted", action="store_true",
                    help="the first cycle without fit (and write) budget, as measured before (the operator's default is budgeted)")
    ap.add_argument("--cpu-share", type=float, default=1.0,
                    help="CPU pressure: the share of a core each arm's process gets during the macro epochs' learning (Throttle)")
    ap.add_argument("--arm", help=argparse.SUPPRESS)
    ap.add_argument("--json", default=str(OUT / "learning-scale.json"))
    ap.add_argument("--md", default=str(OUT / "learning-scale.md"))
    ap.add_argument("--render", action="store_true", help="only write --md again from --json")
    args = ap.parse_args()
    if args.render:
        write_md(json.loads(Path(args.json).read_text()), Path(args.md))
        return
    if args.arm:
        print(json.dumps(run_arm(args)))
        return
    base_rev = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", args.base], check=True, capture_output=True,
                              text=True).stdout.strip()
    results = {}
    load0 = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-learning-") as tmp:
        trees = {"before": Path(tmp), "after": ROOT}
        if "before" in args.arms:
            export(args.base, Path(tmp))
        for arm in args.arms.split(","):
            tree = trees[arm]
            env = {**os.environ, "PYTHONPATH": f"{tree}/optimizer:{tree}/operator:{tree}/pe"}
            steady = args.steady if arm == "after" or args.steady_before is None else args.steady_before
            cmd = [sys.executable, str(Path(__file__).resolve()), "--arm", arm, "--pes", str(args.pes), "--steady", str(steady),
                   "--seed", str(args.seed), "--drift", str(args.drift), "--warm", str(args.warm), "--catch-up", str(args.catch_up),
                   "--cpu-share", str(args.cpu_share)]
            if args.first_unbudgeted:
                cmd.append("--first-unbudgeted")
            restart = not args.no_restart
            # each arm with its own tree's CRD (main's status carries the window as a list)
            subprocess.run(["kubectl", "apply", "--server-side", "--force-conflicts", "-f", str(tree / "crds" / "resourceprofiles.yaml")],
                           check=True, capture_output=True)
            print(f"arm {arm} ({tree})", file=sys.stderr, flush=True)
            t0 = time.monotonic()
            p = subprocess.run(cmd, env=env, check=True, stdout=subprocess.PIPE, text=True)
            results[arm] = json.loads(p.stdout.strip().splitlines()[-1])
            results[arm]["wall_s"] = round(time.monotonic() - t0, 1)
            results[arm]["started"] = time.strftime("%H:%M:%S UTC", time.gmtime(time.time() - results[arm]["wall_s"]))
            if restart:  # a restarted operator is a new process: its RSS is its own (before, the first learner's too)
                p = subprocess.run([*cmd, "--restart-only"], env=env, check=True, stdout=subprocess.PIPE, text=True)
                again = json.loads(p.stdout.strip().splitlines()[-1])
                results[arm]["rows"] += again["rows"]
                results[arm]["rss_restart_start_mb"] = again["rss_start_mb"]
    out = {"pes": args.pes, "base": f"{args.base} ({base_rev})", "macro_epoch_s": MICRO_S * MICRO_PER_MACRO, "argv": sys.argv[1:],
           "host": {"cpus": os.cpu_count(), "load": os.getloadavg(), "load_start": load0}, "cpu_share": args.cpu_share, "arms": results}
    Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    write_md(out, Path(args.md))
    print(Path(args.md).read_text())


def _fmt_bytes(n: float) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 1e5 else f"{n / 1e3:.1f} kB"


def _rows(res: dict[str, Any], prefix: tuple[str, ...]) -> list[dict[str, Any]]:
    return [r for r in res["rows"] if r["epoch"].startswith(prefix)]


def _med(rows: list[dict[str, Any]], k: str, scale: float = 1.0) -> float | None:
    v = [scale * float(r.get(k) or 0.0) for r in rows]
    return float(statistics.median(v)) if v else None


def summary_rows() -> list[tuple[str, Any]]:
    cold = ("first", "catch-up")

    def until_learned(res: dict[str, Any]) -> int | None:
        for i, r in enumerate(_rows(res, cold)):
            if r["learned_pes"] >= r["pes"]:
                return i + 1
        return None

    return [
        ("cold start: learning seconds, first macro epoch", lambda r: _rows(r, ("first",))[0]["learning_s"]),
        ("cold start: learning seconds, most in one macro epoch", lambda r: max(x["learning_s"] for x in _rows(r, cold))),
        ("cold start: learning seconds, median per macro epoch", lambda r: _med(_rows(r, cold), "learning_s")),
        ("cold start: learning CPU seconds (process), first macro epoch", lambda r: _rows(r, ("first",))[0].get("cpu_s")),
        ("cold start: learning CPU seconds (process), median per macro epoch", lambda r: _med(_rows(r, cold), "cpu_s")),
        ("every macro epoch: learning seconds, most in one", lambda r: max(x["learning_s"] for x in r["rows"])),
        ("every macro epoch: learning CPU seconds (process), most in one", lambda r: max((x.get("cpu_s") or 0.0) for x in r["rows"])),
        (f"every macro epoch: over {OVER_S:g} s of learning", lambda r: sum(1 for x in r["rows"] if x["learning_s"] > OVER_S)),
        ("every macro epoch: load average (1 min), median", lambda r: _med(r["rows"], "load")),
        ("cold start: macro epochs until caught up (first + catch-up)", lambda r: len(_rows(r, cold))),
        ("cold start: macro epochs until every PE is planned learned", until_learned),
        ("cold start: learning seconds in all", lambda r: round(sum(x["learning_s"] for x in _rows(r, cold)), 2)),
        ("cold start: PEs planned learned at its last macro epoch", lambda r: _rows(r, cold)[-1]["learned_pes"]),
        ("cold start: nodes refitted in all", lambda r: sum(x.get("refitted") or 0 for x in _rows(r, cold))),
        ("cold start: refits still waiting at its end", lambda r: _rows(r, cold)[-1].get("deferred") or 0),
        ("cold start: profiles holding a fit, still to write at its end", lambda r: _rows(r, cold)[-1].get("unwritten") or 0),
        ("cold start: API calls, most in one macro epoch", lambda r: max(x["calls"] for x in _rows(r, cold))),
        ("cold start: API calls in all", lambda r: sum(x["calls"] for x in _rows(r, cold))),
        ("cold start: status MB written in all", lambda r: round(sum(x["status_bytes"] for x in _rows(r, cold)) / 1e6, 2)),
        ("steady: learning seconds per macro epoch (median)", lambda r: _med(_rows(r, ("steady",)), "learning_s")),
        ("steady: API calls per macro epoch (median)", lambda r: _med(_rows(r, ("steady",)), "calls")),
        ("steady: status kB written per macro epoch (median)", lambda r: _med(_rows(r, ("steady",)), "status_bytes", 1e-3)),
        ("restart: learning seconds (first macro epoch)", lambda r: (_rows(r, ("restart",)) or [{}])[0].get("learning_s")),
        ("restart: learning seconds, most in one macro epoch until every profile is loaded",
         lambda r: max((x["learning_s"] for x in _rows(r, ("restart",))), default=None)),
        ("restart: of which on the epoch lock", lambda r: (_rows(r, ("restart",)) or [{}])[0].get("on_lock_s")),
        ("restart: PEs planned learned", lambda r: (_rows(r, ("restart",)) or [{}])[0].get("learned_pes")),
        ("restart: RSS (MB, a new process)", lambda r: (_rows(r, ("restart",)) or [{}])[0].get("rss_mb")),
        ("RSS growth, start -> before the restart (MB)", lambda r: round(r["rss_before_restart_mb"] - r["rss_start_mb"], 1)),
    ]


def write_md(out: dict[str, Any], path: Path) -> None:
    arms = out["arms"]
    lines = [
        "# The live learner at scale (issue 38 item 4; issue 52 item 4: CPU seconds, CPU pressure)",
        "",
        f"{out['pes']:,} distinct PEs (one image each: 3 signature nodes per PE, a root per kind), a real API server "
        f"(local control plane), `Learning` of `{out['base']}` (before) and of this branch (after), the same samples; "
        f"a macro epoch of {out['macro_epoch_s']:.0f} s (6 micro epochs of 10 s, one sample per PE each). "
        f"Machine: {out['host']['cpus']} cores shared with other jobs (load {out['host']['load'][0]:.1f} at the end): "
        "absolute seconds are loaded figures; " + (out.get("sessions") or "the side by side ran in one session") + "."
        + (f" CPU pressure: during each macro epoch's learning each arm's process ran {100 * float(out['cpu_share']):g}% of "
           "every 0.1 s and was stopped (SIGSTOP) for the rest (`--cpu-share`: a core shared "
           f"{1 / float(out['cpu_share']):.0f} ways)." if float(out.get("cpu_share", 1.0)) < 1.0 else ""),
        "",
        "Regenerate:",
        "",
        "```",
        "KUBESODA_PORT_BASE=31400 KUBESODA_STATE=$PWD/.local/cluster-bench KUBESODA_TOPOLOGY=hack/topologies/tiny.yaml \\",
        "  PYTHONPATH=$PWD/optimizer:$PWD/operator:$PWD/pe hack/with-cluster.sh .venv/bin/python benchmarks/bench_learning_scale.py "
        + " ".join(a for a in out.get("argv", []) if not a.startswith(("docs/", "--json", "--md"))),
        "```",
        "",
        "| arm | macro epoch | on the epoch lock (s) | cycle off the lock (s) | learning per macro epoch (s) | CPU s (process) | "
        "cycle CPU s (its thread) | load | API calls | status written | listed | refitted | chosen (waiting) | profiles written | "
        "PEs planned learned | RSS (MB) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, res in arms.items():
        for r in res["rows"]:
            cyc = "" if r["cycle_s"] is None else f"{r['cycle_s']:.2f}"
            cpu = "" if r.get("cpu_s") is None else f"{r['cpu_s']:.2f}"
            ccpu = "" if r.get("cycle_cpu_s") is None else f"{r['cycle_cpu_s']:.2f}"
            load = "" if r.get("load") is None else f"{r['load']:.1f}"
            chosen = "" if r.get("chosen") is None else f"{r['chosen']} ({r.get('choices_deferred', 0)})"
            if r.get("gc2"):
                cpu += f" (GC {r['gc2_cpu_s']:.2f})"
            lines.append(f"| {name} | {r['epoch']} | {r['on_lock_s']:.2f} | {cyc} | {r['learning_s']:.2f} | {cpu} | {ccpu} | {load} | "
                         f"{r['calls']:,} | {_fmt_bytes(r['status_bytes'])} | {_fmt_bytes(r['received_bytes'])} | "
                         f"{r.get('refitted', '')} | {chosen} | {r.get('written', '')} | {r['learned_pes']:,} / {r['pes']:,} | {r['rss_mb']:.0f} |")
    lines += ["", "Per arm: the cold start (the first macro epoch and the catch-up after it, until no refit waits and no "
              "profile is left to write), the steady macro epochs (1% of the PEs change behaviour in each) and the restart "
              "(a new process; its first macro epoch loads the profiles):", ""]
    lines += ["| figure | " + " | ".join(arms) + (" | ratio |" if len(arms) == 2 else " |"),
              "| --- | " + " | ".join("---" for _ in arms) + (" | --- |" if len(arms) == 2 else " |")]
    for label, fn in summary_rows():
        vals = [fn(res) for res in arms.values()]
        cells = " | ".join("" if v is None else f"{v:,.2f}" if isinstance(v, float) else f"{v:,}" for v in vals)
        ratio = ""
        if len(vals) == 2 and all(isinstance(v, int | float) and v is not None for v in vals) and vals[0]:
            ratio = f" {vals[1] / vals[0]:.3g} |"
        elif len(vals) == 2:
            ratio = " |"
        lines.append(f"| {label} | {cells} |{ratio}")
    path.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
