"""Three real PE processes on 127.0.0.1 (examples/pe: source -> transform -> sink) passing tuples
over TCP, observed only through their /metrics endpoints, as Prometheus would."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "pe"
JOB, NS = "loop", "test-ns"
COUNTERS = ("tuples_received", "bytes_received", "tuples_emitted", "bytes_emitted")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port: int) -> dict[tuple[str, str], float]:
    """(counter, stream) -> value, for this PE's series; checks the label set of the contract."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
        text = r.read().decode()
    out: dict[tuple[str, str], float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if not s.name.startswith("kubesoda_pe_") or not s.name.endswith("_total"):
                continue
            assert set(s.labels) == {"namespace", "pod", "streamjob", "pe", "stream"}, s
            assert s.labels["namespace"] == NS and s.labels["streamjob"] == JOB
            out[(s.name.removeprefix("kubesoda_pe_").removesuffix("_total"), s.labels["stream"])] = s.value
    return out


def poll(fn: Callable[[], object], timeout: float, what: str, every: float = 0.05) -> object:
    deadline = time.monotonic() + timeout
    while True:
        try:
            v = fn()
        except OSError:
            v = None
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(every)


class Procs:
    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.procs: list[tuple[str, subprocess.Popen, Path]] = []

    def start(self, script: str, pe: str, *args: str, stream_port: int | None = None, metrics_port: int,
              outputs: str = "") -> subprocess.Popen:
        env = {**os.environ, "KUBESODA_NAMESPACE": NS, "KUBESODA_POD": f"{JOB}-{pe}-0", "KUBESODA_JOB": JOB,
               "KUBESODA_PE": pe, "KUBESODA_METRICS_PORT": str(metrics_port), "KUBESODA_OUTPUTS": outputs,
               "KUBESODA_STREAM_PORT": str(stream_port or 0), "PYTHONUNBUFFERED": "1",
               # the SDK from this checkout, installed or not
               "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "pe"), os.environ.get("PYTHONPATH")]))}
        log = self.tmp / f"{pe}.log"
        p = subprocess.Popen([sys.executable, str(EXAMPLES / f"{script}.py"), "--log-level", "DEBUG", *args], env=env,
                             stdout=log.open("wb"), stderr=subprocess.STDOUT, cwd=REPO)
        self.procs.append((pe, p, log))
        return p

    def stop(self) -> None:
        for _, p, _ in self.procs:
            if p.poll() is None:
                p.terminate()
        for _, p, _ in self.procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def logs(self) -> str:
        return "\n".join(f"--- {pe} (exit {p.poll()}):\n{log.read_text()[-3000:]}" for pe, p, log in self.procs)


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[Procs]:
    ps = Procs(tmp_path)
    yield ps
    ps.stop()
    print(ps.logs())  # pytest shows it when the test failed


def up(port: int) -> Callable[[], object]:
    return lambda: scrape(port) is not None


def rate_between(samples: list[tuple[float, float]], lo: float, hi: float) -> tuple[float, float]:
    """(tuples/s, seconds) between the first and last samples whose count lies in [lo, hi]."""
    inside = [(t, c) for t, c in samples if lo <= c <= hi]
    assert len(inside) >= 2, samples
    (t0, c0), (t1, c1) = inside[0], inside[-1]
    return (c1 - c0) / (t1 - t0), t1 - t0


def test_pipeline_counts_bytes_and_rate(procs: Procs):
    n, rate, size = 600, 200.0, 100
    sp_mid, sp_snk = free_port(), free_port()
    mp_src, mp_mid, mp_snk = free_port(), free_port(), free_port()
    procs.start("sink", "snk", stream_port=sp_snk, metrics_port=mp_snk)
    procs.start("transform", "mid", "--work", "200", "--selectivity", "1", stream_port=sp_mid, metrics_port=mp_mid,
                outputs=f"mid->snk=127.0.0.1:{sp_snk}")
    poll(up(mp_snk), 10, "the sink's /metrics")
    poll(up(mp_mid), 10, "the transform's /metrics")
    # the transform's output series exists at 0 before its first tuple
    assert scrape(mp_mid)[("tuples_emitted", "mid->snk")] == 0
    procs.start("source", "src", "--rate", str(rate), "--bytes", str(size), "--count", str(n), metrics_port=mp_src,
                outputs=f"src->mid=127.0.0.1:{sp_mid}")
    src_samples, snk_samples = [], []
    deadline = time.monotonic() + n / rate + 10
    while True:
        try:
            src, snk = scrape(mp_src), scrape(mp_snk)
        except OSError:  # the source not serving yet
            src, snk = {}, {}
        now = time.monotonic()
        src_samples.append((now, src.get(("tuples_emitted", "src->mid"), 0.0)))
        snk_samples.append((now, snk.get(("tuples_received", "mid->snk"), 0.0)))
        if snk_samples[-1][1] >= n:
            break
        assert now < deadline, (src, snk)
        time.sleep(0.05)
    src, mid, snk = scrape(mp_src), scrape(mp_mid), scrape(mp_snk)
    # the input queue's wait (issue 38) depends on timing: present on each input stream, never negative
    for got, stream in ((mid, "src->mid"), (snk, "mid->snk")):
        assert got.pop(("input_blocked_seconds", stream)) >= 0
    # exact once drained: every tuple ingested went through every hop, none twice
    expected = {
        "src": {("tuples_received", "primal"): n, ("bytes_received", "primal"): n * size,
                ("tuples_emitted", "src->mid"): n, ("bytes_emitted", "src->mid"): n * size},
        "mid": {("tuples_received", "src->mid"): n, ("bytes_received", "src->mid"): n * size, ("tuples_arrived", "src->mid"): n,
                ("tuples_emitted", "mid->snk"): n, ("bytes_emitted", "mid->snk"): n * size},
        "snk": {("tuples_received", "mid->snk"): n, ("bytes_received", "mid->snk"): n * size, ("tuples_arrived", "mid->snk"): n,
                ("tuples_emitted", "sink"): n, ("bytes_emitted", "sink"): n * size},
    }
    assert {"src": src, "mid": mid, "snk": snk} == expected
    # the configured rate, as the source emitted it and as the sink received it
    for who, samples in (("source", src_samples), ("sink", snk_samples)):
        r, span = rate_between(samples, 0.1 * n, 0.9 * n)
        print(f"{who}: {r:.1f} tuples/s over {span:.2f}s (configured {rate})")
        assert span > 1.0
        assert abs(r - rate) <= 0.1 * rate, (who, r)


def test_a_consumer_started_late_gets_every_tuple(procs: Procs):
    n, size = 50, 32
    sp_snk, mp_src, mp_snk = free_port(), free_port(), free_port()
    procs.start("source", "src", "--bytes", str(size), "--count", str(n), metrics_port=mp_src,
                outputs=f"src->snk=127.0.0.1:{sp_snk}")
    # the source took in its first tuple and waits for a consumer: nothing counted as emitted
    poll(lambda: scrape(mp_src).get(("tuples_received", "primal")) == 1, 10, "the source's first tuple")
    time.sleep(0.3)  # a few connection attempts refused
    s = scrape(mp_src)
    assert s[("tuples_emitted", "src->snk")] == 0 and s[("tuples_received", "primal")] == 1
    procs.start("sink", "snk", stream_port=sp_snk, metrics_port=mp_snk)
    poll(lambda: scrape(mp_snk).get(("tuples_received", "src->snk")) == n, 10, "every tuple at the late sink")
    src, snk = scrape(mp_src), scrape(mp_snk)
    assert src[("tuples_emitted", "src->snk")] == n and src[("bytes_emitted", "src->snk")] == n * size
    assert snk[("tuples_emitted", "sink")] == n and snk[("bytes_received", "src->snk")] == n * size
