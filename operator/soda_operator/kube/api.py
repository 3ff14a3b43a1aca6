"""The API group and the ways kubesoda talks to the API server: retried writes, writes and lists
without the client's model round trip."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from kubernetes.client.rest import ApiException, RESTClientObject

log = logging.getLogger("kubesoda.api")
T = TypeVar("T")

GROUP = "kubesoda.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
# StreamJob's preferred served version (the API server's version priority: v1beta1 above v1alpha1,
# docs/api-versioning.md). The owner references of a job's pods and Service name it: kube-controller-
# manager's garbage collector watches each kind at its preferred version and verifies every dependent
# whose owner reference names other coordinates (apiVersion included) with a GET of the dependent and
# of its owner. With v1alpha1 references that was 9,450 GETs of StreamJobs and 7,370 of pods in each
# 2,000-node round of issue 53's benchmark, for nothing.
STREAM_OWNER_API_VERSION = f"{GROUP}/v1beta1"
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


class Fenced(RuntimeError):
    """Raised before a write when this replica has lost the right to act (peering paused it, or its
    lease lapsed: issue 46)."""


_fence = threading.local()
_install_lock = threading.Lock()
_installed = False
READS = frozenset({"GET", "HEAD", "OPTIONS"})


@contextmanager
def fenced(check: Callable[[], bool]) -> Iterator[None]:
    """While in this block, every write this thread makes through the kubernetes client checks
    ``check`` at the last moment before the request is built and sent (in the client's
    ``RESTClientObject.request``, after the model's serialisation and any retry's sleep) and raises
    :class:`Fenced` when it says so. The applier also checks before each write; this check is what a
    thread that passed that one just before the process stalled (a stop, a long pause) meets when
    it resumes: the stall has made the lease lapse, so the request is not sent (issue 46). Threads
    outside such a block (the lease's own renewals, Kopf's) are not affected."""
    _install()
    before = getattr(_fence, "check", None)
    _fence.check = check
    try:
        yield
    finally:
        _fence.check = before


def _install() -> None:
    global _installed
    with _install_lock:
        if _installed:
            return
        send = RESTClientObject.request

        def request(self: RESTClientObject, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
            check = getattr(_fence, "check", None)
            if check is not None and method.upper() not in READS and check():
                raise Fenced(f"{method} {url.split('?', 1)[0]}: this replica may no longer act")
            return send(self, method, url, *args, **kwargs)

        RESTClientObject.request = request  # type: ignore[method-assign]
        _installed = True

