"""The CRDs against the real API server: accepted, examples apply, every CEL rule rejects."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def crds(kubectl):
    kubectl("apply", "--server-side", "-f", str(ROOT / "crds"))
    for name in ("streamtemplates", "streamjobs", "schedulingpolicies"):
        kubectl("wait", "--for=condition=Established", f"crd/{name}.kubesoda.io", "--timeout=60s")
    return True


def test_crds_are_established_with_short_names(crds, kubectl):
    out = kubectl("api-resources", "--api-group=kubesoda.io", "-o", "wide").stdout
    for short in ("st", "sj", "sp"):
        assert f" {short} " in out, out


def test_examples_apply_and_print(crds, kubectl, namespace):
    for ex in ("small-pipeline", "alternatives", "glued"):
        kubectl("apply", "-n", namespace, "-f", str(ROOT / "examples" / ex))
    out = kubectl("get", "sj", "-n", namespace).stdout
    assert "PHASE" in out and "REVISED" in out and "clicks" in out and "video" in out
    # defaults filled in by the schema
    import json

    st = json.loads(kubectl("get", "st", "clickstream", "-n", namespace, "-o", "json").stdout)
    assert st["spec"]["pes"][1]["kind"] == "transform" and st["spec"]["allowCycles"] is False
    sj = json.loads(kubectl("get", "sj", "video", "-n", namespace, "-o", "json").stdout)
    assert sj["spec"]["required"] is False


def test_generated_workload_applies(crds, kubectl):
    proc = kubectl("apply", "--dry-run=server", "-f", str(ROOT / "examples" / "dac"), check=False, timeout=120)
    # the namespace may not exist for a server dry run of namespaced objects; create it first
    if proc.returncode != 0:
        kubectl("create", "namespace", "bench", check=False)
        proc = kubectl("apply", "--dry-run=server", "-f", str(ROOT / "examples" / "dac"), check=False, timeout=120)
    assert proc.returncode == 0, proc.stderr


TEMPLATE = """apiVersion: kubesoda.io/v1alpha1
kind: StreamTemplate
metadata: {{name: bad, namespace: {ns}}}
spec:
{spec}
"""

BAD_TEMPLATES = {
    "stream to unknown PE": ("  pes: [{name: a}]\n  streams: [{from: a, to: b}]", "every stream's from and to must name a PE"),
    "min above max": ("  pes: [{name: a, minCpu: '2', maxCpu: 500m}]", "minCpu must be <= maxCpu"),
    "negative rate": ("  pes: [{name: a}]\n  primalInputs: [{pe: a, rate: -1}]", "rate"),
    "zero rate": ("  pes: [{name: a}]\n  primalInputs: [{pe: a, rate: 0}]", "rate"),
    "duplicate PE": ("  pes: [{name: a}, {name: a}]", "Duplicate value"),
    "primal to unknown PE": ("  pes: [{name: a}]\n  primalInputs: [{pe: z, rate: 1}]", "every primal input must name a PE"),
    "sink to unknown PE": ("  pes: [{name: a}]\n  sinks: [{pe: z}]", "every sink must name a PE"),
    "export of unknown PE": ("  pes: [{name: a}]\n  exports: [{name: o, pe: z}]", "every export must name a PE"),
    "capped without cap": ("  pes: [{name: a}]\n  sinks: [{pe: a, value: {kind: capped}}]", "a capped value function needs cap"),
    "piecewise with one point": ("  pes: [{name: a}]\n  sinks: [{pe: a, value: {kind: piecewise, points: [{x: 0, \"y\": 0}]}}]", "at least 2 points"),
    "min > max candidates": ("  pes: [{name: a, minCandidates: 3, maxCandidates: 2}]", "minCandidates must be <= maxCandidates"),
    "bad quantity": ("  pes: [{name: a, minCpu: lots}]", "minCpu"),
    "negative cpu": ("  pes: [{name: a, minCpu: '-1'}]", "minCpu"),
    "no PEs": ("  pes: []", "pes"),
}


@pytest.mark.parametrize("case", sorted(BAD_TEMPLATES))
def test_bad_template_is_rejected_with_a_readable_message(crds, kubectl, namespace, case):
    spec, msg = BAD_TEMPLATES[case]
    proc = kubectl("apply", "-f", "-", input=TEMPLATE.format(ns=namespace, spec=spec), check=False, timeout=30)
    assert proc.returncode != 0, f"{case}: accepted"
    assert msg in proc.stderr, proc.stderr


BAD_OTHERS = {
    "job without templates": ("kind: StreamJob\nmetadata: {name: j, namespace: NS}\nspec: {templates: []}", "templates"),
    "job rank 0": ("kind: StreamJob\nmetadata: {name: j, namespace: NS}\nspec: {templates: [a], rank: 0}", "rank"),
    "job coloc and exloc": (
        "kind: StreamJob\nmetadata: {name: j, namespace: NS}\nspec: {templates: [a], colocate: [[p1, p2]], exlocate: [[p2, p1]]}",
        "cannot be both colocated and exlocated",
    ),
    "policy not default": ("kind: SchedulingPolicy\nmetadata: {name: other}\nspec: {}", "must be named 'default'"),
    "policy micro > macro": ("kind: SchedulingPolicy\nmetadata: {name: default}\nspec: {macroEpochSeconds: 5, microEpochSeconds: 10}", "microEpochSeconds must be <= macroEpochSeconds"),
    "policy both resolutions": ("kind: SchedulingPolicy\nmetadata: {name: default}\nspec: {resolutionUnits: 10, unitMips: 100}", "not both"),
}


@pytest.mark.parametrize("case", sorted(BAD_OTHERS))
def test_bad_job_or_policy_is_rejected(crds, kubectl, namespace, case):
    body, msg = BAD_OTHERS[case]
    doc = "apiVersion: kubesoda.io/v1alpha1\n" + body.replace("NS", namespace)
    proc = kubectl("apply", "-f", "-", input=doc, check=False, timeout=30)
    assert proc.returncode != 0, f"{case}: accepted"
    assert msg in proc.stderr, proc.stderr
