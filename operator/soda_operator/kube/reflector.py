"""A lean list-and-watch of one resource kind, feeding indexes shaped like Kopf's: the operator's pods.

Kopf takes every event of a kind it watches through its whole handling cycle, whatever handlers the
kind has: a worker task per object, body and logger wrappers, a deep copy for its diff base, every
handler's filters and keyword arguments. For pods that is most of the operator's CPU at scale: a first
macro epoch at 2,000 nodes creates 7,370 pods, about 30,000 pod events, and the operator spent 84-95
CPU seconds of a 2,000-node round (docs/benchmarks/scale.md); created side by side, 3,000 pods cost
Kopf 15.7 CPU seconds to index and this watch 1.9 (issue 39). So pods are not Kopf's: a
:class:`Reflector` lists them and watches them itself (raw JSON lines, no client models), on a thread
of its own, and hands each chunk of events to Kopf's event loop, where the indexes change. Everything
that reads them (the snapshot copy of :mod:`..soda.indexes`, the yield and dispatch timers) runs on that
loop too, so no reader ever sees half an event applied, as with Kopf's own indexes.

An index is what a Kopf index is: each indexer returns an object's contribution ``{key: value}``
(``{}``: none), and ``index[key]`` is the collection of the values every object contributes under
``key``; an object's new event replaces its old contribution, its deletion removes it. Listeners are
called on the loop after each event is indexed (``(type, body)``, the parsed object as the API server
sent it).

The watch resumes from the last resourceVersion (bookmarks keep it fresh); when the API server
answers 410 Gone it lists again, and objects missing from the new list are indexed as deleted. When
the API server is away, the list or watch is tried again after 0.2 s, doubling to at most 4 s, so it
resumes within 4 s of the server's return (issue 46).
``synced`` is set once the first list is indexed: the loops and the timers wait for it, as Kopf holds
its handlers until its indexes are filled.
"""

from __future__ import annotations

import asyncio
import json
import logging
import queue
import threading
from collections.abc import Callable, Hashable, Iterator, Mapping, ValuesView
from typing import Any

log = logging.getLogger("kubesoda.reflector")

Key = tuple[str, str]  # (namespace, name) of an object
Indexer = Callable[[Mapping[str, Any]], Mapping[Hashable, Any]]
Listener = Callable[[str, Mapping[str, Any]], None]
PAGE = 500  # objects per LIST page
# a failed list or watch is tried again after FIRST_RETRY_S, doubling up to MAX_RETRY_S (issue 46: with
# 1 s doubling to 30 s the watches resumed 18 s after a 30 s API server outage ended; a retry against
# a server that is down costs a refused connection, so a few seconds' bound is cheap)
FIRST_RETRY_S = 0.2
MAX_RETRY_S = 4.0


class Gone(Exception):
    """The watch's resourceVersion is too old (410): list again."""


class Index(Mapping[Hashable, ValuesView[Any]]):
    """key -> the values the objects contribute under it (read on the event loop)."""

    def __init__(self) -> None:
        self._data: dict[Hashable, dict[Key, Any]] = {}

    def __getitem__(self, key: Hashable) -> ValuesView[Any]:
        return self._data[key].values()

    def __iter__(self) -> Iterator[Hashable]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def _put(self, obj: Key, contribution: Mapping[Hashable, Any]) -> None:
        for k, v in contribution.items():
            self._data.setdefault(k, {})[obj] = v

    def _drop(self, obj: Key, contribution: Mapping[Hashable, Any]) -> None:
        for k in contribution:
            store = self._data.get(k)
            if store is not None:
                store.pop(obj, None)
                if not store:
                    del self._data[k]


def _key(body: Mapping[str, Any]) -> Key:
    md = body.get("metadata") or {}
    return (md.get("namespace") or "", md.get("name") or "")


