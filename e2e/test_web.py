"""The web view in a real browser: ``kubesoda run --web-port`` against the live cluster, the page
opened in headless Chromium (Debian's package, driven by Playwright from PyPI; hack/install-browser.sh
installs it, `make e2e` runs that first), and what a user sees checked against the cluster: the
nodes, a job's pods on their nodes, a rejected job's reason, and the page following a node deletion
without a reload.

Screenshots go to the test's output directory (pytest's tmp_path); with KUBESODA_UPDATE_SCREENSHOT=1
the first one also replaces docs/img/web-view.png (the README's).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.request

import pytest
from live import ROOT, job, pe_pods, running_as_planned

CHROMIUM = os.environ.get("KUBESODA_CHROMIUM", "/usr/bin/chromium")
# the cluster's port base + 20 (hack/with-cluster.sh exports the base; its env file names the extender's, base + 6)
WEB_PORT = int(os.environ.get("KUBESODA_WEB_PORT")
               or int(os.environ.get("KUBESODA_PORT_BASE") or int(os.environ.get("KUBESODA_EXTENDER_PORT", "27006")) - 6) + 20)
URL = f"http://127.0.0.1:{WEB_PORT}/"

# a job whose minimum (40 cores) no cluster of 8 x 4 cores can give: rejected for capacity
WHALE = """apiVersion: kubesoda.io/v1alpha1
kind: StreamTemplate
metadata: {name: huge}
spec:
  pes:
  - {name: load, kind: source, minCpu: "20", resourceFunction: {a: 0.01}}
  - {name: crunch, kind: sink, minCpu: "20", resourceFunction: {a: 0.001, b: 1}}
  streams: [{from: load, to: crunch}]
  sinks: [{pe: crunch, weight: 1}]
  primalInputs: [{pe: load, rate: 100}]
