"""Preemption order, live: when capacity shrinks, the worse ranks lose their place first (rank
legality), and each job that leaves says why in numbers.

Three jobs of ranks 1, 2 and 3, each needing 3 cores at least (two PEs of 1500m), on the 8 nodes of
4 cores of the small topology. Nodes are cordoned until 8 cores are left (room for two jobs), then
4 (room for one): rank 3 leaves first, then rank 2; rank 1 keeps running throughout.
"""

from __future__ import annotations

import time

from live import job, running_as_planned

WORK = """apiVersion: kubesoda.io/v1alpha1
kind: StreamTemplate
metadata: {name: work}
spec:
  pes:
  - {name: src, kind: source, minCpu: 1500m, maxCpu: "2", resourceFunction: {a: 0.01}}
  - {name: snk, kind: sink, minCpu: 1500m, maxCpu: "2", resourceFunction: {a: 0.001, b: 1}}
  streams: [{from: src, to: snk}]
  sinks: [{pe: snk, weight: 1}]
  primalInputs: [{pe: src, rate: 1000}]
""" + "".join(f"""---
apiVersion: kubesoda.io/v1alpha1
kind: StreamJob
metadata: {{name: r{r}}}
spec: {{templates: [work], rank: {r}}}
""" for r in (1, 2, 3))


def phases(kube, ns):
    return {f"r{r}": (job(kube, ns, f"r{r}").get("status") or {}) for r in (1, 2, 3)}


def test_worse_ranks_leave_first_when_capacity_shrinks(operator, kube, kubectl, namespace, wait_for):
    nodes = sorted(n.metadata.name for n in kube.core.list_node().items if not n.spec.unschedulable)
    assert len(nodes) >= 8
    kubectl("apply", "-n", namespace, "-f", "-", input=WORK)
    for r in (1, 2, 3):
        wait_for(lambda r=r: running_as_planned(kube, namespace, f"r{r}"), timeout=90, what=f"r{r} Running")
    cordoned: list[str] = []
    try:
        steps = [(6, {"r1", "r2"}, "r3"), (7, {"r1"}, "r2")]  # nodes cordoned, who runs, who just left
        for count, running, left in steps:
            t0 = time.monotonic()
            for n in nodes[len(cordoned):count]:
                kubectl("cordon", n)
                cordoned.append(n)
            st = wait_for(lambda left=left: (s := phases(kube, namespace))[left].get("phase") == "Rejected" and s, timeout=90,
                          what=f"{left} Rejected once {count} nodes are cordoned")
            assert st[left]["reason"] in ("rank-waterline", "capacity"), st[left]
            assert "needs at least" in st[left]["message"] and "better revised rank" in st[left]["message"], st[left]["message"]
            for r in running:
                wait_for(lambda r=r: running_as_planned(kube, namespace, r), timeout=90, what=f"{r} still Running")
                assert not any(p.spec.node_name in cordoned for p in running_as_planned(kube, namespace, r) or [])
            print(f"\n{count} nodes cordoned: {left} left in {time.monotonic() - t0:.1f} s ({st[left]['message'][:90]}...)")
    finally:
        for n in cordoned:
            kubectl("uncordon", n, check=False)
