"""The extender's connection slots (issue 45): however many connections others hold without a
client certificate (idle keep-alives after a /healthz, TLS handshakes never begun, from one address
or many), kube-scheduler's request with its client certificate gets a slot and a correct answer,
and its keep-alive connection stays. Against the real server (TLS with a client CA, the production
limits), real sockets from several loopback addresses (Linux routes all of 127/8 to lo)."""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from soda_operator import threaded
from soda_operator.soda import extender

BODY = json.dumps({"Pod": {"metadata": {"name": "p", "namespace": "ns", "labels": {"kubesoda.io/job": "j"},
                                        "annotations": {"kubesoda.io/node": "b"}}}, "NodeNames": ["a", "b", "c"]}).encode()
ANSWER = {"NodeNames": ["b"], "FailedNodes": {}, "FailedAndUnresolvableNodes": {}, "Error": ""}


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Path:
    """A CA, a server certificate for 127.0.0.1 and a client certificate (the scheduler's), made with openssl."""
    d = tmp_path_factory.mktemp("pki")

    def run(*a):
        subprocess.run(["openssl", *a], cwd=d, check=True, capture_output=True)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-keyout", "ca.key", "-out", "ca.crt", "-subj", "/CN=test-ca")
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    for name in ("server", "client"):
        run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}")
        run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-days", "1",
            "-out", f"{name}.crt", *(["-extfile", "san.ext"] if name == "server" else []))
    return d


@pytest.fixture
def mtls_server(pki):
    """The extender as the chart runs it: TLS, client CA, the default connection limits."""
    ctx = extender.tls_context(str(pki / "server.crt"), str(pki / "server.key"), str(pki / "ca.crt"))
    srv = extender.serve("127.0.0.1", 0, ctx)
    yield srv
    srv.stop()


def anonymous(pki: Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(pki / "ca.crt"))


def scheduler(pki: Path) -> ssl.SSLContext:
    ctx = anonymous(pki)
    ctx.load_cert_chain(str(pki / "client.crt"), str(pki / "client.key"))
    return ctx


def tcp(port: int, source: str) -> socket.socket:
    s = socket.socket()
    s.bind((source, 0))
    s.settimeout(10)
    s.connect(("127.0.0.1", port))
    return s


def keepalive_healthz(port: int, ctx: ssl.SSLContext, source: str) -> ssl.SSLSocket | None:
    """A TLS connection without a client certificate that asks /healthz once and stays open (None
    when the server closed it before the answer)."""
    try:
        s = ctx.wrap_socket(tcp(port, source), server_hostname="127.0.0.1")
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        got = s.recv(4096)
        return s if got.startswith(b"HTTP/1.1 200") else None
    except OSError:
        return None


