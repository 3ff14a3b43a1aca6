"""``kubesoda top`` (and ``kubectl soda top``): what kubesoda runs, job by job and node by node.

Read live from the API server (the current kubeconfig): each StreamJob's phase, rank, planned
mips, its instance pods and their CPU limits, projected and observed importance (status.observed,
when the operator reads Prometheus); then each node's CPU held by kubesoda's pods against its
allocatable CPU. Read-only, three lists.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, cast

from .kube import quantities
from .kube.pods import job_of
from .soda import crd


def _cores(q: Any) -> float:
    try:
        return quantities.amount(q, 0.0)
    except (ValueError, TypeError):
        return 0.0


def rows(jobs: list[dict[str, Any]], pods: list[dict[str, Any]], nodes: list[dict[str, Any]]) -> tuple[list[list[str]], list[list[str]]]:
    """(job rows, node rows) of the table, from the objects as the API returns them (pure)."""
    cpu: dict[tuple[str, str], float] = {}
    count: dict[tuple[str, str], int] = {}
    on_node: dict[str, float] = {}
    for p in pods:
        md, sp = p.get("metadata") or {}, p.get("spec") or {}
        job = job_of(md)
        if not job or (p.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        c = sum(_cores(((k.get("resources") or {}).get("limits") or {}).get("cpu")) for k in sp.get("containers") or [])
        key = (md.get("namespace", ""), job)
        cpu[key] = cpu.get(key, 0.0) + c
        count[key] = count.get(key, 0) + 1
        if sp.get("nodeName"):
            on_node[sp["nodeName"]] = on_node.get(sp["nodeName"], 0.0) + c
    jr = []
    for j in sorted(jobs, key=lambda o: ((o.get("metadata") or {}).get("namespace", ""), (o.get("metadata") or {}).get("name", ""))):
        md, st = j.get("metadata") or {}, j.get("status") or {}
        key = (md.get("namespace", ""), md.get("name", ""))
        ob = st.get("observed") or {}
        ratio = ob.get("ratio")
        jr.append([f"{key[0]}/{key[1]}", st.get("phase") or "Pending", str(st.get("rank", (j.get("spec") or {}).get("rank", 1))),
                   f"{st.get('mips', 0):.0f}", f"{cpu.get(key, 0.0):.2f}", str(count.get(key, 0)), f"{st.get('importance', 0):.4g}",
                   f"{ob['importance']:.4g}" if "importance" in ob else "-", f"{ratio:.0%}" if ratio is not None else "-"])
    nr = []
    for n in sorted(nodes, key=lambda o: (o.get("metadata") or {}).get("name", "")):
        name = (n.get("metadata") or {}).get("name", "")
        alloc = _cores(((n.get("status") or {}).get("allocatable") or {}).get("cpu"))
        used = on_node.get(name, 0.0)
        nr.append([name, f"{used:.2f}", f"{alloc:.2f}", f"{used / alloc:.0%}" if alloc else "-"])
    return jr, nr


def table(header: list[str], body: list[list[str]]) -> str:
    w = [max(len(h), *(len(r[i]) for r in body)) if body else len(h) for i, h in enumerate(header)]
    return "\n".join("  ".join(c.ljust(w[i]) for i, c in enumerate(r)).rstrip() for r in [header, *body])


def main(args: argparse.Namespace) -> int:
    from kubernetes import client, config

    try:
        config.load_kube_config()
        custom, core = client.CustomObjectsApi(), client.CoreV1Api()
        api = client.ApiClient()
        if args.all_namespaces:
            jobs = cast(dict[str, Any], custom.list_cluster_custom_object(crd.GROUP, crd.VERSION, "streamjobs"))["items"]
            pods = api.sanitize_for_serialization(core.list_pod_for_all_namespaces(label_selector=crd.LABEL_JOB).items)
        else:
            jobs = cast(dict[str, Any], custom.list_namespaced_custom_object(crd.GROUP, crd.VERSION, args.namespace, "streamjobs"))["items"]
            pods = api.sanitize_for_serialization(core.list_namespaced_pod(args.namespace, label_selector=crd.LABEL_JOB).items)
        nodes = api.sanitize_for_serialization(core.list_node().items)
    except Exception as e:  # noqa: BLE001 - any config or API problem is one clear line
        print(f"error: cannot read the cluster: {e}", file=sys.stderr)
        return 2
    jr, nr = rows(jobs, pods, nodes)
    print(table(["JOB", "PHASE", "RANK", "MIPS", "CPU", "PODS", "PROJECTED", "OBSERVED", "RATIO"], jr))
    if not args.no_nodes:
        print()
        print(table(["NODE", "KUBESODA CPU", "ALLOCATABLE", "USED"], [r for r in nr if r[1] != "0.00" or args.all_nodes]))
    return 0
