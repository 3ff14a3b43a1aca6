"""The PE handle a user's processing element wraps its loop with (docs/pe-metrics.md).

    pe = PE.from_env()                     # a source
    while True:
        data = read_from_outside()         # pe.offer(n) for what the outside offered (optional)
        pe.ingest(data)                    # received on "primal"
        pe.emit(data)                      # to every output stream

    for stream, data in pe.tuples():       # a transform
        pe.emit(work(data))

    for stream, data in pe.tuples():       # a sink
        pe.consume(data)                   # emitted on "sink"
"""

from __future__ import annotations

import logging
import os
import queue
import socket
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server

from .metrics import PRIMAL, SINK, PEMetrics
from .transport import DEFAULT_STREAM_PORT, Endpoint, Listener, Output, PEClosed, Resolver, parse_outputs, resolve

log = logging.getLogger("kubesoda_pe")

DEFAULT_METRICS_PORT = 9100
DEFAULT_QUEUE = 1000
DEFAULT_RESOLVE_S = 10.0

Bytes = bytes | bytearray | memoryview
_WAKE: Any = ("", b"")  # put on the input queue by close(), by identity


class PE:
    """One PE instance: its input queue, its output streams, its counters and /metrics server.

    Thread-safe: several threads may emit at once; a tuple is counted as emitted once it was
    handed to a consumer's socket, as received when :meth:`receive` (or :meth:`tuples`) returns it,
    as arrived when it was put in the input queue (``kubesoda_pe_tuples_arrived_total``: the rate
    offered to the PE, issue 38; see docs/pe-metrics.md, "Input queue").
    """

    def __init__(self, *, job: str = "local", pe: str = "pe", namespace: str = "", pod: str | None = None,
                 outputs: str | Sequence[tuple[str, Sequence[Endpoint]]] | None = None, listen: bool = True,
                 stream_port: int = DEFAULT_STREAM_PORT, stream_host: str = "",
                 metrics_port: int | None = DEFAULT_METRICS_PORT, metrics_addr: str = "0.0.0.0",
                 queue_size: int = DEFAULT_QUEUE, resolve_interval: float = DEFAULT_RESOLVE_S,
                 backoff: tuple[float, float] = (0.05, 1.0), connect_timeout: float = 2.0,
                 resolver: Resolver = resolve):
        """``metrics_port=None`` serves no /metrics (the registry is still there to read);
        port 0 (stream or metrics) takes a free port, see :attr:`stream_port`, :attr:`metrics_port`."""
        self.job, self.pe = job, pe
        self.namespace, self.pod = namespace, pod or socket.gethostname()
        self.registry = CollectorRegistry(auto_describe=True)
        self.metrics = PEMetrics(self.registry, self.namespace, self.pod, job, pe)
        outs = parse_outputs(outputs) if outputs is None or isinstance(outputs, str) \
            else [(name, list(eps)) for name, eps in outputs]
        # one Output per destination (consumer PE), in KUBESODA_OUTPUTS order
        self.outputs: list[Output] = [
            Output(name, eps, self.metrics.emitted, resolver=resolver, resolve_interval=resolve_interval,
                   backoff=backoff, connect_timeout=connect_timeout)
            for name, eps in outs]
        for o in self.outputs:
            self.metrics.declare_emitted(o.name)
        self._listen = listen
        self._stream_port, self._stream_host = stream_port, stream_host
        self._metrics_port, self._metrics_addr = metrics_port, metrics_addr
        self._queue: queue.Queue[tuple[str, bytes]] = queue.Queue(maxsize=max(1, queue_size))
        self._listener: Listener | None = None
        self._http: Any = None
        self._closed = False
        self._started = False
        self._offered = False  # the source reports its primal input's offered rate (offer)
        self._lock = threading.Lock()

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, *, start: bool = True, **overrides: Any) -> PE:
        """A PE configured by the environment the operator gives a PE pod (``KUBESODA_NAMESPACE``,
        ``KUBESODA_POD``, ``KUBESODA_JOB``, ``KUBESODA_PE``, ``KUBESODA_OUTPUTS``,
        ``KUBESODA_STREAM_PORT``, ``KUBESODA_METRICS_PORT``, ``KUBESODA_RESOLVE_SECONDS``);
        keyword arguments win over it. Started unless ``start=False``."""
        e = os.environ if env is None else env
        kw: dict[str, Any] = {
            "namespace": e.get("KUBESODA_NAMESPACE", ""),
            "pod": e.get("KUBESODA_POD") or None,
            "job": e.get("KUBESODA_JOB") or "local",
            "pe": e.get("KUBESODA_PE") or "pe",
            "outputs": e.get("KUBESODA_OUTPUTS", ""),
            "stream_port": int(e.get("KUBESODA_STREAM_PORT") or DEFAULT_STREAM_PORT),
            "metrics_port": int(e.get("KUBESODA_METRICS_PORT") or DEFAULT_METRICS_PORT),
            "resolve_interval": float(e.get("KUBESODA_RESOLVE_SECONDS") or DEFAULT_RESOLVE_S),
        }
        kw.update(overrides)
        pe = cls(**kw)
        return pe.start() if start else pe

    # -- life cycle

    def start(self) -> PE:
        """Serve /metrics, listen for upstream producers, connect to the consumers. Idempotent."""
        with self._lock:
            if self._started:
                return self
            if self._closed:
                raise PEClosed("PE closed")
            if self._metrics_port is not None:
                self._http = start_http_server(self._metrics_port, addr=self._metrics_addr, registry=self.registry)
            if self._listen:
                self._listener = Listener(self._stream_port, self._deliver, self._stream_host)
                self._listener.start()
            for o in self.outputs:
                o.start()
            self._started = True
        log.info("PE %s/%s of job %s: stream port %s, metrics port %s, outputs %s", self.namespace, self.pod, self.job,
                 self.stream_port, self.metrics_port,
                 ", ".join(f"{o.name}={'|'.join(map(str, o.endpoints))}" for o in self.outputs) or "none")
        return self

    def close(self) -> None:
        """Stop listening and sending, close every connection, stop serving /metrics."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        try:
            self._queue.put_nowait(_WAKE)  # a receive() waiting returns now (a full queue does not wait)
        except queue.Full:
            pass
        for o in self.outputs:
            o.close()
        if self._listener is not None:
            self._listener.close()
        if self._http is not None:
            server = self._http[0] if isinstance(self._http, tuple) else None
            if server is not None:
                server.shutdown()
                server.server_close()

    def __enter__(self) -> PE:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def streams(self) -> list[str]:
        """The output stream names, each once."""
        return list(dict.fromkeys(o.name for o in self.outputs))

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def stream_port(self) -> int | None:
        """The port upstream producers connect to (None when not listening)."""
        return self._listener.port if self._listener is not None else None

    @property
    def metrics_port(self) -> int | None:
        if isinstance(self._http, tuple):
            return int(self._http[0].server_port)
        return None

    def wait_connected(self, timeout: float | None = None) -> bool:
        """Wait until every output stream has at least one consumer connected."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for o in self.outputs:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not o.wait_connected(1, left):
                return False
        return True

    # -- data

    def emit(self, data: Bytes, stream: str | None = None, *, timeout: float | None = None) -> int:
        """Send one tuple on ``stream``, or on every output stream when None, to every destination
        of the stream (one instance of each consumer PE); returns how many destinations it was sent
        to. Blocks while a stream has no consumer connected (until ``timeout``
        seconds: then ``TimeoutError``; nothing is counted for a stream the tuple was not sent on)
        and while the consumer is behind (backpressure)."""
        if not isinstance(data, bytes | bytearray | memoryview):
            raise TypeError(f"a tuple is bytes, not {type(data).__name__}")
        if self._closed:
            raise PEClosed("PE closed")
        targets = self.outputs if stream is None else [o for o in self.outputs if o.name == stream]
        if not targets and stream is not None:
            raise KeyError(f"no output stream {stream!r} (outputs: {', '.join(self.streams) or 'none'})")
        deadline = None if timeout is None else time.monotonic() + timeout
        for o in targets:
            o.send(data, deadline)
        return len(targets)

    def receive(self, timeout: float | None = None) -> tuple[str, bytes] | None:
        """The next (stream, payload) from any upstream, or None after ``timeout`` seconds (or
        once the PE is closed)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._closed:
            wait = 0.5 if deadline is None else min(0.5, deadline - time.monotonic())
            if wait <= 0:
                return None
            try:
                item = self._queue.get(timeout=wait)
            except queue.Empty:
                continue
            if item is _WAKE:
                continue  # close() woke us up
            stream, data = item
            self.metrics.dequeued(stream)
            self.metrics.received(stream, 1, len(data))
            return stream, data
        return None

    def tuples(self) -> Iterator[tuple[str, bytes]]:
        """(stream, payload) from every upstream, until the PE is closed."""
        while not self._closed:
            item = self.receive(timeout=0.5)
            if item is not None:
                yield item

    def ingest(self, data: Bytes | None = None, *, n: int = 1, nbytes: int | None = None) -> None:
        """A source records what it took in on its primal input: ``n`` tuples, ``nbytes`` bytes
        (default ``len(data)``). After :meth:`offer` they leave the primal backlog."""
        self.metrics.received(PRIMAL, n, len(data) if nbytes is None and data is not None else nbytes or 0)
        if self._offered:
            self.metrics.dequeued(PRIMAL, n)

    def offer(self, n: int = 1) -> None:
        """A source records ``n`` tuples its outside input offered it, taken in yet or not: read into
        a buffer of its own, new messages on a broker it consumes, requests accepted. Counted as
        arrived on ``primal`` (``kubesoda_pe_tuples_arrived_total``) and waiting in the primal
        backlog (``kubesoda_pe_queued_tuples``) until :meth:`ingest` takes them. A source that never
        calls it reports no offered rate, as before.

        Why (issue 38, docs/pe-metrics.md "Input queue"): a CPU-starved source takes in only what its
        CPU processes, so what it ingests is its processed rate, not its input rate; the learner
        then sees a saturated source whose offered rate is unknown (a censored sample). With the
        offered rate it learns the CPU per tuple and what the source would need for all it is
        offered, as for a transform behind its input queue."""
        with self._lock:
            self._offered = True
        self.metrics.queued_inc(PRIMAL, n)
        self.metrics.arrived(PRIMAL, n)

    def consume(self, data: Bytes | None = None, *, n: int = 1, nbytes: int | None = None) -> None:
        """A sink records the tuples it delivered as the job's valued output (emitted on ``sink``)."""
        self.metrics.emitted(SINK, n, len(data) if nbytes is None and data is not None else nbytes or 0)

    def _deliver(self, stream: str, data: bytes) -> bool:
        """Put a tuple taken off an upstream connection in the input queue, waiting while it is full
        (the backpressure); counts it arrived, and the seconds waited as the input blocked, as they
        pass (so a reader blocked for minutes shows in every ``rate()`` window, not at its end)."""
        m = self.metrics
        m.queued_inc(stream)  # waiting at this PE from now on: in the queue or held by this reader
        try:
            self._queue.put_nowait((stream, data))
            m.arrived(stream)
            return True
        except queue.Full:
            pass
        t = time.monotonic()
        while not self._closed:
            try:
                self._queue.put((stream, data), timeout=0.5)
            except queue.Full:
                now = time.monotonic()
                m.blocked(stream, now - t)
                t = now
                continue
            m.arrived(stream, 1, time.monotonic() - t)
            return True
        m.dequeued(stream)
        return False
