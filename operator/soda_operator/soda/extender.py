"""The kube-scheduler extender: places each PE instance on its planned node.

HTTP endpoints (kube-scheduler's extender protocol, JSON keys as kube-scheduler sends them: the Go
field names of ExtenderArgs / ExtenderFilterResult / HostPriority):
- ``POST /filter``: ``{"Pod": {...}, "Nodes": {...} | null, "NodeNames": [...] | null}`` ->
  ``{"Nodes": ..., "NodeNames": [...], "FailedNodes": {name: reason}, "FailedAndUnresolvableNodes": {}, "Error": ""}``
- ``POST /prioritize``: same arguments -> ``[{"Host": name, "Score": 0..10}]``
- ``GET /healthz``, ``GET /metrics`` (Prometheus).

Stateless: the planned node is the pod's annotation ``kubesoda.io/node`` (written by the
operator's apply); pods without the ``kubesoda.io/job`` label pass through untouched (every node
passes, every score 0). With ``nodeCacheCapable: true`` kube-scheduler sends only node names.

Served by aiohttp (the server Kopf itself depends on). Requests are validated against the
ExtenderArgs shape (:class:`ExtenderArgs`, pydantic): anything else gets a 400 with a JSON
``{"Error": ...}`` naming the field, a body over ``max_body`` bytes a 413 before it is read whole,
a body that does not arrive within ``read_timeout`` a 408. Optional TLS (``--tls-cert-file``,
``--tls-key-file``), and client certificates when ``--tls-client-ca-file`` is given (required by
the verbs, 403 without; /healthz and /metrics stay open to kubelet probes and Prometheus): the
shapes of kube-scheduler's extender ``enableHTTPS`` / ``tlsConfig``.

``FailedNodes`` names every other node only when the planned node is not among those offered (the
pod then fails, and kube-scheduler's event quotes the reasons); when the planned node passes,
the other nodes are simply left out of ``NodeNames`` (kube-scheduler needs no reason for them), so
an answer at 1000 nodes is a few bytes, not 60 KB.

When the extender is down: the scheduler profile sets ``ignorable: false`` so a kubesoda pod
stays Pending (kube-scheduler retries it) rather than landing on an unplanned node; pods of other
schedulers never reach it. See docs/extender.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import math
import os
import re
import ssl
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .. import logs
from ..kube import metrics
from ..threaded import ThreadedApp

log = logging.getLogger("kubesoda.extender")
ANN_NODE = "kubesoda.io/node"
LABEL_JOB = "kubesoda.io/job"
MAX_SCORE = 10
# 2 MiB: a Pod at etcd's 1.5 MB limit plus 5,000 node names, or 100,000 names of 16 characters
# (kube-scheduler sends only names with nodeCacheCapable: true, as the chart configures it); the
# extender's peak with the largest bodies stays far under the chart's 256Mi (docs/extender.md has
# the measured figures). Full Node objects (nodeCacheCapable: false) fit about 250 nodes: raise
# --max-body-bytes with the container's memory.
MAX_BODY = 2 * 1024 * 1024
READ_TIMEOUT_S = 10.0
# bodies larger than this are validated, filtered and encoded off the event loop, one at a time, so
# /healthz and small requests keep answering and at most one large body is in memory at once
INLINE_BYTES = 64 * 1024
# a Kubernetes node name: a DNS subdomain (RFC 1123), at most 253 characters
NODE_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
# the reasons are fixed: an answer's size never depends on what a pod's author wrote
NOT_PLANNED = "kubesoda planned this instance on another node (its kubesoda.io/node annotation)"
BAD_ANNOTATION = "the pod's kubesoda.io/node annotation is not a node name: kubesoda did not write it"
# cluster-up.sh exports these, so every `kubesoda run` against the local control plane serves TLS
ENV_CERT, ENV_KEY, ENV_CLIENT_CA = "KUBESODA_EXTENDER_TLS_CERT", "KUBESODA_EXTENDER_TLS_KEY", "KUBESODA_EXTENDER_TLS_CLIENT_CA"


# ------------------------------------------------------------------------------------------ models
class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class ObjectMeta(_Open):
    name: str = ""
    namespace: str = ""
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None


class Pod(_Open):
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)


class NodeMeta(_Open):
    name: str


class Node(_Open):
    metadata: NodeMeta


class NodeList(_Open):
    items: list[Node] | None = None


class ExtenderArgs(BaseModel):
    """kube-scheduler's ExtenderArgs (k8s.io/kube-scheduler/extender/v1)."""

    model_config = ConfigDict(extra="ignore")
    Pod: Pod
    Nodes: NodeList | None = None
    NodeNames: list[str] | None = None

    def node_names(self) -> list[str]:
        if self.NodeNames is not None:
            return self.NodeNames
        return [n.metadata.name for n in (self.Nodes.items or [])] if self.Nodes is not None else []


