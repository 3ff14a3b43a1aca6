"""The chart's NetworkPolicies and the extender's health port (issue 45), rendered by
``helm template``: on by default, the extender's verbs port open only to the kubesoda scheduler's
pods, the /metrics ports only to the values' Prometheus selector, nothing to the scheduler; the
extender's probes on its plain-HTTP health port, which the ServiceMonitor scrapes."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
REL, NS = "r", "ops"
SCHEDULER = {"app.kubernetes.io/instance": REL, "app.kubernetes.io/component": "scheduler"}
PROMETHEUS = [{"namespaceSelector": {}, "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}}]


def render(*values: str) -> list[dict[str, Any]]:
    args = [a for v in values for a in ("--set-json", v)]
    out = subprocess.run([str(ROOT / "hack" / "helm.sh"), "template", REL, str(ROOT / "charts" / "kubesoda"), "-n", NS,
                          "--kube-version", "1.35.8", *args], capture_output=True, text=True, check=True, timeout=300).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def policies(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"].removeprefix(f"{REL}-"): d["spec"] for d in docs if d["kind"] == "NetworkPolicy"}


def one(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    return next(d for d in docs if d["kind"] == kind and d["metadata"]["name"] == f"{REL}-{name}")


def test_network_policies_are_on_by_default_and_admit_only_who_needs_them():
    docs = render()
    pol = policies(docs)
    assert set(pol) == {"extender", "operator", "scheduler"}
    for component, spec in pol.items():
        assert spec["podSelector"]["matchLabels"] == {"app.kubernetes.io/instance": REL, "app.kubernetes.io/component": component}
        assert spec["policyTypes"] == ["Ingress"]
    verbs, metrics = pol["extender"]["ingress"]
    assert verbs == {"from": [{"podSelector": {"matchLabels": SCHEDULER}}], "ports": [{"port": 8888, "protocol": "TCP"}]}
    assert metrics == {"from": PROMETHEUS, "ports": [{"port": 8889, "protocol": "TCP"}]}
    assert pol["operator"]["ingress"] == [{"from": PROMETHEUS, "ports": [{"port": 9090, "protocol": "TCP"}]}]
    assert pol["scheduler"]["ingress"] == []
    # the scheduler pods the verbs port admits are the chart's scheduler pods
    sched = one(docs, "Deployment", "scheduler")["spec"]["template"]["metadata"]["labels"]
    assert SCHEDULER.items() <= sched.items()
    ext = one(docs, "Deployment", "extender")["spec"]["template"]["metadata"]["labels"]
    assert not SCHEDULER.items() <= ext.items()


def test_the_extenders_probes_and_metrics_use_its_health_port():
    docs = render('extender.healthPort=9999')
    c = one(docs, "Deployment", "extender")["spec"]["template"]["spec"]["containers"][0]
    assert "--health-port=9999" in c["args"]
    assert {"name": "metrics", "containerPort": 9999} in c["ports"]
    for probe in (c["livenessProbe"], c["readinessProbe"]):
        assert probe["httpGet"]["port"] == "metrics" and probe["httpGet"]["path"] == "/healthz" and "scheme" not in probe["httpGet"]
    svc = one(docs, "Service", "extender")["spec"]["ports"]
    assert {"name": "metrics", "port": 9999, "targetPort": "metrics"} in svc
    assert policies(docs)["extender"]["ingress"][1]["ports"] == [{"port": 9999, "protocol": "TCP"}]
    sm = next(d for d in render("serviceMonitor.enabled=true") if d["kind"] == "ServiceMonitor")
    assert [e["port"] for e in sm["spec"]["endpoints"]] == ["metrics"] and "scheme" not in sm["spec"]["endpoints"][0]


def test_the_selectors_come_from_the_values():
    mine = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
    ours = [{"ipBlock": {"cidr": "10.0.0.0/24"}}]
    pol = policies(render(f"networkPolicy.metricsFrom={json.dumps(mine)}", f"networkPolicy.extenderFrom={json.dumps(ours)}",
                          "scheduler.enabled=false"))
    assert set(pol) == {"extender", "operator"}
    assert pol["extender"]["ingress"] == [{"from": ours, "ports": [{"port": 8888, "protocol": "TCP"}]},
                                          {"from": mine, "ports": [{"port": 8889, "protocol": "TCP"}]}]
    pol = policies(render("networkPolicy.metricsFrom=[]", "scheduler.enabled=false"))
    assert pol["extender"]["ingress"] == [] and pol["operator"]["ingress"] == []
    assert policies(render("networkPolicy.enabled=false")) == {}
