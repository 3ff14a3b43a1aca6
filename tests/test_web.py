"""The web view: its model against a small scenario planned for real, and its aiohttp app (the page,
the JSON, the Plotly asset, a Server-Sent Event after the state changes)."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from aiohttp.test_utils import TestClient, TestServer

from soda_operator.web import model, server
from soda_optimizer import pipeline
from soda_optimizer.importance import Evaluator
from soda_optimizer.model import PE, Job, Node, Policy, PrimalInput, Scenario, Sink, Stream, Template

ROOT = Path(__file__).resolve().parents[1]


def scenario(nodes: int = 4) -> Scenario:
    """Two zones of one rack each; a two-PE pipeline (rank 1), a job too big for the cluster (rank 3)."""
    ns = tuple(Node(name=f"n{i}", mips=4000, rack=f"r{i % 2}", zone=f"z{i % 2}") for i in range(nodes))
    pipe = Template(name="pipe", pes=(PE(name="src", kind="source", rf={"a": 0.1}), PE(name="sink", kind="sink", rf={"a": 0.001, "b": 1})),
                    streams=(Stream(src="src", dst="sink", bytes_per_tuple=1000),), sinks=(Sink(pe="sink", weight=1),),
                    primal_inputs=(PrimalInput(pe="src", rate=100),))
    big = Template(name="big", pes=(PE(name="hog", kind="source", min_mips=100_000, rf={"a": 0.1}),),
                   sinks=(Sink(pe="hog", weight=1),), primal_inputs=(PrimalInput(pe="hog", rate=100),))
    jobs = (Job(name="ns/pipe", rank=1, templates=("pipe",)), Job(name="ns/big", rank=3, templates=("big",)))
    pol = Policy(resolution_units=64, macroq_deadline_s=2, macrow_deadline_s=2)
    return Scenario(nodes=ns, templates=(pipe, big), jobs=jobs, policy=pol)


@pytest.fixture(scope="module")
def planned():
    scen = scenario()
    plan = pipeline.run(scen)
    assert plan.feasible
    return scen, plan


def test_view_model_matches_the_plan(planned):
    scen, plan = planned
    doc = model.build(scen, plan, observed={"ns/pipe": 12.5}, pod_name=lambda j, p, n: f"{j}-{p}-{n}", source="offline")
    json.dumps(doc, allow_nan=False)  # JSON-able as it is
    mips = {n.name: n.mips for n in scen.nodes}
    # instances: one per (PE, node) with a fraction > 0, numbers as in the plan
    want = {(p.pe, n): f for p in plan.pes for n, f in p.fractions.items() if f > 0}
    got = {(i["peId"], i["node"]): i for i in doc["instances"]}
    assert set(got) == set(want) and want
    for (pe, n), f in want.items():
        assert got[(pe, n)]["fraction"] == pytest.approx(f)
        assert got[(pe, n)]["mips"] == pytest.approx(f * mips[n], abs=1e-3)
        assert got[(pe, n)]["pod"] == f"{pe.split(':')[0]}-{pe.split(':')[1]}-{n}"
    # nodes: zones > racks > nodes, utilisation = sum of the fractions there
    nodes = {nd["name"]: nd for z in doc["zones"] for r in z["racks"] for nd in r["nodes"]}
    assert set(nodes) == set(mips)
    assert {z["name"]: sorted(r["name"] for r in z["racks"]) for z in doc["zones"]} == {"z0": ["r0"], "z1": ["r1"]}
    for name, nd in nodes.items():
        f = sum(fr for (pe, n), fr in want.items() if n == name)
        assert nd["utilisation"] == pytest.approx(f, abs=1e-6)
        assert nd["usedMips"] == pytest.approx(f * mips[name], abs=1e-2)
    # jobs: the admitted one with its template and importance, the rejected one with the plan's reason
    dec = {d.job: d for d in plan.jobs}
    jobs = {j["name"]: j for j in doc["jobs"]}
    assert jobs["ns/pipe"]["admitted"] and jobs["ns/pipe"]["template"] == "pipe"
    assert jobs["ns/pipe"]["importance"] == pytest.approx(dec["ns/pipe"].importance, abs=1e-3)
    assert jobs["ns/pipe"]["observedImportance"] == 12.5
    big = jobs["ns/big"]
    assert not big["admitted"] and big["observedImportance"] is None and big["instances"] == 0
    assert big["reason"] == dec["ns/big"].reason and big["reason"] in ("capacity", "rank-waterline")
    assert big["message"] == dec["ns/big"].message and "100000" in big["message"].replace(",", "")
    assert (big["rank"], big["revisedRank"]) == (3, dec["ns/big"].revised_rank)
    assert doc["waterline"] == model.waterline(plan)
    assert doc["importance"] == pytest.approx(plan.importance, abs=1e-3) and doc["observedImportance"] == 12.5
    # the stream's planned rate: the Evaluator on the PEs' planned mips; traffic = rate x bytes
    pe_mips = {p.pe: sum(f * mips[n] for n, f in p.fractions.items()) for p in plan.pes}
    ev = Evaluator(scen.glued({"ns/pipe": "pipe"}))
    rate = ev.stream_rates(np.array([[pe_mips[p] for p in ev.pes]]))[0][0]
    assert rate == pytest.approx(min(0.1 * pe_mips["ns/pipe:src"], 100), rel=1e-6)
    (st,) = doc["streams"]
    assert (st["src"], st["dst"]) == ("ns/pipe:src", "ns/pipe:sink")
    assert st["rate"] == pytest.approx(rate, rel=1e-4) and st["traffic"] == pytest.approx(rate * 1000, rel=1e-4)
    # links: a stream between the two racks crosses both rack uplinks and both zone uplinks
    rack_of = {nd["name"]: r["name"] for z in doc["zones"] for r in z["racks"] for nd in r["nodes"]}
    racks = {i["peId"]: rack_of[i["node"]] for i in doc["instances"]}
    links = {lk["name"]: lk for lk in doc["links"]}
    assert set(links) == {"rack:r0", "rack:r1", "zone:z0", "zone:z1"}
    crossing = racks["ns/pipe:src"] != racks["ns/pipe:sink"]
    for lk in links.values():
        assert lk["traffic"] == pytest.approx(st["traffic"] if crossing else 0.0, rel=1e-4, abs=1e-6)
        assert lk["utilisation"] == pytest.approx(lk["traffic"] / lk["capacity"], rel=1e-4, abs=1e-9)
    assert doc["curves"] and doc["curves"][0]["jobs"] == ["ns/pipe"]


def test_the_view_says_whether_the_bound_is_proven(planned, monkeypatch):
    """Issue 49: every published bound says whether it is proven. A proven bound and its gap as the plan has them;
    an estimated one (curves not exact) marked so, its gap unknown (None) where the answer reaches it."""
    import sys
    sys.path.insert(0, str(ROOT))
    from benchmarks import resolution_families as F
    from soda_optimizer.soda import curves

    scen, plan = planned
    doc = model.build(scen, plan)
    assert plan.bound is not None and plan.bound_proven
    assert doc["bound"] == pytest.approx(plan.bound, abs=1e-3) and doc["boundProven"] is True
    assert doc["gap"] == pytest.approx(plan.gap, abs=1e-6)
    monkeypatch.setattr(curves, "BIG_EXACT_LIMIT", curves.EXACT_LIMIT)
    s = F.two_pe_step(20000.0)
    est = pipeline.run(s, 30.0)
    assert not est.bound_proven and est.bound is not None
    doc = model.build(s, est)
    json.dumps(doc, allow_nan=False)
    assert doc["boundProven"] is False and doc["bound"] == pytest.approx(est.bound, abs=1e-3)
    assert doc["gap"] is None if est.gap is None else doc["gap"] == pytest.approx(est.gap, abs=1e-6)
    empty = model.build(scen, plan.model_copy(update={"bound": None, "gap": None, "bound_proven": False}))
    assert (empty["bound"], empty["boundProven"], empty["gap"]) == (None, None, None)


def test_links_split_traffic_over_instances_in_two_racks():
    scen = scenario()
    from soda_optimizer.plan import JobDecision, PEPlan, Plan

    plan = Plan(feasible=True, jobs=(JobDecision(job="ns/pipe", admitted=True, template="pipe"),),
                pes=(PEPlan(pe="ns/pipe:src", job="ns/pipe", name="src", fractions={"n0": 0.25}),
                     PEPlan(pe="ns/pipe:sink", job="ns/pipe", name="sink", fractions={"n0": 0.25, "n1": 0.25})))
    doc = model.build(scen, plan)
    (st,) = doc["streams"]
    assert st["rate"] == pytest.approx(100)  # 0.1 x 1000 mips, capped by the primal rate 100
    links = {lk["name"]: lk["traffic"] for lk in doc["links"]}
    # half the sink runs in r1 (zone z1): half the traffic crosses r0's, r1's, z0's and z1's uplinks
    assert links == pytest.approx({"rack:r0": 50_000, "rack:r1": 50_000, "zone:z0": 50_000, "zone:z1": 50_000})
    assert doc["waterline"] is None and doc["curves"] == []
    assert {j["name"]: j["admitted"] for j in doc["jobs"]} == {"ns/pipe": True}


def test_history_entry():
    scen = scenario()
    plan = pipeline.run(scen)
    h = model.history_entry(plan, "micro", "t", {"create": 2, "resize": 0}, observed=None)
    assert h == {"time": "t", "epoch": "micro", "importance": pytest.approx(plan.importance, abs=1e-3), "observedImportance": None,
                 "admitted": 1, "jobs": 2, "feasible": True, "changes": {"create": 2}}


def test_view_state_keeps_a_bounded_history(planned):
    scen, plan = planned
    st = server.ViewState("live", history=3)
    assert st.doc()["empty"]
    for k in range(5):
        st.publish(scen, plan, epoch="micro", changes={"resize": k})
    doc = st.doc()
    assert doc["version"] == 5 and len(doc["history"]) == 3
    assert [h["changes"] for h in doc["history"]] == [{"resize": 2}, {"resize": 3}, {"resize": 4}]
    assert doc["instances"][0]["pod"].startswith("pipe-")  # the operator's pod names by default


def test_publish_never_raises():
    st = server.ViewState("live")
    st.publish(None, None)  # type: ignore[arg-type]
    assert st.version == 0


# --------------------------------------------------------------------------- the app


async def _read_event(resp) -> dict:
    while True:
        block = (await asyncio.wait_for(resp.content.readuntil(b"\n\n"), 10)).decode()
        if block.startswith("event: state"):
            data = next(line[6:] for line in block.splitlines() if line.startswith("data: "))
            return json.loads(data)


def test_app_serves_page_state_asset_and_events(planned):
    scen, plan = planned
    state = server.ViewState("offline", pod_name=None)
    state.publish(scen, plan, epoch="offline")

    async def go() -> None:
        async with TestClient(TestServer(server.make_app(state))) as client:
            page = await client.get("/")
            assert page.status == 200 and "text/html" in page.headers["Content-Type"]
            html = await page.text()
            assert '<script src="/static/plotly.min.js">' in html and 'id="topology"' in html
            assert "Content-Security-Policy" in page.headers
            js = await client.get("/static/plotly.min.js")
            body = await js.read()
            assert js.status == 200 and len(body) > 1_000_000 and b"plotly" in body[:2000].lower()
            for name in ("app.js", "app.css"):
                assert (await client.get(f"/static/{name}")).status == 200
            assert (await client.get("/static/../server.py")).status == 404
            assert (await client.get("/static/secret.txt")).status == 404
            got = await (await client.get("/api/state")).json()
            assert got["version"] == 1 and {j["name"] for j in got["jobs"]} == {"ns/pipe", "ns/big"}
            # read-only
            assert (await client.post("/api/state", json={})).status == 405
            # live updates: the current state at once, then a new one when it changes
            resp = await client.get("/api/events")
            assert resp.headers["Content-Type"].startswith("text/event-stream")
            first = await _read_event(resp)
            assert first["version"] == 1
            smaller = scen.model_copy(update={"nodes": scen.nodes[:2]})
            await asyncio.get_running_loop().run_in_executor(None, lambda: state.publish(smaller, pipeline.run(smaller), epoch="micro"))
            second = await _read_event(resp)
            assert second["version"] == 2 and second["epoch"] == "micro"
            assert {nd["name"] for z in second["zones"] for r in z["racks"] for nd in r["nodes"]} == {"n0", "n1"}
            assert len(second["history"]) == 2
            resp.close()

    asyncio.run(go())


def test_plotly_asset_is_found():
    p = server.plotly_js()
    assert p is not None and p.name == "plotly.min.js" and p.stat().st_size > 1_000_000


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_kubesoda_plan_serve(tmp_path):
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "soda_operator.cli", "plan", "-f", str(ROOT / "examples" / "nodes" / "small-8.yaml"),
                             "-f", str(ROOT / "examples" / "small-pipeline"), "--deadline-scale", "0.1", "--serve", "--port", str(port),
                             "--web-allowed-host", "view.example"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        doc = None
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/state", timeout=2) as r:
                    doc = json.load(r)
                break
            except OSError:
                time.sleep(0.3)
        assert doc is not None, proc.stderr.read() if proc.poll() is not None else "no answer"
        assert doc["source"] == "offline" and doc["jobs"][0]["name"] == "default/clicks" and doc["jobs"][0]["admitted"]
        assert len(doc["instances"]) >= 4 and all(i["pod"].startswith("clicks-") for i in doc["instances"])
        # the Host check of the real server, with --web-allowed-host
        for host, status in (("evil.example", 421), (f"evil.example:{port}", 421), (f"view.example:{port}", 200), (f"localhost:{port}", 200)):
            req = urllib.request.Request(f"http://127.0.0.1:{port}/api/state", headers={"Host": host})
            try:
                with urllib.request.urlopen(req, timeout=5) as r:
                    got, headers = r.status, r.headers
            except urllib.error.HTTPError as e:
                got, headers = e.code, e.headers
            assert got == status, (host, got)
            assert headers["X-Content-Type-Options"] == "nosniff" and "frame-ancestors 'none'" in headers["Content-Security-Policy"]
    finally:
        proc.terminate()
        proc.wait(10)


# --------------------------------------------------------------------------- Host and headers

ROUTES = [("GET", "/"), ("GET", "/api/state"), ("GET", "/api/events"), ("GET", "/static/app.js"), ("GET", "/static/app.css"),
          ("GET", "/static/plotly.min.js"), ("GET", "/favicon.ico"), ("GET", "/nope"), ("GET", "/static/nope.txt"),
          ("POST", "/api/state"), ("HEAD", "/api/state")]


def _secure(resp) -> None:
    assert resp.headers.get("Content-Security-Policy") == server._CSP, (resp.status, dict(resp.headers))
    assert "frame-ancestors 'none'" in resp.headers["Content-Security-Policy"]
    assert resp.headers.get("X-Content-Type-Options") == "nosniff", (resp.status, dict(resp.headers))


class _Broken(server.ViewState):
    def doc(self) -> dict:
        raise RuntimeError("a bug")


def test_a_foreign_host_is_refused_on_every_route_and_every_response_is_secured(planned):
    """DNS rebinding: a page of evil.example whose name now points at 127.0.0.1 sends
    ``Host: evil.example``; every route answers 421 without the view, before any handler runs.
    Loopback names (any port, any case, a final dot) get the view. Every response, the 421s, 404s,
    405, 500 and the event stream included, carries the CSP and nosniff."""
    scen, plan = planned
    state = server.ViewState("offline", pod_name=None)
    state.publish(scen, plan, epoch="offline")

    async def go() -> None:
        async with TestClient(TestServer(server.make_app(state))) as client:
            for host in ("evil.example", f"evil.example:{client.port}", "127.0.0.1.evil.example", "localhost.evil.example",
                         "10.0.0.1", "[::2]:80", "local host", "", "127.0.0.1@evil.example"):
                for method, path in ROUTES:
                    resp = await client.request(method, path, headers={"Host": host})
                    body = await resp.read()
                    assert resp.status == 421, (host, method, path, resp.status)
                    assert b"ns/pipe" not in body and b"<html" not in body.lower()
                    _secure(resp)
            statuses = {}
            for host in ("localhost", f"localhost:{client.port}", "LOCALHOST:1", "localhost.", "127.0.0.1", f"127.0.0.1:{client.port}",
                         "[::1]", "[::1]:8090"):
                for method, path in ROUTES:
                    if path == "/api/events":
                        continue
                    resp = await client.request(method, path, headers={"Host": host})
                    await resp.read()
                    statuses[(method, path)] = resp.status
                    assert resp.status != 421, (host, method, path)
                    _secure(resp)
                got = await (await client.get("/api/state", headers={"Host": host})).json()
                assert got["version"] == 1 and {j["name"] for j in got["jobs"]} == {"ns/pipe", "ns/big"}
            assert statuses[("GET", "/")] == 200 and statuses[("GET", "/nope")] == 404 and statuses[("POST", "/api/state")] == 405
            assert statuses[("GET", "/static/nope.txt")] == 404 and statuses[("GET", "/favicon.ico")] == 204
            # the event stream: its headers are sent from inside its handler
            resp = await client.get("/api/events", headers={"Host": "localhost"})
            assert resp.status == 200 and resp.headers["Content-Type"].startswith("text/event-stream")
            _secure(resp)
            assert (await _read_event(resp))["version"] == 1
            resp.close()
        async with TestClient(TestServer(server.make_app(_Broken("offline")))) as client:  # aiohttp's own 500
            resp = await client.get("/api/state")
            assert resp.status == 500
            _secure(resp)
        hosts = server.allowed_hosts("127.0.0.1", ["view.example", "proxy.example:8443"])
        async with TestClient(TestServer(server.make_app(state, hosts))) as client:
            for host, ok in (("view.example", True), ("view.example:1", True), ("VIEW.example.", True), ("proxy.example:8443", True),
                             ("proxy.example", False), ("proxy.example:80", False), ("evil.example", False)):
                resp = await client.get("/api/state", headers={"Host": host})
                assert (resp.status == 200) == ok and (resp.status == 421) != ok, (host, resp.status)

    asyncio.run(go())


def test_allowed_hosts():
    assert server.allowed_hosts() == {"localhost", "127.0.0.1", "::1"}
    for wildcard in ("0.0.0.0", "::", ""):
        assert server.allowed_hosts(wildcard) == {"localhost", "127.0.0.1", "::1"}  # the address it is bound to is no name
    assert server.allowed_hosts("10.1.2.3") == {"localhost", "127.0.0.1", "::1", "10.1.2.3"}
    assert "fd00::5" in server.allowed_hosts("fd00::5") and "fd00::5" in server.allowed_hosts("[fd00::5]")
    assert server.allowed_hosts("0.0.0.0", ["Kubesoda-Web.Example.", "[fd00::1]:8090"]) >= {"kubesoda-web.example", "[fd00::1]:8090"}
    assert server.host_allowed("[FD00::1]:8090", server.allowed_hosts("127.0.0.1", ["[fd00::1]:8090"]))
    assert not server.host_allowed("[fd00::1]:8091", server.allowed_hosts("127.0.0.1", ["[fd00::1]:8090"]))
    assert not server.host_allowed("[fd00::1]:8090", server.allowed_hosts("127.0.0.1", ["[fd00::1:8090]"]))
    with pytest.raises(ValueError, match="not a host name"):
        server.allowed_hosts("127.0.0.1", ["http://x/"])
    allowed = server.allowed_hosts("127.0.0.1", ["a.example:81"])
    assert server.host_allowed("[::1]:3", allowed) and server.host_allowed("a.example:81", allowed)
    assert not server.host_allowed("a.example:82", allowed) and not server.host_allowed(None, allowed)
    assert not server.host_allowed("::1", allowed)  # an IPv6 address in Host is bracketed