---
apiVersion: kubesoda.io/v1alpha1
kind: StreamJob
metadata: {name: whale}
spec: {templates: [huge], rank: 2}
"""


OPERATOR_ARGS = ("--web-port", str(WEB_PORT))  # the conftest's operator fixture


@pytest.fixture(scope="module")
def browser():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("playwright is not installed: pip install -e '.[test]'")
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"no browser at {CHROMIUM}: run hack/install-browser.sh (or set KUBESODA_CHROMIUM)")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-dev-shm-usage"])
        yield b
        b.close()


def _up() -> bool:
    try:
        with urllib.request.urlopen(URL + "api/state", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def _rows(page, table: str) -> list[dict[str, str]]:
    """The rows of a table on the page as the user reads them: header -> cell text."""
    return page.evaluate("""(id) => {
        const t = document.getElementById(id);
        const head = [...t.querySelectorAll("thead th")].map((th) => th.textContent.trim());
        return [...t.querySelectorAll("tbody tr")].map((tr) =>
            Object.fromEntries([...tr.children].map((td, i) => [head[i], td.textContent.trim()])));
    }""", table)


def test_the_page_shows_nodes_pods_rejections_and_follows_a_node_deletion(operator, browser, kube, kubectl, namespace, wait_for, tmp_path):
    kubectl("apply", "-n", namespace, "-f", str(ROOT / "examples" / "small-pipeline"))
    kubectl("apply", "-n", namespace, "-f", "-", input=WHALE)
    kubectl("apply", "-n", namespace, "-f", str(ROOT / "examples" / "glued"))
    wait_for(lambda: all(running_as_planned(kube, namespace, j) for j in ("clicks", "features", "alerts")), timeout=120,
             what="clicks, features and alerts Running as planned")
    st = wait_for(lambda: (s := job(kube, namespace, "whale").get("status") or {}).get("phase") == "Rejected" and s,
                  timeout=60, what="whale rejected")
    wait_for(_up, timeout=30, what=f"the web view on {URL}")

    page = browser.new_page(viewport={"width": 1400, "height": 1100})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(URL)
    clicks_key, whale_key = f"{namespace}/clicks", f"{namespace}/whale"
    page.wait_for_selector(f'#jobs tr[data-job="{clicks_key}"]', timeout=30_000)
    page.wait_for_selector("#topology .main-svg", timeout=30_000)
    assert page.locator("#conn").inner_text(timeout=10_000) == "live"

    # the nodes: every node of the cluster, in its zone and rack
    nodes = {n.metadata.name: n for n in kube.core.list_node().items if "kubesoda.io/rack" in (n.metadata.labels or {})}
    shown = {r["node"]: r for r in _rows(page, "nodes")}
    assert set(nodes) <= set(shown), f"nodes missing from the page: {set(nodes) - set(shown)}"
    for name, n in nodes.items():
        assert shown[name]["rack"] == n.metadata.labels["kubesoda.io/rack"]
        assert shown[name]["zone"] == n.metadata.labels["topology.kubernetes.io/zone"]
    # drawn too: the topology names every node
    drawn = page.locator("#topology").inner_text()
    assert all(name in drawn for name in nodes)

    # a job's pods on their nodes: the page's instances are the cluster's pods, where they run
    def pods_match() -> bool:
        pods = {p.metadata.name: p.spec.node_name for p in pe_pods(kube, namespace, "clicks")}
        mine = {r["pod"]: r["node"] for r in _rows(page, "instances") if r["job"] == clicks_key}
        return bool(pods) and mine == pods
    wait_for(pods_match, timeout=30, what="the page's instances of clicks = its pods on their nodes")
    jobs = {r["job"]: r for r in _rows(page, "jobs")}
    assert jobs[clicks_key]["admitted"] == "yes" and jobs[clicks_key]["template"].endswith("clickstream")
    assert int(jobs[clicks_key]["instances"]) == len(pe_pods(kube, namespace, "clicks"))

    # a rejected job's reason, as its status says it
    assert jobs[whale_key]["admitted"] == "no"
    assert jobs[whale_key]["reason"].startswith(f"{st['reason']}: ") and st["reason"] == "capacity"
    assert "40000 mips" in jobs[whale_key]["reason"]
    assert page.locator(f'#jobs tr[data-job="{whale_key}"]').get_attribute("class") == "rejected"

    # the plan's bound says whether it is proven (issue 49), as the state the page draws says it
    def bound_shown() -> bool:
        with urllib.request.urlopen(URL + "api/state", timeout=5) as r:
            state = json.loads(r.read())
        kind = page.locator("#bound-kind").inner_text().strip()
        if state.get("bound") is None:
            return kind == "" and page.locator("#bound").inner_text().strip() == "–"
        want = "proven" if state["boundProven"] else "estimated"
        gap = page.locator("#gap").inner_text().strip()
        return kind == want and (gap == "unknown" if state.get("gap") is None else gap.endswith("%"))
    wait_for(bound_shown, timeout=30, what="the page's bound marked proven or estimated as /api/state says")
    assert not errors, errors
    page.screenshot(path=str(tmp_path / "web-view.png"), full_page=True)
    if os.environ.get("KUBESODA_UPDATE_SCREENSHOT"):
        shutil.copy(tmp_path / "web-view.png", ROOT / "docs" / "img" / "web-view.png")

    # a node deleted: the page follows (Server-Sent Events, no reload)
    page.evaluate("window.__sameDocument = true")
    version = int(page.locator("body").get_attribute("data-version") or 0)
    victim = next(iter({p.spec.node_name for p in pe_pods(kube, namespace, "clicks")}))
    try:
        kubectl("delete", "node", victim)

        def moved() -> bool:
            names = {r["node"] for r in _rows(page, "nodes")}
            mine = {r["pod"]: r["node"] for r in _rows(page, "instances") if r["job"] == clicks_key}
            return victim not in names and bool(mine) and victim not in mine.values()
        wait_for(moved, timeout=90, interval=1, what=f"the page dropping node {victim} and moving clicks off it")
        assert page.evaluate("window.__sameDocument === true"), "the page reloaded"
        assert int(page.locator("body").get_attribute("data-version") or 0) > version
        wait_for(lambda: running_as_planned(kube, namespace, "clicks"), timeout=120, what="clicks Running again")
        wait_for(pods_match, timeout=60, what="the page's instances = the pods after the node deletion")
        assert victim not in page.locator("#topology").inner_text()
        page.screenshot(path=str(tmp_path / "web-view-node-deleted.png"), full_page=True)
        assert not errors, errors
    finally:
        page.close()
        topo = os.environ.get("KUBESODA_TOPOLOGY", str(ROOT / "hack" / "topologies" / "small.yaml"))
        subprocess.run([sys.executable, str(ROOT / "hack" / "nodes.py"), topo], check=False, timeout=120)
