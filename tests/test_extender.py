"""The extender over real HTTP (no cluster): protocol field names, pass-through, planned node."""

from __future__ import annotations

import json
import threading
import urllib.request

import pytest

from soda_operator import extender


@pytest.fixture(scope="module")
def url():
    srv = extender.serve("127.0.0.1", 0)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()


def post(url, verb, body):
    req = urllib.request.Request(f"{url}/{verb}", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    return json.loads(urllib.request.urlopen(req, timeout=5).read())


def pod(planned=None, job=True):
    md = {"name": "p", "namespace": "ns", "labels": {"kubesoda.io/job": "j"} if job else {}}
    if planned:
        md["annotations"] = {"kubesoda.io/node": planned}
    return {"metadata": md}


def test_node_names_filter_keeps_only_the_planned_node(url):
    out = post(url, "filter", {"Pod": pod("n2"), "NodeNames": ["n1", "n2", "n3"]})
    assert out["NodeNames"] == ["n2"]
    assert set(out["FailedNodes"]) == {"n1", "n3"} and out["Error"] == "" and out["FailedAndUnresolvableNodes"] == {}


def test_full_nodes_filter_when_not_node_cache_capable(url):
    nodes = {"items": [{"metadata": {"name": n}} for n in ("n1", "n2")]}
    out = post(url, "filter", {"Pod": pod("n1"), "Nodes": nodes, "NodeNames": None})
    assert [n["metadata"]["name"] for n in out["Nodes"]["items"]] == ["n1"] and out["NodeNames"] is None


def test_foreign_pods_pass_untouched(url):
    names = ["a", "b", "c"]
    assert post(url, "filter", {"Pod": pod("b", job=False), "NodeNames": names})["NodeNames"] == names
    assert post(url, "prioritize", {"Pod": pod(job=False), "NodeNames": names}) == [{"Host": n, "Score": 0} for n in names]


def test_prioritize_scores_the_planned_node(url):
    assert post(url, "prioritize", {"Pod": pod("b"), "NodeNames": ["a", "b"]}) == [{"Host": "a", "Score": 0}, {"Host": "b", "Score": 10}]


def test_planned_node_gone_filters_everything_out(url):
    out = post(url, "filter", {"Pod": pod("gone"), "NodeNames": ["a"]})
    assert out["NodeNames"] == [] and "gone" in out["FailedNodes"]["a"]


def test_health_and_metrics(url):
    assert urllib.request.urlopen(f"{url}/healthz", timeout=5).read() == b"ok"
    post(url, "filter", {"Pod": pod("a"), "NodeNames": ["a"]})
    assert b"kubesoda_extender_seconds" in urllib.request.urlopen(f"{url}/metrics", timeout=5).read()
