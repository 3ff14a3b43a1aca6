"""Log records as JSON lines, every field escaped (python-json-logger), exceptions kept, failures
deduplicated.

A message may carry text a tenant chose (a label key, a pod name, a request path): formatted into
a JSON-looking template it could close the string and forge fields or whole records. Here every
record is one JSON object written by a JSON encoder, whatever its message holds.

A record with an exception keeps it (issue 45: "epoch failed" alone said nothing): ``exc_type``
(the class, with its module unless builtin), ``exc_message`` and ``traceback``; a record logged
with ``stack_info`` keeps it as ``stack``. Both are escaped like the rest, and cut to their last
:data:`MAX_TRACE` characters (the innermost frames and the exception line are at the end).

Failures come in floods (an epoch failing every 10 s, a scanner, a broken client, a hostile
tenant). :class:`Dedup` lets the first record of each kind of failure through in full, then holds
the others of that kind for ``every`` seconds; the first one after that carries ``repeated``: how
many were held, and says so in its message (its traceback is the first one's, so it is left out).
A kind is the logger, the message template (not its arguments) and, with an exception, its class
and the line that raised it. The root handler deduplicates records of WARNING and above and those
with an exception, once a minute per kind; aiohttp's and asyncio's loggers (a record per malformed
request) every 10 s, at every level.
"""

from __future__ import annotations

import logging
import time
from types import TracebackType
from typing import Any

from pythonjsonlogger.json import JsonFormatter

FIELDS = "{asctime}{levelname}{name}{message}"
RENAME = {"asctime": "ts", "levelname": "level", "name": "logger", "message": "msg"}
MAX_TRACE = 32_000
MAX_MESSAGE = 4_000
KINDS = 1024  # kinds remembered by a Dedup; past that the oldest are forgotten
FAILURE_EVERY_S = 60.0
FLOOD_EVERY_S = 10.0


def _kind(record: logging.LogRecord) -> tuple[Any, ...]:
    key: tuple[Any, ...] = (record.name, str(record.msg)[:200])
    exc = record.exc_info[1] if record.exc_info else None
    if exc is not None:
        tb: TracebackType | None = exc.__traceback__
        while tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
        where = (tb.tb_frame.f_code.co_filename, tb.tb_lineno) if tb is not None else None
        key += (type(exc).__qualname__, where)
    return key


class Dedup(logging.Filter):
    """The first record of each kind in full; the others of that kind within ``every`` seconds
    held and counted; the first after that with ``repeated`` (the count) and without traceback.

    ``failures_only``: records below WARNING without an exception pass untouched (the root
    handler's filter; aiohttp's loggers take every level). A record one Dedup let through is not
    held again by another (a logger's filter, then the handler's)."""

    def __init__(self, every: float = FAILURE_EVERY_S, failures_only: bool = False) -> None:
        super().__init__()
        self.every, self.failures_only = every, failures_only
        self.since: dict[tuple[Any, ...], float] = {}  # kind -> start of its interval
        self.held: dict[tuple[Any, ...], int] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "deduplicated", False):
            return True
        if self.failures_only and record.levelno < logging.WARNING and not record.exc_info:
            return True
        key = _kind(record)
        now = time.monotonic()
        since = self.since.get(key)
        if since is not None and now - since < self.every:
            self.held[key] = self.held.get(key, 0) + 1
            return False
        if since is None and len(self.since) >= KINDS:  # the oldest kind (dicts keep insertion order)
            old = next(iter(self.since))
            del self.since[old]
            self.held.pop(old, None)
        self.since.pop(key, None)
        self.since[key] = now
        record.deduplicated = True
        if since is not None:  # seen before: its traceback is the first record's
            held = self.held.pop(key, 0)
            record.repeated = held
            record.msg = f"{record.msg} (repeated {held} times in the last {now - since:.0f} s)" if held else record.msg
            if record.exc_info and record.exc_info[1] is not None:
                record.exc_summary = (record.exc_info[0], record.exc_info[1])
            record.exc_info, record.exc_text = None, None
        return True


def _type_name(t: type) -> str:
    return t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


class Formatter(JsonFormatter):
    """ts, level, logger, msg, and the exception (exc_type, exc_message, traceback) or stack when
    the record has one; ``repeated`` when :class:`Dedup` held others of its kind. The extras
    other libraries attach to their records (Kopf's object references and settings) are theirs,
    not the log's, and need not serialise."""

    def add_fields(self, log_data: dict[str, Any], record: logging.LogRecord, message_dict: dict[str, Any]) -> None:
        for field in self._required_fields:
            log_data[self._get_rename(field)] = record.__dict__.get(field)
        exc = record.exc_info or getattr(record, "exc_summary", None)
        if exc and exc[0] is not None:
            log_data["exc_type"] = _type_name(exc[0])
            log_data["exc_message"] = str(exc[1])[:MAX_MESSAGE]
        trace = message_dict.get("exc_info")
        if trace:
            log_data["traceback"] = str(trace)[-MAX_TRACE:]
        if message_dict.get("stack_info"):
            log_data["stack"] = str(message_dict["stack_info"])[-MAX_TRACE:]
        if hasattr(record, "repeated"):
            log_data["repeated"] = record.repeated


def setup(level: int = logging.INFO) -> None:
    """JSON lines on stderr for the whole process; failures deduplicated per kind once a minute,
    aiohttp's and asyncio's per-request records every 10 s."""
    handler = logging.StreamHandler()
    handler.setFormatter(Formatter(FIELDS, style="{", rename_fields=RENAME, json_ensure_ascii=True, json_default=str))
    handler.addFilter(Dedup(FAILURE_EVERY_S, failures_only=True))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for name in ("aiohttp.server", "aiohttp.web", "aiohttp.access", "asyncio"):
        lg = logging.getLogger(name)
        lg.filters[:] = [f for f in lg.filters if not isinstance(f, Dedup)]
        lg.addFilter(Dedup(FLOOD_EVERY_S))