class Reflector:
    """List and watch one kind with ``list_call`` (a ``list_*_for_all_namespaces`` of the client, or any
    call that takes ``watch``, ``resource_version``, ``limit``, ``_continue`` and ``_preload_content``)."""

    def __init__(self, list_call: Callable[..., Any], indexers: Mapping[str, Indexer], listeners: list[Listener] | None = None,
                 server_timeout_s: int = 600, name: str = "pods"):
        self.list_call = list_call
        self.indexers = dict(indexers)
        self.listeners = list(listeners or [])
        self.server_timeout_s = server_timeout_s
        self.name = name
        self.indexes: dict[str, Index] = {n: Index() for n in self.indexers}
        self.synced = threading.Event()
        self._objects: dict[Key, dict[str, Mapping[Hashable, Any]]] = {}  # object -> its contribution to each index
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    # ------------------------------------------------------------------ on the event loop
    def _index(self, key: Key, contributions: dict[str, Mapping[Hashable, Any]] | None) -> None:
        """Replace ``key``'s contributions (None: the object is gone)."""
        old = self._objects.pop(key, None)
        if old is not None:
            for n, c in old.items():
                self.indexes[n]._drop(key, c)
        if contributions is not None:
            kept = {n: c for n, c in contributions.items() if c}
            for n, c in kept.items():
                self.indexes[n]._put(key, c)
            self._objects[key] = kept

    def _apply(self, batch: list[tuple[str, Key, dict[str, Mapping[Hashable, Any]] | None, Mapping[str, Any]]], relist: bool = False) -> None:
        if relist:  # objects not in the new list went away while no watch ran
            listed = {key for _, key, _, _ in batch}
            for key in [k for k in self._objects if k not in listed]:
                self._index(key, None)
                self._tell("DELETED", {"metadata": {"namespace": key[0], "name": key[1]}})
        for type_, key, contributions, body in batch:
            self._index(key, contributions)
            self._tell(type_, body)
        if relist:
            self.synced.set()

    def _tell(self, type_: str, body: Mapping[str, Any]) -> None:
        for fn in self.listeners:
            try:
                fn(type_, body)
            except Exception:  # a listener's bug never stops the index
                log.exception("a %s listener failed", self.name)

    # ------------------------------------------------------------------ on the reflector's thread
    def _contributions(self, body: Mapping[str, Any]) -> dict[str, Mapping[Hashable, Any]]:
        out: dict[str, Mapping[Hashable, Any]] = {}
        for n, fn in self.indexers.items():
            try:
                out[n] = fn(body)
            except Exception:  # an indexer's bug costs that object's entry, never the watch
                log.exception("indexer %s failed on %s %s/%s", n, self.name, *_key(body))
                out[n] = {}
        return out

    def _post(self, batch: list[Any], relist: bool = False) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            raise RuntimeError("the event loop is gone")
        loop.call_soon_threadsafe(self._apply, batch, relist)

    def _list(self) -> str:
        batch: list[Any] = []
        cont: str | None = None
        rv = ""
        while True:
            kw: dict[str, Any] = {"limit": PAGE}
            if cont:
                kw["_continue"] = cont
            resp = self.list_call(_preload_content=False, **kw)
            try:
                page = json.loads(resp.read())
            finally:
                resp.release_conn()
            meta = page.get("metadata") or {}
            rv = rv or meta.get("resourceVersion") or ""
            for body in page.get("items") or []:
                batch.append(("ADDED", _key(body), self._contributions(body), body))
            cont = meta.get("continue")
            if not cont:
                break
        self._post(batch, relist=True)
        return rv

    def _watch(self, rv: str) -> str:
        resp = self.list_call(watch=True, resource_version=rv, allow_watch_bookmarks=True, timeout_seconds=self.server_timeout_s,
                              _preload_content=False, _request_timeout=self.server_timeout_s + 30)
        chunks: queue.SimpleQueue[bytes | BaseException | None] = queue.SimpleQueue()
        pump = threading.Thread(target=self._pump, args=(resp, chunks), name=f"reflector-{self.name}-read", daemon=True)
        pump.start()
        buf = b""
        try:
            while (chunk := chunks.get()) is not None:
                if isinstance(chunk, BaseException):
                    raise chunk
                if self._stop.is_set():
                    break
                buf += chunk
                if b"\n" not in buf:
                    continue
                *lines, buf = buf.split(b"\n")
                batch = []
                for line in lines:
                    if not line.strip():
                        continue
                    ev = json.loads(line)
                    type_, body = ev.get("type"), ev.get("object") or {}
                    if type_ == "ERROR":
                        if body.get("code") == 410:
                            raise Gone(body.get("message"))
                        raise RuntimeError(f"watch of {self.name}: {body.get('message') or body}")
                    rv = (body.get("metadata") or {}).get("resourceVersion") or rv
                    if type_ == "BOOKMARK":
                        continue
                    batch.append((type_, _key(body), None if type_ == "DELETED" else self._contributions(body), body))
                if batch:
                    self._post(batch)
        finally:
            if pump.is_alive():  # left early (stop, 410, an error): the reader's next read fails and it ends
                resp.close()
            pump.join(5)
            resp.release_conn()
        return rv

    def _pump(self, resp: Any, chunks: queue.SimpleQueue[bytes | BaseException | None]) -> None:
        """Read the watch's bytes as they come, nothing else (issue 53): the API server closes a watch whose
        reader falls a few events behind during a burst ("Forcing pods watcher close due to unresponsiveness":
        ten events of buffer for a cluster-wide watch, 50 ms of waiting a second shared by every watcher),
        and a reader that parses and indexes each event under the GIL, beside the epoch's 16 create threads,
        fell behind: with its waits it also spent the budget that KWOK's and the schedulers' watches needed,
        and each close of KWOK's watch (which restarts from resourceVersion 0) started its Pending pods
        again. Parsing and indexing stay on the reflector's thread, behind this queue."""
        try:
            for chunk in resp.stream(65536):
                chunks.put(chunk)
                if self._stop.is_set():
                    break
        except BaseException as e:  # noqa: BLE001 - handed to the parsing thread, which raises it there
            chunks.put(e)
        finally:
            chunks.put(None)

    def _run(self) -> None:
        rv: str | None = None
        backoff = FIRST_RETRY_S
        while not self._stop.is_set():
            try:
                if rv is None:
                    rv = self._list()
                rv = self._watch(rv)
                backoff = FIRST_RETRY_S
            except Gone:
                log.info("the %s watch is too old: listing again", self.name)
                rv = None
            except Exception as e:  # the API server is away: try again soon, a little later each time, never long
                if self._loop is None or self._loop.is_closed():
                    return
                log.warning("the %s watch failed (%s); again in %.1fs", self.name, e, backoff)
                self._stop.wait(backoff)
                backoff = min(MAX_RETRY_S, backoff * 2)

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """List, then watch, on a daemon thread; the indexes change on ``loop``."""
        self._loop = loop
        self._thread = threading.Thread(target=self._run, name=f"reflector-{self.name}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
