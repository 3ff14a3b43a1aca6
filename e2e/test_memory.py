"""Memory as a capacity, live (small topology: 8 nodes of 4 cores and 16Gi).

- a job whose PE needs 20Gi per instance is Rejected with reason memory and the numbers; the other
  jobs keep their place;
- six PEs of 10Gi each (a job that needs little CPU): no two share a node, every pod requests (and
  is limited to) exactly 10Gi, and all run where planned: none Pending for Insufficient memory.
"""

from __future__ import annotations

from live import job, pe_pods, running_as_planned, start_operator

TEMPLATES = """apiVersion: kubesoda.io/v1alpha1
kind: StreamTemplate
metadata: {name: roomy}
spec:
  pes:
""" + "".join(f"  - {{name: p{i}, kind: source, memory: 10Gi, maxCpu: 500m, resourceFunction: {{a: 0.01}}}}\n" for i in range(6)) + """  sinks: [{pe: p0, weight: 1}]
  primalInputs: [{pe: p0, rate: 1000}]
---
apiVersion: kubesoda.io/v1alpha1
kind: StreamTemplate
metadata: {name: huge}
spec:
  pes:
  - {name: src, kind: source, memory: 20Gi, resourceFunction: {a: 0.01}}
  sinks: [{pe: src, weight: 1}]
  primalInputs: [{pe: src, rate: 1000}]
---
apiVersion: kubesoda.io/v1alpha1
kind: StreamJob
metadata: {name: roomy}
spec: {templates: [roomy], rank: 2}
---
apiVersion: kubesoda.io/v1alpha1
kind: StreamJob
metadata: {name: huge}
spec: {templates: [huge], rank: 1}
"""


def test_memory_is_a_capacity(kube, kubectl, namespace, extender_port, wait_for, tmp_path):
    op = start_operator(kubectl, extender_port, log=str(tmp_path / "operator.log"))
    try:
        kubectl("apply", "-n", namespace, "-f", "-", input=TEMPLATES)
        st = wait_for(lambda: (s := job(kube, namespace, "huge").get("status") or {}).get("phase") == "Rejected" and s,
                      timeout=90, what="huge Rejected")
        assert st["reason"] == "memory", st
        assert "20480Mi" in st["message"] and "16384Mi" in st["message"], st["message"]
        pods = wait_for(lambda: running_as_planned(kube, namespace, "roomy"), timeout=120, what="roomy Running as planned")
        assert len(pods) == 6
        nodes = [p.spec.node_name for p in pods]
        assert len(set(nodes)) == 6, f"10Gi instances share a 16Gi node: {nodes}"
        for p in pods:
            res = p.spec.containers[0].resources
            assert res.requests["memory"] == res.limits["memory"] == "10Gi", res
        assert all(p.status.phase == "Running" for p in pe_pods(kube, namespace, "roomy"))
    finally:
        op.stop()
