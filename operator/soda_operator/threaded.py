"""An aiohttp application on its own event loop in a daemon thread: the extender and the web view
share the process with Kopf's loop (``kubesoda run``). Subclasses give the app, the address and
TLS; ``start()`` returns once it listens (or raises what stopped it), ``stop()`` closes connections
and handlers, then the loop. Port 0 picks a free port (``port`` then holds it)."""

from __future__ import annotations

import asyncio
import logging
import ssl
import threading
from typing import Any, TypeVar

from aiohttp import web

log = logging.getLogger("kubesoda.threaded")
S = TypeVar("S", bound="ThreadedApp")


# Connection limits (a client that opens connections and sends nothing, trickles its headers, or
# never finishes a TLS handshake must not hold the server): an idle connection, or one whose
# request headers are not complete, is closed after IDLE_TIMEOUT_S (aiohttp's keep-alive timer,
# armed from the moment a connection opens); a TLS handshake has HANDSHAKE_TIMEOUT_S; past
# MAX_CONNECTIONS open connections a new one is closed at once.
IDLE_TIMEOUT_S = 15.0
HANDSHAKE_TIMEOUT_S = 5.0
MAX_CONNECTIONS = 256


class _Refuse(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.close()


class _LimitedSite(web.TCPSite):
    """A TCPSite with a TLS handshake timeout and a cap on open connections."""

    def __init__(self, *a: Any, handshake_timeout: float, max_connections: int, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.handshake_timeout, self.max_connections = handshake_timeout, max_connections

    async def start(self) -> None:
        await web.BaseSite.start(self)
        server = self._runner.server
        assert server is not None

        def protocol() -> asyncio.BaseProtocol:
            return _Refuse() if len(server.connections) >= self.max_connections else server()

        extra: dict[str, Any] = {"ssl_handshake_timeout": self.handshake_timeout} if self._ssl_context else {}
        self._server = await asyncio.get_running_loop().create_server(protocol, self._host, self._port, ssl=self._ssl_context,
                                                                      backlog=self._backlog, **extra)
        self._bound_port = self._server.sockets[0].getsockname()[1] if self._server.sockets else self._port


class ThreadedApp:
    def __init__(self, app: web.Application, host: str, port: int, name: str, ssl_context: ssl.SSLContext | None = None,
                 idle_timeout: float = IDLE_TIMEOUT_S, handshake_timeout: float = HANDSHAKE_TIMEOUT_S,
                 max_connections: int = MAX_CONNECTIONS, **runner: Any) -> None:
        self.app, self.host, self.port, self.ssl = app, host, port, ssl_context
        self.handshake_timeout, self.max_connections = handshake_timeout, max_connections
        self.runner_kw = {"access_log": None, "handle_signals": False, "keepalive_timeout": idle_timeout, **runner}
        self.loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._runner: web.AppRunner | None = None
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

    async def _start(self) -> None:
        self._runner = web.AppRunner(self.app, **self.runner_kw)
        await self._runner.setup()
        site = _LimitedSite(self._runner, self.host, self.port, ssl_context=self.ssl, backlog=1024,
                            handshake_timeout=self.handshake_timeout, max_connections=self.max_connections)
        await site.start()
        if self.port == 0:
            self.port = site.port

    def stop(self) -> None:
        if not self.thread.is_alive():
            return
        if self._runner is not None:  # close connections and handlers first, then the loop
            try:
                asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self.loop).result(10)
            except Exception as e:  # noqa: BLE001 - stopping anyway
                log.warning("%s cleanup: %s", self.thread.name, e)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
