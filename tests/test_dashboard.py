"""The Grafana dashboard in the chart names only metrics that the operator and extender export
(a panel that queries a renamed or missing metric fails here, not silently in Grafana)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client import REGISTRY

from soda_operator.kube import metrics  # noqa: F401  (registers the metrics)

DASHBOARD = Path(__file__).resolve().parents[1] / "charts" / "kubesoda" / "dashboards" / "kubesoda.json"
SUFFIXES = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_count", "_sum"), "summary": ("_count", "_sum", "")}


def exported() -> set[str]:
    names = set()
    for fam in REGISTRY.collect():
        names.update(fam.name + s for s in SUFFIXES.get(fam.type, ("",)))
    return names


def test_every_panel_queries_exported_metrics():
    dash = json.loads(DASHBOARD.read_text())
    have = exported()
    assert "kubesoda_stage_seconds_bucket" in have and "kubesoda_pod_changes_total" in have  # the check itself works
    used = set()
    for panel in dash["panels"]:
        assert panel["targets"], f"panel {panel['title']!r} has no query"
        for t in panel["targets"]:
            names = set(re.findall(r"\bkubesoda_[a-z_]+\b", t["expr"]))
            assert names, f"panel {panel['title']!r}: {t['expr']!r} names no kubesoda metric"
            missing = names - have
            assert not missing, f"panel {panel['title']!r} queries {sorted(missing)}, which nothing exports"
            used |= names
    # the panels: stages, importance projected vs observed, jobs, pod changes, extender, leader
    for want in ("kubesoda_stage_seconds_bucket", "kubesoda_projected_importance", "kubesoda_observed_importance", "kubesoda_jobs",
                 "kubesoda_pod_changes_total", "kubesoda_extender_seconds_bucket", "kubesoda_extender_seconds_count", "kubesoda_leader"):
        assert want in used, f"no panel shows {want}"


def test_panels_do_not_overlap():
    dash = json.loads(DASHBOARD.read_text())
    cells = {}
    for p in dash["panels"]:
        g = p["gridPos"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"panels {cells.get((x, y))!r} and {p['title']!r} overlap"
                cells[(x, y)] = p["title"]
        assert g["x"] + g["w"] <= 24
