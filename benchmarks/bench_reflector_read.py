"""How long the operator's pod watch holds up the API server's sender (issue 53).

    .venv/bin/python benchmarks/bench_reflector_read.py [EVENTS] [BUSY_THREADS]   (defaults 3000, 16)

The API server gives a cluster-wide watch about ten events of buffer and closes a watch whose reader
stays behind ("Forcing pods watcher close due to unresponsiveness"); every close of KWOK's watch made
it start its Pending pods a second time (docs/benchmarks/scale.md, issue 53). Here a local HTTP
server streams ``EVENTS`` MODIFIED events of a real PE pod body (:func:`soda_operator.soda.apply.pod_body`,
resourceVersion rising) as fast as the socket takes them, 16 KB a write, and sums the seconds its
writes block, while ``BUSY_THREADS`` threads keep the GIL busy as the epoch's create threads do; the
reader is the operator's :class:`~soda_operator.kube.reflector.Reflector` with the operator's pod
indexers, (a) as it is (a thread that only reads, parsing and indexing behind a queue) and (b) with
the previous inline loop (read, parse and index on one thread), for comparison. Prints, for each, the
seconds the sender was held up and the seconds until the last event was indexed.
"""

from __future__ import annotations

import asyncio
import json
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

import urllib3

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from soda_operator.kube import pods as kpods  # noqa: E402
from soda_operator.kube.reflector import Gone, Reflector, _key  # noqa: E402
from soda_operator.soda import indexes  # noqa: E402
from soda_operator.soda.apply import Instance, pod_body  # noqa: E402


class InlineReflector(Reflector):
    """The watch loop before issue 53: read, parse and index on the reflector's one thread."""

    def _watch(self, rv: str) -> str:
        resp = self.list_call(watch=True, resource_version=rv, allow_watch_bookmarks=True, timeout_seconds=self.server_timeout_s,
                              _preload_content=False, _request_timeout=self.server_timeout_s + 30)
        buf = b""
        try:
            for chunk in resp.stream(65536):
                buf += chunk
                if b"\n" not in buf:
                    continue
                *lines, buf = buf.split(b"\n")
                batch = []
                for line in lines:
                    if not line.strip():
                        continue
                    ev = json.loads(line)
                    type_, body = ev.get("type"), ev.get("object") or {}
                    if type_ == "ERROR" and body.get("code") == 410:
                        raise Gone(body.get("message"))
                    rv = (body.get("metadata") or {}).get("resourceVersion") or rv
                    batch.append((type_, _key(body), self._contributions(body), body))
                if batch:
                    self._post(batch)
        finally:
            resp.release_conn()
        return rv


def events(n: int) -> bytes:
    inst = Instance(namespace="bench", job="lsd-0", pe="pe0", node="z0-r0-n0", fraction=0.25, cores=16.0,
                    candidates=("z0-r0-n0", "z0-r0-n1"), spec={}, owner={"metadata": {"name": "lsd-0", "uid": "u"}})
    out = []
    for i in range(n):
        p = pod_body(inst)
        p["metadata"].update(name=f"p{i}", resourceVersion=str(i + 1), uid=f"uid-{i}")
        p["spec"]["nodeName"] = "z0-r0-n0"
        p["status"] = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}]}
        out.append(json.dumps({"type": "MODIFIED", "object": p}).encode() + b"\n")
    return b"".join(out)


def serve(data: bytes, port: list[int], held: list[float]) -> None:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port.append(srv.getsockname()[1])
    conn, _ = srv.accept()
    conn.recv(65536)
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n")
    waited = 0.0
    for off in range(0, len(data), 16384):
        t = time.perf_counter()
        conn.sendall(data[off:off + 16384])
        waited += time.perf_counter() - t
    held.append(waited)
    conn.close()
    srv.close()


def busy(stop: threading.Event) -> None:
    x = 0
    while not stop.is_set():
        for i in range(1000):
            x += i * i


def run(cls: type[Reflector], data: bytes, threads: int) -> dict[str, float]:
    port: list[int] = []
    held: list[float] = []
    threading.Thread(target=serve, args=(data, port, held), daemon=True).start()
    while not port:
        time.sleep(0.01)
    http = urllib3.PoolManager()

    def list_call(**_: Any) -> Any:
        return http.request("GET", f"http://127.0.0.1:{port[0]}/", preload_content=False)

    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()
    r = cls(list_call, {"kubesoda_pods": indexes.kubesoda_pods, "foreign_pods": kpods.foreign_pods})
    r._loop = loop
    stop = threading.Event()
    for _ in range(threads):
        threading.Thread(target=busy, args=(stop,), daemon=True).start()
    t0 = time.perf_counter()
    r._watch("1")
    done = asyncio.run_coroutine_threadsafe(asyncio.sleep(0), loop)  # every posted batch indexed before this
    done.result(600)
    indexed = time.perf_counter() - t0
    stop.set()
    while not held:
        time.sleep(0.01)
    loop.call_soon_threadsafe(loop.stop)
    return {"sender_held_s": round(held[0], 2), "all_indexed_s": round(indexed, 2), "pods_indexed": len(r.indexes["kubesoda_pods"])}


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
    threads = int(sys.argv[2]) if len(sys.argv) > 2 else 16
    data = events(n)
    out = {"events": n, "bytes": len(data), "busy_threads": threads,
           "reader_thread": run(Reflector, data, threads), "inline (before issue 53)": run(InlineReflector, data, threads)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
