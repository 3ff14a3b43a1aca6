"""The four counters of the PE metrics contract (docs/pe-metrics.md).

Every series carries ``namespace``, ``pod``, ``streamjob``, ``pe`` and ``stream``; never ``job``,
which Prometheus's scrape sets to the scrape job's name. The values are served by
prometheus_client's own HTTP server from a registry private to the PE (nothing else in the
process leaks into it, and two PEs can live in one process, as the tests do).
"""

from __future__ import annotations

import threading

from prometheus_client import CollectorRegistry, Counter

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
        self._rec: dict[str, tuple[Counter, Counter]] = {}
        self._emi: dict[str, tuple[Counter, Counter]] = {}
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
