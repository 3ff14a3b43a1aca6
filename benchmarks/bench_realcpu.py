"""The SODA paper's section 7.2 on real CPU, small scale: SODA's CPU allocation vs an even split of
the same CPU, on a real node, measured from the PEs' own counters.

    make bench-realcpu      # a cluster with one real node whose allocatable CPU is 1.2 cores
    # or, on a cluster with a real node:  .venv/bin/python benchmarks/bench_realcpu.py [--windows 3]

The PEs are the example PEs (examples/pe, image ghcr.io/kubesoda/pe-examples:dev, built and loaded
by ``hack/build-image.py pe-examples``): light sources at a fixed offered rate, and transforms (or
sinks) that spend a calibrated amount of CPU per tuple (``--work`` SHA-256 iterations; the cost
of one iteration is measured first by a calibration pod on the node). Their declared resource
functions are those costs, so SODA plans with the truth; everything runs on one real node.

For each workload (SrcSink, the paper's toy of two-PE jobs, and a small DAC-like one: jobs whose
PEs need very different CPU per tuple, with different weights):

1. ``kubesoda run`` (SODA) plans and places the jobs; once every pod runs and one settling period
   has passed, the tuples/s each valued PE receives are read from its /metrics over ``--windows``
   windows of ``--window`` seconds (medians). Weighted throughput = sum of weight x the sinks'
   rates: the importance SODA maximises (linear values), observed.
2. The operator is stopped and every PE pod is resized in place to an even share of the CPU SODA
   had given the workload in all (same pods, same node, same total CPU); measured again.

Writes docs/benchmarks/realcpu.json, realcpu.md and realcpu.png. RR/RAND placement is not compared
here: the host has 2 cores, so a second real node would share the same CPU (see the note in the
markdown).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PE_IMAGE = "ghcr.io/kubesoda/pe-examples:dev"
NS = "bench-realcpu"
POLICY = """apiVersion: kubesoda.io/v1alpha1
kind: SchedulingPolicy
metadata: {name: default}
spec:
  macroEpochSeconds: 10
  microEpochSeconds: 3
  macroQDeadlineSeconds: 2
  macroWDeadlineSeconds: 2
