"""Time from `kubectl apply` of the LSD-like workload to all admitted instances Running.

    KUBESODA_TOPOLOGY=hack/topologies/medium.yaml hack/with-cluster.sh .venv/bin/python benchmarks/bench_e2e_lsd.py

Against the cluster KUBECONFIG names (with-cluster.sh starts a local one with 100 KWOK nodes when
none is given). For each ``--runs`` label (w<API requests in flight while applying>, with ``s`` when the extender
runs as its own process; w1 = the old sequential apply, the baseline), in one run: start
`kubesoda run` (operator + extender, or operator and `kubesoda extender`), apply the
CRDs, a SchedulingPolicy with the default deadlines and examples/lsd with kubectl, poll until every
StreamJob is Running or Rejected, read the epoch times from the operator's log, then delete the
namespace and wait until its pods are gone. Writes docs/benchmarks/e2e-lsd.json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NS = "bench"


def kubectl(*args: str, **kw) -> str:
    return subprocess.run(["kubectl", *args], check=True, capture_output=True, text=True, **kw).stdout


def parse_config(label: str) -> tuple[int, bool]:
    """``w16`` = 16 apply workers, extender inside `kubesoda run`; ``w16s`` = the extender as its own
    process (`kubesoda extender`, as the chart deploys it)."""
    m = re.fullmatch(r"w(\d+)(s?)", label)
    if not m:
        raise SystemExit(f"bad run label {label!r}: expected w<workers>[s], e.g. w1, w16, w16s")
    return int(m.group(1)), bool(m.group(2))


def one_run(label: str, port: str, timeout: float) -> dict:
    workers, separate = parse_config(label)
    logpath = Path(f"/tmp/kubesoda-bench-lsd-operator-{label}.log")
    cli = [sys.executable, "-m", "soda_operator.cli"]
    with logpath.open("w") as log:
        op = subprocess.Popen([*cli, "run", "--extender-port", "0" if separate else port, "--workers", str(workers)],
                              stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        ext = subprocess.Popen([*cli, "extender", "--port", port], stdout=log, stderr=subprocess.STDOUT, cwd=ROOT) if separate else None
    try:
        time.sleep(3)
        t0 = time.perf_counter()
        kubectl("apply", "-f", str(ROOT / "examples" / "lsd"))
        first_admitted = pods_running_at = None
        while True:
            jobs = json.loads(kubectl("get", "streamjobs", "-n", NS, "-o", "json"))["items"]
            phases = [(j.get("status") or {}).get("phase") for j in jobs]
            if first_admitted is None and any(p in ("Admitted", "Running") for p in phases):
                first_admitted = time.perf_counter() - t0
            if pods_running_at is None and jobs and all(p in ("Admitted", "Running", "Rejected") for p in phases):
                planned = sum(len(pe.get("instances") or []) for j in jobs for pe in (j.get("status") or {}).get("pes") or []
                              if (j.get("status") or {}).get("phase") != "Rejected")
                running = kubectl("get", "pods", "-n", NS, "--field-selector=status.phase=Running", "-o", "name").split()
                if planned and len(running) >= planned:
                    pods_running_at = time.perf_counter() - t0
            if jobs and all(p in ("Running", "Rejected") for p in phases):
                break
            if time.perf_counter() - t0 > timeout:
                print(f"timeout: {sum(p == 'Running' for p in phases)}/{len(phases)} Running", file=sys.stderr)
                break
            time.sleep(1)
        total = time.perf_counter() - t0
        pods = json.loads(kubectl("get", "pods", "-n", NS, "-o", "json"))["items"]
    finally:
        for proc in (op, ext):
            if proc is not None:
                proc.terminate()
                proc.wait(30)
    text = logpath.read_text()
    # the first macro epoch that saw the jobs: total, snapshot, macroQ, macroW, apply (seconds)
    macro = [tuple(float(x) for x in m) for m in re.findall(
        r"macro epoch: \d+/([1-9]\d*) jobs admitted, importance [\d.]+, ([\d.]+)s \(snapshot ([\d.]+)s, macroQ ([\d.]+)s, "
        r"macroW ([\d.]+)s, apply ([\d.]+)s\)", text)]
    row = {
        "run": label,
        "workers": workers,
        "extender": "separate process" if separate else "inside kubesoda run",
        "jobs": len(jobs),
        "running_jobs": sum(p == "Running" for p in phases),
        "rejected_jobs": sum(p == "Rejected" for p in phases),
        "pods": len(pods),
        "pods_running": sum((p.get("status") or {}).get("phase") == "Running" for p in pods),
        "seconds_to_first_admitted": round(first_admitted or -1, 2),
        "seconds_to_all_pods_running": round(pods_running_at or -1, 2),  # seen by polling the pods
        "seconds_to_all_running": round(total, 2),  # every StreamJob's phase Running/Rejected (set by a micro epoch)
        "first_macro_epoch_seconds": dict(zip(("total", "snapshot", "macroQ", "macroW", "apply"), macro[0][1:])) if macro else None,
        "timed_out": total > timeout,
    }
    kubectl("delete", "namespace", NS, "--wait=false")
    t1 = time.perf_counter()
    while time.perf_counter() - t1 < 300:
        try:
            kubectl("get", "namespace", NS)
        except subprocess.CalledProcessError:
            break
        time.sleep(2)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", nargs="+", default=["w1", "w16", "w16s"] * 2,
                    help="one run per label, in this order: w<apply workers>[s = extender in its own process]; w1 = sequential apply")
    ap.add_argument("--timeout", type=float, default=900)
    args = ap.parse_args()
    kubectl("apply", "--server-side", "-f", str(ROOT / "crds"))
    kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
    kubectl("apply", "-f", "-", input="apiVersion: kubesoda.io/v1alpha1\nkind: SchedulingPolicy\nmetadata: {name: default}\n"
            "spec: {macroEpochSeconds: 60, microEpochSeconds: 10}\n")
    port = os.environ.get("KUBESODA_EXTENDER_PORT", "27006")
    n_nodes = len(kubectl("get", "nodes", "-o", "name").split())
    rows = []
    for label in args.runs:
        row = {"nodes": n_nodes, **one_run(label, port, args.timeout)}
        print(json.dumps(row), flush=True)
        rows.append(row)
    summary = {}
    for label in dict.fromkeys(args.runs):
        mine = [r for r in rows if r["run"] == label]
        summary[label] = {k: statistics.median(r[k] for r in mine) for k in ("seconds_to_first_admitted", "seconds_to_all_pods_running",
                                                                             "seconds_to_all_running")}
        epochs = [r["first_macro_epoch_seconds"] for r in mine if r["first_macro_epoch_seconds"]]
        if epochs:
            summary[label]["first_macro_epoch_seconds"] = {k: statistics.median(e[k] for e in epochs) for k in epochs[0]}
    print(json.dumps(summary, indent=2))
    out = ROOT / "docs" / "benchmarks" / "e2e-lsd.json"
    out.write_text(json.dumps({
        "command": "KUBESODA_TOPOLOGY=hack/topologies/medium.yaml hack/with-cluster.sh .venv/bin/python benchmarks/bench_e2e_lsd.py",
        "policy": {"macroEpochSeconds": 60, "microEpochSeconds": 10, "deadlines": "defaults"},
        "medians": summary,
        "rows": rows,
    }, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
