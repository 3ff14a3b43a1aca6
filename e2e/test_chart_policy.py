"""Helm and `kubesoda run` never fight over the SchedulingPolicy "default" (issue 48, item 2), on
the real API server (the chart's ``lookup`` needs one): `kubesoda run` made it first, so the chart
installs without it and leaves it alone, uninstall keeps it; after the NOTES' hand-over (delete it,
upgrade) the release owns one made from its values; and `kubesoda run` never rewrites a policy that
exists."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from soda_operator.runner import ensure_policy

ROOT = Path(__file__).resolve().parents[1]
HELM = str(ROOT / "hack" / "helm.sh")
NS, REL = "kubesoda-policy", "pol"


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([HELM, *args], capture_output=True, text=True, timeout=180)
    if check and proc.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)}: {proc.stderr}")
    return proc


def install(*extra: str) -> subprocess.CompletedProcess[str]:
    return helm("upgrade", "--install", REL, str(ROOT / "charts" / "kubesoda"), "-n", NS, "--create-namespace",
                "--set", "policy.macroEpochSeconds=70", "--set", "networkPolicy.enabled=false", "--wait=false", *extra)


def policy(kubectl) -> dict:
    return json.loads(kubectl("get", "schedulingpolicy", "default", "-o", "json").stdout)


def test_the_chart_leaves_kubesoda_runs_policy_alone_until_handed_over(kube, kubectl):
    kubectl("apply", "--server-side", "-f", str(ROOT / "crds"))  # as before `kubesoda run` (README)
    kubectl("delete", "schedulingpolicy", "default", "--ignore-not-found")
    try:
        ensure_policy(kube.api_client)  # what `kubesoda run` does at start
        made = policy(kubectl)
        assert made["spec"].get("macroEpochSeconds") == 60  # the CRD's default
        # main's chart: "SchedulingPolicy "default" ... exists and cannot be imported into the current release"
        out = install()
        assert "already existed" in out.stdout and "kubectl delete schedulingpolicy default && helm upgrade" in out.stdout, out.stdout
        kept = policy(kubectl)
        assert kept["metadata"]["uid"] == made["metadata"]["uid"] and kept["spec"] == made["spec"]
        assert "meta.helm.sh/release-name" not in (kept["metadata"].get("annotations") or {})
        assert "kind: SchedulingPolicy" not in helm("get", "manifest", REL, "-n", NS).stdout
        # an upgrade does not take it either
        install()
        assert policy(kubectl)["spec"] == made["spec"]
        # the hand-over the NOTES print: delete it, upgrade (the chart creates it from its values)
        kubectl("delete", "schedulingpolicy", "default")
        install()
        adopted = policy(kubectl)
        assert adopted["spec"]["macroEpochSeconds"] == 70
        assert adopted["metadata"]["annotations"]["meta.helm.sh/release-name"] == REL
        assert "kind: SchedulingPolicy" in helm("get", "manifest", REL, "-n", NS).stdout
        # `kubesoda run` against the release's policy changes nothing
        ensure_policy(kube.api_client)
        assert policy(kubectl)["spec"] == adopted["spec"]
    finally:
        helm("uninstall", REL, "-n", NS, check=False)
    # the release owned it at the end, so uninstall removes it
    assert kubectl("get", "schedulingpolicy", "default", check=False).returncode != 0


def test_uninstall_keeps_a_policy_the_release_never_owned(kube, kubectl):
    kubectl("apply", "--server-side", "-f", str(ROOT / "crds"))
    kubectl("delete", "schedulingpolicy", "default", "--ignore-not-found")
    ensure_policy(kube.api_client)
    uid = policy(kubectl)["metadata"]["uid"]
    try:
        install()
    finally:
        helm("uninstall", REL, "-n", NS, check=False)
    assert policy(kubectl)["metadata"]["uid"] == uid
