"""Time from `kubectl apply` of the LSD-like workload to all admitted instances Running.

    hack/with-cluster.sh .venv/bin/python benchmarks/bench_e2e_lsd.py      # or against $KUBECONFIG

Starts `kubesoda run` (operator + extender) against the cluster, applies the CRDs, a
SchedulingPolicy with the default deadlines, then examples/lsd with kubectl, and polls until every
StreamJob is Running or Rejected. Writes docs/benchmarks/e2e-lsd.json.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def kubectl(*args: str, **kw) -> str:
    return subprocess.run(["kubectl", *args], check=True, capture_output=True, text=True, **kw).stdout


def main() -> None:
    kubectl("apply", "--server-side", "-f", str(ROOT / "crds"))
    kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
    kubectl("apply", "-f", "-", input="apiVersion: kubesoda.io/v1alpha1\nkind: SchedulingPolicy\nmetadata: {name: default}\nspec: {macroEpochSeconds: 60, microEpochSeconds: 10}\n")
    port = os.environ.get("KUBESODA_EXTENDER_PORT", "27006")
    log = open("/tmp/kubesoda-bench-lsd-operator.log", "w")
    op = subprocess.Popen([sys.executable, "-m", "soda_operator.cli", "run", "--extender-port", port], stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    try:
        time.sleep(3)
        n_nodes = len(kubectl("get", "nodes", "-o", "name").split())
        t0 = time.perf_counter()
        kubectl("apply", "-f", str(ROOT / "examples" / "lsd"))
        first_admitted = None
        while True:
            jobs = json.loads(kubectl("get", "streamjobs", "-n", "bench", "-o", "json"))["items"]
            phases = [(j.get("status") or {}).get("phase") for j in jobs]
            if first_admitted is None and any(p in ("Admitted", "Running") for p in phases):
                first_admitted = time.perf_counter() - t0
            if jobs and all(p in ("Running", "Rejected") for p in phases):
                break
            if time.perf_counter() - t0 > 900:
                raise SystemExit(f"timeout: {sum(p == 'Running' for p in phases)}/{len(phases)} Running")
            time.sleep(1)
        total = time.perf_counter() - t0
        pods = json.loads(kubectl("get", "pods", "-n", "bench", "-o", "json"))["items"]
        row = {"nodes": n_nodes, "jobs": len(jobs), "running_jobs": sum(p == "Running" for p in phases), "pods": len(pods),
               "seconds_to_first_admitted": first_admitted, "seconds_to_all_running": total}
        print(json.dumps(row))
        out = ROOT / "docs" / "benchmarks"
        (out / "e2e-lsd.json").write_text(json.dumps({"command": "hack/with-cluster.sh .venv/bin/python benchmarks/bench_e2e_lsd.py", "rows": [row]}, indent=2))
    finally:
        op.terminate()
        op.wait(20)
        subprocess.run(["kubectl", "delete", "namespace", "bench", "--wait=false"], capture_output=True)


if __name__ == "__main__":
    main()
