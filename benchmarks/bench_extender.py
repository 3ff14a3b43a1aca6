"""Scheduling throughput through the kubesoda extender vs the same kube-scheduler without it.

    KUBESODA_TOPOLOGY=hack/topologies/medium.yaml hack/with-cluster.sh .venv/bin/python benchmarks/bench_extender.py

Against the cluster KUBECONFIG names (the local control plane: its `default-scheduler` process has
no extender, its `kubesoda` process calls the extender on KUBESODA_EXTENDER_PORT, which this script
serves in-process, over TLS when KUBESODA_EXTENDER_TLS_CERT/KEY are set as cluster-up.sh sets them).
At each node count (100, then the topology grown to 1000 nodes with hack/topologies/k1.yaml) it
creates N pods for the plain scheduler, for the kubesoda scheduler with this checkout's extender,
and (with BENCH_BASELINE=<rev>, default 4606ca2, the last http.server extender; "" to skip) with
the baseline's extender on the same port, alternating, and measures the time until all are bound;
pods/s and the ratios are written to docs/benchmarks/extender.json.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kubernetes import client, config

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from soda_operator.soda import extender  # noqa: E402

CANDIDATES = int(os.environ.get("BENCH_CANDIDATES", "0"))
BASELINE = os.environ.get("BENCH_BASELINE", "4606ca2")
# with BENCH_CANDIDATES: also the extender with the candidates named by the kubernetes.io/hostname label
# (the operator's pods before 177d922) instead of by name (matchFields metadata.name, which
# kube-scheduler's NodeAffinity PreFilter turns into the only nodes it filters)
BY_LABEL = bool(CANDIDATES) and os.environ.get("BENCH_AFFINITY_LABEL", "") not in ("", "0")


def baseline_extender(rev: str):
    """The baseline commit's extender module, loaded beside this one (its ``serve`` returns an
    ``http.server`` server; its own metrics module is this checkout's, which it only observes)."""
    import importlib.util
    import types

    src = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:operator/soda_operator/extender.py"],
                         check=True, capture_output=True, text=True).stdout
    spec = importlib.util.spec_from_loader("soda_operator._extender_baseline", loader=None)
    mod = types.ModuleType(spec.name)
    mod.__package__ = "soda_operator"
    exec(compile(src, f"{rev}:extender.py", "exec"), mod.__dict__)
    return mod


class Served:
    """One extender on the scheduler's port: ``new`` (this checkout) or the baseline module."""

    def __init__(self, which: str, port: int):
        self.which, self.port, self.srv = which, port, None

    def __enter__(self):
        ctx = extender.tls_context(os.environ.get(extender.ENV_CERT), os.environ.get(extender.ENV_KEY))
        for _ in range(50):  # the previous server's socket may linger a moment
            try:
                if self.which == "new":
                    self.srv = extender.serve("127.0.0.1", self.port, ctx)
                else:
                    self.srv = baseline_extender(self.which).serve("127.0.0.1", self.port)
                    if ctx is not None:
                        self.srv.socket = ctx.wrap_socket(self.srv.socket, server_side=True)
                    threading.Thread(target=self.srv.serve_forever, daemon=True).start()
                return self
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"port {self.port} stays busy")

    def __exit__(self, *exc):
        if self.which == "new":
            self.srv.stop()
        else:
            self.srv.shutdown()
            self.srv.server_close()


