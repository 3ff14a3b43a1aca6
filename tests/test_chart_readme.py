"""The chart's README is generated from its values schema and values.yaml (hack/chart-readme.py,
issue 48): it is current (the CI check), it has a row for every value, and the check catches a
value added without regenerating it."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "hack" / "chart-readme.py"


def load_script() -> Any:
    spec = importlib.util.spec_from_file_location("chart_readme", SCRIPT)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def leaves(values: Any, prefix: str = "") -> list[str]:
    if isinstance(values, dict) and values:
        return [p for k, v in values.items() for p in leaves(v, f"{prefix}{k}.")]
    return [prefix.rstrip(".")]


def test_the_chart_readme_is_current():
    proc = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_every_value_has_a_row_with_its_default():
    text = (ROOT / "charts" / "kubesoda" / "README.md").read_text()
    rows = {line.split("|")[1].strip().strip("`"): line for line in text.splitlines() if line.startswith("| `")}
    values = yaml.safe_load((ROOT / "charts" / "kubesoda" / "values.yaml").read_text())
    for leaf in leaves(values):
        # the leaf's row, or its nearest ancestor's when the schema makes that one value (resources)
        parts = leaf.split(".")
        path = next((".".join(parts[:n]) for n in range(len(parts), 0, -1) if ".".join(parts[:n]) in rows), None)
        assert path is not None, leaf
        default: Any = values
        for k in path.split("."):
            default = default[k]
        assert f"`{json.dumps(default)}`".replace("<", "&lt;").replace(">", "&gt;") in rows[path], path
    schema = json.loads((ROOT / "charts" / "kubesoda" / "values.schema.json").read_text())
    assert "`global`" in text and "`imagePullSecrets`" in text
    assert schema["properties"]["priorityClassName"]["description"] in rows["priorityClassName"]


def test_the_check_catches_a_value_added_without_regenerating(tmp_path, monkeypatch):
    mod = load_script()
    chart = tmp_path / "kubesoda"
    shutil.copytree(ROOT / "charts" / "kubesoda", chart, symlinks=True)
    monkeypatch.setattr(mod, "CHART", chart)
    monkeypatch.setattr(sys, "argv", ["chart-readme.py", "--check"])
    assert mod.main() == 0
    with (chart / "values.yaml").open("a") as f:
        f.write("newThing: 3  # a value nobody documented\n")
    assert mod.main() == 1
    monkeypatch.setattr(sys, "argv", ["chart-readme.py"])
    assert mod.main() == 0
    assert "| `newThing` | any | `3` | a value nobody documented |" in (chart / "README.md").read_text()
