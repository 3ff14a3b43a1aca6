"""Random and hostile bodies against a live extender process (`kubesoda extender`): every request
gets a well-formed answer (200 with the protocol's shape, or a 4xx with a JSON Error), the process
stays up, and its memory stays bounded."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[1]
MAX_BODY = 1 << 20


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBESODA_EXTENDER_TLS")}
    proc = subprocess.Popen([sys.executable, "-m", "soda_operator.cli", "extender", "--port", str(port),
                             "--max-body-bytes", str(MAX_BODY)], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=(tmp_path_factory.mktemp("extender") / "log").open("w"))
    url = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            requests.get(f"{url}/healthz", timeout=1)
            break
        except requests.ConnectionError:
            time.sleep(0.1)
    session = requests.Session()
    yield url, proc, session
    proc.send_signal(signal.SIGINT)
    proc.wait(10)


def check(resp: requests.Response, verb: str) -> None:
    assert resp.status_code in (200, 400, 413), resp.status_code
    out = resp.json()  # always JSON
    if resp.status_code != 200:
        assert isinstance(out, dict) and out["Error"].startswith("kubesoda extender:"), out
    elif verb == "filter":
        assert set(out) >= {"NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}
    else:
        assert isinstance(out, list) and all(set(h) == {"Host", "Score"} for h in out)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner, max_size=5),
    max_leaves=30,
)
names = st.lists(st.text(min_size=1, max_size=30), max_size=50)
metas = st.fixed_dictionaries({}, optional={
    "name": st.text(max_size=10) | json_values,
    "labels": st.dictionaries(st.sampled_from(["kubesoda.io/job", "app", ""]), st.text(max_size=5) | json_values, max_size=3),
    "annotations": st.dictionaries(st.sampled_from(["kubesoda.io/node", "x"]), st.text(max_size=30) | json_values, max_size=3),
})
pods = st.fixed_dictionaries({}, optional={"metadata": metas | json_values, "spec": json_values})
args = st.fixed_dictionaries({}, optional={
    "Pod": pods | json_values,
    "NodeNames": names | st.none() | json_values,
    "Nodes": st.none() | st.fixed_dictionaries({"items": st.lists(st.fixed_dictionaries({"metadata": st.fixed_dictionaries({"name": st.text(max_size=10)})}), max_size=5)}) | json_values,
})


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(body=args | json_values, verb=st.sampled_from(["filter", "prioritize"]))
def test_random_bodies_get_well_formed_answers(live, body, verb):
    url, proc, session = live
    check(session.post(f"{url}/{verb}", data=json.dumps(body), timeout=5), verb)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=st.binary(max_size=2000), verb=st.sampled_from(["filter", "prioritize"]))
def test_random_bytes_get_well_formed_answers(live, raw, verb):
    url, proc, session = live
    check(session.post(f"{url}/{verb}", data=raw, timeout=5), verb)


def test_hostile_bodies_leave_the_process_up_with_bounded_memory(live):
    url, proc, session = live
    before = rss_mib(proc.pid)
    hostile = [
        b"[" * 100_000 + b"]" * 100_000,                                   # deep nesting
        b'{"Pod": ' + b'{"a": ' * 50_000 + b"1" + b"}" * 50_000 + b"}",
        json.dumps({"Pod": {}, "NodeNames": ["n"] * 100_000}).encode()[: MAX_BODY - 1],  # truncated, near the limit
        json.dumps({"Pod": {"metadata": {"labels": {"kubesoda.io/job": "j"}, "annotations": {"kubesoda.io/node": "n7"}}},
                    "NodeNames": [f"n{i}" for i in range(50_000)]}).encode(),   # big but valid
        b'{"Pod": {}, "NodeNames": ["' + b"\xff" * 1000 + b'"]}',
        b'{"Pod": {}, "Pod": 5}',
        b"1e999999",
        b'"' + b"\\u0000" * 10_000 + b'"',
    ]
    for _ in range(5):
        for body in hostile:
            for verb in ("filter", "prioritize"):
                check(session.post(f"{url}/{verb}", data=body, timeout=10), verb)
    for _ in range(20):  # declared far over the limit: refused before a byte is read
        with socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])), timeout=5) as s:
            s.sendall(b"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000000\r\n\r\n{")
            assert s.recv(4096).startswith(b"HTTP/1.1 413")
    assert proc.poll() is None, "the extender exited"
    after = rss_mib(proc.pid)
    assert after < before + 100, f"RSS grew from {before:.0f} to {after:.0f} MiB"
    ok = session.post(f"{url}/filter", json={"Pod": {"metadata": {"labels": {"kubesoda.io/job": "j"},
                                             "annotations": {"kubesoda.io/node": "b"}}}, "NodeNames": ["a", "b"]}, timeout=5)
    assert ok.status_code == 200 and ok.json()["NodeNames"] == ["b"]
