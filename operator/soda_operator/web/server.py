"""The web view's server (aiohttp): read-only, on 127.0.0.1 unless told otherwise.

Routes:
- ``/``: the page (``static/index.html``); it draws with Plotly's JavaScript, served from the
  installed ``plotly`` wheel at ``/static/plotly.min.js`` (no internet access needed);
- ``/api/state``: the current view (:func:`.model.build`) as JSON;
- ``/api/events``: Server-Sent Events, one ``state`` event with the whole view each time it changes
  (and a comment every 15 s to keep proxies from closing the stream).

Every request must name an allowed host in its ``Host`` header (:func:`allowed_hosts`: the loopback
names, the address the server is bound to unless it is a wildcard, and ``--web-allowed-host``);
any other gets 421 before a handler runs, so a page of another site that rebinds its DNS name to
127.0.0.1 cannot read ``/api/state``. Every response, errors and the event stream included, carries
the Content-Security-Policy and ``X-Content-Type-Options: nosniff``.

:class:`ViewState` is the one place the operator (or ``kubesoda plan --serve``) hands its latest
Scenario and Plan to; it keeps the bounded history of the last epochs. :class:`Server` runs the app
on its own event loop in a daemon thread, next to Kopf's.
"""

from __future__ import annotations

import asyncio
import collections
import importlib.util
import json
import logging
import re
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from aiohttp import web

from soda_optimizer.model import Scenario
from soda_optimizer.plan import Plan

from ..threaded import ThreadedApp
from . import model

log = logging.getLogger("kubesoda.web")

STATIC = Path(__file__).parent / "static"
HISTORY = 120  # epochs kept (at the default 10 s micro epoch: 20 minutes)
KEEPALIVE_S = 15.0


def plotly_js() -> Path | None:
    """plotly.min.js inside the installed ``plotly`` package (without importing it)."""
    spec = importlib.util.find_spec("plotly")
    for loc in (spec.submodule_search_locations or []) if spec else []:
        p = Path(loc) / "package_data" / "plotly.min.js"
        if p.is_file():
            return p
    return None


def k8s_pod_name(job: str, pe: str, node: str) -> str:
    """The pod the operator creates for an instance (``apply.pod_name`` of the job's name)."""
    from ..soda.apply import pod_name

    return pod_name(job.split("/", 1)[-1], pe, node)


class ViewState:
    """The latest view and the history of epochs; :meth:`publish` may be called from any thread."""

    def __init__(self, source: str = "live", history: int = HISTORY,
                 pod_name: Callable[[str, str, str], str] | None = k8s_pod_name) -> None:
        self.source = source
        self.pod_name = pod_name
        self.history: collections.deque[dict[str, Any]] = collections.deque(maxlen=history)
        self.version = 0
        self._doc: dict[str, Any] = {"apiVersion": "kubesoda.io/web/v1alpha1", "source": source, "version": 0, "empty": True,
                                     "message": "no plan yet: the first macro epoch has not run", "zones": [], "jobs": [],
                                     "instances": [], "streams": [], "links": [], "history": []}
        self._lock = threading.Lock()
        self._listeners: list[Callable[[], None]] = []

    def publish(self, scenario: Scenario, plan: Plan, *, epoch: str = "macro", changes: Mapping[str, int] | None = None,
                observed: Mapping[str, float] | None = None) -> None:
        """A new plan was made (and applied): rebuild the view, add an epoch to the history, tell
        the open pages. Never raises (the operator's epoch must not fail because of the view)."""
        try:
            now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            obs_total = sum(float(v) for v in (observed or {}).values()) if observed else None
            with self._lock:
                self.history.append(model.history_entry(plan, epoch, now, changes, obs_total))
                doc = model.build(scenario, plan, observed=observed, history=list(self.history), source=self.source,
                                  pod_name=self.pod_name, time=now)
                self.version += 1
                doc["version"] = self.version
                doc["epoch"] = epoch
                self._doc = doc
                listeners = list(self._listeners)
        except Exception:  # noqa: BLE001  (a view must never break an epoch)
            log.exception("web view: could not build the view of this plan")
            return
        for f in listeners:
            try:
                f()
            except RuntimeError:  # its loop is closed
                pass

    def doc(self) -> dict[str, Any]:
        with self._lock:
            return self._doc

    def subscribe(self, f: Callable[[], None]) -> None:
        with self._lock:
            self._listeners.append(f)

    def unsubscribe(self, f: Callable[[], None]) -> None:
        with self._lock:
            if f in self._listeners:
                self._listeners.remove(f)


# --------------------------------------------------------------------------- the app

