"""Create the KWOK nodes of a topology file (hack/topologies/*.yaml) in the current kubeconfig.

    python hack/nodes.py hack/topologies/small.yaml [--delete]

Each node is named ``z<zone>-r<rack>-n<index>``, labelled ``topology.kubernetes.io/zone``,
``kubesoda.io/rack`` and ``kubesoda.io/mips-per-core``, annotated for the KWOK controller, and
has allocatable cpu/memory/pods from the file. An optional ``nodes: N`` keeps only the first N
(racks filled in order: 29 nodes in racks of 10 are 10, 10 and 9). Creates run in parallel threads so 2000 nodes come
up in well under a minute; existing nodes are left as they are.
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import yaml
from kubernetes import client, config
from kubernetes.client.rest import ApiException

FIELDS = ("zones", "racksPerZone", "nodesPerRack", "cpu", "memory", "pods", "mipsPerCore")


def load(path: str) -> dict:
    with open(path) as f:
        topo = yaml.safe_load(f) or {}
    missing = [k for k in FIELDS if k not in topo]
    if missing:
        sys.exit(f"{path}: missing fields {missing}")
    return topo


def node_bodies(topo: dict) -> list[dict]:
    out = []
    for z in range(topo["zones"]):
        for r in range(topo["racksPerZone"]):
            for i in range(topo["nodesPerRack"]):
                name = f"z{z}-r{r}-n{i}"
                capacity = {"cpu": str(topo["cpu"]), "memory": str(topo["memory"]), "pods": str(topo["pods"])}
                if topo.get("nodes") is not None and len(out) >= int(topo["nodes"]):
                    return out
                out.append(
                    {
                        "apiVersion": "v1",
                        "kind": "Node",
                        "metadata": {
                            "name": name,
                            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
                            "labels": {
                                "type": "kwok",
                                "kubernetes.io/hostname": name,
                                "kubernetes.io/os": "linux",
                                "kubernetes.io/arch": "amd64",
                                "topology.kubernetes.io/zone": f"zone-{z}",
                                "kubesoda.io/rack": f"rack-{z}-{r}",
                                "kubesoda.io/mips-per-core": str(topo["mipsPerCore"]),
                            },
                        },
                        "spec": {},
                        "status": {"capacity": capacity, "allocatable": capacity},
                    }
                )
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("topology")
    ap.add_argument("--delete", action="store_true", help="delete the topology's nodes instead")
    ap.add_argument("--timeout", type=float, default=300)
    args = ap.parse_args()
    topo = load(args.topology)
    config.load_kube_config()
    cfg = client.Configuration.get_default_copy()
    cfg.connection_pool_maxsize = 32
    v1 = client.CoreV1Api(client.ApiClient(cfg))
    bodies = node_bodies(topo)
    t0 = time.time()

    def create(body: dict) -> None:
        try:
            if args.delete:
                v1.delete_node(body["metadata"]["name"])
            else:
                v1.create_node(body)
        except ApiException as e:
            if e.status not in (404, 409):
                raise

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(create, bodies))
    if args.delete:
        print(f"[nodes] deleted {len(bodies)} nodes", file=sys.stderr)
        return 0
    want = {b["metadata"]["name"] for b in bodies}
    while time.time() - t0 < args.timeout:
        ready = {
            n.metadata.name
            for n in v1.list_node().items
            if any(c.type == "Ready" and c.status == "True" for c in (n.status.conditions or []))
        }
        if want <= ready:
            print(f"[nodes] {len(want)} nodes Ready in {time.time() - t0:.1f}s", file=sys.stderr)
            return 0
        time.sleep(1)
    print(f"[nodes] only {len(want & ready)}/{len(want)} nodes Ready after {args.timeout}s", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
