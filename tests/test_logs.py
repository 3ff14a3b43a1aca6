"""The JSON log keeps exceptions and deduplicates failures (issue 45): a record logged with an
exception carries its class, message and traceback (and ``stack_info`` its stack) as escaped JSON
fields; a flood of one kind of failure is one record in full, then one per interval saying how
many it stood for; other kinds, and ordinary records, pass."""

from __future__ import annotations

import io
import json
import logging

import pytest

from soda_operator import logs


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def log_lines(monkeypatch):
    """logs.setup() writing into a buffer, with a clock the test moves; yields (lines(), clock)."""
    clock = Clock()
    monkeypatch.setattr(logs.time, "monotonic", clock)
    root = logging.getLogger()
    saved, level = root.handlers[:], root.level
    logs.setup()
    buf = io.StringIO()
    root.handlers[0].stream = buf  # type: ignore[attr-defined]
    # asyncio's records aside: a test run before this one in the same process may leave asyncio tasks
    # that the garbage collector reports meanwhile ("Task was destroyed but it is pending!")
    yield (lambda: [r for r in (json.loads(line) for line in buf.getvalue().splitlines())
                    if r.get("logger") != "asyncio"]), clock
    root.handlers[:] = saved
    root.setLevel(level)


def plan(weights: list[float]) -> float:
    return sum(weights) / (len(weights) - len(weights))  # ZeroDivisionError, always from this line


def parse(doc: str) -> dict:
    return json.loads(doc)  # json.JSONDecodeError from inside json


def epoch(log: logging.Logger, fn, arg) -> None:
    try:
        fn(arg)
    except Exception:
        log.exception("epoch failed")


def test_an_exception_is_kept_in_the_record(log_lines):
    lines, _ = log_lines
    log = logging.getLogger("kubesoda.test.keep")
    epoch(log, plan, [1.0])
    epoch(log, parse, '{"x": "\\u0000 tenant text\n{"forged": 1}')
    log.warning("look here", stack_info=True)
    first, second, third = lines()
    assert first["msg"] == "epoch failed" and first["level"] == "ERROR"
    assert first["exc_type"] == "ZeroDivisionError" and first["exc_message"] == "float division by zero"
    assert "in plan" in first["traceback"] and "len(weights) - len(weights)" in first["traceback"]
    assert first["traceback"].rstrip().endswith("ZeroDivisionError: float division by zero")
    assert second["exc_type"] == "json.decoder.JSONDecodeError" and "in parse" in second["traceback"]
    assert third["msg"] == "look here" and "test_an_exception_is_kept_in_the_record" in third["stack"] and "exc_type" not in third


def test_a_flood_of_one_failure_is_one_record_per_interval(log_lines):
    lines, clock = log_lines
    log = logging.getLogger("kubesoda.test.flood")
    for _ in range(500):
        epoch(log, plan, [1.0, 2.0])
        log.info("epoch done")  # ordinary records are not held
    got = lines()
    assert [r["msg"] for r in got if r["level"] == "ERROR"] == ["epoch failed"]
    assert "traceback" in got[0] and "repeated" not in got[0]
    assert sum(r["msg"] == "epoch done" for r in got) == 500
    # another kind of failure (another exception, or the same one raised elsewhere) is not held
    epoch(log, parse, "{")
    epoch(log, lambda w: 1 / 0, None)
    assert [(r["exc_type"], "traceback" in r) for r in lines()[501:]] == [("json.decoder.JSONDecodeError", True), ("ZeroDivisionError", True)]
    # after the interval, one record says how many it stands for
    clock.now += logs.FAILURE_EVERY_S
    epoch(log, plan, [1.0, 2.0])
    last = lines()[-1]
    assert last["repeated"] == 499 and last["msg"] == "epoch failed (repeated 499 times in the last 60 s)"
    assert last["exc_type"] == "ZeroDivisionError" and "traceback" not in last
    for _ in range(3):
        epoch(log, plan, [1.0, 2.0])
    clock.now += logs.FAILURE_EVERY_S + 1
    epoch(log, plan, [1.0, 2.0])
    assert lines()[-1]["repeated"] == 3 and len(lines()) == 505


def test_aiohttp_records_are_deduplicated_every_ten_seconds_at_every_level(log_lines):
    lines, clock = log_lines
    lg = logging.getLogger("aiohttp.server")
    for _ in range(50):
        lg.info("bad request from %s", "x")
    clock.now += logs.FLOOD_EVERY_S
    lg.info("bad request from %s", "y")
    assert [(r["msg"], r.get("repeated")) for r in lines()] == [("bad request from x", None),
                                                                ("bad request from y (repeated 49 times in the last 10 s)", 49)]


def test_the_kinds_remembered_are_bounded():
    d = logs.Dedup()
    for i in range(3 * logs.KINDS):
        assert d.filter(logging.LogRecord("x", logging.ERROR, __file__, 1, f"failure {i}", None, None))
    assert len(d.since) == logs.KINDS
