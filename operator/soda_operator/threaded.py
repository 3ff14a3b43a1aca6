"""An aiohttp application on its own event loop in a daemon thread: the extender and the web view
share the process with Kopf's loop (``kubesoda run``). Subclasses give the app, the address and
TLS; ``start()`` returns once it listens (or raises what stopped it), ``stop()`` closes connections
and handlers, then the loop. Port 0 picks a free port (``port`` then holds it). Further plain-HTTP
apps (the extender's health and metrics port) can listen on the same loop (``extra``).

Connection slots (issue 45): a client that opens connections and sends nothing, trickles its
headers, or never finishes a TLS handshake must not hold the server, and no number of connections
without a client certificate may keep out one with a certificate (kube-scheduler's). See
:class:`Slots`.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import threading
import time
from asyncio.sslproto import SSLProtocol
from collections.abc import Sequence
from typing import Any, TypeVar

from aiohttp import web

log = logging.getLogger("kubesoda.threaded")
S = TypeVar("S", bound="ThreadedApp")


# An idle connection, or one whose request headers are not complete, is closed after
# IDLE_TIMEOUT_S (aiohttp's keep-alive timer, armed from the moment a connection opens); a TLS
# handshake has HANDSHAKE_TIMEOUT_S. Connections without a verified client certificate (all of
# them on a server without a client CA) share MAX_CONNECTIONS slots, at most MAX_PER_CLIENT per
# source address; connections with one have MAX_AUTHENTICATED slots of their own.
IDLE_TIMEOUT_S = 15.0
HANDSHAKE_TIMEOUT_S = 5.0
MAX_CONNECTIONS = 256
MAX_PER_CLIENT = 32
MAX_AUTHENTICATED = 256


class _Conn:
    """One accepted connection: its source address, raw transport and (once HTTP is spoken on it)
    aiohttp's request handler."""

    __slots__ = ("ip", "since", "raw", "handler", "authenticated", "gone")

    def __init__(self, ip: str, raw: asyncio.BaseTransport) -> None:
        self.ip, self.since, self.raw = ip, time.monotonic(), raw
        self.handler: Any = None
        self.authenticated = self.gone = False

    def busy(self) -> bool:
        """A request is being answered on it (aiohttp's RequestHandler flag); otherwise it is in its
        TLS handshake, between requests, or still receiving headers."""
        return bool(getattr(self.handler, "_request_in_progress", False))


