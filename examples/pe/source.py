#!/usr/bin/env python3
"""A source PE: makes tuples of --bytes bytes (an 8-byte sequence number, then padding) and emits
them on every output stream at --rate tuples/s (0: as fast as the consumers take them). Each tuple
is first counted as ingested (received on ``primal``). After --count tuples (0: never) it keeps
serving /metrics until terminated, or exits with --exit.

    KUBESODA_JOB=demo KUBESODA_PE=src KUBESODA_OUTPUTS='src->mid=127.0.0.1:9001' \\
        python examples/pe/source.py --rate 100 --bytes 64 --count 1000
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
import time

from kubesoda_pe import PE, PEClosed

MAX_DEBT_S = 1.0  # a source blocked longer than this does not burst to catch up: it drops the debt


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", type=float, default=0.0, help="tuples per second (0: as fast as possible)")
    ap.add_argument("--bytes", type=int, default=64, help="payload bytes per tuple")
    ap.add_argument("--count", type=int, default=0, help="tuples to emit (0: forever)")
    ap.add_argument("--exit", action="store_true", help="exit once --count tuples are emitted")
    ap.add_argument("--log-level", default="INFO")
    a = ap.parse_args(argv)
    logging.basicConfig(level=a.log_level, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    stop = threading.Event()
    pad = b"\0" * max(0, a.bytes - 8)
    pe = PE.from_env(listen=False)  # a source has no upstream

    def terminate(*_: object) -> None:
        stop.set()
        threading.Thread(target=pe.close).start()  # wakes an emit waiting for a consumer

    signal.signal(signal.SIGTERM, terminate)
    try:
        period = 1.0 / a.rate if a.rate > 0 else 0.0
        nxt = time.monotonic()
        seq = 0
        while not stop.is_set() and (a.count <= 0 or seq < a.count):
            if period:
                now = time.monotonic()
                if nxt > now:
                    if stop.wait(nxt - now):
                        break
                elif now - nxt > MAX_DEBT_S:
                    nxt = now
                nxt += period
            data = (seq.to_bytes(8, "big") + pad)[:a.bytes]
            pe.ingest(data)
            pe.emit(data)
            seq += 1
        logging.info("emitted %d tuples", seq)
        if not a.exit:
            stop.wait()
    except PEClosed:
        pass
    finally:
        pe.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