def pods_per_second(core: client.CoreV1Api, ns: str, scheduler: str, nodes: list[str], n: int, by_label: bool = False) -> float:
    tag = uuid.uuid4().hex[:6]

    def create(i: int) -> None:
        md = client.V1ObjectMeta(name=f"{scheduler[:4]}-{tag}-{i}", labels={"bench": tag})
        # kubesoda's pods name their planned node; with BENCH_CANDIDATES=k both schedulers' pods also
        # carry node affinity to k candidate nodes by name (the planned one first), as the operator's pods do
        if scheduler == "kubesoda":
            md.labels["kubesoda.io/job"] = "bench"
            md.annotations = {"kubesoda.io/node": nodes[i % len(nodes)]}
        cands = [nodes[(i + k) % len(nodes)] for k in range(CANDIDATES)]
        # by name: one term per node (the API server allows one value per metadata.name requirement)
        terms = [client.V1NodeSelectorTerm(match_expressions=[client.V1NodeSelectorRequirement(key="kubernetes.io/hostname", operator="In", values=cands)])] \
            if by_label else [client.V1NodeSelectorTerm(match_fields=[client.V1NodeSelectorRequirement(key="metadata.name", operator="In", values=[c])]) for c in cands]
        affinity = None if not cands else client.V1Affinity(node_affinity=client.V1NodeAffinity(
            required_during_scheduling_ignored_during_execution=client.V1NodeSelector(node_selector_terms=terms)))
        core.create_namespaced_pod(ns, client.V1Pod(metadata=md, spec=client.V1PodSpec(
            scheduler_name=scheduler, affinity=affinity, containers=[client.V1Container(name="c", image="pause",
            resources=client.V1ResourceRequirements(requests={"cpu": "10m"}))])))

    t0 = time.perf_counter()
    with ThreadPoolExecutor(16) as pool:  # the client must not be the bottleneck
        list(pool.map(create, range(n)))
    while True:
        pods = core.list_namespaced_pod(ns, label_selector=f"bench={tag}").items
        if sum(1 for p in pods if p.spec.node_name) == n:
            break
        time.sleep(0.05)
    dt = time.perf_counter() - t0
    if scheduler == "kubesoda":
        wrong = [p.metadata.name for p in pods if p.spec.node_name != p.metadata.annotations["kubesoda.io/node"]]
        assert not wrong, f"pods off their planned node: {wrong[:3]}"
    core.delete_collection_namespaced_pod(ns, label_selector=f"bench={tag}", grace_period_seconds=0)
    return n / dt


def main() -> None:
    config.load_kube_config()
    cfg = client.Configuration.get_default_copy()
    cfg.connection_pool_maxsize = 32
    core = client.CoreV1Api(client.ApiClient(cfg))
    port = int(os.environ.get("KUBESODA_EXTENDER_PORT", "27006"))
    ns = f"bench-{uuid.uuid4().hex[:6]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    n_pods = int(os.environ.get("BENCH_PODS", "300"))
    runs = int(os.environ.get("BENCH_RUNS", "3"))
    rows = []
    try:
        for target, topo in ((100, "medium.yaml"), (1000, "k1.yaml")):
            subprocess.run([sys.executable, str(ROOT / "hack" / "nodes.py"), str(ROOT / "hack" / "topologies" / topo)], check=True)
            nodes = sorted(n.metadata.name for n in core.list_node().items)[:target]
            plain, ext, base, label = [], [], [], []
            for _ in range(runs):
                plain.append(pods_per_second(core, ns, "default-scheduler", nodes, n_pods))
                with Served("new", port):
                    ext.append(pods_per_second(core, ns, "kubesoda", nodes, n_pods))
                if BY_LABEL:
                    with Served("new", port):
                        label.append(pods_per_second(core, ns, "kubesoda", nodes, n_pods, by_label=True))
                if BASELINE:
                    with Served(BASELINE, port):
                        base.append(pods_per_second(core, ns, "kubesoda", nodes, n_pods))
            row = {"nodes": len(core.list_node().items), "pods": n_pods, "runs": runs, "candidates_affinity": CANDIDATES,
                   "tls": bool(os.environ.get(extender.ENV_CERT)),
                   "plain_pods_per_s_median": statistics.median(plain), "extender_pods_per_s_median": statistics.median(ext),
                   "ratio": statistics.median(ext) / statistics.median(plain), "plain_runs": plain, "extender_runs": ext}
            if label:
                row.update({"extender_by_label_pods_per_s_median": statistics.median(label), "extender_by_label_runs": label,
                            "by_name_vs_by_label": statistics.median(ext) / statistics.median(label)})
            if base:
                row.update({"baseline": BASELINE, "baseline_pods_per_s_median": statistics.median(base),
                            "baseline_ratio": statistics.median(base) / statistics.median(plain), "baseline_runs": base})
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        core.delete_namespace(ns)
    out = ROOT / "docs" / "benchmarks"
    out.mkdir(parents=True, exist_ok=True)
    (out / ("extender.json" if not CANDIDATES else f"extender-candidates{CANDIDATES}.json")).write_text(json.dumps({"command": (f"BENCH_CANDIDATES={CANDIDATES} " if CANDIDATES else "") + "KUBESODA_TOPOLOGY=hack/topologies/medium.yaml hack/with-cluster.sh .venv/bin/python benchmarks/bench_extender.py",
                                                    "reference": "a Go extender: ~0.11x of the plain scheduler at 500 nodes (991 vs 111 pods/s)", "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
