"""The extender against a hostile client (issue 32): answers whose size never depends on what a
pod's author wrote, every log record one escaped JSON line, floods of bad requests throttled, idle
and trickling connections closed, a cap on connections, large bodies off the event loop, and the
peak memory of the largest accepted body far under the chart's 256Mi."""

from __future__ import annotations

import io
import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from soda_operator import logs
from soda_operator.soda import extender

ROOT = Path(__file__).resolve().parents[1]


def pod(planned: str) -> dict:
    return {"metadata": {"name": "p", "namespace": "ns", "labels": {"kubesoda.io/job": "j"}, "annotations": {"kubesoda.io/node": planned}}}


def post(url: str, verb: str, body: bytes, timeout: float = 30) -> tuple[int, bytes]:
    req = urllib.request.Request(f"{url}/{verb}", data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


@pytest.fixture(scope="module")
def srv():
    s = extender.serve("127.0.0.1", 0, idle_timeout=1.0, max_connections=8, read_timeout=2.0)
    yield s
    s.stop()


def test_the_answer_never_grows_with_the_annotation(srv):
    nodes = [f"node-{i}" for i in range(500)]
    sizes = {}
    for planned in ("Bad_Name", "n" * 200_000, "a" * 254, "x" * 253, "gone"):
        code, out = post(srv.url, "filter", json.dumps({"Pod": pod(planned), "NodeNames": nodes}).encode())
        assert code == 200
        doc = json.loads(out)
        assert doc["NodeNames"] == [] and planned not in out.decode()
        sizes[planned] = len(out)
        if planned in ("x" * 253, "gone"):  # a node name, just not offered
            assert set(doc["FailedNodes"].values()) == {extender.NOT_PLANNED} and doc["Error"] == ""
        else:
            assert doc["Error"] == extender.BAD_ANNOTATION and doc["FailedNodes"] == {}
    assert sizes["n" * 200_000] == sizes["Bad_Name"] == sizes["a" * 254] < 200
    assert sizes["x" * 253] == sizes["gone"]


def test_log_records_are_escaped_json_lines():
    buf = io.StringIO()
    logs.setup()
    root = logging.getLogger()
    saved = root.handlers[:]
    root.handlers[0].stream = buf  # type: ignore[attr-defined]
    try:
        logging.getLogger("kubesoda.extender").warning("bad key %s", 'x","level":"CRITICAL"}\n{"ts":"0","level":"CRITICAL","msg":"forged')
        # a library's record with extras that do not serialise (Kopf attaches its settings and queues)
        logging.getLogger("a.library").info("handler done", extra={"settings": threading.Lock(), "k8s_ref": {"name": "x"}})
    finally:
        root.handlers[:] = saved
    lines = buf.getvalue().splitlines()
    assert len(lines) == 2, lines
    rec = json.loads(lines[0])
    assert rec["level"] == "WARNING" and rec["logger"] == "kubesoda.extender" and rec["msg"].startswith('bad key x","level":"CRITICAL"}\n')
    assert json.loads(lines[1]) == {"ts": json.loads(lines[1])["ts"], "level": "INFO", "logger": "a.library", "msg": "handler done"}


def test_a_flood_of_bad_requests_logs_a_few_records(srv):
    seen: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record)

    logs.setup()
    root = logging.getLogger()
    keep = Keep(level=logging.INFO)
    root.addHandler(keep)
    try:
        for i in range(200):
            post(srv.url, "filter", b"{not json" if i % 2 else b'{"Pod": 5}')
            with socket.create_connection(("127.0.0.1", srv.port), timeout=5) as s:  # not HTTP at all
                s.sendall(b"\x16\x03\x01 garbage \r\n\r\n")
                s.recv(100)
    finally:
        root.removeHandler(keep)
    assert len(seen) <= 6, [r.getMessage()[:120] for r in seen]
    # a traceback at most once per kind (logs.Dedup: the first of a kind in full)
    assert len([r for r in seen if r.exc_info]) <= len({(r.name, str(r.msg)) for r in seen})


def closed_within(sock: socket.socket, seconds: float) -> bool:
    sock.settimeout(seconds)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