STATE_KEY: web.AppKey[ViewState] = web.AppKey("state", ViewState)
COND_KEY: web.AppKey[asyncio.Condition] = web.AppKey("cond", asyncio.Condition)
LISTENER_KEY: web.AppKey[Any] = web.AppKey("listener", object)

HOSTS_KEY = web.AppKey("hosts", frozenset[str])

_HEADERS = {"Cache-Control": "no-store"}
_CSP = ("default-src 'self'; script-src 'self' 'unsafe-eval'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; "
        "connect-src 'self'; frame-ancestors 'none'")
SECURITY_HEADERS = {"Content-Security-Policy": _CSP, "X-Content-Type-Options": "nosniff"}
LOOPBACK = ("localhost", "127.0.0.1", "::1")
WILDCARDS = ("", "0.0.0.0", "::", "*")
_HOST = re.compile(r"(?:\[(?P<v6>[0-9a-f:.]+)\]|(?P<name>[^:\[\]/@\s]+))(?::(?P<port>[0-9]{1,5}))?")


def split_host(value: str) -> tuple[str, str | None] | None:
    """A ``Host`` header (or a ``--web-allowed-host``) as (lower-case name without brackets or a
    final dot, port or None); None when it is not a host[:port]."""
    m = _HOST.fullmatch(value.strip().lower())
    if m is None:
        return None
    name = (m.group("v6") or m.group("name")).removesuffix(".")
    return (name, m.group("port")) if name else None


def allowed_hosts(bound: str = "127.0.0.1", extra: Iterable[str] = ()) -> frozenset[str]:
    """The ``Host`` values the view answers: the loopback names, the address it is bound to
    (``--web-host``/``--host``) unless a wildcard, and ``extra`` (``--web-allowed-host``), each
    with any port ("name"), or with only the one it gives ("name:port")."""
    out = set(LOOPBACK)
    if bound.strip().lower() not in WILDCARDS:
        got = split_host(f"[{bound}]" if ":" in bound and not bound.startswith("[") else bound)
        if got:
            out.add(got[0])
    for h in extra:
        got = split_host(h)
        if got is None:
            raise ValueError(f"--web-allowed-host {h!r}: not a host name or address, with an optional :port")
        out.add(_with_port(*got) if got[1] else got[0])
    return frozenset(out)


def _with_port(name: str, port: str | None) -> str:
    return f"[{name}]:{port}" if ":" in name else f"{name}:{port}"


def host_allowed(value: str | None, allowed: frozenset[str]) -> bool:
    got = split_host(value) if value else None
    return got is not None and (got[0] in allowed or _with_port(*got) in allowed)


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


_last_refusal_log = 0.0


@web.middleware
async def _check_host(request: web.Request, handler: Handler) -> web.StreamResponse:
    """421 Misdirected Request for a ``Host`` this view does not answer (DNS rebinding), before any
    route (404s and 405s included) runs; logged at most once a minute."""
    global _last_refusal_log
    allowed: frozenset[str] = request.app[HOSTS_KEY]
    if not host_allowed(request.headers.get("Host"), allowed):
        if time.monotonic() - _last_refusal_log > 60:
            _last_refusal_log = time.monotonic()
            log.warning("web view: refused a request for Host %r (allowed: %s; see --web-allowed-host)",
                        request.headers.get("Host"), ", ".join(sorted(allowed)))
        return web.Response(status=421, text="421 Misdirected Request: this host name is not served here (see --web-allowed-host)\n",
                            headers=_HEADERS)
    return await handler(request)


async def _security_headers(request: web.Request, response: web.StreamResponse) -> None:
    """On every response as its headers go out: the event stream's are sent from inside its
    handler, and aiohttp's own 404, 405 and 500 are made outside the handlers, where a middleware's
    return path would not see them."""
    response.headers.update(SECURITY_HEADERS)


async def _index(request: web.Request) -> web.StreamResponse:
    return web.FileResponse(STATIC / "index.html", headers={**_HEADERS, "Content-Type": "text/html; charset=utf-8"})


async def _asset(request: web.Request) -> web.StreamResponse:
    name = request.match_info["name"]
    if name == "plotly.min.js":
        p = plotly_js()
        if p is None:
            raise web.HTTPNotFound(text="the plotly package is not installed (pip install plotly)")
        return web.FileResponse(p, headers={"Cache-Control": "max-age=86400", "Content-Type": "application/javascript"})
    if name not in ("app.js", "app.css"):
        raise web.HTTPNotFound()
    ctype = "application/javascript" if name.endswith(".js") else "text/css"
    return web.FileResponse(STATIC / name, headers={**_HEADERS, "Content-Type": ctype})


