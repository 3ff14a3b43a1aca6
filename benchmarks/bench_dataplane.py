"""The SODA paper's section 7.2 experiment, live: SODA vs RR vs RAND vs spread placement, measured
from observed rates.

    hack/with-cluster.sh .venv/bin/python benchmarks/bench_dataplane.py [--runs 1] [--configs lsd-30,dac-9,...]

On the local control plane (KWOK nodes, the real Prometheus that cluster-up starts) with the fluid
data plane (``kubesoda simulate``) playing the PEs: for each configuration (the LSD-like workload on
30 and 70 nodes, the DAC-like one on 9 and 29 nodes: the paper's node counts; nodes of 8 cores x
1000 mips in racks of 10, two racks per zone, as the offline benchmarks use) and each placement
(``SchedulingPolicy.spec.placement``), one after the other in alternating order: start the
operator with ``--prometheus-url``, apply the workload with kubectl, wait until every job is
Running or Rejected and one observation window has passed, then read, from Prometheus, over the
window:

- ingest: tuples/s received on primal streams by the sources;
- importance at the sinks: the data plane's true importance (weight x value of what the sinks
  emit and the streams deliver), next to the plan's projection (the jobs' status);
- stream affinity: the share of stream traffic (bytes/s) that stays inside a node, and inside a
  rack (traffic level), and the share of streams whose producer and consumer share a node
  (stream level, from the pods' placement);
- CPU used vs projected: the PE containers' CPU (cAdvisor series) x mips-per-core, vs the sum of
  the jobs' planned mips.

Rack uplinks carry 2.5 MB/s and zone uplinks 10 MB/s (as benchmarks/bench_placement.py), so that
where the streams run matters: the data plane delivers what a saturated uplink can carry and the
rest is lost downstream.

Then the jobs are deleted and their pods awaited. Macro epochs are 15 minutes apart, so that each
run measures one placement: the baselines re-place every PE at each macro epoch (SODA changes
candidates incrementally), and with shorter epochs their 700 pods never all run between two. Writes docs/benchmarks/dataplane.json, a
markdown table (dataplane.md) and a plot (dataplane.png). Medians over ``--runs``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from soda_operator.soda import crd, render  # noqa: E402
from soda_operator.soda.observe import Prometheus  # noqa: E402
from soda_optimizer import workloads  # noqa: E402

NS = "bench"
PLACEMENTS = ("soda", "rr", "rand", "spread")
CONFIGS = {"lsd-30": ("lsd", 30), "lsd-70": ("lsd", 70), "dac-9": ("dac", 9), "dac-29": ("dac", 29)}
PAPER = {
    "lsd-30": "SODA on 30 PNs ingests as much as the expert placement on 82; over 70% of LSD traffic stays inside nodes",
    "dac-29": "RR reaches 84% of SODA's sink traffic",
}
WINDOW_S = 10
POLICY = """apiVersion: kubesoda.io/v1alpha1
kind: SchedulingPolicy
metadata: {{name: default}}
spec:
  placement: {placement}
  macroEpochSeconds: 900
  microEpochSeconds: 5
  observation: {{windowSeconds: {window}}}
  links: {{rackUplink: {rack:g}, zoneUplink: {zone:g}}}
