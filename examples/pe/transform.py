#!/usr/bin/env python3
"""A transform PE: for every tuple received, spends --work iterations of SHA-256 (a calibrated,
steady amount of CPU: ``--calibrate`` prints what one iteration costs here), then emits
--selectivity tuples per input on average (fractions accumulate: 0.5 emits every second tuple,
2 emits each twice), the input's payload unchanged, on every output stream.

    KUBESODA_JOB=demo KUBESODA_PE=mid KUBESODA_STREAM_PORT=9001 KUBESODA_METRICS_PORT=9101 \\
    KUBESODA_OUTPUTS='mid->snk=127.0.0.1:9002' python examples/pe/transform.py --work 1000
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import signal
import sys
import threading
import time

from kubesoda_pe import PE, PEClosed


def work(data: bytes, iterations: int) -> bytes:
    h = data
    for _ in range(iterations):
        h = hashlib.sha256(h).digest()
    return h


def calibrate(seconds: float = 1.0) -> float:
    """Seconds of CPU one iteration of :func:`work` costs on this machine."""
    n, t0 = 0, time.process_time()
    while time.process_time() - t0 < seconds:
        work(b"x" * 64, 1000)
        n += 1000
    return (time.process_time() - t0) / n


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=int, default=0, help="SHA-256 iterations per input tuple")
    ap.add_argument("--selectivity", type=float, default=1.0, help="output tuples per input tuple")
    ap.add_argument("--calibrate", action="store_true", help="print the CPU cost of one iteration and exit")
    ap.add_argument("--log-level", default="INFO")
    a = ap.parse_args(argv)
    if a.calibrate:
        s, w = calibrate(), a.work or 1000
        print(f"one iteration: {s * 1e6:.3f} us of CPU; --work {w}: {w * s * 1e3:.3f} ms of CPU per tuple, "
              f"{1 / (w * s):.0f} tuples/s per core, {w * s * 1000:.3f} million instructions per tuple "
              f"at kubesoda.io/mips-per-core=1000")
        return 0
    if a.selectivity < 0:
        ap.error("--selectivity must be >= 0")
    logging.basicConfig(level=a.log_level, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    pe = PE.from_env()
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=pe.close).start())
    credit = 0.0
    try:
        for _stream, data in pe.tuples():
            if a.work:
                work(data, a.work)
            credit += a.selectivity
            while credit >= 1.0:
                pe.emit(data)
                credit -= 1.0
    except PEClosed:
        pass
    finally:
        pe.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
