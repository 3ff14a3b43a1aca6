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


class ThreadedApp:
    def __init__(self, app: web.Application, host: str, port: int, name: str, ssl_context: ssl.SSLContext | None = None,
                 **runner: Any) -> None:
        self.app, self.host, self.port, self.ssl = app, host, port, ssl_context
        self.runner_kw = {"access_log": None, "handle_signals": False, **runner}
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
        site = web.TCPSite(self._runner, self.host, self.port, ssl_context=self.ssl, backlog=1024)
        await site.start()
        server = getattr(site, "_server", None)
        if self.port == 0 and server is not None and server.sockets:
            self.port = server.sockets[0].getsockname()[1]

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