"""
SOURCE_MS = 0.25  # CPU ms per tuple a light source or sink is planned with (generous: ~0.1 measured)
LIGHT_MIN = "50m"

# workload: job -> (offered tuples/s, [(pe, kind, CPU ms per tuple or None for light)], valued sink, weight)
WORKLOADS: dict[str, dict[str, tuple[float, list[tuple[str, str, float | None]], str, float]]] = {
    # the paper's SrcSink: jobs of two PEs, a source and a sink; here the sinks do the work
    "srcsink": {
        "ss-a": (400, [("src", "source", None), ("snk", "sink", 1.0)], "snk", 1.0),
        "ss-b": (400, [("src", "source", None), ("snk", "sink", 2.5)], "snk", 4.0),
    },
    # DAC-like: PEs with a wide range of processing requirements, jobs of different weights
    "dac-small": {
        "d-light": (300, [("src", "source", None), ("parse", "transform", 0.5), ("snk", "sink", None)], "snk", 1.0),
        "d-heavy": (150, [("src", "source", None), ("parse", "transform", 0.4), ("model", "transform", 4.0),
                          ("snk", "sink", None)], "snk", 6.0),
        "d-mid": (200, [("src", "source", None), ("score", "transform", 2.0), ("snk", "sink", None)], "snk", 2.0),
    },
}


def log(msg: str) -> None:
    print(f"[bench-realcpu] {msg}", file=sys.stderr, flush=True)


def kubectl(*args: str, input: str | None = None, check: bool = True) -> str:
    p = subprocess.run(["kubectl", *args], input=input, capture_output=True, text=True, timeout=120)
    if check and p.returncode:
        raise RuntimeError(f"kubectl {' '.join(args)}: {p.stderr}")
    return p.stdout


def pods() -> list[dict[str, Any]]:
    return json.loads(kubectl("get", "pods", "-n", NS, "-l", "kubesoda.io/job", "-o", "json"))["items"]


def milli(cpu: str) -> int:
    return int(cpu[:-1]) if cpu.endswith("m") else int(float(cpu) * 1000)


def real_node() -> dict[str, Any]:
    nodes = json.loads(kubectl("get", "nodes", "-o", "json"))["items"]
    real = [n for n in nodes if (n["metadata"].get("annotations") or {}).get("kwok.x-k8s.io/node") != "fake"]
    if not real:
        sys.exit("no real node: start the cluster with KUBESODA_REAL_NODES=1 (make bench-realcpu does)")
    return sorted(real, key=lambda n: n["metadata"]["name"])[0]


def ensure_image(node: dict[str, Any]) -> None:
    names = [nm for img in node["status"].get("images") or [] for nm in img.get("names") or []]
    if not any(nm.endswith(PE_IMAGE) for nm in names):
        subprocess.run([sys.executable, str(ROOT / "hack" / "build-image.py"), "pe-examples"], check=True, timeout=900)


def calibrate(node: str) -> float:
    """Seconds of CPU one --work iteration costs, measured by a pod of the PE image on the node."""
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "calibrate", "namespace": NS},
           "spec": {"nodeName": node, "restartPolicy": "Never", "automountServiceAccountToken": False,
                    "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [{"name": "c", "image": PE_IMAGE, "args": ["transform", "--calibrate", "--work", "1000"],
                                    "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                                    "resources": {"limits": {"cpu": "1", "memory": "128Mi"}}}]}}
    kubectl("apply", "-f", "-", input=json.dumps(pod))
    for _ in range(120):
        phase = kubectl("get", "pod", "-n", NS, "calibrate", "-o", "jsonpath={.status.phase}", check=False)
        if phase in ("Succeeded", "Failed"):
            break
        time.sleep(1)
    out = kubectl("logs", "-n", NS, "calibrate")
    kubectl("delete", "pod", "-n", NS, "calibrate", "--wait=false")
    m = re.search(r"one iteration: ([0-9.]+) us", out)
    if not m:
        raise RuntimeError(f"calibration printed no cost: {out!r}")
    return float(m.group(1)) * 1e-6


def manifests(name: str, node: str, iteration_s: float) -> tuple[str, dict[str, float], dict[str, tuple[str, float]]]:
    """The workload's StreamTemplates and StreamJobs, the planned mips of each PE, and each job's
    valued (sink pod prefix, weight)."""
    docs, planned, valued = [], {}, {}
    on = {"kubernetes.io/hostname": node}
    for job, (rate, pes, sink, weight) in WORKLOADS[name].items():
        spec_pes, streams = [], []
        for i, (pe, kind, ms) in enumerate(pes):
            d: dict[str, Any] = {"name": pe, "kind": kind, "image": PE_IMAGE, "nodeSelector": on}
            if kind == "source":
                d["args"] = ["source", "--rate", str(rate), "--bytes", "64"]
                d["resourceFunction"] = {"a": 1 / SOURCE_MS}  # tuples/s per mips
                d["minCpu"] = LIGHT_MIN
                mips = rate * SOURCE_MS
            elif ms is None:
                d["args"] = ["sink"]
                d["resourceFunction"] = {"a": 1 / (SOURCE_MS * rate), "b": 1}
                d["minCpu"] = LIGHT_MIN
                mips = rate * SOURCE_MS
            else:
                work = max(1, round(ms / 1000 / iteration_s))
                d["args"] = ["transform", "--work", str(work)]
                # r_o = min(a r_i m, r_i): the whole input at m = ms x rate (1 core = 1000 mips)
                d["resourceFunction"] = {"a": 1 / (ms * rate), "b": 1}
                mips = ms * rate
            planned[f"{job}/{pe}"] = mips
            spec_pes.append(d)
            if i:
                streams.append({"from": pes[i - 1][0], "to": pe, "bytesPerTuple": 64})
        docs.append({"apiVersion": "kubesoda.io/v1alpha1", "kind": "StreamTemplate", "metadata": {"name": job, "namespace": NS},
                     "spec": {"pes": spec_pes, "streams": streams, "sinks": [{"pe": sink, "weight": weight}],
                              "primalInputs": [{"pe": pes[0][0], "rate": rate}]}})
        docs.append({"apiVersion": "kubesoda.io/v1alpha1", "kind": "StreamJob", "metadata": {"name": job, "namespace": NS},
                     "spec": {"templates": [job], "rank": 1}})
        valued[job] = (sink, weight)
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}), planned, valued


def received(ip: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://{ip}:9100/metrics", timeout=5) as r:
        text = r.read().decode()
    return sum(s.value for fam in text_string_to_metric_families(text) for s in fam.samples
               if s.name == "kubesoda_pe_tuples_received_total")


def valued_pods(valued: dict[str, tuple[str, float]]) -> dict[str, tuple[str, float]]:
    """job -> (pod IP of its valued sink, weight)."""
    out = {}
    for p in pods():
        lab = p["metadata"]["labels"]
        job, pe = lab.get("kubesoda.io/job"), lab.get("kubesoda.io/pe")
        if job in valued and pe == valued[job][0] and p["status"].get("podIP"):
            out[job] = (p["status"]["podIP"], valued[job][1])
    return out


def measure(valued: dict[str, tuple[str, float]], windows: int, window: float) -> dict[str, Any]:
    """Median over windows of each job's sink rate and of the weighted throughput."""
    where = valued_pods(valued)
    per_window = []
    for _ in range(windows):
        c0 = {j: received(ip) for j, (ip, _) in where.items()}
        t0 = time.monotonic()
        time.sleep(window)
        c1 = {j: received(ip) for j, (ip, _) in where.items()}
        dt = time.monotonic() - t0
        per_window.append({j: (c1[j] - c0[j]) / dt for j in where})
    rates = {j: statistics.median(w[j] for w in per_window) for j in where}
    weighted = [sum(w[j] * where[j][1] for j in where) for w in per_window]
    return {"rates": rates, "weighted": statistics.median(weighted), "weighted_windows": weighted}


