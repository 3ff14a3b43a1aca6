"""Periodic work without Kopf's timers and daemons, so that uninstalling leaves nothing Terminating (issue 48, item 3).

Kopf gives every object that a ``@kopf.timer`` or ``@kopf.daemon`` serves a finalizer, to stop the task before
the object goes. The finalizer outlives the operator: after ``helm uninstall``, a YieldGroup, BatchDispatch,
JobFlow or FlowPool, and the namespace or CRD holding it, stayed Terminating until someone patched
``finalizers: null``. Kopf 1.45 has no setting to leave it out (``requires_finalizer=True`` is hard-coded in
``kopf.timer`` and ``kopf.daemon``), and its maintainer declined to add one (nolar/kopf#896, #1183: the finalizer
is what guarantees the task stops). Our periodic functions hold nothing that needs clean-up when their object
goes (their state is the object's status and memo maps keyed by the object), so they run here instead, driven
by Kopf's own watch:

- :func:`timer` registers a function as ``@kopf.timer`` did (it gets the same keyword arguments: ``namespace``,
  ``name``, ``spec``, ``status``, ``body``, ``meta``, ``patch``, ``memo``, ``logger`` and every index by its
  name) together with a ``@kopf.on.event`` handler of its kind that keeps the latest body of each object.
  Event handlers need no finalizer, and Kopf calls them only once all its indexes are filled, as it starts
  timers;
- :class:`Ticker` runs, for each object, its function ``initial_delay`` seconds after the object is first seen
  and then ``interval`` seconds after each run ends (a Kopf timer that is not sharp), one asyncio task per
  object on Kopf's event loop, so a slow object delays no other; the status patch the function leaves is
  written as a merge patch on the status subresource (as Kopf does); an exception is logged and the next run
  comes at the next interval (Kopf retried after 60 s); the task ends when the watch says the object is gone;
- :class:`Acting`: with ``--peering``, only the replica that Kopf's peering elects runs them (Kopf stopped its
  timers on a paused replica): Kopf's own rule (``kopf._core.engines.peering.process_peering_event``) applied to
  the peering object, which this replica watches itself: a replica pauses while another live record (lastseen
  + lifetime in the future) has a higher or equal priority. A replica that starts acting waits ``grace_s``
  first (Kopf's watches relist when it resumes), and one that stops acting cancels its tasks at once.

The SODA loops (:func:`..soda.handlers.scheduler_loops`) use the same :class:`Acting` in place of Kopf's daemon
on SchedulingPolicy ``default`` (which needed a private edit of Kopf's registry to drop its finalizer).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, cast

import kopf
from kubernetes import client, watch

from . import reflector

log = logging.getLogger("kubesoda.periodic")

Key = tuple[str, str]  # (namespace or "", name)
POLL_S = 0.5  # how often the ticker looks for new objects and for a change of who acts
STOP_POLL_S = 0.1  # how often the SODA loops' stopper looks (a standby must stop writing at once)
PEERING_GROUP, PEERING_VERSION, PEERING_PLURAL = "kopf.dev", "v1", "clusterkopfpeerings"
GONE = object()  # a status write's answer: the object is gone


@dataclass(frozen=True)
class Timer:
    group: str
    version: str
    plural: str
    fn: Callable[..., Coroutine[Any, Any, None]]
    interval: float
    initial_delay: float


TIMERS: list[Timer] = []  # what :func:`timer` registered, in order (as Kopf's registry of handlers)


def timer(group: str, version: str, plural: str, *, interval: float, initial_delay: float = 0.0) -> Callable[[Any], Any]:
    """``@kopf.timer(group, version, plural, interval=..., initial_delay=...)`` without the finalizer (module docstring)."""

    def register(fn: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., Coroutine[Any, Any, None]]:
        t = Timer(group, version, plural, fn, float(interval), float(initial_delay))
        TIMERS.append(t)

        async def seen(event: kopf.RawEvent, body: kopf.Body, memo: Any, **kwargs: Any) -> None:
            ticker: Ticker | None = getattr(memo, "ticker", None)
            if ticker is not None:
                ticker.seen(t, event, body, kwargs)

        seen.__name__ = seen.__qualname__ = f"periodic_{plural}"
        kopf.on.event(group, version, plural, id=f"periodic-{plural}")(seen)
        return fn

    return register


def _deadline(record: Mapping[str, Any]) -> float:
    """Seconds since the epoch at which a peering record is dead (Kopf's Peer: lastseen + lifetime)."""
    try:
        seen = datetime.fromisoformat(str(record.get("lastseen"))).timestamp()
    except ValueError:
        return float("inf")  # Kopf takes a record without a readable lastseen as seen now
    return seen + int(record.get("lifetime", 60))


class Acting:
    """Whether this replica acts now: always when standalone; with peering, Kopf's rule on the peering object's
    records (module docstring), which :meth:`start` keeps up to date on a thread of its own (a watch of that one
    object: no hop through Kopf's event loop, which a large apply keeps busy for seconds)."""

    def __init__(self, peering: str | None = None, identity: str | None = None, priority: int = 0,
                 custom: client.CustomObjectsApi | None = None, clock: Callable[[], float] = time.time):
        self.peering, self.identity, self.priority, self.clock = peering, identity, int(priority), clock
        self.custom = custom
        self.records: Mapping[str, Any] = {}
        self.synced = threading.Event()
        self.stopped = threading.Event()

    def start(self) -> None:
        """Watch the peering object (nothing to watch when standalone)."""
        if self.peering is not None and self.custom is not None:
            threading.Thread(target=self._run, name="kubesoda-peering-watch", daemon=True).start()

    def stop(self) -> None:
        self.stopped.set()

    def _run(self) -> None:
        backoff = reflector.FIRST_RETRY_S
        while not self.stopped.is_set() and self.custom is not None and self.peering is not None:
            try:
                obj = cast(dict[str, Any], self.custom.get_cluster_custom_object(PEERING_GROUP, PEERING_VERSION, PEERING_PLURAL, self.peering))
                self.records = dict(obj.get("status") or {})
                self.synced.set()
                stream = watch.Watch().stream(self.custom.list_cluster_custom_object, PEERING_GROUP, PEERING_VERSION, PEERING_PLURAL,
                                              field_selector=f"metadata.name={self.peering}", timeout_seconds=60,
                                              resource_version=(obj.get("metadata") or {}).get("resourceVersion"))
                for ev in stream:
                    if self.stopped.is_set():
                        return
                    if ev.get("type") in ("ADDED", "MODIFIED"):
                        self.records = dict((ev.get("object") or {}).get("status") or {})
                    elif ev.get("type") == "DELETED":
                        self.records = {}
                backoff = reflector.FIRST_RETRY_S
            except Exception as e:  # noqa: BLE001 - the API server away, the object gone: again soon
                log.warning("the watch of the peering object %s failed (%s); again in %.1fs", self.peering, e, backoff)
                self.stopped.wait(backoff)
                backoff = min(reflector.MAX_RETRY_S, backoff * 2)

    def __call__(self) -> bool:
        if self.peering is None:
            return True
        if not self.synced.is_set():
            return False
        now = self.clock()
        for ident, rec in list(self.records.items()):
            if ident == self.identity or not isinstance(rec, Mapping):
                continue
            if _deadline(rec) > now and int(rec.get("priority", 0)) >= self.priority:
                return False  # a live peer of a higher priority, or of the same (Kopf pauses both)
        return True


@dataclass
class Ticker:
    """Runs the registered :data:`TIMERS` for every object Kopf's watch shows, while :class:`Acting` says so."""

    custom: client.CustomObjectsApi
    acting: Acting = field(default_factory=Acting)
    grace_s: float = 0.0
    timers: list[Timer] = field(default_factory=lambda: list(TIMERS))
    bodies: dict[str, dict[Key, Mapping[str, Any]]] = field(default_factory=dict)
    indices: dict[str, Any] = field(default_factory=dict)
    tasks: dict[tuple[str, Key], asyncio.Task[None]] = field(default_factory=dict)
    acts_since: float | None = None
    runs: int = 0
    # set by the startup handler (..soda.handlers): this ticker's task, the SODA loops' thread, the operator stopping
    task: asyncio.Task[None] | None = None
    loops_thread: threading.Thread | None = None
    stopping: threading.Event = field(default_factory=threading.Event)

    def seen(self, t: Timer, event: Mapping[str, Any], body: Mapping[str, Any], kwargs: Mapping[str, Any]) -> None:
        """The kind's event handler: keep the object's latest body (drop it when deleted), and Kopf's indexes."""
        self.indices.update({k: v for k, v in kwargs.items() if isinstance(v, kopf.Index)})
        md = body.get("metadata") or {}
        key = (md.get("namespace") or "", md.get("name") or "")
        objects = self.bodies.setdefault(t.plural, {})
        if event.get("type") == "DELETED" or md.get("deletionTimestamp"):
            objects.pop(key, None)
        else:
            objects[key] = dict(event.get("object") or body)

    async def run(self, memo: Any) -> None:
        """Until cancelled (Kopf's cleanup): start a task for each object seen, stop those whose object went,
        stop all while this replica does not act."""
        try:
            while True:
                self.tick(memo)
                await asyncio.sleep(POLL_S)
        finally:
            for task in self.tasks.values():
                task.cancel()
            self.tasks.clear()

    def tick(self, memo: Any) -> None:
        now = time.monotonic()
        if not self.acting():
            if self.acts_since is not None:  # paused: Kopf's watches stop, and list every object again when it resumes
                self.bodies.clear()
            self.acts_since = None
        elif self.acts_since is None:
            self.acts_since = now
        live = self.acts_since is not None and now - self.acts_since >= self.grace_s
        want = {(t.plural, key): t for t in self.timers for key in self.bodies.get(t.plural, {})} if live else {}
        for k in [k for k, task in self.tasks.items() if k not in want or task.done()]:
            self.tasks.pop(k).cancel()
        for k, t in want.items():
            if k not in self.tasks:
                self.tasks[k] = asyncio.create_task(self._object(t, k[1], memo), name=f"kubesoda {t.plural} {'/'.join(k[1])}")

    async def _object(self, t: Timer, key: Key, memo: Any) -> None:
        await asyncio.sleep(t.initial_delay)
        while True:
            raw = self.bodies.get(t.plural, {}).get(key)
            if raw is None:
                return
            body = kopf.Body(cast(kopf.RawBody, dict(raw)))
            patch = kopf.Patch()
            try:
                await t.fn(namespace=key[0] or None, name=key[1], body=body, spec=body.spec, status=body.status, meta=body.meta,
                           patch=patch, memo=memo, logger=log, **self.indices)
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - one object's failure is logged; it runs again next interval, the others go on
                log.exception("%s %s: the periodic handler %s failed", t.plural, "/".join(p for p in key if p), t.fn.__name__)
            self.runs += 1
            if patch.get("status"):
                new = await asyncio.to_thread(self._write_status, t, key, dict(patch["status"]))
                objects = self.bodies.get(t.plural, {})
                if new is GONE:
                    objects.pop(key, None)
                elif isinstance(new, dict) and objects.get(key) is raw:
                    objects[key] = new  # the next run sees what it wrote, not the body from before (the watch brings the same)
            await asyncio.sleep(t.interval)

    def _write_status(self, t: Timer, key: Key, status: dict[str, Any]) -> Any:
        """Merge-patch the object's status (in a thread): the object as the API server returns it, :data:`GONE`
        (404), or None (failed; the next run writes again)."""
        body = {"status": status}
        try:
            if key[0]:
                return self.custom.patch_namespaced_custom_object_status(t.group, t.version, key[0], t.plural, key[1], body,
                                                                         _request_timeout=10)
            return self.custom.patch_cluster_custom_object_status(t.group, t.version, t.plural, key[1], body, _request_timeout=10)
        except client.ApiException as e:
            if e.status == 404:
                return GONE
            log.warning("status of %s %s failed: %s %s", t.plural, "/".join(p for p in key if p), e.status, e.reason)
        except Exception as e:  # noqa: BLE001 - the API server away: the next run writes again
            log.warning("status of %s %s failed: %s", t.plural, "/".join(p for p in key if p), e)
        return None


def loops_stopper(acting: Acting, stop_all: threading.Event, poll_s: float = STOP_POLL_S) -> threading.Event:
    """An Event set once ``stop_all`` is or this replica stops acting (the SODA loops' ``stopped``, as Kopf's
    ``DaemonStopped`` was), set by a thread that watches both (and ends once it is set)."""
    stopped = threading.Event()

    def watch() -> None:
        while not stop_all.wait(poll_s) and not stopped.is_set() and acting():
            pass
        stopped.set()

    threading.Thread(target=watch, name="kubesoda-acting", daemon=True).start()
    return stopped
