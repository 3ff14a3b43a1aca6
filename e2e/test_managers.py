"""The budget-driven rank manager live (SODA 6.2.1): two owners whose jobs cannot both run share
the cluster over time. Each overloaded macro epoch the operator charges the owner whose job ran
(status.budgetSpent of the SchedulingPolicy); the BDRM then ranks the other owner's job better, so
admission alternates and both budgets deplete at about the same rate.

Then the administrator overrides job-b's rank (SchedulingPolicy rankOverrides, which only cluster
administrators may write): job-a keeps the cluster, epoch after epoch.

Small topology: 8 nodes of 4 cores. Each job is six PEs of exactly 3 cores (18 cores): one fits,
two do not.
"""

from __future__ import annotations

import json
import time

from live import FAST_POLICY, GROUP, VERSION, Operator, install_crds_and_policy, job

POLICY = FAST_POLICY + """  rankManager: budget
  budgets:
    allocated: {team-a: 400000, team-b: 400000}
"""

WORK = """apiVersion: kubesoda.io/v1alpha1
kind: StreamTemplate
metadata: {name: wide}
spec:
  pes:
""" + "".join(f"  - {{name: p{i}, kind: source, minCpu: '3', maxCpu: '3', resourceFunction: {{a: 0.01}}}}\n" for i in range(6)) + """  sinks: [{pe: p0, weight: 1}]
  primalInputs: [{pe: p0, rate: 1000}]
""" + "".join(f"""---
apiVersion: kubesoda.io/v1alpha1
kind: StreamJob
metadata: {{name: job-{o}}}
spec: {{templates: [wide], rank: 1, owner: team-{o}}}
""" for o in ("a", "b"))


def test_budget_ranks_share_an_overloaded_cluster_over_time(kube, kubectl, namespace, extender_port, wait_for, tmp_path):
    # the administrator binds both owners to the test's namespace (SchedulingPolicy owners, issue 45)
    install_crds_and_policy(kubectl, POLICY + f"  owners: {{{namespace}: [team-a, team-b]}}\n")
    kubectl("patch", "schedulingpolicy", "default", "--subresource=status", "--type=merge", "-p", '{"status": {"budgetSpent": null}}')
    op = Operator("run", "--extender-port", str(extender_port), log=str(tmp_path / "operator.log"))
    op.start()
    try:
        kubectl("apply", "-n", namespace, "-f", "-", input=WORK)
        runs: list[str] = []  # who ran, in order (each change recorded once)

        def alternated() -> dict | None:
            phases = {o: (job(kube, namespace, f"job-{o}").get("status") or {}).get("phase") for o in ("a", "b")}
            assert not (phases["a"] == phases["b"] == "Running"), f"both jobs Running on a cluster that holds one: {phases}"
            running = [o for o, ph in phases.items() if ph == "Running"]
            if running and (not runs or runs[-1] != running[0]):
                runs.append(running[0])
            pol = kube.custom.get_cluster_custom_object(GROUP, VERSION, "schedulingpolicies", "default")
            spent = (pol.get("status") or {}).get("budgetSpent") or {}
            return spent if len(runs) >= 2 and spent.get("team-a", 0) > 0 and spent.get("team-b", 0) > 0 else None

        t0 = time.monotonic()
        spent = wait_for(alternated, timeout=180, interval=1, what="each owner's job Running in turn, both charged")
        print(f"\nBDRM: Running in turn {runs} within {time.monotonic() - t0:.0f} s; charged (mips x s) {spent}")
        assert set(runs[:2]) == {"a", "b"}
        # the administrator's word: job-b ranked 3 whatever its budget, so job-a keeps the cluster
        kubectl("patch", "schedulingpolicy", "default", "--type=merge", "-p",
                json.dumps({"spec": {"rankOverrides": {f"{namespace}/job-b": 3}}}))

        def a_holds() -> bool:
            a, b = (job(kube, namespace, f"job-{o}").get("status") or {} for o in ("a", "b"))
            return a.get("phase") == "Running" and b.get("phase") == "Rejected" and b.get("rank") == 3 and a.get("rank", 9) < 3
        wait_for(a_holds, timeout=60, interval=1, what="job-b overridden to rank 3, job-a Running")
        t1 = time.monotonic()
        while time.monotonic() - t1 < 14:  # two more macro epochs: the override holds against the budgets
            assert a_holds(), [job(kube, namespace, f"job-{o}").get("status", {}).get("phase") for o in ("a", "b")]
            time.sleep(1)
    finally:
        op.stop()
        install_crds_and_policy(kubectl, FAST_POLICY)

