"""The API group and the ways kubesoda talks to the API server: retried writes, writes and lists
without the client's model round trip."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

from kubernetes.client.rest import ApiException

log = logging.getLogger("kubesoda.api")
T = TypeVar("T")

GROUP = "kubesoda.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
TRANSIENT = (429, 500, 502, 503, 504)


def retry(fn: Callable[[], T], what: str, attempts: int = 5, codes: tuple[int, ...] = TRANSIENT) -> T:
    """Call ``fn``, retrying with exponential backoff on transient API errors (and on 409
    conflicts for updates: pass ``codes=TRANSIENT + (409,)``)."""
    delay = 0.2
    for i in range(attempts):
        try:
            return fn()
        except ApiException as e:
            if e.status in codes and i < attempts - 1:
                log.info("retrying %s after %s", what, e.status)
                time.sleep(delay)
                delay *= 2
                continue
            raise
    raise RuntimeError("unreachable")


def raw(call: Callable[..., Any], *args: Any, **kw: Any) -> int:
    """Make a write without deserialising the response into client models (the bulk of the
    client's CPU time when thousands of pods are created); returns the HTTP status. Errors still
    raise ApiException with their status."""
    resp = call(*args, _preload_content=False, **kw)
    try:
        resp.read()
        return int(resp.status)
    finally:
        resp.release_conn()


def list_json(call: Callable[..., Any], *args: Any, **kw: Any) -> list[dict[str, Any]]:
    """A list call's ``items`` as plain dicts, straight from the JSON (no model round trip)."""
    resp = call(*args, _preload_content=False, **kw)
    try:
        return json.loads(resp.read())["items"]
    finally:
        resp.release_conn()
