"""Streams over TCP: the producer side (:class:`Output`, one per output stream) and the consumer
side (:class:`Listener`). Plain threads and blocking sockets:

- an :class:`Output` keeps one connection per address its endpoints resolve to (in a cluster the
  consumer PE's name ``<pe>.<job>.<namespace>.svc``, its pods' hostname under the job's headless
  Service, gives every ready instance of the PE), sends each tuple on the next
  connection round robin, and has a thread that re-resolves periodically and (re)connects with
  exponential backoff. A send blocks while the consumer's socket buffer is full: that is the
  backpressure that lets a CPU-starved consumer slow down its producer;
- the :class:`Listener` accepts upstream connections on the PE's stream port, with a reader
  thread per connection that decodes frames (:mod:`.framing`) and hands them to a callback that
  blocks while the PE's bounded queue is full.
"""

from __future__ import annotations

import logging
import random
import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from .framing import HEADER, MAX_PAYLOAD, PREAMBLE, FrameDecoder, ProtocolError, encode_header

log = logging.getLogger("kubesoda_pe")

DEFAULT_STREAM_PORT = 9000
Address = tuple[str, int]  # a numeric IP and a port
Resolver = Callable[[str, int], list[Address]]


class PEClosed(RuntimeError):
    """The PE was closed while an operation waited."""


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_endpoint(text: str, default_port: int = DEFAULT_STREAM_PORT) -> Endpoint:
    """``host:port``, ``host`` (default port), ``[v6]:port`` or ``[v6]``."""
    t = text.strip()
    if t.startswith("["):
        host, sep, rest = t[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            raise ValueError(f"bad endpoint {text!r}")
        port_s = rest[1:]
    elif t.count(":") == 1:
        host, port_s = t.split(":")
    elif ":" in t:
        raise ValueError(f"bad endpoint {text!r} (write an IPv6 address as [addr]:port)")
    else:
        host, port_s = t, ""
    if not host:
        raise ValueError(f"bad endpoint {text!r}: no host")
    try:
        port = int(port_s) if port_s else default_port
    except ValueError as e:
        raise ValueError(f"bad endpoint {text!r}: port is not a number") from e
    if not 0 < port < 65536:
        raise ValueError(f"bad endpoint {text!r}: port out of range")
    return Endpoint(host, port)


def parse_outputs(spec: str | None, default_port: int = DEFAULT_STREAM_PORT) -> list[tuple[str, list[Endpoint]]]:
    """``KUBESODA_OUTPUTS``: comma-separated ``<stream>=<host>:<port>``, one entry per consumer PE
    (the destination gets every tuple of the stream; the instances behind it share them, round
    robin over every address its host resolves to). A destination may list several endpoints
    separated by ``|`` (instances without a common DNS name). A stream named twice goes to two
    consumers (a job's export imported by two jobs). Blank entries are ignored."""
    out: list[tuple[str, list[Endpoint]]] = []
    for item in (spec or "").split(","):
        if not item.strip():
            continue
        name, sep, addrs = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise ValueError(f"bad output {item.strip()!r}: expected <stream>=<host>:<port>")
        encode_header(name)  # checks the name fits a frame
        eps = list(dict.fromkeys(parse_endpoint(a, default_port) for a in addrs.split("|")))
        out.append((name, eps))
    return out


def resolve(host: str, port: int) -> list[Address]:
    """Every TCP address ``host`` resolves to, in resolver order, without duplicates."""
    seen: dict[Address, None] = {}
    for _family, _type, _proto, _canon, sockaddr in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
        seen[(str(sockaddr[0]), int(sockaddr[1]))] = None
    return list(seen)


class _Conn:
    def __init__(self, sock: socket.socket, addr: Address):
        self.sock = sock
        self.addr = addr
        self.lock = threading.Lock()

    def send(self, frame: bytes) -> None:
        with self.lock:
            self.sock.sendall(frame)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


class Output:
    """One output stream: its endpoints, their connections, round robin over them."""

    def __init__(self, name: str, endpoints: Iterable[Endpoint], on_sent: Callable[[str, int, int], None], *,
                 resolver: Resolver = resolve, resolve_interval: float = 10.0, backoff: tuple[float, float] = (0.05, 1.0),
                 connect_timeout: float = 2.0):
        self.name = name
        self.endpoints = list(endpoints)
        self._name = encode_header(name)
        self._on_sent = on_sent
        self._resolver = resolver
        self._resolve_interval = resolve_interval
        self._backoff_min, self._backoff_max = backoff
        self._connect_timeout = connect_timeout
        self._conns: list[_Conn] = []
        self._cond = threading.Condition()
        self._rr = 0
        self._wake = threading.Event()
        self._closed = False
        self._thread = threading.Thread(target=self._maintain, name=f"kubesoda-pe out {name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    @property
    def connected(self) -> list[Address]:
        with self._cond:
            return [c.addr for c in self._conns]

    def wait_connected(self, n: int = 1, timeout: float | None = None) -> bool:
        """Wait until at least ``n`` consumers are connected."""
        with self._cond:
            return self._cond.wait_for(lambda: self._closed or len(self._conns) >= n, timeout) and not self._closed

    def send(self, data: bytes | bytearray | memoryview, deadline: float | None = None) -> None:
        """Send one tuple to one consumer (round robin). Waits while no consumer is connected (until
        ``deadline``, a ``time.monotonic()`` instant: then ``TimeoutError``); a send that fails is
        retried on another connection; blocks while the chosen consumer's buffers are full."""
        n = len(data)
        if n > MAX_PAYLOAD:
            raise ValueError(f"payload of {n} bytes exceeds {MAX_PAYLOAD}")
        frame = HEADER.pack(len(self._name), n) + self._name + bytes(data)
        while True:
            with self._cond:
                while not self._conns:
                    if self._closed:
                        raise PEClosed(f"output {self.name} closed")
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        raise TimeoutError(f"no consumer of {self.name} connected ({', '.join(map(str, self.endpoints))})")
                    self._cond.wait(remaining)
                conn = self._conns[self._rr % len(self._conns)]
                self._rr += 1
            try:
                conn.send(frame)
            except OSError as e:
                log.info("stream %s: connection to %s lost (%s); tuple resent elsewhere", self.name, _fmt(conn.addr), e)
                self._drop(conn)
                continue
            self._on_sent(self.name, 1, n)
            return

    def close(self) -> None:
        with self._cond:
            self._closed = True
            conns, self._conns = self._conns, []
            self._cond.notify_all()
        self._wake.set()
        for c in conns:
            c.close()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=2)

    def _drop(self, conn: _Conn) -> None:
        with self._cond:
            if conn in self._conns:
                self._conns.remove(conn)
        conn.close()
        self._wake.set()

    def _resolve(self, previous: dict[Endpoint, list[Address]]) -> dict[Endpoint, list[Address]]:
        out = {}
        for ep in self.endpoints:
            try:
                out[ep] = self._resolver(ep.host, ep.port)
            except socket.gaierror as e:
                # the name does not exist (a headless Service with no ready pod): no address;
                # any other failure (a DNS server away) keeps what the last resolution gave
                gone = e.errno in (socket.EAI_NONAME, getattr(socket, "EAI_NODATA", socket.EAI_NONAME))
                out[ep] = [] if gone else previous.get(ep, [])
                log.debug("stream %s: resolving %s: %s", self.name, ep, e)
            except OSError as e:
                out[ep] = previous.get(ep, [])
                log.debug("stream %s: resolving %s: %s", self.name, ep, e)
        return out

    def _connect(self, addr: Address) -> _Conn:
        sock = socket.create_connection(addr, timeout=self._connect_timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            sock.sendall(PREAMBLE)
            sock.settimeout(None)  # blocking sends: backpressure
        except OSError:
            sock.close()
            raise
        return _Conn(sock, addr)

    def _maintain(self) -> None:
        resolved: dict[Endpoint, list[Address]] = {}
        next_resolve = 0.0
        delay: dict[Address, float] = {}  # the current backoff of an address that failed
        next_try: dict[Address, float] = {}
        while not self._closed:
            now = time.monotonic()
            if now >= next_resolve:
                resolved = self._resolve(resolved)
                next_resolve = now + self._resolve_interval
            addresses = list(dict.fromkeys(a for ep in self.endpoints for a in resolved.get(ep, [])))
            wanted = set(addresses)
            with self._cond:
                stale = [c for c in self._conns if c.addr not in wanted]
                for c in stale:
                    self._conns.remove(c)
                have = {c.addr for c in self._conns}
            for c in stale:
                log.info("stream %s: %s no longer resolves from %s; disconnected", self.name, _fmt(c.addr),
                         ", ".join(map(str, self.endpoints)))
                c.close()
            for a in list(delay):
                if a not in wanted:
                    delay.pop(a)
                    next_try.pop(a, None)
            for a in addresses:
                if self._closed or a in have or time.monotonic() < next_try.get(a, 0.0):
                    continue
                try:
                    conn = self._connect(a)
                except OSError as e:
                    d = delay[a] = min(self._backoff_max, delay[a] * 2) if a in delay else self._backoff_min
                    next_try[a] = time.monotonic() + d * random.uniform(0.8, 1.0)
                    log.debug("stream %s: connecting to %s: %s (retry in %.2fs)", self.name, _fmt(a), e, d)
                    continue
                delay.pop(a, None)
                next_try.pop(a, None)
                with self._cond:
                    if self._closed:
                        conn.close()
                        return
                    self._conns.append(conn)
                    self._cond.notify_all()
                log.info("stream %s: connected to %s", self.name, _fmt(a))
            with self._cond:
                have = {c.addr for c in self._conns}
            wake_at = min([next_resolve] + [next_try.get(a, 0.0) for a in addresses if a not in have])
            self._wake.wait(max(0.0, wake_at - time.monotonic()))
            self._wake.clear()


def _fmt(a: Address) -> str:
    return f"[{a[0]}]:{a[1]}" if ":" in a[0] else f"{a[0]}:{a[1]}"


class Listener:
    """Accepts upstream producers on ``port`` and feeds their frames to ``deliver(stream, payload)``,
    which blocks while the consumer is behind (returns False when the PE closes)."""

    def __init__(self, port: int, deliver: Callable[[str, bytes], bool], host: str = ""):
        self._deliver = deliver
        if host in ("", "::") and socket.has_dualstack_ipv6():
            self._sock = socket.create_server(("::", port), family=socket.AF_INET6, dualstack_ipv6=True, backlog=128)
        else:
            self._sock = socket.create_server((host or "0.0.0.0", port), backlog=128)
        self._sock.settimeout(0.5)  # accept() polls the closed flag
        self.port = self._sock.getsockname()[1]
        self._closed = False
        self._conns: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._accept, name="kubesoda-pe listener", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._closed = True
        try:
            self._sock.shutdown(socket.SHUT_RDWR)  # wakes accept() at once (Linux); else its timeout does
        except OSError:
            pass
        with self._lock:
            conns = list(self._conns)
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)  # wakes the reader blocked in recv
            except OSError:
                pass
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=2)
        self._sock.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, peer = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                if self._closed:
                    return
                time.sleep(0.05)  # out of descriptors, say: do not spin
                continue
            conn.settimeout(None)
            with self._lock:
                self._conns.add(conn)
            threading.Thread(target=self._read, args=(conn, peer), name=f"kubesoda-pe in {peer[0]}", daemon=True).start()

    def _read(self, conn: socket.socket, peer: tuple) -> None:
        dec = FrameDecoder()
        try:
            while not self._closed:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                for stream, payload in dec.feed(chunk):
                    if not self._deliver(stream, payload):
                        return
        except ProtocolError as e:
            log.warning("upstream %s: %s; connection closed", peer[0], e)
        except OSError as e:
            log.info("upstream %s: %s", peer[0], e)
        finally:
            if dec.pending:
                log.info("upstream %s: connection ended inside a frame (%d bytes dropped)", peer[0], dec.pending)
            with self._lock:
                self._conns.discard(conn)
            conn.close()
