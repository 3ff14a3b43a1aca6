"""How long `kubesoda plan` takes to read a large manifest file: a ~6 MB `kubectl get pods -A -o yaml`
style List of Pods (the other workloads' pods that hold node capacity) beside the 8 example nodes
and the small pipeline.

    PYTHONPATH=optimizer:operator:pe .venv/bin/python benchmarks/bench_manifests.py [--mb 6]

Prints the size, the time of ``manifests.load`` on it, of PyYAML's pure-Python SafeLoader and of
libyaml's CSafeLoader on the same text, and of the whole `kubesoda plan` (a subprocess). Nothing is
written; the figures go to docs/api.md by hand.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
NODES = [f"z{z}-r{r}-n{n}" for z in range(2) for r in range(2) for n in range(2)]


def pod(i: int) -> str:
    """One Pod as `kubectl get -o yaml` writes it (about 1.3 KB)."""
    node = NODES[i % len(NODES)]
    return f"""- apiVersion: v1
  kind: Pod
  metadata:
    name: web-{i:06d}
    namespace: shop-{i % 17}
    uid: 0b6c1f0e-{i:04x}-4c1a-9c8e-5f2d3a1b{i % 10000:04d}
    labels:
      app.kubernetes.io/name: web
      app.kubernetes.io/instance: web-{i % 97}
      pod-template-hash: 7d9f8c{i % 1000:03d}
    annotations:
      kubectl.kubernetes.io/restartedAt: "2026-11-01T10:00:00Z"
  spec:
    nodeName: {node}
    containers:
    - name: web
      image: registry.example.com/shop/web:1.{i % 50}.0
      ports:
      - {{containerPort: 8080, protocol: TCP}}
      env:
      - {{name: SHOP_MODE, value: production}}
      - {{name: SHOP_REGION, value: zone-{i % 2}}}
      resources:
        requests: {{cpu: 1m, memory: 1Mi}}
        limits: {{cpu: 500m, memory: 256Mi}}
  status:
    phase: Running
    podIP: 10.{i // 65536 % 256}.{i // 256 % 256}.{i % 256}
    conditions:
    - {{type: Ready, status: "True", lastTransitionTime: "2026-11-01T10:00:05Z"}}
    - {{type: ContainersReady, status: "True", lastTransitionTime: "2026-11-01T10:00:05Z"}}
"""


def make(mb: float) -> str:
    parts = ["apiVersion: v1\nkind: List\nitems:\n"]
    size, i = len(parts[0]), 0
    while size < mb * 1_000_000:
        parts.append(pod(i))
        size += len(parts[-1])
        i += 1
    return "".join(parts)


def timed(fn, reps: int = 3) -> float:
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=float, default=6.0)
    a = ap.parse_args()
    from soda_operator import manifests

    text = make(a.mb)
    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "pods.yaml"
        f.write_text(text)
        print(f"file: {f.stat().st_size / 1e6:.1f} MB, {text.count('kind: Pod')} Pods")
        print(f"yaml.SafeLoader (pure Python): {timed(lambda: list(yaml.load_all(text, Loader=yaml.SafeLoader)), 1):.2f} s")
        if getattr(yaml, "CSafeLoader", None) is not None:
            print(f"yaml.CSafeLoader (libyaml):    {timed(lambda: list(yaml.load_all(text, Loader=yaml.CSafeLoader))):.2f} s")
        print(f"manifests.load:                {timed(lambda: manifests.load([str(f)]), 1):.2f} s")
        cmd = [sys.executable, "-m", "soda_operator.cli", "plan", "-f", str(ROOT / "examples" / "nodes" / "small-8.yaml"),
               "-f", str(ROOT / "examples" / "small-pipeline"), "-f", str(f), "--deadline-scale", "0.1"]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        print(f"kubesoda plan (whole command):  {time.perf_counter() - t0:.2f} s, exit {proc.returncode}")
        if proc.returncode not in (0, 1):
            print(proc.stderr[-2000:], file=sys.stderr)


if __name__ == "__main__":
    main()
