"""The SDK's transport in one process: round robin over the addresses a consumer's name resolves
to, re-resolution, fan-out to several consumers, reconnection, backpressure, timeouts."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from kubesoda_pe import PE, Endpoint


def consumer(name: str, **kw) -> PE:
    return PE(job="j", pe=name, namespace="ns", pod=f"{name}-0", stream_port=0, metrics_port=None, **kw).start()


def producer(outputs, resolver=None, **kw) -> PE:
    if resolver is not None:
        kw["resolver"] = resolver
    return PE(job="j", pe="src", namespace="ns", pod="src-0", listen=False, metrics_port=None, outputs=outputs,
              resolve_interval=0.1, backoff=(0.01, 0.1), **kw).start()


def value(pe: PE, counter: str, stream: str) -> float:
    v = pe.registry.get_sample_value(f"kubesoda_pe_{counter}_total", {
        "namespace": pe.namespace, "pod": pe.pod, "streamjob": pe.job, "pe": pe.pe, "stream": stream})
    return v or 0.0


def drain(pe: PE, n: int, timeout: float = 5.0) -> list[tuple[str, bytes]]:
    got = []
    deadline = time.monotonic() + timeout
    while len(got) < n:
        item = pe.receive(timeout=max(0.0, deadline - time.monotonic()))
        assert item is not None, f"{pe.pe}: {len(got)} of {n} tuples"
        got.append(item)
    assert pe.receive(timeout=0.05) is None, "more tuples than sent"
    return got


@pytest.fixture
def pes() -> Iterator[list[PE]]:
    made: list[PE] = []
    yield made
    for p in made:
        p.close()


def test_round_robin_over_every_address_and_re_resolution(pes):
    cs = [consumer(f"c{i}") for i in range(3)]
    pes += cs
    addrs = [("127.0.0.1", c.stream_port) for c in cs]
    answer = {"svc": addrs[:2]}
    src = producer("s->c=svc:9000", resolver=lambda host, port: list(answer[host]))
    pes.append(src)
    out = src.outputs[0]
    assert out.wait_connected(2, timeout=5)
    for i in range(100):
        src.emit(i.to_bytes(2, "big"))
    a, b = drain(cs[0], 50), drain(cs[1], 50)
    assert {s for s, _ in a + b} == {"s->c"}
    assert sorted(int.from_bytes(d, "big") for _, d in a + b) == list(range(100))
    # a third instance appears in DNS: it gets its share
    answer["svc"] = addrs
    assert out.wait_connected(3, timeout=5)
    for _ in range(90):
        src.emit(b"x")
    for c in cs:
        drain(c, 30)
    # the first one is gone from DNS: disconnected, the others share everything
    answer["svc"] = addrs[1:]
    deadline = time.monotonic() + 5
    while len(out.connected) != 2:
        assert time.monotonic() < deadline, out.connected
        time.sleep(0.01)
    for _ in range(20):
        src.emit(b"y")
    drain(cs[1], 10), drain(cs[2], 10)
    assert cs[0].receive(timeout=0.05) is None
    assert value(src, "tuples_emitted", "s->c") == 210 and value(src, "bytes_emitted", "s->c") == 200 + 110
    assert value(cs[1], "tuples_received", "s->c") == 50 + 30 + 10


def test_every_consumer_pe_gets_every_tuple(pes):
    a, b = consumer("a"), consumer("b")
    pes += [a, b]
    src = producer(f"import:up/out=127.0.0.1:{a.stream_port},import:up/out=127.0.0.1:{b.stream_port},"
                   f"s->b=127.0.0.1:{b.stream_port}")
    pes.append(src)
    assert src.wait_connected(timeout=5)
    assert src.streams == ["import:up/out", "s->b"]
    assert src.emit(b"1", "import:up/out") == 2
    assert src.emit(b"22") == 3
    assert sorted(drain(a, 2)) == [("import:up/out", b"1"), ("import:up/out", b"22")]
    assert sorted(drain(b, 3)) == [("import:up/out", b"1"), ("import:up/out", b"22"), ("s->b", b"22")]
    assert value(src, "tuples_emitted", "import:up/out") == 4 and value(src, "tuples_emitted", "s->b") == 1
    assert value(b, "bytes_received", "import:up/out") == 3 and value(b, "bytes_received", "s->b") == 2
    with pytest.raises(KeyError):
        src.emit(b"x", "nope")
    with pytest.raises(TypeError):
        src.emit("text")  # type: ignore[arg-type]


def test_no_consumer_times_out_and_counts_nothing(pes):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    src = producer(f"s->c=127.0.0.1:{port}")
    pes.append(src)
    t0 = time.monotonic()
    with pytest.raises(TimeoutError):
        src.emit(b"x", timeout=0.3)
    assert 0.25 < time.monotonic() - t0 < 2
    assert value(src, "tuples_emitted", "s->c") == 0
    # the series exists at 0 all along (rate() needs it before the first tuple)
    assert src.registry.get_sample_value("kubesoda_pe_tuples_emitted_total", {
        "namespace": "ns", "pod": "src-0", "streamjob": "j", "pe": "src", "stream": "s->c"}) == 0


def test_a_restarted_consumer_is_reconnected(pes):
    c = consumer("c")
    port = c.stream_port
    src = producer(f"s->c=127.0.0.1:{port}")
    pes += [src]
    assert src.wait_connected(timeout=5)
    src.emit(b"before")
    assert drain(c, 1) == [("s->c", b"before")]
    c.close()
    # sends into the dead connection fail sooner or later; the producer never crashes and waits
    # for a consumer again
    deadline = time.monotonic() + 5
    while src.outputs[0].connected:
        assert time.monotonic() < deadline
        try:
            src.emit(b"lost?", timeout=0.2)
        except TimeoutError:
            break
        time.sleep(0.01)
    c2 = PE(job="j", pe="c", namespace="ns", pod="c-1", stream_port=port, metrics_port=None).start()
    pes.append(c2)
    assert src.wait_connected(timeout=5)
    for i in range(20):
        src.emit(b"after%d" % i)
    assert [d for _, d in drain(c2, 20)] == [b"after%d" % i for i in range(20)]


def test_a_slow_consumer_holds_its_producer_back(pes):
    c = consumer("c", queue_size=1)
    src = producer(f"s->c=127.0.0.1:{c.stream_port}")
    pes += [c, src]
    assert src.wait_connected(timeout=5)
    n, big = 64, b"z" * (1 << 20)  # 64 MiB: far more than the socket buffers hold
    done = threading.Event()

    def emit_all() -> None:
        for _ in range(n):
            src.emit(big)
        done.set()

    t = threading.Thread(target=emit_all, daemon=True)
    t.start()
    time.sleep(0.5)
    stalled = value(src, "tuples_emitted", "s->c")
    assert not done.is_set() and stalled < n
    time.sleep(0.2)
    assert value(src, "tuples_emitted", "s->c") == stalled  # blocked, not just slow
    assert len(drain(c, n, timeout=20)) == n
    assert done.wait(5)
    assert value(src, "bytes_emitted", "s->c") == n * len(big) == value(c, "bytes_received", "s->c")


def test_endpoints_given_as_objects():
    pe = PE(job="j", pe="p", listen=False, metrics_port=None, outputs=[("s->t", [Endpoint("127.0.0.1", 1)])])
    assert [o.name for o in pe.outputs] == ["s->t"] and pe.outputs[0].endpoints == [Endpoint("127.0.0.1", 1)]
    pe.close()