def planned_node(pod: Pod) -> str | None:
    md = pod.metadata
    if LABEL_JOB not in (md.labels or {}):
        return None
    return (md.annotations or {}).get(ANN_NODE)


def is_node_name(name: str) -> bool:
    return len(name) <= 253 and NODE_NAME.fullmatch(name) is not None


def filter_(args: ExtenderArgs) -> dict[str, Any]:
    names = args.node_names()
    want = planned_node(args.Pod)
    failed: dict[str, str] = {}
    error = ""
    if want is None:
        keep = names
    elif not is_node_name(want):
        # no node can ever pass: one error of fixed size (kube-scheduler's event for the pod quotes it)
        keep, error = [], BAD_ANNOTATION
    else:
        keep = [n for n in names if n == want]
        if not keep:
            failed = dict.fromkeys(names, NOT_PLANNED)
    result: dict[str, Any] = {"NodeNames": keep, "FailedNodes": failed, "FailedAndUnresolvableNodes": {}, "Error": error}
    if args.NodeNames is None and args.Nodes is not None:
        kept = set(keep)
        items = [n.model_dump(mode="json") for n in args.Nodes.items or [] if n.metadata.name in kept]
        result["Nodes"] = {"items": items}
        result["NodeNames"] = None
    return result


def prioritize(args: ExtenderArgs) -> list[dict[str, Any]]:
    want = planned_node(args.Pod)  # an annotation that is not a node name matches no node: every score 0
    return [{"Host": n, "Score": MAX_SCORE if n == want else 0} for n in args.node_names()]


# ------------------------------------------------------------------------------------------ server
def _error(status: int, msg: str) -> web.Response:
    metrics.EXTENDER_ERRORS.labels(str(status)).inc()
    resp = web.json_response({"Error": f"kubesoda extender: {msg}"}, status=status)
    if status in (408, 413):  # the rest of the body is not read: the connection cannot be reused
        resp.force_close()
    return resp


def _describe(e: ValidationError) -> str:
    first = e.errors()[0]
    where = ".".join(str(x) for x in first.get("loc", ())) or "body"
    more = f" (and {e.error_count() - 1} more)" if e.error_count() > 1 else ""
    return f"bad request: {where}: {first.get('msg', 'invalid')}{more}"


class _Throttled:
    """One warning per ``every`` seconds about bad requests (a hostile client cannot flood the log;
    the count is in ``kubesoda_extender_errors_total``)."""

    def __init__(self, every: float = 10.0) -> None:
        self.every, self.last, self.quiet = every, -math.inf, 0

    def log(self, verb: str, remote: str | None, what: str) -> None:
        now = time.monotonic()
        if now - self.last < self.every:
            self.quiet += 1
            return
        more = f" ({self.quiet} more bad requests in the last {now - self.last:.0f} s)" if self.quiet else ""
        log.warning("bad extender request %s from %s: %s%s", verb, remote, what, more)
        self.last, self.quiet = now, 0


def make_app(max_body: int = MAX_BODY, read_timeout: float = READ_TIMEOUT_S, client_certs: bool = False) -> web.Application:
    """The routes. With ``client_certs`` the verbs answer only clients that presented a certificate
    the TLS context verified (403 otherwise); /healthz and /metrics stay open to probes and scrapers."""
    verbs: dict[str, Callable[[ExtenderArgs], Any]] = {"filter": filter_, "prioritize": prioritize}
    bad = _Throttled()
    large = asyncio.Semaphore(1)  # one large body in memory at a time

    def answer(name: str, body: bytes) -> tuple[int, bytes, str]:
        """(status, JSON body, what was wrong) of one request: validation, the verb, encoding."""
        try:
            args = ExtenderArgs.model_validate_json(body)
        except ValidationError as e:
            return 400, b"", _describe(e)
        return 200, json.dumps(verbs[name](args), separators=(",", ":")).encode(), ""

    async def verb(request: web.Request) -> web.StreamResponse:
        name = request.match_info["verb"]
        fn = verbs.get(name)
        if fn is None:
            return _error(404, f"unknown verb {name!r} (filter, prioritize)")
        t0 = time.perf_counter()
        if client_certs and request.transport is not None and not request.transport.get_extra_info("peercert"):
            return _error(403, "a client certificate signed by the extender's client CA is required")
        if request.content_length is not None and request.content_length > max_body:
            return _error(413, f"body of {request.content_length} bytes over the limit of {max_body}")
        try:
            body = await asyncio.wait_for(request.read(), read_timeout)
        except web.HTTPRequestEntityTooLarge:
            return _error(413, f"body over the limit of {max_body} bytes")
        except TimeoutError:
            return _error(408, f"body not received within {read_timeout:g} s")
        if len(body) <= INLINE_BYTES:
            code, out, why = answer(name, body)
        else:
            async with large:
                code, out, why = await asyncio.get_running_loop().run_in_executor(None, answer, name, body)
        del body
        if code != 200:
            bad.log(name, request.remote, why)
            return _error(code, why)
        metrics.EXTENDER_LATENCY.labels(name).observe(time.perf_counter() - t0)
        return web.Response(body=out, content_type="application/json")

    app = web.Application(client_max_size=max_body)
    app.router.add_post("/{verb}", verb)
    _health_routes(app)
    return app