class Slots:
    """Who may hold a connection (issue 45).

    Every connection starts *open* (no client certificate yet: in its TLS handshake, or on a
    server without a client CA). Open connections share ``limit`` slots, at most ``per_client``
    per source address. A new connection never waits for, and is not refused because of, idle
    ones: when its address already holds ``per_client``, that address's oldest idle connection is
    closed; when all ``limit`` slots are taken, the oldest idle connection of the address that holds
    the most is closed. Only when every connection that would have to go is answering a request is
    the new one closed at once. A connection whose TLS handshake verified a client certificate
    leaves the open slots for ``authenticated`` slots of its own, which open connections can never
    take: kube-scheduler's connection gets in however many connections others hold (its handshake
    takes milliseconds; others would have to open ``per_client`` connections from one address,
    or ``limit`` from many, within those milliseconds to close it before it is done)."""

    def __init__(self, limit: int = MAX_CONNECTIONS, per_client: int = MAX_PER_CLIENT, authenticated: int = MAX_AUTHENTICATED) -> None:
        self.limit, self.per_client, self.max_authenticated = limit, per_client, authenticated
        self.open: dict[str, dict[_Conn, None]] = {}  # address -> its open connections, oldest first
        self.n_open = 0
        self.authenticated: dict[_Conn, None] = {}
        self.evicted = self.refused = 0

    def accept(self, raw: asyncio.BaseTransport) -> _Conn | None:
        """Register a new connection; None when it must be closed (no slot could be freed)."""
        peer = raw.get_extra_info("peername")
        ip = str(peer[0]) if isinstance(peer, tuple) and peer else "?"
        mine = self.open.get(ip, {})
        if len(mine) >= self.per_client:
            pool: list[dict[_Conn, None]] = [mine]
        elif self.n_open >= self.limit:
            pool = sorted(self.open.values(), key=len, reverse=True)
        else:
            pool = []
        if pool and not self._evict_one(pool):
            self.refused += 1
            return None
        conn = _Conn(ip, raw)
        self.open.setdefault(ip, {})[conn] = None
        self.n_open += 1
        return conn

    def _evict_one(self, pools: Sequence[dict[_Conn, None]]) -> bool:
        """Close the oldest idle connection of the first pool that has one."""
        for pool in pools:
            victim = next((c for c in pool if not c.busy()), None)
            if victim is not None:
                self.drop(victim)
                self.evicted += 1
                victim.raw.abort()  # type: ignore[attr-defined]
                return True
        return False

    def authenticate(self, conn: _Conn) -> bool:
        """Move a connection whose client certificate was verified to the authenticated slots;
        False when they are all answering requests (the connection must be closed)."""
        if conn.gone:
            return False
        if len(self.authenticated) >= self.max_authenticated and not self._evict_one([self.authenticated]):
            self.refused += 1
            return False
        self._forget_open(conn)
        conn.authenticated = True
        self.authenticated[conn] = None
        return True

    def _forget_open(self, conn: _Conn) -> None:
        mine = self.open.get(conn.ip)
        if mine is not None and conn in mine:
            del mine[conn]
            self.n_open -= 1
            if not mine:
                del self.open[conn.ip]

    def drop(self, conn: _Conn) -> None:
        if conn.gone:
            return
        conn.gone = True
        if conn.authenticated:
            self.authenticated.pop(conn, None)
        else:
            self._forget_open(conn)

    def all(self) -> list[_Conn]:
        return [c for m in self.open.values() for c in m] + list(self.authenticated)


class _App(asyncio.Protocol):
    """aiohttp's request handler behind the slots: told of its connection only once the
    connection has a slot (plain TCP: at accept; TLS: after the handshake, authenticated or not)."""

    def __init__(self, handler: asyncio.Protocol, slots: Slots, conn: _Conn | None = None) -> None:
        self.handler, self.slots, self.conn, self.made = handler, slots, conn, False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if self.conn is None:  # plain TCP: the raw transport
            self.conn = self.slots.accept(transport)
            if self.conn is None:
                transport.abort()  # type: ignore[attr-defined]
                return
        elif transport.get_extra_info("peercert") and not self.slots.authenticate(self.conn):
            transport.abort()  # type: ignore[attr-defined]
            return
        self.conn.handler = self.handler
        self.made = True
        self.handler.connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.conn is not None:
            self.slots.drop(self.conn)
        if self.made:
            self.made = False
            self.handler.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.made:
            self.handler.data_received(data)

    def eof_received(self) -> bool | None:
        return self.handler.eof_received() if self.made else None

    def pause_writing(self) -> None:
        if self.made:
            self.handler.pause_writing()

    def resume_writing(self) -> None:
        if self.made:
            self.handler.resume_writing()


class _TLS(SSLProtocol):
    """asyncio's own server-side TLS protocol (what ``create_server(ssl=...)`` builds for each
    connection), with the connection given a slot before its handshake starts."""

    def __init__(self, loop: asyncio.AbstractEventLoop, app: _App, ctx: ssl.SSLContext, handshake_timeout: float) -> None:
        super().__init__(loop, app, ctx, None, server_side=True, ssl_handshake_timeout=handshake_timeout)  # type: ignore[arg-type]  # typeshed: int
        self.app, self.refused = app, False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        conn = self.app.slots.accept(transport)
        if conn is None:
            self.refused = True
            transport.abort()  # type: ignore[attr-defined]
            return
        self.app.conn = conn
        super().connection_made(transport)

    def connection_lost(self, exc: BaseException | None) -> None:
        if self.app.conn is not None:
            self.app.slots.drop(self.app.conn)
        if not self.refused:
            super().connection_lost(exc)


