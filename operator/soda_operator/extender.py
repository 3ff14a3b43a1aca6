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

When the extender is down: the scheduler profile sets ``ignorable: false`` so a kubesoda pod
stays Pending (kube-scheduler retries it) rather than landing on an unplanned node; pods of other
schedulers never reach it. See docs/extender.md.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from . import metrics

log = logging.getLogger("kubesoda.extender")
ANN_NODE = "kubesoda.io/node"
LABEL_JOB = "kubesoda.io/job"
MAX_SCORE = 10


def _node_names(args: dict[str, Any]) -> list[str]:
    if args.get("NodeNames") is not None:
        return list(args["NodeNames"])
    nodes = args.get("Nodes") or {}
    return [n["metadata"]["name"] for n in nodes.get("items") or []]


def planned_node(pod: dict[str, Any]) -> str | None:
    md = pod.get("metadata") or {}
    if LABEL_JOB not in (md.get("labels") or {}):
        return None
    return (md.get("annotations") or {}).get(ANN_NODE)


def filter_(args: dict[str, Any]) -> dict[str, Any]:
    names = _node_names(args)
    want = planned_node(args.get("Pod") or {})
    if want is None:
        keep, failed = names, {}
    else:
        keep = [n for n in names if n == want]
        failed = {n: f"kubesoda plans this instance on {want}" for n in names if n != want}
    result: dict[str, Any] = {"NodeNames": keep, "FailedNodes": failed, "FailedAndUnresolvableNodes": {}, "Error": ""}
    if args.get("NodeNames") is None and args.get("Nodes") is not None:
        result["Nodes"] = {"items": [n for n in args["Nodes"].get("items") or [] if n["metadata"]["name"] in keep]}
        result["NodeNames"] = None
    return result


def prioritize(args: dict[str, Any]) -> list[dict[str, Any]]:
    want = planned_node(args.get("Pod") or {})
    return [{"Host": n, "Score": MAX_SCORE if n == want else 0} for n in _node_names(args)]


class Handler(BaseHTTPRequestHandler):
    server_version = "kubesoda-extender"

    def log_message(self, fmt: str, *a: Any) -> None:  # structured logs instead
        log.debug(fmt, *a)

    def _send(self, code: int, body: bytes, ctype: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802
        if self.path == "/healthz":
            self._send(200, b"ok", "text/plain")
        elif self.path == "/metrics":
            body, ctype = metrics.exposition()
            self._send(200, body, ctype)
        else:
            self._send(404, b"not found", "text/plain")

    def do_POST(self) -> None:  # noqa: N802
        verb = self.path.strip("/")
        t0 = time.perf_counter()
        try:
            args = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            if verb == "filter":
                out: Any = filter_(args)
            elif verb == "prioritize":
                out = prioritize(args)
            else:
                self._send(404, b"unknown verb", "text/plain")
                return
        except (ValueError, KeyError, TypeError) as e:
            log.warning("bad extender request %s: %s", verb, e)
            out = {"Error": f"kubesoda extender: bad request: {e}"} if verb == "filter" else []
        metrics.EXTENDER_LATENCY.labels(verb).observe(time.perf_counter() - t0)
        self._send(200, json.dumps(out).encode())


def serve(host: str = "127.0.0.1", port: int = 8888) -> ThreadingHTTPServer:
    srv = ThreadingHTTPServer((host, port), Handler)
    srv.daemon_threads = True
    return srv


def main(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format='{"ts":"%(asctime)s","level":"%(levelname)s","logger":"%(name)s","msg":"%(message)s"}')
    srv = serve(getattr(args, "host", "127.0.0.1"), args.port)
    log.info("extender listening on %s:%d", *srv.server_address[:2])
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0
