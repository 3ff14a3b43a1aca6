#!/usr/bin/env python3
"""A sink PE: takes every tuple from its upstreams and counts it as the job's valued output
(emitted on ``sink``).

    KUBESODA_JOB=demo KUBESODA_PE=snk KUBESODA_STREAM_PORT=9002 KUBESODA_METRICS_PORT=9102 \\
        python examples/pe/sink.py
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading

from kubesoda_pe import PE, PEClosed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--log-every", type=int, default=0, help="log a line every N tuples (0: never)")
    ap.add_argument("--log-level", default="INFO")
    a = ap.parse_args(argv)
    logging.basicConfig(level=a.log_level, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    pe = PE.from_env()
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=pe.close).start())
    n = 0
    try:
        for stream, data in pe.tuples():
            pe.consume(data)
            n += 1
            if a.log_every and n % a.log_every == 0:
                logging.info("%d tuples (last on %s, %d bytes)", n, stream, len(data))
    except PEClosed:
        pass
    finally:
        pe.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