"""
# uplinks narrow enough that where streams run matters (as benchmarks/bench_placement.py sets them):
# the data plane loses what a saturated uplink cannot carry; the plan's projection does not model it
RACK_UPLINK, ZONE_UPLINK = 2.5e6, 1e7


def kubectl(*args: str, input: str | None = None, check: bool = True) -> str:
    return subprocess.run(["kubectl", *args], check=check, capture_output=True, text=True, input=input).stdout


def topology(n: int) -> dict[str, Any]:
    racks = -(-n // 10)
    return {"name": f"bench-{n}", "zones": -(-racks // 2), "racksPerZone": 2, "nodesPerRack": 10, "nodes": n,
            "cpu": "8", "memory": "64Gi", "pods": 250, "mipsPerCore": 1000}


def set_nodes(n: int) -> None:
    """Exactly the n nodes of this configuration (the KWOK ones; others deleted)."""
    have = json.loads(kubectl("get", "nodes", "-o", "json"))["items"]
    for node in have:
        kubectl("delete", "node", node["metadata"]["name"], "--wait=false", check=False)
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        yaml.safe_dump(topology(n), f)
    for _ in range(60):
        if not json.loads(kubectl("get", "nodes", "-o", "json"))["items"]:
            break
        time.sleep(1)
    subprocess.run([sys.executable, str(ROOT / "hack" / "nodes.py"), f.name], check=True)
    os.unlink(f.name)


def workload(kind: str) -> str:
    t, j = workloads.lsd(0) if kind == "lsd" else workloads.dac(0)
    s = workloads.scenario((t, j), workloads.nodes(1))
    objs = [o for o in render.scenario_to_objects(s) if o["kind"] in ("StreamTemplate", "StreamJob")]
    return yaml.safe_dump_all(objs)


def jobs() -> list[dict[str, Any]]:
    return json.loads(kubectl("get", "streamjobs", "-n", NS, "-o", "json"))["items"]


def scalar(prom: Prometheus, q: str) -> float:
    rows = prom.query(q)
    return sum(v for _, v in rows)


def stream_level_affinity(kind: str) -> float:
    """Share of streams whose producer and consumer have an instance on a common node, weighted by
    the share of the pair's instances that do (pods' placement)."""
    t, j = workloads.lsd(0) if kind == "lsd" else workloads.dac(0)
    pods = json.loads(kubectl("get", "pods", "-n", NS, "-l", crd.LABEL_JOB, "-o", "json"))["items"]
    where: dict[tuple[str, str], set[str]] = {}
    for p in pods:
        lab = p["metadata"]["labels"]
        if p["spec"].get("nodeName"):
            where.setdefault((lab[crd.LABEL_JOB], lab[crd.LABEL_PE]), set()).add(p["spec"]["nodeName"])
    tmpl = {x.name: x for x in t}
    total = shared = 0
    for job in j:
        name = job.name.split("/", 1)[1]
        for s in tmpl[job.templates[0]].streams:
            a, b = where.get((name, s.src)), where.get((name, s.dst))
            if not a or not b:
                continue
            total += 1
            shared += bool(a & b)
    return shared / total if total else 0.0


def one_run(prom: Prometheus, kind: str, placement: str, port: str, timeout: float) -> dict[str, Any]:
    kubectl("apply", "-f", "-", input=POLICY.format(placement=placement, window=WINDOW_S, rack=RACK_UPLINK, zone=ZONE_UPLINK))
    log = open(f"/tmp/kubesoda-bench-dataplane-{kind}-{placement}.log", "w")
    op = subprocess.Popen([sys.executable, "-m", "soda_operator.cli", "run", "--extender-port", port, "--prometheus-url", prom.url],
                          stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    try:
        time.sleep(3)
        t0 = time.perf_counter()
        kubectl("apply", "-n", NS, "-f", "-", input=workload(kind))
        while True:
            items = jobs()
            phases = [(x.get("status") or {}).get("phase") for x in items]
            if items and all(p in ("Running", "Rejected", "Degraded") for p in phases):
                break
            if time.perf_counter() - t0 > timeout:  # measured anyway, and said so
                print(f"{kind}/{placement}: jobs not settled after {timeout}s: {sorted(set(map(str, phases)))}", file=sys.stderr, flush=True)
                break
            time.sleep(2)
        settled = time.perf_counter() - t0
        time.sleep(WINDOW_S + 6)  # a full window of rates on the settled placement, and two scrapes
        w = f"{WINDOW_S}s"
        sel = f'namespace="{NS}"'
        samples = []
        for _ in range(3):
            samples.append({
                "ingest": scalar(prom, f'sum(rate(kubesoda_pe_tuples_received_total{{{sel},stream="primal"}}[{w}]))'),
                "sink_rate": scalar(prom, f'sum(rate(kubesoda_pe_tuples_emitted_total{{{sel},stream="sink"}}[{w}]))'),
                "importance": scalar(prom, f"sum(kubesoda_dataplane_importance{{{sel}}})"),
                "traffic_node": scalar(prom, f'sum(kubesoda_dataplane_traffic_bytes{{{sel},scope="node"}})'),
                "traffic_rack": scalar(prom, f'sum(kubesoda_dataplane_traffic_bytes{{{sel},scope=~"node|rack"}})'),
                "traffic_all": scalar(prom, f"sum(kubesoda_dataplane_traffic_bytes{{{sel}}})"),
                "cpu_mips": 1000 * scalar(prom, f'sum(rate(container_cpu_usage_seconds_total{{{sel},container="pe"}}[{w}]))'),
            })
            time.sleep(2)
        med = {k: statistics.median(s[k] for s in samples) for k in samples[0]}
        items = jobs()
        st = [x.get("status") or {} for x in items]
        return {
            "workload": kind, "placement": placement, "settled_s": round(settled, 1),
            "jobs": len(items), "running": sum(s.get("phase") == "Running" for s in st),
            "projected_importance": round(sum(s.get("importance", 0.0) for s in st if s.get("phase") == "Running"), 3),
            "observed_importance_status": round(sum((s.get("observed") or {}).get("importance", 0.0) for s in st), 3),
            "planned_mips": round(sum(s.get("mips", 0.0) for s in st if s.get("phase") == "Running"), 1),
            "ingest": round(med["ingest"], 3), "sink_rate": round(med["sink_rate"], 3), "importance": round(med["importance"], 3),
            "traffic_in_node": round(med["traffic_node"] / med["traffic_all"], 4) if med["traffic_all"] else None,
            "traffic_in_rack": round(med["traffic_rack"] / med["traffic_all"], 4) if med["traffic_all"] else None,
            "streams_in_node": round(stream_level_affinity(kind), 4),
            "cpu_used_mips": round(med["cpu_mips"], 1),
        }
    finally:
        op.terminate()
        try:
            op.wait(20)
        except subprocess.TimeoutExpired:
            op.kill()
        log.close()
        kubectl("delete", "streamjobs", "--all", "-n", NS, "--wait=false", check=False)
        for _ in range(120):
            if not json.loads(kubectl("get", "pods", "-n", NS, "-o", "json"))["items"]:
                break
            time.sleep(1)


def report(rows: list[dict[str, Any]], out: Path, command: str) -> None:
    keys = ("ingest", "sink_rate", "importance", "projected_importance", "traffic_in_node", "traffic_in_rack", "streams_in_node",
            "cpu_used_mips", "planned_mips", "running", "settled_s")
    med: dict[str, dict[str, Any]] = {}
    for r in rows:
        med.setdefault(f"{r['config']}/{r['placement']}", {k: [] for k in keys})
        for k in keys:
            if r.get(k) is not None:
                med[f"{r['config']}/{r['placement']}"][k].append(r[k])
    medians = {c: {k: (statistics.median(v) if v else None) for k, v in d.items()} for c, d in med.items()}
    (out / "dataplane.json").write_text(json.dumps({"command": command, "window_s": WINDOW_S, "rack_uplink": RACK_UPLINK,
                                                    "zone_uplink": ZONE_UPLINK, "paper": PAPER, "medians": medians,
                                                    "rows": rows}, indent=1) + "\n")
    lines = ["# Section 7.2 live: placements measured from observed rates", "", f"`{command}` (fluid data plane, real Prometheus,"
             f" rates over {WINDOW_S} s, rack uplinks {RACK_UPLINK / 1e6:g} MB/s, zone uplinks {ZONE_UPLINK / 1e6:g} MB/s; medians of {max(len(v['ingest']) for v in med.values())} run(s)).", "",
             "| config | placement | ingest (t/s) | sink rate (t/s) | importance (observed) | projected | vs SODA | traffic in node |"
             " in rack | streams in node | CPU used / planned (mips) | jobs Running |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for c, d in medians.items():
        cfg, pl = c.split("/")
        soda = medians.get(f"{cfg}/soda", {}).get("importance") or 0

        def f(x: Any, p: str = ".3g") -> str:
            return "-" if x is None else format(x, p)
        lines.append(f"| {cfg} | {pl} | {f(d['ingest'])} | {f(d['sink_rate'])} | {f(d['importance'])} | {f(d['projected_importance'])} |"
                     f" {f(d['importance'] / soda if soda and d['importance'] is not None else None, '.0%')} | {f(d['traffic_in_node'], '.0%')} |"
                     f" {f(d['traffic_in_rack'], '.0%')} | {f(d['streams_in_node'], '.0%')} | {f(d['cpu_used_mips'], '.0f')} / {f(d['planned_mips'], '.0f')} |"
                     f" {f(d['running'], '.0f')} |")
    lines += ["", "Paper: " + "; ".join(f"{k}: {v}" for k, v in PAPER.items()) + "."]
    (out / "dataplane.md").write_text("\n".join(lines) + "\n")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        cfgs = sorted({c.split("/")[0] for c in medians})
        fig, axes = plt.subplots(1, 2, figsize=(11, 4))
        for ax, key, title in ((axes[0], "importance", "observed importance (vs SODA)"), (axes[1], "traffic_in_node", "traffic inside nodes")):
            for i, pl in enumerate(PLACEMENTS):
                vals = []
                for c in cfgs:
                    v = medians.get(f"{c}/{pl}", {}).get(key)
                    base = medians.get(f"{c}/soda", {}).get(key) if key == "importance" else 1.0
                    vals.append((v / base) if v is not None and base else 0.0)
                ax.bar([x + 0.2 * i for x in range(len(cfgs))], vals, width=0.2, label=pl)
            ax.set_xticks([x + 0.3 for x in range(len(cfgs))], cfgs)
            ax.set_title(title)
        axes[0].legend()
        fig.tight_layout()
        fig.savefig(out / "dataplane.png", dpi=90)
    except ImportError:
        pass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--placements", default=",".join(PLACEMENTS))
    ap.add_argument("--timeout", type=float, default=420)
    ap.add_argument("--out", default=str(ROOT / "docs" / "benchmarks"))
    args = ap.parse_args()
    url, sim_port = os.environ.get("KUBESODA_PROMETHEUS_URL"), os.environ.get("KUBESODA_SIMULATOR_PORT")
    if not url or not sim_port:
        raise SystemExit("needs the local control plane's Prometheus (KUBESODA_PROMETHEUS_URL, KUBESODA_SIMULATOR_PORT): "
                         "run through hack/with-cluster.sh")
    port = os.environ.get("KUBESODA_EXTENDER_PORT", "8888")
    prom = Prometheus(url, timeout_s=10)
    kubectl("apply", "--server-side", "-f", str(ROOT / "crds"))
    kubectl("wait", "--for=condition=Established", "crd/streamjobs.kubesoda.io", "--timeout=60s")
    kubectl("create", "namespace", NS, check=False)
    sim_log = open("/tmp/kubesoda-bench-dataplane-simulate.log", "w")
    sim = subprocess.Popen([sys.executable, "-m", "soda_operator.cli", "simulate", "--port", sim_port, "--interval", "1"],
                           stdout=sim_log, stderr=subprocess.STDOUT, cwd=ROOT)
    rows = []
    command = "hack/with-cluster.sh .venv/bin/python benchmarks/bench_dataplane.py" + (f" --runs {args.runs}" if args.runs != 1 else "")
    try:
        for cfg in args.configs.split(","):
            kind, n = CONFIGS[cfg]
            set_nodes(n)
            placements = args.placements.split(",")
            for r in range(args.runs):
                order = placements if r % 2 == 0 else placements[::-1]  # alternate, so drift does not favour one
                for pl in order:
                    row = one_run(prom, kind, pl, port, args.timeout)
                    row.update(config=cfg, nodes=n, run=r)
                    print(json.dumps(row), flush=True)
                    rows.append(row)
                    report(rows, Path(args.out), command)
    finally:
        sim.terminate()
        sim.wait(10)
        sim_log.close()


if __name__ == "__main__":
    main()