async def _healthz(_: web.Request) -> web.Response:
    return web.Response(text="ok")


async def _metrics(_: web.Request) -> web.Response:
    body, ctype = metrics.exposition()
    return web.Response(body=body, headers={"Content-Type": ctype})


def _health_routes(app: web.Application) -> None:
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/metrics", _metrics)


def make_health_app() -> web.Application:
    """``/healthz`` and ``/metrics`` alone, for the health port (plain HTTP: kubelet's probes and
    Prometheus; issue 45): probes never compete with anyone for the verbs port's connections."""
    app = web.Application(client_max_size=4096)
    _health_routes(app)
    return app


def tls_context(cert: str | None, key: str | None, client_ca: str | None = None) -> ssl.SSLContext | None:
    """A server TLS context from PEM files, or None when no certificate is given. With a client CA,
    a client certificate is verified against it when presented (kube-scheduler's
    ``tlsConfig.certFile``), and the verbs require one (:func:`make_app`)."""
    if not cert and not key:
        if client_ca:
            raise ValueError("--tls-client-ca-file needs --tls-cert-file and --tls-key-file")
        return None
    if not (cert and key):
        raise ValueError("TLS needs both --tls-cert-file and --tls-key-file")
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert, key)
    if client_ca:
        ctx.load_verify_locations(client_ca)
        ctx.verify_mode = ssl.CERT_OPTIONAL
    return ctx


class Server(ThreadedApp):
    """The extender on its own event loop in a daemon thread (``kubesoda run`` shares the process
    with Kopf's loop; ``kubesoda extender`` just waits on it)."""

    def __init__(self, host: str = "127.0.0.1", port: int = 8888, ssl_context: ssl.SSLContext | None = None,
                 max_body: int = MAX_BODY, read_timeout: float = READ_TIMEOUT_S, health_port: int | None = None, **limits: Any) -> None:
        """``health_port``: also serve /healthz and /metrics over plain HTTP on this port (0: a free
        one; None: none), on the same event loop, so a probe answers only when the verbs can.
        ``limits``: the connection limits of :class:`.threaded.ThreadedApp` (idle_timeout,
        handshake_timeout, max_connections, max_per_client, max_authenticated)."""
        super().__init__(make_app(max_body, read_timeout, client_certs=ssl_context is not None and ssl_context.verify_mode != ssl.CERT_NONE),
                         host, port, "extender", ssl_context, extra=[] if health_port is None else [(make_health_app(), health_port)],
                         **limits)

    @property
    def health_port(self) -> int | None:
        return self.extra_ports[0] if self.extra_ports else None

    @property
    def scheme(self) -> str:
        return "https" if self.ssl else "http"

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}"


def serve(host: str = "127.0.0.1", port: int = 8888, ssl_context: ssl.SSLContext | None = None, **kw: Any) -> Server:
    """Start the extender; returns the running :class:`Server` (``.port`` is the bound port)."""
    return Server(host, port, ssl_context, **kw).start()


def tls_from_args(args: argparse.Namespace) -> ssl.SSLContext | None:
    return tls_context(getattr(args, "tls_cert_file", None) or os.environ.get(ENV_CERT),
                       getattr(args, "tls_key_file", None) or os.environ.get(ENV_KEY),
                       getattr(args, "tls_client_ca_file", None) or os.environ.get(ENV_CLIENT_CA))


def main(args: argparse.Namespace) -> int:
    logs.setup()
    try:
        ctx = tls_from_args(args)
        srv = serve(getattr(args, "host", "127.0.0.1"), args.port, ctx, max_body=getattr(args, "max_body_bytes", MAX_BODY),
                    health_port=getattr(args, "health_port", 0) or None)
    except (OSError, ValueError, ssl.SSLError) as e:
        log.error("extender cannot start: %s", e)
        return 2
    log.info("extender listening on %s%s", srv.url, f", /healthz and /metrics also on http port {srv.health_port}" if srv.health_port else "")
    try:
        srv.thread.join()
    except KeyboardInterrupt:
        srv.stop()
    return 0