class _LimitedSite(web.TCPSite):
    """A TCPSite whose connections hold :class:`Slots`, with a TLS handshake timeout."""

    def __init__(self, *a: Any, handshake_timeout: float, slots: Slots, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.handshake_timeout, self.slots = handshake_timeout, slots

    async def start(self) -> None:
        await web.BaseSite.start(self)
        server = self._runner.server
        assert server is not None
        loop = asyncio.get_running_loop()
        ctx = self._ssl_context

        def protocol() -> asyncio.BaseProtocol:
            app = _App(server(), self.slots)
            return _TLS(loop, app, ctx, self.handshake_timeout) if ctx is not None else app

        self._server = await loop.create_server(protocol, self._host, self._port, backlog=self._backlog)
        self._bound_port = self._server.sockets[0].getsockname()[1] if self._server.sockets else self._port

    async def stop(self) -> None:
        await super().stop()
        for conn in self.slots.all():  # those aiohttp does not know of (in their TLS handshake); it shuts down its own
            if conn.handler is None:
                conn.raw.abort()  # type: ignore[attr-defined]


class ThreadedApp:
    def __init__(self, app: web.Application, host: str, port: int, name: str, ssl_context: ssl.SSLContext | None = None,
                 idle_timeout: float = IDLE_TIMEOUT_S, handshake_timeout: float = HANDSHAKE_TIMEOUT_S,
                 max_connections: int = MAX_CONNECTIONS, max_per_client: int = MAX_PER_CLIENT,
                 max_authenticated: int = MAX_AUTHENTICATED, extra: Sequence[tuple[web.Application, int]] = (), **runner: Any) -> None:
        """``extra``: (app, port) pairs served over plain HTTP on the same host and loop, each with
        slots of its own (``extra_ports`` then holds the bound ports)."""
        self.app, self.host, self.port, self.ssl = app, host, port, ssl_context
        self.handshake_timeout = handshake_timeout
        self.limits = (max_connections, max_per_client, max_authenticated)
        self.slots = Slots(*self.limits)
        self.extra = list(extra)
        self.extra_ports = [p for _, p in self.extra]
        self.extra_slots = [Slots(*self.limits) for _ in self.extra]
        self.runner_kw = {"access_log": None, "handle_signals": False, "keepalive_timeout": idle_timeout, **runner}
        self.loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._runners: list[web.AppRunner] = []
        self.thread = threading.Thread(target=self._run, daemon=True, name=name)

    def start(self: S) -> S:
        self.thread.start()
        self._ready.wait()
        if self._error is not None:
            raise self._error
        return self

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_until_complete(self._start())
        except BaseException as e:  # reported to start()'s caller
            self._error = e
            self._ready.set()
            return
        self._ready.set()
        self.loop.run_forever()
        self.loop.close()

    async def _site(self, app: web.Application, port: int, ctx: ssl.SSLContext | None, slots: Slots) -> int:
        runner = web.AppRunner(app, **self.runner_kw)
        await runner.setup()
        self._runners.append(runner)
        site = _LimitedSite(runner, self.host, port, ssl_context=ctx, backlog=1024, handshake_timeout=self.handshake_timeout, slots=slots)
        await site.start()
        return site.port

    async def _start(self) -> None:
        self.port = await self._site(self.app, self.port, self.ssl, self.slots)
        for i, (app, port) in enumerate(self.extra):
            self.extra_ports[i] = await self._site(app, port, None, self.extra_slots[i])

    def stop(self) -> None:
        if not self.thread.is_alive():
            return
        for runner in self._runners:  # close connections and handlers first, then the loop
            try:
                asyncio.run_coroutine_threadsafe(runner.cleanup(), self.loop).result(10)
            except Exception as e:  # noqa: BLE001 - stopping anyway
                log.warning("%s cleanup: %s", self.thread.name, e)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
