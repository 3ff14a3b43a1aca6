"""Figures the docs quote from code, checked against the code (issue 48, item 9): the CRDs of
docs/api.md (count, kinds, scopes, short names, printer columns) against crds/, its SchedulingPolicy
defaults against the CRD's, its worked example against a real `kubesoda plan`; the chart defaults of
docs/install.md against values.yaml; the ports of docs/local-control-plane.md against
hack/cluster-up.sh; test counts against the test files."""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
NUMBERS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9,
           "ten": 10, "eleven": 11, "twelve": 12}


def crds() -> dict[str, dict[str, Any]]:
    out = {}
    for f in sorted((ROOT / "crds").glob("*.yaml")):
        d = yaml.safe_load(f.read_text())
        out[d["spec"]["names"]["kind"]] = d
    return out


def table(text: str, first_header: str) -> list[list[str]]:
    """The rows of the markdown table whose first header cell is ``first_header``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first_header} |"))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in re.split(r"(?<!\\)\|", line.strip()[1:-1])])
    return rows


def section(text: str, heading: str) -> str:
    start = text.index(heading)
    nxt = text.find("\n## ", start + len(heading))
    return text[start: nxt if nxt > 0 else None]


# --------------------------------------------------------------------------------------- api.md


def test_api_md_names_every_crd_as_the_crds_define_it():
    api = (DOCS / "api.md").read_text()
    defined = crds()
    count = re.search(r"^(\w+) CRDs in `crds/`", api, re.M)
    assert count and NUMBERS[count[1].lower()] == len(defined), (count and count[0], len(defined))
    rows = {r[0]: r for r in table(api, "kind")}
    assert set(rows) == set(defined)
    for kind, d in defined.items():
        _, scope, short, columns, _docs = rows[kind]
        assert scope == d["spec"]["scope"], kind
        assert short.strip("`") == ", ".join(d["spec"]["names"].get("shortNames", [])), kind
        cols = d["spec"]["versions"][0].get("additionalPrinterColumns", [])
        plain = ", ".join(c["name"] for c in cols if not c.get("priority"))
        wide = ", ".join(c["name"] for c in cols if c.get("priority"))
        assert columns == (f"{plain} ({wide})" if wide else plain), kind
    # the StreamJob paragraph says the same
    sj = defined["StreamJob"]["spec"]["versions"][0]["additionalPrinterColumns"]
    m = re.search(r"Printer columns: ([^(]+?) \(and ([^)]+?) with `-o wide`\)", " ".join(api.split()))
    assert m, "StreamJob's printer columns sentence"
    assert m[1].split(", ") == [c["name"] for c in sj if not c.get("priority")]
    assert m[2].split(", ") == [c["name"] for c in sj if c.get("priority")]


def test_api_md_schedulingpolicy_defaults_are_the_crds():
    text = " ".join(section((DOCS / "api.md").read_text(), "## SchedulingPolicy").split())
    schema = crds()["SchedulingPolicy"]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    quoted = dict(re.findall(r"`(\w+)` \(?(\d+(?:\.\d+)?)\b", text))
    assert {"macroEpochSeconds", "microEpochSeconds", "peFloorMips"} <= set(quoted), quoted
    for name, figure in quoted.items():
        assert name in schema and float(figure) == schema[name]["default"], (name, figure)


def test_api_md_worked_example_is_what_kubesoda_plan_prints():
    from soda_operator import cli

    api = (DOCS / "api.md").read_text()
    example = section(api, "## Worked example")
    cmd = re.search(r"^\$ kubesoda plan (.+)$", example, re.M)
    assert cmd
    args = cmd[1].split()
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        cli.main(["plan", *[str(ROOT / a) if not a.startswith("-") else a for a in args], "--json"])
    plan = json.loads(out.getvalue())
    job = plan["jobs"][0]
    jobline = re.search(r"^default/clicks\s+(\w+)\s+(\S+)\s+(\d+)\s+(\d+)\s+([\d.]+)\s+(\d+)", example, re.M)
    assert jobline
    assert jobline[1] == ("yes" if job["admitted"] else "no") and jobline[2] == job["template"].split("/")[-1]
    assert float(jobline[5]) == round(job["importance"], 2) and float(jobline[6]) == round(job["mips"])
    assert re.search(rf"importance: {plan['importance']:.3f}", example)
    nodes = {n["metadata"]["name"] for n in yaml.safe_load_all((ROOT / args[1]).read_text())}
    printed = re.findall(r"^default/clicks:(\w+)\s+(\d+)\s+(\S+)\s+(\S+)=([\d.]+)$", example, re.M)
    pes = {p["name"]: p for p in plan["pes"] if p["job"] == job["job"]}
    assert len(printed) == len(pes)
    for name, goal, candidate, node, fraction in printed:
        assert float(goal) == round(pes[name]["goal_mips"]), name
        assert candidate == node and node in nodes  # which of the equal nodes: macroW's search
        assert [float(fraction)] == [round(f, 3) for f in pes[name]["fractions"].values()], name


# ----------------------------------------------------------------------------------- install.md


def values_at(values: dict[str, Any], path: str) -> Any:
    for k in path.split("."):
        values = values[k]
    return values


def test_install_md_chart_defaults_are_values_yaml():
    values = yaml.safe_load((ROOT / "charts" / "kubesoda" / "values.yaml").read_text())
    checked = 0
    for row in table((DOCS / "install.md").read_text(), "value"):
        keys = re.findall(r"`([\w.]+)`", row[0])
        defaults = row[1].split(", ")
        if not keys or len(keys) != len(defaults) or any(k.startswith(".") for k in keys):
            continue
        for key, shown in zip(keys, defaults):
            try:
                want = values_at(values, key)
            except (KeyError, TypeError):
                continue  # a prose mention such as `policy.*`
            token = shown.strip()
            if token.startswith("`") and token.endswith("`"):
                got = yaml.safe_load(token.strip("`")) if token != '`""`' else ""
            elif re.fullmatch(r"-?\d+(\.\d+)?|true|false", token):
                got = yaml.safe_load(token)
            else:
                continue  # prose: "appVersion", "none", "unset (...)"
            assert got == want, (key, token, want)
            checked += 1
    assert checked >= 15, checked  # the table keeps quoting figures


def test_install_md_test_counts_are_the_files():
    for doc in DOCS.glob("*.md"):
        for path, n in re.findall(r"((?:e2e|tests)/test_\w+\.py)\b[^\n#]*#\s*(\d+) tests", doc.read_text()):
            defined = len(re.findall(r"^(?:async )?def test_", (ROOT / path).read_text(), re.M))
            assert int(n) == defined, (doc.name, path, n, defined)


# ------------------------------------------------------------------------ local-control-plane.md


def test_local_control_plane_ports_are_cluster_up_sh():
    script = (ROOT / "hack" / "cluster-up.sh").read_text()
    offsets = {name: int(n) for name, n in re.findall(r"(\w+)=\$\(\(base \+ (\d+)\)\)", script)}
    offsets["etcd_port"] = 0 if re.search(r"etcd_port=\$base\b", script) else -1
    sched = re.search(r'port=\$\(\(base \+ (\d+)\)\)\s*\n\s*\[ "\$s" = default-scheduler \] && \{[^}]*port=\$\(\(base \+ (\d+)\)\)', script)
    assert sched
    offsets["kubesoda_scheduler"], offsets["default_scheduler"] = int(sched[1]), int(sched[2])
    rows = table((DOCS / "local-control-plane.md").read_text(), "port")
    said = {what: int(n) for cell, what in rows for n in re.findall(r"^base\+(\d+)", cell)}
    expect = {"etcd_port": "etcd", "api_port": "kube-apiserver", "kcm_port": "kube-controller-manager",
              "kwok_port": "KWOK", "ext_port": "extender", "prom_port": "Prometheus", "sim_port": "simulate",
              "kubesoda_scheduler": "the `kubesoda` kube-scheduler", "default_scheduler": "the `default-scheduler`"}
    for var, words in expect.items():
        row = next((w for w in said if words in w), None)
        assert row is not None, words
        assert said[row] == offsets[var], (var, row, said[row], offsets[var])
    # the variables the env file exports are the ones the doc names
    env = re.search(r'cat >"\$state/env" <<ENV\n(.*?)\nENV', script, re.S)
    assert env
    exported = set(re.findall(r"export (\w+)=", env[1]))
    text = (DOCS / "local-control-plane.md").read_text()
    for name in ("KUBESODA_EXTENDER_PORT", "KUBESODA_API_PORT", "KUBESODA_SIMULATOR_PORT"):
        assert name in exported and name in text
    # the real nodes' range stated in real-node.sh
    node = (ROOT / "hack" / "real-node.sh").read_text()
    assert "base+10+3i" in node and "base+19" in node
    assert any(cell == "base+10..base+18" for cell, _ in rows) and any(cell == "base+19" for cell, _ in rows)
