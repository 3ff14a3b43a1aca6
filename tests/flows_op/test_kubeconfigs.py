"""Kubeconfigs from Secrets (soda_operator.flows.kubeconfigs): inline credentials only, Secrets of the
operator's namespace only, and a chart whose ClusterRole reads no Secret."""

from __future__ import annotations

import base64
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from soda_operator.flows import kubeconfigs, members

ROOT = Path(__file__).resolve().parents[2]
CA = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n").decode()


def kubeconfig(user: dict[str, Any], cluster: dict[str, Any] | None = None, **top: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Config", "current-context": "c",
            "clusters": [{"name": "k", "cluster": {"server": "https://127.0.0.1:1", **(cluster or {})}}],
            "users": [{"name": "u", "user": user}], "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}], **top}


def raw(doc: dict[str, Any]) -> bytes:
    return yaml.safe_dump(doc).encode()


@pytest.mark.parametrize(("doc", "path"), [
    (kubeconfig({"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "id"}}), "users[0].user.exec"),
    (kubeconfig({"auth-provider": {"name": "oidc", "config": {}}}), "users[0].user.auth-provider"),
    (kubeconfig({"tokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token"}), "users[0].user.tokenFile"),
    (kubeconfig({"client-certificate": "/etc/x.crt", "client-key": "/etc/x.key"}), "users[0].user.client-certificate"),
    (kubeconfig({"token": "t"}, {"certificate-authority": "/etc/ca.crt"}), "clusters[0].cluster.certificate-authority"),
    (kubeconfig({"token": "t"}, {"LocationOfOrigin": "/root/.kube/config"}), "clusters[0].cluster.LocationOfOrigin"),
    (kubeconfig({"token": "t"}, extensions=[{"name": "x"}]), "extensions"),
])
def test_anything_but_inline_credentials_is_refused_by_its_path(doc, path):
    assert path in kubeconfigs.unsafe_entries(doc)
    with pytest.raises(kubeconfigs.Refused, match=path.replace("[", r"\[").replace("]", r"\]")) as e:
        kubeconfigs.parse(raw(doc))
    assert "--allow-unsafe-kubeconfigs" in str(e.value)
    assert kubeconfigs.parse(raw(doc), allow_unsafe=True) == doc


def test_inline_credentials_make_a_client():
    doc = kubeconfig({"client-certificate-data": CA, "client-key-data": CA, "token": "t"}, {"certificate-authority-data": CA})
    assert kubeconfigs.unsafe_entries(doc) == []
    api = kubeconfigs.api_client(raw(doc))
    assert api.configuration.host == "https://127.0.0.1:1"


def test_an_exec_kubeconfig_runs_nothing_unless_allowed(tmp_path):
    """The finding: an exec entry ran its command inside the operator. Refused, it runs nothing;
    with the administrator's flag, the client runs it (the danger the default refuses)."""
    marker = tmp_path / "ran"
    doc = kubeconfig({"exec": {"apiVersion": "client.authentication.k8s.io/v1beta1", "command": "sh",
                               "args": ["-c", f"touch {marker}; echo '{{\"apiVersion\":\"client.authentication.k8s.io/v1beta1\","
                                              f"\"kind\":\"ExecCredential\",\"status\":{{\"token\":\"x\"}}}}'"]}})
    with pytest.raises(kubeconfigs.Refused):
        kubeconfigs.api_client(raw(doc))
    assert not marker.exists()
    kubeconfigs.api_client(raw(doc), allow_unsafe=True)
    assert marker.exists()


def test_members_read_secrets_only_in_the_operators_namespace(tmp_path):
    class Core:  # the CoreV1Api surface Members uses; records what it was asked
        def __init__(self) -> None:
            self.read: list[tuple[str, str]] = []

        def read_namespaced_secret(self, name: str, ns: str) -> Any:
            self.read.append((ns, name))
            data = {"kubeconfig": base64.b64encode(raw(kubeconfig({"exec": {"command": f"touch {tmp_path / 'ran'}"}}))).decode()}
            return type("S", (), {"data": data, "metadata": type("M", (), {"resource_version": "1"})()})()

    core = Core()
    m = members.Members(core, namespace="kubesoda-system")  # type: ignore[arg-type]
    with pytest.raises(kubeconfigs.Refused, match="read only from the operator's namespace kubesoda-system"):
        m.api(("tenant", "m1", "kubeconfig"))
    assert core.read == []
    with pytest.raises(kubeconfigs.Refused, match=r"Secret kubesoda-system/m1 key kubeconfig: the kubeconfig holds users\[0\]\.user\.exec"):
        m.api(("", "m1", "kubeconfig"))  # no namespace: the operator's
    assert core.read == [("kubesoda-system", "m1")] and not (tmp_path / "ran").exists()


def test_operator_namespace(monkeypatch):
    monkeypatch.setenv("POD_NAMESPACE", "ops")
    assert kubeconfigs.operator_namespace() == "ops" and kubeconfigs.operator_namespace("given") == "given"
    monkeypatch.delenv("POD_NAMESPACE")
    monkeypatch.setattr(kubeconfigs, "SA_NAMESPACE", Path("/nonexistent"))
    assert kubeconfigs.operator_namespace() == "default"


def test_the_chart_reads_secrets_only_in_its_namespace():
    out = subprocess.run([str(ROOT / "hack" / "helm.sh"), "template", "r", str(ROOT / "charts" / "kubesoda"), "-n", "ops",
                          "--kube-version", "1.35.8"], capture_output=True, text=True, check=True, timeout=300).stdout
    docs = [d for d in yaml.safe_load_all(out) if d]
    rules = {(d["kind"], d["metadata"].get("namespace")): [r for rule in d["rules"] for r in rule.get("resources", [])]
             for d in docs if d["kind"] in ("ClusterRole", "Role") and "operator" in d["metadata"]["name"]}
    assert "secrets" not in rules[("ClusterRole", None)]
    assert rules[("Role", "ops")] == ["secrets"]
    op = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"].endswith("operator"))
    env = {e["name"]: e for e in op["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    assert "--allow-unsafe-kubeconfigs" not in op["spec"]["template"]["spec"]["containers"][0]["args"]
