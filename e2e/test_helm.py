"""The Helm chart on the real control plane: install, upgrade, uninstall; and least privilege:
the operator passes its scenario with only the chart's ServiceAccount permissions, and fails
when one verb is taken away."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
HELM = str(ROOT / "hack" / "helm.sh")
NS = "kubesoda-system"
REL = "soda"


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([HELM, *args], capture_output=True, text=True, timeout=180)
    if check and proc.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)}: {proc.stderr}")
    return proc


RESTRICTED_NS = """apiVersion: v1
kind: Namespace
metadata:
  name: {name}
  labels:
    pod-security.kubernetes.io/enforce: restricted
    pod-security.kubernetes.io/enforce-version: latest
"""

PLAIN = """apiVersion: v1
kind: Pod
metadata: {name: plain-probe}
spec:
  containers: [{name: c, image: registry.k8s.io/pause:3.10}]  # no securityContext: fine under baseline, not restricted
"""


@pytest.fixture(scope="module")
def release(kubectl):
    kubectl("delete", "schedulingpolicy", "default", "--ignore-not-found", check=False)  # the chart owns it
    # the release namespace enforces the `restricted` Pod Security Standard: the API server admits
    # the chart's pods only if they pass it
    kubectl("apply", "-f", "-", input=RESTRICTED_NS.format(name=NS))
    helm("upgrade", "--install", REL, str(ROOT / "charts" / "kubesoda"), "-n", NS,
         "--set", "policy.macroEpochSeconds=6", "--set", "policy.microEpochSeconds=2",
         "--set", "policy.macroQDeadlineSeconds=1", "--set", "policy.macroWDeadlineSeconds=1", "--wait=false")
    yield REL
    helm("uninstall", REL, "-n", NS, check=False)


def test_install_creates_everything(release, kube, kubectl):
    for crd in ("streamtemplates.kubesoda.io", "streamjobs.kubesoda.io", "schedulingpolicies.kubesoda.io", "clusterkopfpeerings.kopf.dev"):
        kubectl("get", "crd", crd)
    # leader election on by default: the release's own peering object, named in the operator's args
    kubectl("get", "clusterkopfpeering", f"{REL}-{NS}")
    deps = {d.metadata.name for d in kube.apps.list_namespaced_deployment(NS).items}
    assert deps == {f"{REL}-operator", f"{REL}-extender", f"{REL}-scheduler"}
    op = kube.apps.read_namespaced_deployment(f"{REL}-operator", NS)
    pod = op.spec.template.spec
    assert pod.security_context.run_as_non_root and pod.security_context.seccomp_profile.type == "RuntimeDefault"
    c = pod.containers[0]
    assert c.security_context.read_only_root_filesystem and c.security_context.capabilities.drop == ["ALL"]
    assert c.liveness_probe and c.readiness_probe and c.resources.requests
    assert f"--peering={REL}-{NS}" in c.args and "--priority=auto" in c.args
    pol = json.loads(kubectl("get", "sp", "default", "-o", "json").stdout)
    assert pol["spec"]["macroEpochSeconds"] == 6
    cm = kube.core.read_namespaced_config_map(f"{REL}-scheduler", NS)
    assert f"{REL}-extender.{NS}.svc" in cm.data["config.yaml"] and "ignorable: false" in cm.data["config.yaml"]
    assert "percentageOfNodesToScore: 100" in cm.data["config.yaml"]  # every feasible node reaches the extender


def test_chart_pods_pass_the_restricted_pod_security_standard(release, kube, kubectl, wait_for):
    # the enforcement is real: the API server refuses a pod without a securityContext in the release namespace
    bad = kubectl("apply", "-n", NS, "-f", "-", input=PLAIN, check=False)
    assert bad.returncode != 0 and "violates PodSecurity" in bad.stderr and "restricted" in bad.stderr, bad.stderr

    def admitted() -> set[str]:
        pods = kube.core.list_namespaced_pod(NS, label_selector=f"app.kubernetes.io/instance={REL}").items
        return {p.metadata.labels.get("app.kubernetes.io/component") for p in pods} >= {"operator", "extender", "scheduler"}

    wait_for(admitted, timeout=90, what="a pod of each chart Deployment admitted under `restricted`")


def test_second_scheduler_can_do_its_job(release, kubectl):
    sa = f"system:serviceaccount:{NS}:{REL}-scheduler"
    for args in (("update", f"leases/{REL}-scheduler", "-n", NS), ("create", "pods", "--subresource=binding", "-n", "default"),
                 ("list", "nodes"), ("watch", "pods", "-A"), ("get", "configmaps/extension-apiserver-authentication", "-n", "kube-system")):
        assert kubectl("auth", "can-i", *args, "--as", sa, check=False).stdout.strip() == "yes", args
    assert kubectl("auth", "can-i", "get", "secrets", "-n", NS, "--as", f"system:serviceaccount:{NS}:{REL}-extender", check=False).stdout.strip() == "no"


def test_bad_values_fail_at_install_with_a_clear_message():
    proc = helm("install", "bad", str(ROOT / "charts" / "kubesoda"), "-n", NS, "--set", "extender.port=0", "--dry-run", check=False)
    assert proc.returncode != 0 and "/extender/port" in proc.stderr and "minimum" in proc.stderr
    proc = helm("install", "bad", str(ROOT / "charts" / "kubesoda"), "-n", NS, "--set", "operator.replicas=2", "--set", "operator.peering=",
                "--dry-run", check=False)
    assert proc.returncode != 0 and "operator.replicas > 1 needs operator.peering" in proc.stderr


def test_upgrade_changes_a_value(release, kube):
    helm("upgrade", REL, str(ROOT / "charts" / "kubesoda"), "-n", NS, "--reuse-values", "--set", "extender.replicas=3", "--wait=false")
    assert kube.apps.read_namespaced_deployment(f"{REL}-extender", NS).spec.replicas == 3


# ---------------------------------------------------------------------------------------- RBAC


def sa_kubeconfig(kubectl, tmp_path: Path) -> Path:
    token = kubectl("create", "token", f"{REL}-operator", "-n", NS, "--duration", "1h").stdout.strip()
    admin = yaml.safe_load(Path(os.environ["KUBECONFIG"]).read_text())
    cluster = admin["clusters"][0]["cluster"]
    cfg = {"apiVersion": "v1", "kind": "Config", "clusters": [{"name": "c", "cluster": cluster}],
           "users": [{"name": "sa", "user": {"token": token}}], "contexts": [{"name": "c", "context": {"cluster": "c", "user": "sa"}}],
           "current-context": "c"}
    path = tmp_path / "sa.kubeconfig"
    path.write_text(yaml.safe_dump(cfg))
    return path


def run_operator(kubeconfig: Path, port: int, log: Path) -> subprocess.Popen:
    env = dict(os.environ, KUBECONFIG=str(kubeconfig))
    return subprocess.Popen([sys.executable, "-m", "soda_operator.cli", "run", "--extender-port", str(port)],
                            env=env, stdout=log.open("w"), stderr=subprocess.STDOUT, cwd=ROOT)


def stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()


def test_operator_works_with_only_the_charts_permissions(release, kube, kubectl, namespace, wait_for, extender_port, tmp_path):
    from test_operator import running_as_planned

    # the chart's own operator Deployment cannot run here (KWOK runs no containers); scale it to 0
    kube.apps.patch_namespaced_deployment_scale(f"{REL}-operator", NS, {"spec": {"replicas": 0}})
    cfg = sa_kubeconfig(kubectl, tmp_path)
    # sanity: the identity really is restricted
    env = dict(os.environ, KUBECONFIG=str(cfg))
    denied = subprocess.run(["kubectl", "get", "secrets", "-A"], env=env, capture_output=True, text=True)
    assert denied.returncode != 0 and "forbidden" in denied.stderr.lower()
    proc = run_operator(cfg, extender_port, tmp_path / "op.log")
    try:
        kubectl("apply", "-n", namespace, "-f", str(ROOT / "examples" / "small-pipeline"))
        wait_for(lambda: running_as_planned(kube, namespace, "clicks"), timeout=90, what="clicks Running under the SA")
        time.sleep(3)  # a few more epochs: no call the operator makes may be denied
        assert "forbidden" not in (tmp_path / "op.log").read_text().lower()
        # take one verb away: creating pods
        role = kube.rbac.read_cluster_role(f"{REL}-operator")
        for rule in role.rules:
            if rule.resources == ["pods"]:
                rule.verbs = [v for v in rule.verbs if v != "create"]
        kube.rbac.replace_cluster_role(f"{REL}-operator", role)
        kubectl("apply", "-n", namespace, "-f", str(ROOT / "examples" / "glued"))
        wait_for(lambda: "forbidden" in (tmp_path / "op.log").read_text().lower(), timeout=60, what="the operator hitting 403 on pod create")
        time.sleep(5)
        assert not kube.core.list_namespaced_pod(namespace, label_selector="kubesoda.io/job=alerts").items
    finally:
        stop(proc)
        helm("upgrade", REL, str(ROOT / "charts" / "kubesoda"), "-n", NS, "--reuse-values", "--wait=false", check=False)  # restores the role


def test_namespace_users_write_jobs_but_not_the_policy(release, kubectl, namespace):
    """The chart's roles aggregate into the built-in ones: a user with `edit` in a namespace may
    write StreamJobs and StreamTemplates there, `view` only read them, and neither may write the
    cluster-scoped SchedulingPolicy, where ranks are overridden (rankOverrides) and budgets kept."""
    for sa, role in (("dev", "edit"), ("auditor", "view")):
        kubectl("create", "serviceaccount", sa, "-n", namespace)
        kubectl("create", "rolebinding", f"{sa}-{role}", f"--clusterrole={role}", f"--serviceaccount={namespace}:{sa}", "-n", namespace)

    def can(sa: str, *what: str) -> bool:
        out = kubectl("auth", "can-i", *what, f"--as=system:serviceaccount:{namespace}:{sa}", check=False)
        return out.stdout.strip() == "yes"

    assert can("dev", "create", "streamjobs.kubesoda.io", "-n", namespace)
    assert can("dev", "delete", "streamtemplates.kubesoda.io", "-n", namespace)
    assert not can("dev", "create", "streamjobs.kubesoda.io", "-n", "default")  # only in its namespace
    assert can("auditor", "list", "streamjobs.kubesoda.io", "-n", namespace)
    assert not can("auditor", "create", "streamjobs.kubesoda.io", "-n", namespace)
    for sa in ("dev", "auditor"):
        assert not can(sa, "patch", "schedulingpolicies.kubesoda.io/default")
        assert not can(sa, "patch", "schedulingpolicies.kubesoda.io/default", "--subresource=status")


def test_chart_crds_are_the_top_level_crds(tmp_path):
    """The chart's crds/ are symlinks to crds/ (one source of truth); the packaged chart holds their content."""
    for f in (ROOT / "crds").glob("*.yaml"):
        link = ROOT / "charts" / "kubesoda" / "crds" / f.name
        assert link.is_symlink() and link.resolve() == f.resolve(), link
    helm("package", str(ROOT / "charts" / "kubesoda"), "-d", str(tmp_path))
    import tarfile
    with tarfile.open(next(tmp_path.glob("kubesoda-*.tgz"))) as tar:
        for f in (ROOT / "crds").glob("*.yaml"):
            member = tar.extractfile(f"kubesoda/crds/{f.name}")
            assert member is not None and member.read() == f.read_bytes(), f.name


def test_uninstall_leaves_no_operator_objects(kube, kubectl):
    helm("upgrade", "--install", "gone", str(ROOT / "charts" / "kubesoda"), "-n", "kubesoda-gone", "--create-namespace",
         "--set", "createPolicy=false", "--wait=false")
    helm("uninstall", "gone", "-n", "kubesoda-gone")
    assert not kube.apps.list_namespaced_deployment("kubesoda-gone").items
    assert not [s for s in kube.core.list_namespaced_service_account("kubesoda-gone").items if s.metadata.name.startswith("gone-")]
    assert not [r for r in kube.rbac.list_cluster_role().items if r.metadata.name.startswith("gone-")]
    assert not [b for b in kube.rbac.list_cluster_role_binding().items if b.metadata.name.startswith("gone-")]
    assert not kube.core.list_namespaced_config_map("kubesoda-gone", label_selector="app.kubernetes.io/instance=gone").items
    assert kubectl("get", "clusterkopfpeering", "gone-kubesoda-gone", check=False).returncode != 0