async def _no_icon(request: web.Request) -> web.Response:
    return web.Response(status=204)


async def _state(request: web.Request) -> web.Response:
    return web.json_response(request.app[STATE_KEY].doc(), headers=_HEADERS, dumps=lambda o: json.dumps(o, allow_nan=False))


async def _events(request: web.Request) -> web.StreamResponse:
    state, cond = request.app[STATE_KEY], request.app[COND_KEY]
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
    await resp.prepare(request)
    sent = -1
    try:
        while True:
            doc = state.doc()
            if doc.get("version", 0) != sent:
                sent = doc.get("version", 0)
                await resp.write(f"event: state\nid: {sent}\ndata: {json.dumps(doc, allow_nan=False)}\n\n".encode())
            def moved(seen: int = sent) -> bool:
                return bool(state.version != seen)

            async with cond:
                try:
                    await asyncio.wait_for(cond.wait_for(moved), KEEPALIVE_S)
                except TimeoutError:
                    await resp.write(b": keep-alive\n\n")
    except (ConnectionResetError, asyncio.CancelledError):
        pass
    return resp


def make_app(state: ViewState, hosts: frozenset[str] | None = None) -> web.Application:
    """The view's app; ``hosts`` from :func:`allowed_hosts` (default: the loopback names)."""
    app = web.Application(middlewares=[_check_host])
    app[STATE_KEY] = state
    app[HOSTS_KEY] = allowed_hosts() if hosts is None else hosts
    app.on_response_prepare.append(_security_headers)

    async def on_startup(app: web.Application) -> None:
        cond = asyncio.Condition()
        app[COND_KEY] = cond
        loop = asyncio.get_running_loop()

        async def wake() -> None:
            async with cond:
                cond.notify_all()

        def changed() -> None:
            loop.call_soon_threadsafe(lambda: loop.create_task(wake()))

        app[LISTENER_KEY] = changed
        state.subscribe(changed)

    async def on_cleanup(app: web.Application) -> None:
        state.unsubscribe(app[LISTENER_KEY])

    app.on_startup.append(on_startup)
    app.on_cleanup.append(on_cleanup)
    app.router.add_get("/", _index)
    app.router.add_get("/api/state", _state)
    app.router.add_get("/api/events", _events)
    app.router.add_get("/static/{name}", _asset)
    app.router.add_get("/favicon.ico", _no_icon)
    return app


class Server(ThreadedApp):
    """The view on its own event loop in a daemon thread (``kubesoda run`` shares the process with
    Kopf's loop)."""

    def __init__(self, state: ViewState, host: str = "127.0.0.1", port: int = 8090, allowed: Iterable[str] = ()) -> None:
        self.state = state
        self.hosts = allowed_hosts(host, allowed)
        super().__init__(make_app(state, self.hosts), host, port, "web", shutdown_timeout=1.0)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/"


def serve(state: ViewState, host: str = "127.0.0.1", port: int = 8090, allowed: Iterable[str] = ()) -> Server:
    return Server(state, host, port, allowed).start()


def serve_live(loops: Any, host: str = "127.0.0.1", port: int = 8090, allowed: Iterable[str] = ()) -> Server:
    """``kubesoda run --web-port``: the view of every plan the operator's epochs apply
    (``Loops.on_apply``), with the observed importance its Observer keeps."""
    state = ViewState("live")

    def on_apply(scen: Scenario, plan: Plan, changes: dict[str, int]) -> None:
        blocks = getattr(getattr(loops, "observer", None), "blocks", {}) or {}
        observed = {job: float(b["importance"]) for job, b in blocks.items() if "importance" in b and "error" not in b}
        state.publish(scen, plan, epoch="macro" if plan is loops.last else "micro", changes=changes, observed=observed or None)

    loops.on_apply = on_apply
    return serve(state, host, port, allowed)


def serve_offline(scenario: Scenario, plan: Plan, host: str = "127.0.0.1", port: int = 8090, allowed: Iterable[str] = ()) -> int:
    """``kubesoda plan -f ... --serve``: one plan from files, until interrupted."""
    import sys

    state = ViewState("offline")
    state.publish(scenario, plan, epoch="offline")
    try:
        srv = serve(state, host, port, allowed)
    except OSError as e:
        print(f"error: the web view cannot listen on {host}:{port}: {e}", file=sys.stderr)
        return 2
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"\nweb view of this plan on {srv.url} (Ctrl-C to stop)", file=sys.stderr, flush=True)
    try:
        while srv.thread.is_alive():
            srv.thread.join(1.0)
    except KeyboardInterrupt:
        srv.stop()
    return 0
