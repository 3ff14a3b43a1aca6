"""Kopf handlers: watches that wake the loops, and the thread that runs them on the acting replica.

- StreamJob: a change of spec (``metadata.generation`` ahead of ``status.observedGeneration``) or a
  deletion asks for a macro epoch (debounced by the loop); status-only writes, including ours, do not
  (a listener of the operator's own StreamJob watch, :mod:`..kube.reflector`, not a Kopf handler);
- StreamTemplate and SchedulingPolicy: a change of spec, or a deletion, asks for a macro epoch (the
  operator's own status writes do not; StreamTemplates through the operator's own watch too);
- Node: a change of readiness, cordon, allocatable CPU or SODA labels, or a deletion, asks for a
  micro epoch (handled within one micro epoch, as the issue requires);
- a thread of the operator's (:func:`scheduler_loops`) runs the macro and micro loops, on snapshots of the
  watch-fed indexes (:mod:`.indexes`), not on lists, while this replica acts: with
  ``kubesoda run --peering`` only the replica Kopf's peering elects (the highest-priority live one;
  :class:`..kube.periodic.Acting` applies Kopf's rule to the peering object). It was Kopf's daemon on
  SchedulingPolicy ``default`` until issue 48: the daemon's finalizer outlived the operator. Two guards
  close the gaps around a hand-over: a replica waits ``memo.startup_grace_s`` each time it starts acting
  (it sees a live leader's keep-alive and pauses first), and a replica paused mid-epoch makes no further
  write (the applier's fence). A third: the fence
  also trips once the replica's own lease lapses (:mod:`..kube.lease`: no successful renewal for the
  lifetime less a margin), and the loops start again only after it has been held for that margin.

Validation failures never reach Kopf as exceptions: the loops write them to the StreamJob's status
and an Event.

The handlers reach the loops through Kopf's ``memo`` (``kubesoda run`` passes
``kopf.Memo(loops=..., startup_grace_s=..., nodes={})``), never through module globals.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

import kopf

from ..kube import metrics, periodic
from ..kube.lease import Lease
from ..memo import Memo
from . import crd, indexes
from .epochs import Loops

log = logging.getLogger("kubesoda.handlers")


def memo(loops: Loops, startup_grace_s: float = 0.0, snapshots: str = "index") -> Memo:
    """What the handlers share (:class:`~..memo.Memo`): the loops, the grace before the first epoch
    (peering), where snapshots come from (``index`` or ``list``); Kopf's event loop is set at startup."""
    return Memo(loops=loops, startup_grace_s=startup_grace_s, snapshots=snapshots)


@kopf.on.startup()
async def _remember_event_loop(memo: Memo, **_: Any) -> None:
    # the loops run in a thread of their own and copy the indexes on Kopf's own event loop, where the
    # operator's own watches (pods, jobs, templates, the peering object) change theirs
    memo.event_loop = asyncio.get_running_loop()
    for watch in memo.watches():
        watch.start(memo.event_loop)
    ticker = memo.ticker
    if ticker is not None:
        ticker.acting.start()
        ticker.task = asyncio.create_task(ticker.run(memo), name="kubesoda periodic handlers")
        ticker.loops_thread = threading.Thread(target=scheduler_loops, args=(memo, ticker.stopping), name="kubesoda-loops", daemon=True)
        ticker.loops_thread.start()


@kopf.on.cleanup()
async def _stop_own_watches(memo: Memo, **_: Any) -> None:
    ticker = memo.ticker
    if ticker is not None:
        ticker.stopping.set()
        if ticker.task is not None:
            ticker.task.cancel()
        if ticker.loops_thread is not None:  # the epoch in progress stops at its next write (the fence)
            await asyncio.to_thread(ticker.loops_thread.join, LOOPS_STOP_S)
        ticker.acting.stop()
    for watch in memo.watches():
        watch.stop()
    if memo.lease is not None:
        memo.lease.stop()  # before Kopf's last keep-alive removes the record: never written again after it


LOOPS_STOP_S = 10.0  # how long the shutdown waits for the loops' thread (Kopf's cancellation_timeout of the daemon was)


def job_listener(memo: Memo) -> Callable[[str, Mapping[str, Any]], None]:
    """The StreamJob watch's listener (:mod:`..kube.reflector`, not Kopf's): a new spec or a deletion
    asks for a macro epoch; status-only writes, ours included, do not."""

    def on_job(type_: str, body: Mapping[str, Any]) -> None:
        gen = (body.get("metadata") or {}).get("generation")
        seen = (body.get("status") or {}).get("observedGeneration")
        if type_ == "DELETED" or gen != seen:
            memo.loops.macro_due.set()

    return on_job


def template_listener(memo: Memo) -> Callable[[str, Mapping[str, Any]], None]:
    """The StreamTemplate watch's listener: a change of the spec, or a deletion, asks for a macro
    epoch; the operator's own status writes (counts, Valid) do not."""

    def on_template(type_: str, body: Mapping[str, Any]) -> None:
        md = body.get("metadata") or {}
        key = (md.get("namespace") or "", md.get("name") or "")
        spec = None if type_ == "DELETED" else dict(body.get("spec") or {})
        seen = memo.template_specs
        if key in seen and seen[key] == spec:
            return
        if spec is None:
            seen.pop(key, None)
        else:
            seen[key] = spec
        memo.loops.macro_due.set()

    return on_template


