"""The extender under a flood of connections without a client certificate, live (issue 45): the
real kube-scheduler (its client certificate from the local control plane) still places a job's
instances on their planned nodes while 270 keep-alive TLS connections to /healthz, from 30
addresses, are held (each asking again every 5 s) and reopened as soon as the extender closes one,
as a tenant's pod could. Before, 256 of them took every connection slot for as long as they were
held, and kube-scheduler's /filter got resets (this test timed out waiting for the pods)."""

from __future__ import annotations

import os
import select
import socket
import ssl
import threading
import time

import pytest
from live import ROOT, running_as_planned

FLOOD, ADDRESSES = 270, 30
PING_S = 5.0  # the extender closes a connection idle for 15 s


class Flood:
    """FLOOD anonymous keep-alive connections to the extender, each asking /healthz every PING_S
    seconds (never idle long enough to time out) and reopened when closed."""

    def __init__(self, port: int, ctx: ssl.SSLContext) -> None:
        self.port, self.ctx = port, ctx
        self.socks: list[ssl.SSLSocket | None] = [None] * FLOOD
        self.stop, self.opened = threading.Event(), 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _open(self, i: int) -> ssl.SSLSocket | None:
        try:
            raw = socket.socket()
            raw.bind((f"127.0.0.{2 + i % ADDRESSES}", 0))
            raw.settimeout(5)
            raw.connect(("127.0.0.1", self.port))
            s = self.ctx.wrap_socket(raw, server_hostname="127.0.0.1")
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            if not s.recv(4096).startswith(b"HTTP/1.1 200"):
                s.close()
                return None
            self.opened += 1
            return s
        except OSError:
            return None

    def _run(self) -> None:
        asked = [0.0] * FLOOD
        while not self.stop.is_set():
            now = time.monotonic()
            for i, s in enumerate(self.socks):
                if s is None:
                    self.socks[i], asked[i] = self._open(i), now
                elif now - asked[i] > PING_S:  # asked again before the extender's idle timeout closes it
                    try:
                        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                        asked[i] = now
                    except OSError:
                        self._drop(s)
            live = [s for s in self.socks if s is not None]
            readable, _, _ = select.select(live, [], [], 0.2) if live else ([], [], [])
            for s in readable:  # an answer, or closed by the extender
                try:
                    if s.recv(4096):
                        continue
                except ssl.SSLWantReadError:
                    continue
                except OSError:
                    pass
                self._drop(s)

    def _drop(self, s: ssl.SSLSocket) -> None:
        self.socks[self.socks.index(s)] = None
        s.close()

    def held(self) -> int:
        return sum(s is not None for s in self.socks)

    def __enter__(self) -> Flood:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join(10)
        for s in self.socks:
            if s is not None:
                s.close()


def test_the_scheduler_places_pods_through_a_flood_of_anonymous_connections(operator, kube, kubectl, namespace, extender_port, wait_for):
    cert = os.environ.get("KUBESODA_EXTENDER_TLS_CERT")
    if not cert:
        pytest.skip("the extender serves TLS with client certificates on the local control plane only")
    ctx = ssl.create_default_context(cafile=os.path.join(os.path.dirname(cert), "ca.crt"))
    with Flood(extender_port, ctx) as flood:
        wait_for(lambda: flood.held() >= 250, timeout=60, what="250 anonymous connections held")
        kubectl("apply", "-n", namespace, "-f", str(ROOT / "examples" / "small-pipeline"))
        pods = wait_for(lambda: running_as_planned(kube, namespace, "clicks"), timeout=90, what="clicks Running as planned during the flood")
        assert all(p.spec.scheduler_name == "kubesoda" for p in pods)
        held, opened = flood.held(), flood.opened
    print(f"\nflood: {opened} anonymous connections opened, {held} held at the end; {len(pods)} instances placed as planned")
    assert held >= 240, held  # the flood was real to the end: the open slots stayed full
