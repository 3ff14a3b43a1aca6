"""Log records as JSON lines, every field escaped (python-json-logger), and floods throttled.

A message may carry text a tenant chose (a label key, a pod name, a request path): formatted into
a JSON-looking template it could close the string and forge fields or whole records. Here every
record is one JSON object written by a JSON encoder, whatever its message holds.

Bad requests come in floods (a scanner, a broken client, a hostile tenant); aiohttp logs each
malformed request with a traceback. :class:`Throttle` lets one record per kind (logger and message
template) through per interval, without its traceback, and says how many it held back.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from pythonjsonlogger.json import JsonFormatter

FIELDS = "{asctime}{levelname}{name}{message}"
RENAME = {"asctime": "ts", "levelname": "level", "name": "logger", "message": "msg"}


class Throttle(logging.Filter):
    """At most one record per (logger, message template) every ``every`` seconds, without its
    traceback; the one let through says how many were held back since the last."""

    def __init__(self, every: float = 10.0) -> None:
        super().__init__()
        self.every = every
        self.last: dict[tuple[str, str], float] = {}
        self.held: dict[tuple[str, str], int] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, str(record.msg)[:200])
        now = time.monotonic()
        if now - self.last.get(key, -1e18) < self.every:
            self.held[key] = self.held.get(key, 0) + 1
            return False
        self.last[key] = now
        held = self.held.pop(key, 0)
        if record.exc_info and record.exc_info[1] is not None:
            record.msg = f"{record.msg} ({type(record.exc_info[1]).__name__}: {str(record.exc_info[1])[:200]})"
        record.exc_info, record.exc_text, record.stack_info = None, None, None
        if held:
            record.msg = f"{record.msg} ({held} more like it in the last {self.every:g} s)"
        if len(self.last) > 1024:  # kinds are few; never a memory of every message
            self.last.clear()
        return True


class Formatter(JsonFormatter):
    """ts, level, logger and msg only: the extras other libraries attach to their records (Kopf's
    object references and settings) are theirs, not the log's, and need not serialise."""

    def add_fields(self, log_data: dict[str, Any], record: logging.LogRecord, message_dict: dict[str, Any]) -> None:
        for field in self._required_fields:
            log_data[self._get_rename(field)] = record.__dict__.get(field)


def setup(level: int = logging.INFO) -> None:
    """JSON lines on stderr for the whole process; aiohttp's per-request error records throttled."""
    handler = logging.StreamHandler()
    handler.setFormatter(Formatter(FIELDS, style="{", rename_fields=RENAME, json_ensure_ascii=True, json_default=str))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for name in ("aiohttp.server", "aiohttp.web", "aiohttp.access", "asyncio"):
        logging.getLogger(name).addFilter(Throttle())
