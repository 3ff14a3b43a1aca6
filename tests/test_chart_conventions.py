"""The chart's platform conventions (issue 48, item 2), rendered by the cached helm binary
(hack/build-binaries.sh's cache; skipped when it is not there): the chart as a dependency of an
umbrella chart with ``global`` values passes ``helm lint`` and ``helm template``; pull secrets,
priority, spread, PDBs, pod labels and annotations, readiness on every container, and cert-manager
certificates that render the same on every ``helm template`` (which the generated Secret does not)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "charts" / "kubesoda"
REL, NS, KUBE = "r", "ops", "1.35.8"


def find_helm() -> Path | None:
    cache = Path(os.environ.get("KUBESODA_CACHE", Path.home() / ".cache" / "kubesoda"))
    found = sorted(cache.glob("bin/*/helm"))
    return found[-1] if found else None


HELM = find_helm()
pytestmark = pytest.mark.skipif(HELM is None, reason="no helm in ~/.cache/kubesoda/bin (hack/build-binaries.sh builds it)")


def helm(*args: str | Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([str(HELM), *map(str, args)], capture_output=True, text=True, timeout=300)
    if check and proc.returncode != 0:
        raise AssertionError(f"helm {' '.join(map(str, args))}:\n{proc.stderr}")
    return proc


def render(*values: str, chart: Path = CHART, check: bool = True) -> list[dict[str, Any]]:
    args = [a for v in values for a in ("--set-json", v)]
    out = helm("template", REL, chart, "-n", NS, "--kube-version", KUBE, *args, check=check).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def of_kind(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"].removeprefix(f"{REL}-"): d for d in docs if d["kind"] == kind}


def pods(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {name: d["spec"]["template"] for name, d in of_kind(docs, "Deployment").items()}


def matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return selector.items() <= labels.items()


# ------------------------------------------------------------------------------ umbrella chart


def test_the_chart_as_a_dependency_of_an_umbrella_chart_with_global_values(tmp_path):
    umbrella = tmp_path / "platform"
    umbrella.mkdir()
    (umbrella / "Chart.yaml").write_text(yaml.safe_dump({
        "apiVersion": "v2", "name": "platform", "version": "1.0.0",
        "dependencies": [{"name": "kubesoda", "version": "0.1.0", "repository": f"file://{CHART}"}]}))
    # what umbrella charts put in global (their own keys besides the ones this chart reads)
    (umbrella / "values.yaml").write_text(yaml.safe_dump({
        "global": {"imagePullSecrets": [{"name": "platform-pull"}, "shared"], "imageRegistry": "registry.example",
                   "storageClass": "fast"},
        "kubesoda": {"imagePullSecrets": [{"name": "mine"}, {"name": "shared"}], "podLabels": {"team": "streams"}}}))
    helm("dependency", "update", umbrella)
    lint = helm("lint", umbrella, "--with-subcharts", "--kube-version", KUBE, check=False)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    docs = render(chart=umbrella)
    deps = pods(docs)
    assert set(deps) == {"operator", "extender", "scheduler"}
    for name, pod in deps.items():
        # the chart's own and the umbrella's global pull secrets, each once
        assert pod["spec"]["imagePullSecrets"] == [{"name": "mine"}, {"name": "shared"}, {"name": "platform-pull"}], name
        assert pod["metadata"]["labels"]["team"] == "streams"
    # a value the schema refuses is still refused through the umbrella (the schema is in force)
    (umbrella / "values.yaml").write_text(yaml.safe_dump({"global": {}, "kubesoda": {"extender": {"replicas": 0}}}))
    bad = helm("template", REL, umbrella, "--kube-version", KUBE, check=False)
    assert bad.returncode != 0 and "replicas" in bad.stderr and "minimum" in bad.stderr, bad.stderr


# --------------------------------------------------------------------------------- conventions


def test_every_container_has_liveness_and_readiness_probes():
    for name, pod in pods(render()).items():
        for c in pod["spec"]["containers"]:
            assert c.get("readinessProbe") and c.get("livenessProbe"), (name, c["name"])
    sched = pods(render())["scheduler"]["spec"]["containers"][0]
    assert sched["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "https", "scheme": "HTTPS"}


def test_priority_is_high_by_default_and_can_be_the_charts_own_class():
    docs = render()
    assert {n: p["spec"].get("priorityClassName") for n, p in pods(docs).items()} == dict.fromkeys(
        ("operator", "extender", "scheduler"), "system-cluster-critical")
    assert not of_kind(docs, "PriorityClass")
    docs = render('priorityClassName="kubesoda-critical"', 'priorityClass={"create": true, "value": 1000000}',
                  'operator.priorityClassName="batch"')
    assert set(of_kind(docs, "PriorityClass")) == {"kubesoda-critical"}
    pc = of_kind(docs, "PriorityClass")["kubesoda-critical"]
    assert pc["value"] == 1000000 and pc["globalDefault"] is False
    assert {n: p["spec"]["priorityClassName"] for n, p in pods(docs).items()} == {
        "operator": "batch", "extender": "kubesoda-critical", "scheduler": "kubesoda-critical"}
    assert all("priorityClassName" not in p["spec"] for p in pods(render('priorityClassName=""')).values())
    bad = helm("template", REL, CHART, "--kube-version", KUBE, "--set-json", 'priorityClass={"create": true}', check=False)
    assert bad.returncode != 0 and "system-* classes" in bad.stderr


def test_extender_replicas_spread_and_keep_a_disruption_budget():
    docs = render()
    ext = of_kind(docs, "Deployment")["extender"]
    labels = ext["spec"]["template"]["metadata"]["labels"]
    spread = ext["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert [c["topologyKey"] for c in spread] == ["kubernetes.io/hostname", "topology.kubernetes.io/zone"]
    for c in spread:
        assert c["whenUnsatisfiable"] == "ScheduleAnyway" and matches(c["labelSelector"]["matchLabels"], labels)
        assert c["labelSelector"]["matchLabels"]["app.kubernetes.io/component"] == "extender"
    pdbs = of_kind(docs, "PodDisruptionBudget")
    assert set(pdbs) == {"extender"}  # the one component with more than one replica
    assert matches(pdbs["extender"]["spec"]["selector"]["matchLabels"], labels)
    assert pdbs["extender"]["spec"]["maxUnavailable"] == 1
    # the operator's hot standby gets one too; the extender's own anti-affinity is the user's
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app.kubernetes.io/component": "extender"}}}]}}
    docs = render("operator.replicas=2", f"extender.affinity={json.dumps(anti)}", "extender.topologySpreadConstraints=[]")
    assert set(of_kind(docs, "PodDisruptionBudget")) == {"extender", "operator"}
    ext = pods(docs)["extender"]["spec"]
    assert ext["affinity"] == anti and "topologySpreadConstraints" not in ext
    assert of_kind(render("podDisruptionBudget.enabled=false", "operator.replicas=2"), "PodDisruptionBudget") == {}


def test_pod_labels_and_annotations_never_break_the_selectors():
    docs = render('podLabels={"team": "streams", "app.kubernetes.io/component": "x"}', 'podAnnotations={"a": "1"}',
                  'extender.podAnnotations={"b": "2"}', 'extender.podLabels={"tier": "control"}')
    for name, dep in of_kind(docs, "Deployment").items():
        meta = dep["spec"]["template"]["metadata"]
        assert matches(dep["spec"]["selector"]["matchLabels"], meta["labels"]), name
        assert meta["labels"]["team"] == "streams" and meta["labels"]["app.kubernetes.io/component"] == name
        assert meta["annotations"]["a"] == "1"
    ext = pods(docs)["extender"]["metadata"]
    assert ext["annotations"] == {"a": "1", "b": "2"} and ext["labels"]["tier"] == "control"
    assert "tier" not in pods(docs)["operator"]["metadata"]["labels"]


# --------------------------------------------------------------------------------- certificates


def tls_volume(pod: dict[str, Any]) -> dict[str, Any]:
    return next(v for v in pod["spec"]["volumes"] if v["name"] == "tls")


def test_generated_certificates_change_on_every_template_and_cert_manager_ones_do_not():
    # the oracle of the Argo CD problem: two `helm template` runs differ in the generated Secret
    assert of_kind(render(), "Secret")["extender-tls"]["data"] != of_kind(render(), "Secret")["extender-tls"]["data"]
    cm = ('extender.tls.certManager={"enabled": true}',)
    first, second = render(*cm), render(*cm)
    assert first == second
    assert "extender-tls" not in of_kind(first, "Secret")
    certs = of_kind(first, "Certificate")
    assert set(certs) == {"extender-ca", "extender", "scheduler-client"} and certs["extender-ca"]["spec"]["isCA"]
    assert set(of_kind(first, "Issuer")) == {"selfsigned", "extender-ca"}
    srv, cli = certs["extender"]["spec"], certs["scheduler-client"]["spec"]
    assert f"{REL}-extender.{NS}.svc" in srv["dnsNames"] and "server auth" in srv["usages"]
    assert "client auth" in cli["usages"]
    assert srv["issuerRef"] == cli["issuerRef"] == {"name": f"{REL}-extender-ca", "kind": "Issuer", "group": "cert-manager.io"}
    p = pods(first)
    # the extender serves tls.crt/tls.key and checks clients against ca.crt of its own Secret ...
    assert tls_volume(p["extender"])["secret"]["secretName"] == srv["secretName"]
    # ... and the scheduler finds ca.crt, client.crt, client.key (its config's paths) in its own
    sched = tls_volume(p["scheduler"])["secret"]
    assert sched["secretName"] == cli["secretName"] != srv["secretName"]
    assert {i["path"]: i["key"] for i in sched["items"]} == {"ca.crt": "ca.crt", "client.crt": "tls.crt", "client.key": "tls.key"}
    config = yaml.safe_load(of_kind(first, "ConfigMap")["scheduler"]["data"]["config.yaml"])
    tls = config["extenders"][0]["tlsConfig"]
    assert {Path(tls[k]).name for k in ("caFile", "certFile", "keyFile")} == {"ca.crt", "client.crt", "client.key"}
    # an issuer of the user's: no CA of the chart's
    mine = render('extender.tls.certManager={"enabled": true, "issuerRef": {"name": "corp-ca", "kind": "ClusterIssuer"}}')
    assert not of_kind(mine, "Issuer") and set(of_kind(mine, "Certificate")) == {"extender", "scheduler-client"}
    assert of_kind(mine, "Certificate")["extender"]["spec"]["issuerRef"] == {"name": "corp-ca", "kind": "ClusterIssuer",
                                                                             "group": "cert-manager.io"}


def test_a_policy_is_rendered_for_helm_template():
    # `helm template` cannot look the cluster up: it renders the policy (the lookup-based skip of a
    # policy another owner holds needs the API server: e2e/test_helm.py)
    assert set(of_kind(render(), "SchedulingPolicy")) == {"default"}
    assert of_kind(render("createPolicy=false"), "SchedulingPolicy") == {}
