"""`kubesoda plan` reads ResourceProfile objects from files like any other object and plans with
them in the operator's precedence (docs/learn.md): a pinned profile, a learned one, the declared
function, the policy's default per kind."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from soda_operator import cli
from soda_operator.soda.learning import profile_status, template_signatures
from soda_optimizer.learn import Learner, Sample

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "small-pipeline"
NODES = ROOT / "examples" / "nodes" / "small-8.yaml"
POLICY = {"apiVersion": "kubesoda.io/v1alpha1", "kind": "SchedulingPolicy", "metadata": {"name": "default"},
          "spec": {"learning": {"enabled": True}}}


def _template() -> dict[str, Any]:
    docs = [d for d in yaml.safe_load_all((EXAMPLE / "pipeline.yaml").read_text()) if d]
    return next(d for d in docs if d["kind"] == "StreamTemplate")


def _goals(tmp_path: Path, capsys: pytest.CaptureFixture[str], *objects: dict[str, Any]) -> tuple[dict[str, float], str]:
    files = ["-f", str(NODES), "-f", str(EXAMPLE)]
    if objects:
        extra = tmp_path / f"extra-{len(list(tmp_path.iterdir()))}.yaml"
        extra.write_text(yaml.safe_dump_all(list(objects)))
        files += ["-f", str(extra)]
    rc = cli.main(["plan", *files, "--json", "--deadline-scale", "0.1"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    doc = json.loads(out.out)
    assert doc["errors"] == []
    return {p["name"]: p["goal_mips"] for p in doc["pes"]}, out.err


def _profile(key: str, spec: dict[str, Any], status: dict[str, Any] | None = None) -> dict[str, Any]:
    obj: dict[str, Any] = {"apiVersion": "kubesoda.io/v1alpha1", "kind": "ResourceProfile", "metadata": {"name": key}, "spec": spec}
    if status is not None:
        obj["status"] = status
    return obj


def test_a_profile_in_a_file_changes_the_planned_function(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    parse = template_signatures(_template())["parse"]  # declared a 0.002, b 1: saturates at 500 mips
    base, _ = _goals(tmp_path, capsys, POLICY)
    assert base["parse"] == pytest.approx(500, rel=0.05)

    # pinned by an administrator: a 0.008 -> saturates at 125 mips
    pinned = _profile(parse.key, {"pinned": True, "a": 0.008, "b": 1.0},
                      {"key": parse.key, "kind": "transform", "level": "flowspec", "path": list(parse.path), "a": 0.002, "b": 1.0})
    goals, _ = _goals(tmp_path, capsys, POLICY, pinned)
    assert goals["parse"] == pytest.approx(125, rel=0.1)

    # learned (what the operator writes: the status with its sample window): true a 0.001, b 1 -> 1000 mips
    lr = Learner()
    rng = np.random.default_rng(0)
    for i in range(40):
        m = float(rng.uniform(200, 3000))
        lr.observe(parse, [Sample(r_i=200.0, m=m, r_o=min(0.001 * 200 * m, 200.0) * float(np.exp(rng.normal(0, 0.02))),
                                  m_used=min(m, 1000.0), t=float(i))], now=float(i))
    model = lr.get(parse.key)
    assert model is not None
    learned = _profile(parse.key, {"pinned": False}, profile_status(model, 40.0))
    goals, _ = _goals(tmp_path, capsys, POLICY, learned)
    assert goals["parse"] == pytest.approx(1000, rel=0.1)

    # the same profile with learning off in the policy: not used, and said so
    goals, err = _goals(tmp_path, capsys, learned)
    assert goals["parse"] == pytest.approx(500, rel=0.05)
    assert "ResourceProfile(s) not used" in err


def test_a_bad_profile_is_an_error_in_the_plan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump_all([POLICY, _profile("transform-flow-0000000000000000", {"pinned": False})]))
    rc = cli.main(["plan", "-f", str(NODES), "-f", str(EXAMPLE), "-f", str(bad), "--json", "--deadline-scale", "0.1"])
    out = capsys.readouterr()
    assert rc == 2
    doc = json.loads(out.out)
    assert any("ResourceProfile transform-flow-0000000000000000" in e for e in doc["errors"])
