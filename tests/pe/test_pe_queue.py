"""The input queue series of the PE metrics contract (issue 38, docs/pe-metrics.md "Input queue"):
tuples arrived, waiting, and the seconds the input waited on a full queue, measured on real
sockets between two PEs in one process (the SDK's own transport, no mock)."""

from __future__ import annotations

import threading
import time
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kubesoda_pe import PE


def value(pe: PE, name: str, stream: str) -> float:
    v = pe.registry.get_sample_value(name, {"namespace": pe.namespace, "pod": pe.pod, "streamjob": pe.job, "pe": pe.pe,
                                            "stream": stream})
    return v or 0.0


def poll(fn, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not fn():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


@pytest.fixture
def pes() -> Iterator[list[PE]]:
    made: list[PE] = []
    yield made
    for p in made:
        p.close()


def pair(pes: list[PE], queue_size: int) -> tuple[PE, PE]:
    c = PE(job="j", pe="c", namespace="ns", pod="c-0", stream_port=0, metrics_port=0, metrics_addr="127.0.0.1",
           queue_size=queue_size).start()
    src = PE(job="j", pe="src", namespace="ns", pod="src-0", listen=False, metrics_port=None,
             outputs=f"s->c=127.0.0.1:{c.stream_port}", resolve_interval=0.1, backoff=(0.01, 0.1)).start()
    pes += [c, src]
    assert src.wait_connected(timeout=5)
    return c, src


ARR, RECV, QUEUED, BLOCKED = ("kubesoda_pe_tuples_arrived_total", "kubesoda_pe_tuples_received_total",
                              "kubesoda_pe_queued_tuples", "kubesoda_pe_input_blocked_seconds_total")


def test_a_growing_queue_shows_as_arrived_not_received(pes):
    """A consumer that processes nothing while tuples come: they arrived (offered), wait in the queue,
    and only what its code takes out is received."""
    c, src = pair(pes, queue_size=10_000)
    n = 3000
    for i in range(n):
        src.emit(b"%d" % i)
    poll(lambda: value(c, ARR, "s->c") == n, 10, "every tuple to arrive")
    assert value(c, RECV, "s->c") == 0
    assert value(c, QUEUED, "s->c") == n
    assert value(c, BLOCKED, "s->c") == 0  # room all along: the offered rate is exact
    for _ in range(1200):
        assert c.receive(timeout=2) is not None
    assert value(c, RECV, "s->c") == 1200 and value(c, QUEUED, "s->c") == n - 1200 and value(c, ARR, "s->c") == n
    # the contract's names and labels, through /metrics as Prometheus reads them
    with urllib.request.urlopen(f"http://127.0.0.1:{c.metrics_port}/metrics", timeout=2) as r:
        fams = {f.name: f for f in text_string_to_metric_families(r.read().decode())}
    for name in ("kubesoda_pe_tuples_arrived", "kubesoda_pe_input_blocked_seconds", "kubesoda_pe_queued_tuples"):
        s = [x for x in fams[name].samples if not x.name.endswith("_created")]
        assert s and all(set(x.labels) == {"namespace", "pod", "streamjob", "pe", "stream"} for x in s), name


def test_a_full_queue_counts_the_time_the_input_waited(pes):
    """A queue of 5 and a consumer that does not read: the reader blocks, the seconds blocked grow
    as they pass (not only when the wait ends), and stop once the consumer catches up."""
    c, src = pair(pes, queue_size=5)
    n = 400
    t = threading.Thread(target=lambda: [src.emit(b"x" * 64) for _ in range(n)], daemon=True)
    t.start()
    poll(lambda: value(c, ARR, "s->c") == 5, 5, "the queue to fill")
    t0 = time.monotonic()
    time.sleep(1.6)
    waited = value(c, BLOCKED, "s->c")
    elapsed = time.monotonic() - t0
    assert 0.5 <= waited <= elapsed + 0.6, (waited, elapsed)  # counted in 0.5 s steps while it waits
    assert value(c, ARR, "s->c") == 5 and value(c, QUEUED, "s->c") == 6  # 5 queued + 1 held by the reader
    got = 0
    while got < n:
        assert c.receive(timeout=5) is not None
        got += 1
    t.join(5)
    assert value(c, ARR, "s->c") == n == value(c, RECV, "s->c") and value(c, QUEUED, "s->c") == 0
    settled = value(c, BLOCKED, "s->c")
    time.sleep(0.7)
    assert value(c, BLOCKED, "s->c") == settled  # nothing waits: nothing more counted
