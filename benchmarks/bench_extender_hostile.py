"""The extender against hostile requests (issue 32): answer size, latency and the process's peak
RSS for a forged planned-node annotation and for the largest body it accepts.

    python benchmarks/bench_extender_hostile.py [--src DIR]   # -> docs/benchmarks/extender_hostile.json

Each case starts `kubesoda extender` afresh (from ``--src``: another checkout's operator/ and
optimizer/, to measure a baseline side by side; default this one), sends the request once and
reads VmHWM from /proc. The annotation cases use 500 and 1000 nodes (the issue's figures).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def pod(planned: str) -> dict:
    return {"metadata": {"name": "p", "namespace": "ns", "labels": {"kubesoda.io/job": "j"}, "annotations": {"kubesoda.io/node": planned}}}


def case(src: Path, body: bytes, port: int) -> dict:
    env = {**os.environ, "PYTHONPATH": f"{src / 'operator'}:{src / 'optimizer'}"}
    proc = subprocess.Popen([sys.executable, "-m", "soda_operator.cli", "extender", "--port", str(port), "--max-body-bytes", str(64 << 20)],
                            cwd=src, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1)
                break
            except OSError:
                time.sleep(0.1)
        base = _hwm(proc.pid)
        t0 = time.perf_counter()
        req = urllib.request.Request(f"http://127.0.0.1:{port}/filter", data=body, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                code, out = r.status, r.read()
        except urllib.error.HTTPError as e:
            code, out = e.code, e.read()
        secs = time.perf_counter() - t0
        return {"status": code, "answer_bytes": len(out), "seconds": round(secs, 3), "idle_rss_mib": round(base / 1024, 1),
                "peak_rss_mib": round(_hwm(proc.pid) / 1024, 1)}
    finally:
        proc.terminate()
        proc.wait(10)


def _hwm(pid: int) -> int:
    return next(int(line.split()[1]) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("VmHWM"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", default=str(ROOT))
    ap.add_argument("--out", default=str(ROOT / "docs" / "benchmarks" / "extender_hostile.json"))
    a = ap.parse_args()
    src = Path(a.src)
    cases = {}
    for n in (500, 1000):
        body = json.dumps({"Pod": pod("n" * 263_000), "NodeNames": [f"node-{i}" for i in range(n)]}).encode()
        cases[f"263 KB annotation, {n} nodes"] = case(src, body, 27950)
    names = [f"node-{i:07d}" for i in range(120_000)]
    cases["2 MiB body: 120,000 names, planned node not among them"] = case(
        src, json.dumps({"Pod": pod("elsewhere"), "NodeNames": names}).encode(), 27951)
    doc = {"src": str(src), "cases": cases}
    Path(a.out).write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(doc, indent=2))


if __name__ == "__main__":
    main()
