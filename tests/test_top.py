"""kubesoda top's table from objects as the API returns them (hand-computed sums)."""

from __future__ import annotations

from soda_operator.top import rows, table


def pod(ns, name, job, node, cpu, phase="Running"):
    return {"metadata": {"namespace": ns, "name": name, "labels": {"kubesoda.io/job": job, "kubesoda.io/pe": "p"}},
            "spec": {"nodeName": node, "containers": [{"name": "pe", "resources": {"limits": {"cpu": cpu}}}]}, "status": {"phase": phase}}


def test_rows_sum_cpu_per_job_and_node():
    jobs = [{"metadata": {"namespace": "a", "name": "clicks"}, "spec": {"rank": 2},
             "status": {"phase": "Running", "rank": 2, "mips": 1500.4, "importance": 320.0,
                        "observed": {"importance": 80.0, "ratio": 0.25}}},
            {"metadata": {"namespace": "a", "name": "idle"}, "spec": {}}]
    pods = [pod("a", "c1", "clicks", "n1", "500m"), pod("a", "c2", "clicks", "n2", "1"), pod("a", "c3", "clicks", "n2", "250m"),
            pod("a", "old", "clicks", "n1", "2", phase="Succeeded")]
    nodes = [{"metadata": {"name": "n1"}, "status": {"allocatable": {"cpu": "4"}}},
             {"metadata": {"name": "n2"}, "status": {"allocatable": {"cpu": "2500m"}}},
             {"metadata": {"name": "n3"}, "status": {"allocatable": {"cpu": "4"}}}]
    jr, nr = rows(jobs, pods, nodes)
    assert jr[0] == ["a/clicks", "Running", "2", "1500", "1.75", "3", "320", "80", "25%"]
    assert jr[1] == ["a/idle", "Pending", "1", "0", "0.00", "0", "0", "-", "-"]
    assert nr == [["n1", "0.50", "4.00", "12%"], ["n2", "1.25", "2.50", "50%"], ["n3", "0.00", "4.00", "0%"]]
    out = table(["JOB", "PHASE"], [r[:2] for r in jr]).splitlines()
    assert out[0].split() == ["JOB", "PHASE"] and out[1].split() == ["a/clicks", "Running"]
