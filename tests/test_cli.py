"""`kubesoda plan` on every example, and bad inputs giving one clear error without a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EX = ROOT / "examples"


def plan(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "soda_operator.cli", "plan", *args], capture_output=True, text=True, timeout=120, cwd=ROOT)


@pytest.mark.parametrize(
    "nodes,example",
    [("small-8", "small-pipeline"), ("small-8", "alternatives"), ("small-8", "glued"), ("nodes-30", "dac"), ("nodes-30", "lsd")],
)
def test_plan_every_example(nodes, example):
    proc = plan("-f", str(EX / "nodes" / f"{nodes}.yaml"), "-f", str(EX / example), "--json", "--deadline-scale", "0.1")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["feasible"] and doc["errors"] == []
    admitted = {j["job"] for j in doc["jobs"] if j["admitted"]}
    assert admitted
    nodes_cap = {}
    for pe in doc["pes"]:
        assert pe["job"] in admitted
        assert set(pe["fractions"]) <= set(pe["candidates"])
        for n, f in pe["fractions"].items():
            nodes_cap[n] = nodes_cap.get(n, 0) + f
    assert all(v <= 1 + 1e-6 for v in nodes_cap.values())
    assert [s["stage"] for s in doc["stages"]] == ["macroq", "macrow", "microq", "microw"]


def test_plan_table_output():
    proc = plan("-f", str(EX / "nodes" / "small-8.yaml"), "-f", str(EX / "alternatives"), "--deadline-scale", "0.1")
    assert proc.returncode == 0
    assert "default/video" in proc.stdout and "GOAL(MIPS)" in proc.stdout and "macrow" in proc.stdout


def test_at_nodes_shrinks_capacity_and_infeasible_exit_code(tmp_path):
    big = tmp_path / "big.yaml"
    big.write_text((EX / "small-pipeline" / "pipeline.yaml").read_text().replace("minCpu: 250m", "minCpu: \"9\""))
    proc = plan("-f", str(EX / "nodes" / "small-8.yaml"), "-f", str(big), "--at-nodes", "2", "--deadline-scale", "0.1")
    assert proc.returncode == 1  # a required job refused
    assert "default/clicks: infeasible-required: required, but its minimum of" in proc.stdout, proc.stdout


BAD = {
    "malformed.yaml": ("kind: StreamJob\nmetadata: {name: x\n", "malformed YAML"),
    "unknown.yaml": ("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n", "unknown kind 'ConfigMap'"),
    "noname.yaml": ("apiVersion: kubesoda.io/v1alpha1\nkind: StreamJob\nmetadata: {}\nspec: {templates: [a]}\n", "no metadata.name"),
    "dangling.yaml": ("apiVersion: kubesoda.io/v1alpha1\nkind: StreamJob\nmetadata: {name: lost}\nspec: {templates: [missing]}\n", "StreamJob default/lost field spec.templates[0]"),
    "badstream.yaml": (
        "apiVersion: kubesoda.io/v1alpha1\nkind: StreamTemplate\nmetadata: {name: t}\nspec:\n  pes: [{name: a}]\n  streams: [{from: a, to: b}]\n",
        "StreamTemplate default/t field spec",
    ),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_input_gives_one_clear_error(tmp_path, name):
    text, expect = BAD[name]
    f = tmp_path / name
    f.write_text(text)
    proc = plan("-f", str(EX / "nodes" / "small-8.yaml"), "-f", str(EX / "small-pipeline"), "-f", str(f), "--deadline-scale", "0.1")
    assert proc.returncode == 2, proc.stdout
    assert "Traceback" not in proc.stderr
    errs = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errs) == 1 and expect in errs[0], proc.stderr
    if name in ("dangling.yaml", "badstream.yaml"):
        assert str(f) in errs[0]  # the file is named
        assert "default/clicks" in proc.stdout  # the good job is still planned


def test_plan_counts_other_pods_from_files(tmp_path):
    """Pods in the files that kubesoda does not manage hold their requests on their nodes, as live."""
    nodes = [f"z{z}-r{r}-n{n}" for z in range(2) for r in range(2) for n in range(2)]
    free = {"z1-r1-n0", "z1-r1-n1"}
    pods = [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"hog-{n}", "namespace": "other"},
             "spec": {"nodeName": n, "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "4"}}}]},
             "status": {"phase": "Running"}} for n in nodes if n not in free]
    (tmp_path / "pods.yaml").write_text("\n---\n".join(json.dumps(p) for p in pods))
    used = []
    for extra in ([], ["-f", str(tmp_path / "pods.yaml")]):
        proc = plan("-f", str(EX / "nodes" / "small-8.yaml"), "-f", str(EX / "small-pipeline"), *extra, "--json", "--deadline-scale", "0.1")
        assert proc.returncode == 0, proc.stderr
        doc = json.loads(proc.stdout)
        assert doc["feasible"] and all(j["admitted"] for j in doc["jobs"])
        used.append({n for pe in doc["pes"] for n, f in pe["fractions"].items() if f > 0})
    assert not used[0] <= free  # precondition: on an empty cluster the plan spreads beyond the two nodes
    assert used[1] <= free, f"planned on nodes another workload fills: {used[1] - free}"


def test_explain_from_files_says_why_in_numbers():
    """`kubesoda explain` on an overloaded cluster: a rejected job's message gives its minimum and the
    capacity left, and what is left is too little for it (else ties would have admitted it)."""
    import re

    plan_proc = plan("-f", str(EX / "nodes" / "small-8.yaml"), "-f", str(EX / "lsd"), "--json", "--unit-mips", "200")
    doc = json.loads(plan_proc.stdout)
    out = [j for j in doc["jobs"] if not j["admitted"] and j["reason"] in ("capacity", "rank-waterline")]
    assert out, "the small cluster should not hold all of LSD"
    for j in out[:5]:
        m = re.search(r"needs at least (\d+) mips \((\d+)-mips units\); (\d+) of (\d+) are free", j["message"])
        assert m, j["message"]
        need, unit, free = (int(m.group(i)) for i in (1, 2, 3))
        assert -(-need // unit) * unit > free, j["message"]  # its minimum in whole units does not fit what is free
    name = out[0]["job"]
    proc = subprocess.run([sys.executable, "-m", "soda_operator.cli", "explain", name, "-f", str(EX / "nodes" / "small-8.yaml"), "-f",
                           str(EX / "lsd"), "--unit-mips", "200"], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"{name}: not admitted") and "why:" in proc.stdout and "standing:" in proc.stdout
    missing = subprocess.run([sys.executable, "-m", "soda_operator.cli", "explain", "bench/nope", "-f", str(EX / "nodes" / "small-8.yaml"),
                              "-f", str(EX / "lsd")], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert missing.returncode == 2 and "no StreamJob bench/nope" in missing.stderr


def test_plan_reads_lists_as_kubectl_get_writes_them(tmp_path):
    """`kubectl get nodes -o yaml > nodes.yaml` writes a List (items with their kind); the API's
    typed NodeList leaves the items' kind out. Both are read as their items; a list of something
    else inside is refused with where it is."""
    from soda_operator import manifests

    node = {"metadata": {"name": "n0", "labels": {"kubesoda.io/mips-per-core": "1000"}},
            "status": {"allocatable": {"cpu": "4"}, "conditions": [{"type": "Ready", "status": "True"}]}}
    (tmp_path / "list.yaml").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [{"apiVersion": "v1", "kind": "Node", **node}]}))
    (tmp_path / "typed.yaml").write_text(json.dumps({"apiVersion": "v1", "kind": "NodeList",
                                                     "items": [{**node, "metadata": {**node["metadata"], "name": "n1"}}]}))
    m = manifests.load([str(tmp_path / "list.yaml"), str(tmp_path / "typed.yaml")])
    assert [n["metadata"]["name"] for n in m.nodes] == ["n0", "n1"]
    assert m.source["Node/n1"].endswith("typed.yaml (document 1) items[0]")
    (tmp_path / "bad.yaml").write_text(json.dumps({"kind": "List", "items": [{"kind": "PodList", "items": []}]}))
    with pytest.raises(manifests.ManifestError, match=r"bad.yaml \(document 1\) items\[0\]: a PodList inside a list"):
        manifests.load([str(tmp_path / "bad.yaml")])


def test_malloc_arenas_are_capped_on_glibc_unless_the_environment_says(monkeypatch):
    import platform

    from soda_operator import runner

    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    assert runner.limit_malloc_arenas() == (platform.libc_ver()[0] == "glibc")
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert runner.limit_malloc_arenas() is False