def until(cond, what: str) -> None:
    """Wait for the server's loop to have accepted what the kernel already did (not a timing test)."""
    deadline = time.monotonic() + 20
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def filter_now(conn: http.client.HTTPSConnection) -> tuple[int, dict]:
    conn.request("POST", "/filter", body=BODY, headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    return r.status, json.loads(r.read())


def test_the_schedulers_request_gets_a_slot_past_any_number_of_anonymous_connections(pki, mtls_server):
    srv = mtls_server
    anon = anonymous(pki)
    held: list[socket.socket] = []
    try:
        # 300 idle keep-alive connections without a certificate, from 30 addresses (under the
        # per-address limit each, over the open slots together)
        for i in range(300):
            s = keepalive_healthz(srv.port, anon, f"127.0.0.{2 + i % 30}")
            if s is not None:
                held.append(s)
        sched = http.client.HTTPSConnection("127.0.0.1", srv.port, timeout=10, context=scheduler(pki))
        assert filter_now(sched) == (200, ANSWER)
        # 300 more, and 300 TCP connections that never begin their handshake: the scheduler's
        # keep-alive connection keeps its slot (the same socket answers), and a new one gets in
        sock = sched.sock
        for i in range(300):
            s = keepalive_healthz(srv.port, anon, f"127.0.1.{2 + i % 30}")
            if s is not None:
                held.append(s)
        held += [tcp(srv.port, f"127.0.2.{2 + i % 30}") for i in range(300)]
        assert filter_now(sched) == (200, ANSWER) and sched.sock is sock
        fresh = http.client.HTTPSConnection("127.0.0.1", srv.port, timeout=10, context=scheduler(pki))
        assert filter_now(fresh) == (200, ANSWER)
        assert len(srv.slots.authenticated) == 2 and srv.slots.n_open <= threaded.MAX_CONNECTIONS
        assert srv.slots.evicted > 0 and len(srv.slots.open) > 1  # others' idle connections were closed, not all of one address
        fresh.close()
        sched.close()
    finally:
        for s in held:
            s.close()


def test_the_health_port_serves_probes_and_metrics_only(pki):
    ctx = extender.tls_context(str(pki / "server.crt"), str(pki / "server.key"), str(pki / "ca.crt"))
    srv = extender.serve("127.0.0.1", 0, ctx, health_port=0)
    try:
        assert srv.health_port not in (None, 0, srv.port)
        with urllib.request.urlopen(f"http://127.0.0.1:{srv.health_port}/healthz", timeout=10) as r:
            assert r.read() == b"ok"
        with urllib.request.urlopen(f"http://127.0.0.1:{srv.health_port}/metrics", timeout=10) as r:
            assert b"kubesoda_extender_seconds" in r.read()
        plain = http.client.HTTPConnection("127.0.0.1", srv.health_port, timeout=10)
        plain.request("POST", "/filter", body=BODY, headers={"Content-Type": "application/json"})
        assert plain.getresponse().status in (404, 405)
        plain.close()
        sched = http.client.HTTPSConnection("127.0.0.1", srv.port, timeout=10, context=scheduler(pki))
        assert filter_now(sched) == (200, ANSWER)
        sched.close()
    finally:
        srv.stop()


def test_one_address_cannot_take_the_open_slots_of_others(pki):
    srv = extender.serve("127.0.0.1", 0, max_connections=40, max_per_client=8)
    try:
        other = [tcp(srv.port, "127.0.0.9") for _ in range(4)]
        for s in other:  # they are established (have been answered)
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert s.recv(4096).startswith(b"HTTP/1.1 200")
        flood = [tcp(srv.port, "127.0.0.8") for _ in range(100)]
        # the flooding address holds its 8 newest connections; the other address's 4 still answer
        until(lambda: srv.slots.evicted == 92, "the flood accepted")
        assert len(srv.slots.open["127.0.0.8"]) == 8
        for s in other:
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert s.recv(4096).startswith(b"HTTP/1.1 200")
        # many addresses at their limit: a new address's connection closes one of the heaviest's
        flood += [tcp(srv.port, f"127.0.3.{i}") for i in range(1, 5) for _ in range(8)]
        until(lambda: sum(map(len, srv.slots.open.values())) == 40 and srv.slots.evicted == 92 + 4, "the addresses accepted")
        newcomer = tcp(srv.port, "127.0.0.7")
        newcomer.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert newcomer.recv(4096).startswith(b"HTTP/1.1 200")
        assert len(srv.slots.open["127.0.0.9"]) == 4
        for s in [*other, *flood, newcomer]:
            s.close()
    finally:
        srv.stop()


# ----------------------------------------------------------------------------- the rule, by property
class Transport:
    """What Slots reads of a transport: the peer's address; abort() marks it closed."""

    def __init__(self, ip: str) -> None:
        self.ip, self.aborted = ip, False

    def get_extra_info(self, name: str):
        return (self.ip, 1) if name == "peername" else None

    def abort(self) -> None:
        self.aborted = True


class Busy:
    _request_in_progress = True


OPS = st.lists(st.tuples(st.sampled_from(["accept", "authenticate", "busy", "close"]), st.integers(0, 5), st.integers(0, 10**6)),
               max_size=300)


@settings(max_examples=300, deadline=None)
@given(ops=OPS, limit=st.integers(1, 12), per_client=st.integers(1, 6), authenticated=st.integers(1, 4))
def test_slots_keep_their_bounds_and_never_close_a_certificate_holder_for_an_open_connection(ops, limit, per_client, authenticated):
    slots = threaded.Slots(limit, per_client, authenticated)
    live: list[threaded._Conn] = []
    for op, who, pick in ops:
        if op == "accept":
            before = {c: c.raw.aborted for c in live}
            ip = f"10.0.0.{who}"
            mine = [c for c in live if not c.authenticated and c.ip == ip]
            open_ = [c for c in live if not c.authenticated]
            conn = slots.accept(Transport(ip))
            newly = [c for c in live if c.raw.aborted and not before[c]]
            assert all(not c.authenticated and not c.busy() for c in newly)  # only an idle open connection makes room
            assert len(newly) <= 1
            if conn is None:  # refused only when every connection that could go is busy
                pool = mine if len(mine) >= per_client else open_
                assert all(c.busy() for c in pool) and not newly
            else:
                live.append(conn)
        elif live:
            conn = live[pick % len(live)]
            if op == "authenticate" and not conn.authenticated:
                n_auth = sum(c.authenticated for c in live)
                ok = slots.authenticate(conn)
                assert ok or n_auth >= authenticated
                if not ok:
                    conn.raw.abort()
            elif op == "busy":
                conn.handler = Busy()
            elif op == "close":
                conn.raw.abort()
        for c in [c for c in live if c.raw.aborted]:  # the transport's connection_lost
            slots.drop(c)
            live.remove(c)
        opened = [c for c in live if not c.authenticated]
        assert slots.n_open == len(opened) == sum(map(len, slots.open.values())) <= limit
        assert all(len(m) <= per_client for m in slots.open.values())
        assert len(slots.authenticated) == sum(c.authenticated for c in live) <= authenticated
