"""Issue 51 item 5: ``bench_dispatch.py --swf`` labels a trace by its file name; only the Archive's SDSC-Par96 file is
described as SDSC-Par96 (main labelled every ``--swf`` trace "SDSC-Par96")."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def bench():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("bench_dispatch", ROOT / "benchmarks" / "bench_dispatch.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("bench_dispatch", mod)
    spec.loader.exec_module(mod)
    return mod


def test_a_trace_is_labelled_by_its_file_name() -> None:
    b = bench()
    assert b.trace_label(Path("/x/CTC-SP2-1996-3.1-cln.swf.gz")) == "CTC-SP2-1996-3.1-cln"
    assert b.trace_label(Path("mine.swf")) == "mine"
    assert "SDSC-Par96" not in b.describe(Path("/x/CTC-SP2-1996-3.1-cln.swf.gz"))
    assert b.trace_label(Path(b.TRACE_FILE)) == "SDSC-Par-1996-3.1-cln"
    assert "SDSC-Par96" in b.describe(Path("/cache/traces") / b.TRACE_FILE)
