"""The series of the PE metrics contract (docs/pe-metrics.md): four counters of what a PE took in
and sent, and three of its input queue (issue 38: the rate *offered* to a PE, not only the rate it
processed; under backpressure the received rate is the processed one).

Every series carries ``namespace``, ``pod``, ``streamjob``, ``pe`` and ``stream``; never ``job``,
which Prometheus's scrape sets to the scrape job's name. The values are served by
prometheus_client's own HTTP server from a registry private to the PE (nothing else in the
process leaks into it, and two PEs can live in one process, as the tests do).
"""

from __future__ import annotations

import threading

from prometheus_client import CollectorRegistry, Counter, Gauge

LABELS = ("namespace", "pod", "streamjob", "pe", "stream")

# the stream labels that are not PE -> PE edges inside a template
PRIMAL = "primal"  # a source's primal input (counted as received, by PE.ingest)
SINK = "sink"  # a sink's valued terminal output (counted as emitted, by PE.consume)


def internal_stream(src: str, dst: str) -> str:
    """The label of the stream ``src -> dst`` inside one template (PE names)."""
    return f"{src}->{dst}"


def import_stream(exporting_job: str, export: str) -> str:
    """The label of a stream imported from another job's export."""
    return f"import:{exporting_job}/{export}"


class PEMetrics:
    def __init__(self, registry: CollectorRegistry, namespace: str, pod: str, streamjob: str, pe: str):
        self.registry = registry
        self._base = (namespace, pod, streamjob, pe)
        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, labelnames=LABELS, registry=registry)

        self.tuples_received = counter("kubesoda_pe_tuples_received", "Tuples the PE received, per input stream")
        self.bytes_received = counter("kubesoda_pe_bytes_received", "Payload bytes the PE received, per input stream")
        self.tuples_emitted = counter("kubesoda_pe_tuples_emitted", "Tuples the PE emitted, per output stream")
        self.bytes_emitted = counter("kubesoda_pe_bytes_emitted", "Payload bytes the PE emitted, per output stream")
        # the input queue, per input stream: tuples that arrived from upstream (taken off their
        # connection into the queue), tuples waiting in it, seconds the connection's reader waited
        # for room in a full queue (the upstream's sends then block: the arrival rate is a lower
        # bound of what it would send)
        self.tuples_arrived = counter("kubesoda_pe_tuples_arrived", "Tuples that arrived in the PE's input queue, per input stream")
        self.input_blocked = counter("kubesoda_pe_input_blocked_seconds",
                                     "Seconds an upstream connection waited for room in the PE's full input queue, per input stream")
        self.queued = Gauge("kubesoda_pe_queued_tuples", "Tuples waiting in the PE's input queue, per input stream",
                            labelnames=LABELS, registry=registry)
        self._rec: dict[str, tuple[Counter, Counter]] = {}
        self._emi: dict[str, tuple[Counter, Counter]] = {}
        self._arr: dict[str, tuple[Counter, Counter, Gauge]] = {}
        self._lock = threading.Lock()

    def _children(self, cache: dict[str, tuple[Counter, Counter]], tuples: Counter, nbytes: Counter,
                  stream: str) -> tuple[Counter, Counter]:
        c = cache.get(stream)
        if c is None:
            with self._lock:
                c = cache.get(stream)
                if c is None:
                    labels = (*self._base, stream)
                    c = cache[stream] = (tuples.labels(*labels), nbytes.labels(*labels))
        return c

    def declare_emitted(self, stream: str) -> None:
        """Expose the stream's emitted series at 0 before its first tuple (``rate()`` needs two points)."""
        self._children(self._emi, self.tuples_emitted, self.bytes_emitted, stream)

    def received(self, stream: str, n: int, nbytes: int) -> None:
        t, b = self._children(self._rec, self.tuples_received, self.bytes_received, stream)
        t.inc(n)
        if nbytes:
            b.inc(nbytes)

    def emitted(self, stream: str, n: int, nbytes: int) -> None:
        t, b = self._children(self._emi, self.tuples_emitted, self.bytes_emitted, stream)
        t.inc(n)
        if nbytes:
            b.inc(nbytes)

    def _queue_children(self, stream: str) -> tuple[Counter, Counter, Gauge]:
        c = self._arr.get(stream)
        if c is None:
            with self._lock:
                c = self._arr.get(stream)
                if c is None:
                    labels = (*self._base, stream)
                    c = self._arr[stream] = (self.tuples_arrived.labels(*labels), self.input_blocked.labels(*labels),
                                             self.queued.labels(*labels))
        return c

    def queued_inc(self, stream: str, n: int = 1) -> None:
        """``n`` tuples of ``stream`` now waiting at the PE (in its input queue, or held by a reader
        waiting for room in it)."""
        self._queue_children(stream)[2].inc(n)

    def arrived(self, stream: str, n: int = 1, blocked_s: float = 0.0) -> None:
        """``n`` tuples of ``stream`` put in the input queue, after waiting ``blocked_s`` more seconds for room."""
        a, b, _ = self._queue_children(stream)
        a.inc(n)
        if blocked_s > 0:
            b.inc(blocked_s)

    def blocked(self, stream: str, seconds: float) -> None:
        """``seconds`` more waited for room in the queue by a connection of ``stream`` (still waiting)."""
        if seconds > 0:
            self._queue_children(stream)[1].inc(seconds)

    def dequeued(self, stream: str, n: int = 1) -> None:
        """``n`` tuples of ``stream`` taken from the input queue (received, or dropped at close)."""
        self._queue_children(stream)[2].dec(n)
