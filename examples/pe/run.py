#!/usr/bin/env python3
"""The example image's entrypoint: runs source.py, transform.py or sink.py, chosen by the first
argument or, without one, by ``KUBESODA_PE_ROLE``; the remaining arguments go to the script.

    run.py transform --work 1000        KUBESODA_PE_ROLE=sink run.py
"""

from __future__ import annotations

import os
import runpy
import sys

ROLES = ("source", "transform", "sink")


def main() -> None:
    args = sys.argv[1:]
    if args and not args[0].startswith("-"):
        role, args = args[0], args[1:]
    else:
        role = os.environ.get("KUBESODA_PE_ROLE", "")
    if role not in ROLES:
        sys.exit(f"usage: run.py {{{'|'.join(ROLES)}}} [args...] (or set KUBESODA_PE_ROLE); got {role!r}")
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{role}.py")
    sys.argv = [script, *args]
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
