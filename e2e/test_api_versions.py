"""StreamJob and StreamTemplate served as v1beta1 beside v1alpha1 (issue 48 item 7), against the real
API server: one stored version (v1alpha1), objects written under either version read back under both
with the same spec, the operator (which watches v1alpha1) plans a job created as v1beta1, and the
required-job admission policy holds under v1beta1 too. The plan: docs/api-versioning.md."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml
from live import running_as_planned
from test_crds import BAD_TEMPLATES, TEMPLATE  # the same cases, under the other version

ROOT = Path(__file__).resolve().parents[1]
KINDS = {"StreamTemplate": "streamtemplates", "StreamJob": "streamjobs"}


def get(kubectl, namespace: str, kind: str, name: str, version: str) -> dict:
    return json.loads(kubectl("get", f"{KINDS[kind]}.{version}.kubesoda.io", name, "-n", namespace, "-o", "json").stdout)


def example(version_of: dict[str, str]) -> str:
    """examples/small-pipeline with each kind at the version asked for (and `required` off: a
    namespace editor's job)."""
    docs = [d for d in yaml.safe_load_all((ROOT / "examples" / "small-pipeline" / "pipeline.yaml").read_text()) if d]
    for d in docs:
        d["apiVersion"] = f"kubesoda.io/{version_of[d['kind']]}"
        if d["kind"] == "StreamJob":
            d["spec"]["required"] = False
    return yaml.safe_dump_all(docs)


def test_both_versions_are_served_and_one_is_stored(kubectl):
    kubectl("apply", "--server-side", "-f", str(ROOT / "crds"))
    for plural in KINDS.values():
        kubectl("wait", "--for=condition=Established", f"crd/{plural}.kubesoda.io", "--timeout=60s")
        crd = json.loads(kubectl("get", "crd", f"{plural}.kubesoda.io", "-o", "json").stdout)
        versions = {v["name"]: (v["served"], v["storage"]) for v in crd["spec"]["versions"]}
        assert versions == {"v1alpha1": (True, True), "v1beta1": (True, False)}, versions
        assert crd["status"]["storedVersions"] == ["v1alpha1"]
        assert crd["spec"].get("conversion", {}).get("strategy", "None") == "None"
    out = kubectl("api-versions").stdout.split()
    assert {"kubesoda.io/v1alpha1", "kubesoda.io/v1beta1"} <= set(out), out


def test_an_object_written_under_one_version_reads_back_under_both(operator, kube, kubectl, namespace, wait_for):
    # the template as v1alpha1, the job as v1beta1
    kubectl("apply", "-n", namespace, "-f", "-", input=example({"StreamTemplate": "v1alpha1", "StreamJob": "v1beta1"}))
    for kind, name in (("StreamTemplate", "clickstream"), ("StreamJob", "clicks")):
        alpha, beta = (get(kubectl, namespace, kind, name, v) for v in ("v1alpha1", "v1beta1"))
        assert alpha["apiVersion"] == "kubesoda.io/v1alpha1" and beta["apiVersion"] == "kubesoda.io/v1beta1"
        assert alpha["spec"] == beta["spec"] and alpha["metadata"]["uid"] == beta["metadata"]["uid"], kind
    # the operator watches v1alpha1: a job created as v1beta1 is planned and runs like any other
    wait_for(lambda: running_as_planned(kube, namespace, "clicks"), timeout=120, what="clicks (created as v1beta1) Running")
    st = get(kubectl, namespace, "StreamJob", "clicks", "v1beta1")["status"]
    assert st["phase"] == "Running" and st == get(kubectl, namespace, "StreamJob", "clicks", "v1alpha1")["status"]
    # an update under v1beta1 is seen under v1alpha1
    kubectl("patch", "streamjobs.v1beta1.kubesoda.io", "clicks", "-n", namespace, "--type", "merge", "-p", '{"spec": {"rank": 2}}')
    assert get(kubectl, namespace, "StreamJob", "clicks", "v1alpha1")["spec"]["rank"] == 2


@pytest.mark.parametrize("case", sorted(BAD_TEMPLATES))
def test_the_schema_and_its_rules_hold_under_v1beta1(kubectl, namespace, case):
    spec, msg = BAD_TEMPLATES[case]
    doc = TEMPLATE.format(ns=namespace, spec=spec).replace("kubesoda.io/v1alpha1", "kubesoda.io/v1beta1", 1)
    proc = kubectl("apply", "-f", "-", input=doc, check=False, timeout=30)
    assert proc.returncode != 0 and msg in proc.stderr, (case, proc.stderr)


def test_the_required_policy_holds_under_v1beta1(kubectl, namespace, wait_for):
    rendered = subprocess.run([str(ROOT / "hack" / "helm.sh"), "template", "kubesoda", str(ROOT / "charts" / "kubesoda"),
                               "--kube-version", "1.35.8", "--show-only", "templates/required-policy.yaml"],
                              capture_output=True, text=True, check=True).stdout
    kubectl("apply", "-f", "-", input=rendered)
    role = f"""apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: beta-editor, namespace: {namespace}}}
rules:
- {{apiGroups: [kubesoda.io], resources: [streamjobs], verbs: [get, list, create, update, patch, delete]}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: beta-editors, namespace: {namespace}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: beta-editor}}
subjects:
- {{apiGroup: rbac.authorization.k8s.io, kind: User, name: carol}}
"""
    kubectl("apply", "-f", "-", input=role)
    job = "apiVersion: kubesoda.io/v1beta1\nkind: StreamJob\nmetadata: {name: promise}\nspec: {templates: [t], required: true}\n"
    try:
        def refused():
            p = kubectl("create", "-n", namespace, "--as", "carol", "-f", "-", input=job, check=False)
            if p.returncode == 0:
                kubectl("delete", "-n", namespace, "streamjob", "promise", "--wait=false", check=False)
            return p.returncode != 0 and p.stderr
        err = wait_for(refused, timeout=30, what="carol's required job refused under v1beta1")
        assert "spec.required" in err, err
    finally:
        kubectl("delete", "-f", "-", input=rendered, check=False)