def test_idle_and_trickling_connections_are_closed(srv):
    idle = socket.create_connection(("127.0.0.1", srv.port))
    slow = socket.create_connection(("127.0.0.1", srv.port))
    slow.sendall(b"POST /filter HTTP/1.1\r\nHost: x\r\n")
    t0 = time.monotonic()
    closed = False
    while time.monotonic() - t0 < 4 and not closed:
        try:
            slow.sendall(b"X-A: b\r\n")  # a header every 0.2 s, never the end of them
        except OSError:
            closed = True
        closed = closed or closed_within(slow, 0.2)
    assert closed and time.monotonic() - t0 < 3.5
    assert closed_within(idle, 2.0)
    idle.close()
    slow.close()


def test_past_the_cap_the_oldest_idle_connection_makes_room(srv):
    """Issue 45: a new connection is not refused because idle ones hold every slot (as it was up
    to then): the oldest idle one is closed instead. Only when every held connection is answering
    a request (here: waiting for a body that never comes) is the new one closed at once."""
    held = [socket.create_connection(("127.0.0.1", srv.port)) for _ in range(8)]
    until(lambda: srv.slots.n_open == 8)
    with urllib.request.urlopen(f"{srv.url}/healthz", timeout=5) as r:  # the ninth gets in
        assert r.status == 200
    assert closed_within(held[0], 0.5)  # not the idle timeout (1 s)
    for s in held:
        s.close()
    until(lambda: srv.slots.n_open == 0)
    busy = [socket.create_connection(("127.0.0.1", srv.port)) for _ in range(8)]
    for s in busy:
        s.sendall(b"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n")
    until(lambda: sum(c.busy() for c in srv.slots.all()) == 8)
    extra = socket.create_connection(("127.0.0.1", srv.port))
    assert closed_within(extra, 0.5)
    for s in busy:
        s.close()
    until(lambda: srv.slots.n_open == 0)
    with urllib.request.urlopen(f"{srv.url}/healthz", timeout=5) as r:  # room again
        assert r.status == 200


def until(cond) -> None:
    """Wait for the server's loop to have done what the kernel already did (not a timing test)."""
    deadline = time.monotonic() + 20
    while not cond():
        assert time.monotonic() < deadline
        time.sleep(0.02)


def test_healthz_answers_while_a_large_body_is_processed(srv):
    body = json.dumps({"Pod": pod("node-1"), "NodeNames": [f"node-{i}" for i in range(120_000)]}).encode()
    assert len(body) < extender.MAX_BODY
    done = threading.Event()
    worst = 0.0

    def big() -> None:
        for _ in range(3):
            assert post(srv.url, "filter", body)[0] == 200
        done.set()

    threading.Thread(target=big, daemon=True).start()
    while not done.is_set():
        t0 = time.monotonic()
        with urllib.request.urlopen(f"{srv.url}/healthz", timeout=10) as r:
            assert r.status == 200
        worst = max(worst, time.monotonic() - t0)
        time.sleep(0.02)
    assert worst < 0.5, worst


def test_the_largest_accepted_body_peaks_far_under_the_charts_limit(tmp_path):
    """`kubesoda extender` as a process, sent the largest body it accepts (node names plus a pod
    with a planned node not among them, so every node gets a reason), twice at once: its peak RSS
    (VmHWM) stays under 200 MiB (the chart's limit is 256Mi)."""
    port = 27000 + os.getpid() % 1000
    proc = subprocess.Popen([sys.executable, "-m", "soda_operator.cli", "extender", "--port", str(port)], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(100):
            try:
                urllib.request.urlopen(f"{url}/healthz", timeout=1)
                break
            except OSError:
                time.sleep(0.1)
        head = json.dumps({"Pod": pod("elsewhere")})[:-1]
        names = []
        size = len(head) + 20
        while size < extender.MAX_BODY - 64:
            names.append(f"node-{len(names):07d}")
            size += 16
        body = f'{{"Pod": {json.dumps(pod("elsewhere"))}, "NodeNames": {json.dumps(names)}}}'.encode()
        assert extender.MAX_BODY - 1024 < len(body) <= extender.MAX_BODY, len(body)
        codes = []
        threads = [threading.Thread(target=lambda: codes.append(post(url, "filter", body, timeout=60)[0])) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert codes == [200, 200]
        assert post(url, "filter", body + b" " * 2048)[0] == 413
        hwm = next(int(line.split()[1]) for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines() if line.startswith("VmHWM"))
        print(f"extender peak RSS {hwm / 1024:.0f} MiB for two {len(body) / 2**20:.1f} MiB bodies at once")
        assert hwm < 200 * 1024, hwm
    finally:
        proc.terminate()
        proc.wait(10)