def limits() -> dict[str, int]:
    out = {}
    for p in pods():
        lab = p["metadata"]["labels"]
        st = (p["status"].get("containerStatuses") or [{}])[0]
        cpu = ((st.get("resources") or {}).get("limits") or {}).get("cpu") or p["spec"]["containers"][0]["resources"]["limits"]["cpu"]
        out[f"{lab['kubesoda.io/job']}/{lab['kubesoda.io/pe']}/{p['metadata']['name']}"] = milli(cpu)
    return out


def all_running(jobs: list[str]) -> bool:
    items = json.loads(kubectl("get", "streamjobs", "-n", NS, "-o", "json"))["items"]
    phases = {j["metadata"]["name"]: (j.get("status") or {}).get("phase") for j in items}
    ps = pods()
    return all(phases.get(j) == "Running" for j in jobs) and bool(ps) and all(
        p["status"].get("phase") == "Running" and all(c.get("ready") for c in p["status"].get("containerStatuses") or [{}])
        for p in ps)


def projected() -> float:
    items = json.loads(kubectl("get", "streamjobs", "-n", NS, "-o", "json"))["items"]
    return sum(float((j.get("status") or {}).get("importance") or 0) for j in items)


def even_split(total: int) -> dict[str, int]:
    """Resize every PE pod in place to total / n millicores; returns the new limits."""
    ps = pods()
    share = max(10, total // len(ps))
    for p in ps:
        c = p["spec"]["containers"][0]["name"]
        kubectl("patch", "pod", "-n", NS, p["metadata"]["name"], "--subresource", "resize", "-p",
                json.dumps({"spec": {"containers": [{"name": c, "resources": {"requests": {"cpu": f"{share}m"},
                                                                             "limits": {"cpu": f"{share}m"}}}]}}))
    for _ in range(120):
        if all(v == share for v in limits().values()):
            break
        time.sleep(1)
    else:
        raise RuntimeError(f"the even split ({share}m each) was not actuated: {limits()}")
    return limits()


def predicted(name: str, lim: dict[str, int]) -> float:
    """Weighted throughput the declared functions predict for the CPU limits ``lim`` (job/pe/pod ->
    millicores, 1 core = 1000 mips): each PE passes min(its input, its CPU / its CPU per tuple)."""
    by_pe = {k.rsplit("/", 1)[0]: v for k, v in lim.items()}
    total = 0.0
    for job, (rate, pes, _sink, weight) in WORKLOADS[name].items():
        r = float(rate)
        for pe, _kind, ms in pes:
            r = min(r, by_pe.get(f"{job}/{pe}", 0) / (SOURCE_MS if ms is None else ms))
        total += weight * r
    return total


def run_workload(name: str, node: str, iteration_s: float, args: argparse.Namespace) -> dict[str, Any]:
    text, planned, valued = manifests(name, node, iteration_s)
    op = subprocess.Popen([sys.executable, "-m", "soda_operator.cli", "run", "--extender-port", os.environ["KUBESODA_EXTENDER_PORT"]],
                          stdout=open(f"/tmp/bench-realcpu-operator-{name}.log", "w"), stderr=subprocess.STDOUT, cwd=ROOT)
    try:
        kubectl("apply", "-f", "-", input=text)
        t0 = time.monotonic()
        while not all_running(list(valued)):
            if time.monotonic() - t0 > args.timeout:
                raise RuntimeError(f"{name}: jobs not Running with every pod ready after {args.timeout:.0f} s")
            time.sleep(2)
        time.sleep(args.settle)
        soda_limits = limits()
        soda = measure(valued, args.windows, args.window)
        soda["projected"] = projected()
        soda["limits"] = soda_limits
        log(f"{name}: SODA weighted {soda['weighted']:.1f} (projected {soda['projected']:.1f}), limits {soda_limits}")
    finally:
        op.send_signal(signal.SIGINT)
        try:
            op.wait(30)
        except subprocess.TimeoutExpired:
            op.kill()
    total = sum(soda_limits.values())
    even_limits = even_split(total)
    time.sleep(args.settle)
    even = measure(valued, args.windows, args.window)
    even["limits"] = even_limits
    log(f"{name}: even split weighted {even['weighted']:.1f}, limits {even_limits}")
    kubectl("delete", "streamjobs,streamtemplates", "--all", "-n", NS, "--wait=false")
    kubectl("delete", "pods", "--all", "-n", NS, "--grace-period=0", "--force", check=False)
    for _ in range(60):
        if not pods():
            break
        time.sleep(1)
    soda["model"], even["model"] = predicted(name, soda["limits"]), predicted(name, even["limits"])
    return {"workload": name, "total_millicores": total, "planned_mips": planned, "soda": soda, "even": even,
            "ratio": soda["weighted"] / even["weighted"] if even["weighted"] else None}


def report(result: dict[str, Any], out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    rows = result["rows"]
    md = ["# Section 7.2 on real CPU, small scale (`make bench-realcpu`)", "",
          f"Run of {result['date']} on this 2-core machine: one real node (kubelet + containerd) with "
          f"{result['allocatable']} allocatable cores, the example PEs as real processes; one SHA-256 iteration "
          f"cost {result['iteration_us']:.3f} us of CPU in the calibration pod. Medians of {result['windows']} windows of "
          f"{result['window']:.0f} s. Regenerate: `make bench-realcpu`.", "",
          "| workload | CPU given in all | weighted throughput observed: SODA / even split of the same CPU | SODA / even | predicted by the declared functions for the CPU given: SODA / even | macroQ's projection |",
          "| --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        md.append(f"| {r['workload']} | {r['total_millicores']}m | {r['soda']['weighted']:.1f} / {r['even']['weighted']:.1f} | "
                  f"{r['ratio']:.2f} | {r['soda'].get('model', 0):.1f} / {r['even'].get('model', 0):.1f} | {r['soda']['projected']:.1f} |")
    md += ["", "Per job, tuples/s at the valued sink (SODA / even split):", ""]
    for r in rows:
        md.append(f"- {r['workload']}: " + ", ".join(
            f"{j} {r['soda']['rates'][j]:.1f} / {r['even']['rates'].get(j, 0):.1f}" for j in sorted(r["soda"]["rates"])))
    md += ["", "CPU limits (millicores) SODA gave each PE pod, then the even split:", ""]
    for r in rows:
        md.append(f"- {r['workload']}: SODA " + ", ".join(f"{k.rsplit('/', 1)[0]} {v}" for k, v in sorted(r["soda"]["limits"].items()))
                  + f"; even {next(iter(r['even']['limits'].values()), 0)} each")
    md += ["", "macroQ's projection (the jobs' status.importance) plans with the cluster's aggregate CPU and does not "
           "see that every PE here is pinned to one node, so it promises more than the node holds; microQ and microW "
           "then allocate within the node, which is what the PEs get.", ""]
    md += ["", "Paper (section 7.2): SODA's weighted throughput against baselines that do not weigh the jobs; "
           "here the baseline is the allocation a scheduler without resource functions would make "
           "(the same CPU split evenly over the PEs). RR/RAND placement needs more than one real node; on this "
           "2-core host a second node would share the same cores, so placement cannot change the CPU the "
           "PEs get (docs/benchmarks/dataplane.md compares placements on the fluid data plane).", "",
           "![realcpu](realcpu.png)", ""]
    out.with_suffix(".md").write_text("\n".join(md))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(6, 3.5))
    x = range(len(rows))
    ax.bar([i - 0.2 for i in x], [r["soda"]["weighted"] for r in rows], 0.4, label="SODA")
    ax.bar([i + 0.2 for i in x], [r["even"]["weighted"] for r in rows], 0.4, label="even split")
    ax.set_xticks(list(x), [r["workload"] for r in rows])
    ax.set_ylabel("weighted tuples/s at the sinks")
    ax.set_title("Real CPU, one real node: SODA vs even split of the same CPU")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out.with_suffix(".png"), dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks" / "realcpu.json")
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--windows", type=int, default=3)
    ap.add_argument("--window", type=float, default=10.0)
    ap.add_argument("--settle", type=float, default=8.0)
    ap.add_argument("--timeout", type=float, default=300.0)
    args = ap.parse_args()
    node = real_node()
    ensure_image(node)
    name = node["metadata"]["name"]
    kubectl("create", "namespace", NS, check=False)
    kubectl("apply", "--server-side", "-f", str(ROOT / "crds"))
    kubectl("wait", "--for=condition=Established", "crd/streamjobs.kubesoda.io", "--timeout=60s")
    kubectl("apply", "-f", "-", input=POLICY)
    iteration_s = calibrate(name)
    log(f"node {name}: allocatable cpu {node['status']['allocatable']['cpu']}; one iteration {iteration_s * 1e6:.3f} us")
    rows = [run_workload(w, name, iteration_s, args) for w in args.workloads.split(",")]
    report({"date": time.strftime("%Y-%m-%d"), "node": name, "allocatable": node["status"]["allocatable"]["cpu"],
            "iteration_us": iteration_s * 1e6, "windows": args.windows, "window": args.window, "rows": rows}, args.out)
    kubectl("delete", "namespace", NS, "--wait=false", check=False)


if __name__ == "__main__":
    main()