def _kopf_indexed(memo: Memo, kwargs: Mapping[str, Any]) -> None:
    """Kopf calls event handlers only once all its indexes are filled: remember them, and that they are."""
    if not memo.kopf_indexed.is_set():
        memo.kopf_indices.update({k: v for k, v in kwargs.items() if isinstance(v, kopf.Index)})
        memo.kopf_indexed.set()


@kopf.on.event(crd.GROUP, crd.VERSION, "schedulingpolicies")
def on_policy(event: kopf.RawEvent, body: kopf.Body, name: str, memo: Memo, **kwargs: Any) -> None:
    _kopf_indexed(memo, kwargs)
    # a change of the spec asks for a macro epoch; the operator's own status writes (the budget
    # managers' bookkeeping, after each overloaded macro epoch) must not, or each would ask for the next
    spec = None if event.get("type") == "DELETED" else dict(body.get("spec") or {})
    seen = memo.policy_specs
    if name in seen and seen[name] == spec:
        return
    seen[name] = spec
    memo.loops.macro_due.set()


@kopf.on.event("", "v1", "nodes")
def on_node(event: kopf.RawEvent, body: kopf.Body, name: str, memo: Memo, **kwargs: Any) -> None:
    _kopf_indexed(memo, kwargs)
    if event.get("type") == "DELETED":
        memo.nodes.pop(name, None)
        memo.loops.micro_due.set()
        return
    st = body.get("status") or {}
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in st.get("conditions") or [])
    labels = body.get("metadata", {}).get("labels") or {}
    state = (ready, bool((body.get("spec") or {}).get("unschedulable")), (st.get("allocatable") or {}).get("cpu"),
             labels.get(crd.MIPS_LABEL), labels.get(crd.DEFAULT_RACK_LABEL), labels.get(crd.ZONE_LABEL))
    if memo.nodes.get(name) != state:
        memo.nodes[name] = state
        memo.loops.micro_due.set()


def scheduler_loops(memo: Memo, stopping: threading.Event) -> None:
    """The SODA loops' thread, started with the operator: it runs them while this replica acts
    (:class:`..kube.periodic.Acting`: always when standalone, the elected replica with peering), each time
    after ``memo.startup_grace_s`` of acting, and until ``stopping`` (the operator's cleanup). Was Kopf's
    daemon on SchedulingPolicy ``default``, which put a finalizer on the policy (issue 48)."""
    acting = memo.ticker.acting if memo.ticker is not None else periodic.Acting()
    while not memo.kopf_indexed.wait(0.5):  # Kopf's own indexes filled by their first list
        if stopping.is_set():
            return
    if memo.snapshots == "index" and memo.event_loop is not None:
        # the operator's own watches' indexes (pods, jobs, templates) are filled when they say synced
        for watch in memo.watches():
            while not watch.synced.wait(0.5):
                if stopping.is_set():
                    return
        every = {**memo.kopf_indices, **{n: ix for watch in memo.watches() for n, ix in watch.indexes.items()}}
        memo.loops.reader = indexes.Reader(memo.event_loop, {n: every[n] for n in indexes.NAMES if n in every})
    while not stopping.is_set():
        if not acting():
            stopping.wait(periodic.POLL_S)
            continue
        stopped = periodic.loops_stopper(acting, stopping)
        if memo.startup_grace_s and stopped.wait(memo.startup_grace_s):
            continue  # peering paused this replica before it acted
        lapsed = False
        while not stopped.is_set():
            log.info("this replica runs the SODA loops")
            metrics.LEADER.set(1)
            try:
                memo.loops.run(stopped, lease=memo.lease)
            finally:
                metrics.LEADER.set(0)
                log.info("this replica stopped running the SODA loops")
            lapsed = not stopped.is_set()
            if not lapsed or memo.lease is None or not rejoin(memo.lease, stopped):
                break
        stopped.set()  # ends its watcher thread


def rejoin(lease: Lease, stopped: threading.Event, poll_s: float = 0.5) -> bool:
    """After the lease lapsed (issue 46): wait until it has been held again, without a lapse, for
    its margin (the replica that took over meanwhile sees the renewed record and pauses); False when
    the loops are stopped first."""
    log.warning("the lease lapsed (last renewal %.1f s ago, lifetime %g s, margin %g s): writes stopped until it is held again for %g s",
                lease.clock() - (lease.renewed or 0.0), lease.lifetime_s, lease.margin_s, lease.margin_s)
    held_since: float | None = None
    lapses = lease.lapses
    while not stopped.wait(poll_s):
        if not lease.holds() or lease.lapses != lapses:
            held_since, lapses = None, lease.lapses
        elif held_since is None:
            held_since = lease.clock()
        elif lease.clock() - held_since >= lease.margin_s:
            return True
    return False
