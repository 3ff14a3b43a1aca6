"""When the epochs run: the macro loop and the micro loop on one thread, the Running refresh on another.

- a macro epoch every ``macroEpochSeconds``, and soon after a handler flags a relevant change,
  once the changes have settled (:class:`Settle`): a ``kubectl apply`` of many jobs arrives over
  many seconds (2,219 objects in 54-91 s at 2,000 nodes), and planning on part of them places the
  rest around them and re-plans a minute later;
- a micro epoch every ``microEpochSeconds`` or when a handler flags a node change; while a zone is
  disrupted (:mod:`.disruption`) only micro epochs run, the macro epoch waits for its end;
- every second, on a thread of its own, a refresh that turns Admitted jobs Running as soon as
  their pods run, also while an epoch is still creating the pods of later jobs (a first macro
  epoch at 2,000 nodes creates thousands of pods over minutes; :meth:`.epochs.Loops.refresh_running`).

An epoch that raises is logged, counted and retried a micro epoch later, never in a tight loop; a
refresh that raises is logged, counted (``kubesoda_refresh_failures_total``) and retried 2 s later.
Once ``stop`` is set, or this replica's lease lapses (:mod:`..kube.lease`), the epoch in progress
writes nothing more (the applier's fence) and the loops return.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..kube import metrics
from ..kube.api import Fenced, fenced
from ..kube.lease import Lease, fence
from . import state

if TYPE_CHECKING:
    from .epochs import Loops

log = logging.getLogger("kubesoda.loop")


DEBOUNCE_S = 1.0  # quiet needed before a flagged macro epoch plans
MAX_DEBOUNCE_S = 10.0  # the longest wait for quiet, at least
SETTLE_PER_OBJECT_S = 0.1  # ... and this much per StreamJob and StreamTemplate known


def settle_cap(objects: int, max_debounce_s: float = MAX_DEBOUNCE_S, per_object_s: float = SETTLE_PER_OBJECT_S) -> float:
    """The longest a flagged macro epoch waits for quiet with ``objects`` StreamJobs and
    StreamTemplates known: ``max(max_debounce_s, per_object_s x objects)``."""
    return max(max_debounce_s, per_object_s * objects)


@dataclass
class Settle:
    """The wait of a flagged macro epoch: the changes that flag one (new or changed StreamJobs,
    StreamTemplates, the policy) must have been quiet for ``debounce_s``, or :func:`settle_cap` of
    the objects known (counted afresh at every look) must have passed since the first of them.

    Why the cap grows with the objects: an apply that delivers at least one object every
    ``per_object_s`` (10 a second by default; ``kubectl apply`` managed 24-40 at 2,000 nodes) is
    never cut, since after t seconds of it at least t / per_object_s objects are known and the cap
    is past t; and a stream that never quiets (a controller rewriting specs) still gets its epoch
    within the cap, 10 s for 100 objects, 100 s for 1,000 (the default macro epoch is 60 s)."""

    debounce_s: float = DEBOUNCE_S
    max_debounce_s: float = MAX_DEBOUNCE_S
    per_object_s: float = SETTLE_PER_OBJECT_S
    first: float | None = None  # the first change not planned yet (None: nothing waits)
    last: float = 0.0  # the latest change

    def change(self, now: float) -> None:
        if self.first is None:
            self.first = now
        self.last = now

    def deadline(self, objects: int) -> float | None:
        """When the macro epoch may start (None: no change waits)."""
        if self.first is None:
            return None
        return min(self.last + self.debounce_s, self.first + settle_cap(objects, self.max_debounce_s, self.per_object_s))

    def end(self, now: float) -> float:
        """The wait is over: the seconds it took."""
        waited = now - (self.first if self.first is not None else now)
        self.first = None
        return waited


def run(loops: Loops, stop: threading.Event, debounce_s: float = DEBOUNCE_S, max_debounce_s: float = MAX_DEBOUNCE_S,
        refresh_s: float = 1.0, per_object_s: float = SETTLE_PER_OBJECT_S, lease: Lease | None = None) -> None:
    """Both loops and the Running refresh until ``stop`` is set or a write is fenced: the applier's
    fence is ``stop`` and, with peering, this replica's lease (:func:`..kube.lease.fence`)."""
    loops.applier.fence = fence(stop.is_set, lease)
    done = threading.Event()  # ``stop`` may be Kopf's DaemonStopped, which only the daemon's owner sets
    refresher = threading.Thread(target=refresh, args=(loops, stop, done, refresh_s, loops.applier.fence), name="kubesoda-refresh", daemon=True)
    refresher.start()
    try:
        with fenced(loops.applier.fence):  # this thread's writes too, at the client's send
            epochs(loops, stop, debounce_s, max_debounce_s, per_object_s)
    finally:
        done.set()  # the refresh ends with the epochs
        refresher.join(timeout=30)


def refresh(loops: Loops, stop: threading.Event, done: threading.Event, refresh_s: float = 1.0,
            fence: Callable[[], bool] | None = None) -> None:
    """Every ``refresh_s`` while jobs wait for their pods: promote those whose pods all run (its
    writes fenced at the client's send by ``fence``, the applier's)."""
    while not done.wait(refresh_s) and not stop.is_set():
        if not loops.awaiting:
            continue
        try:
            with fenced(fence) if fence is not None else contextlib.nullcontext():
                n = loops.refresh_running()
            if n:
                log.info("%d job(s) Running", n)
        except Fenced:
            return
        except Exception:  # the API server is away: the next tick tries again
            metrics.REFRESH_FAILURES.inc()
            log.exception("Running refresh failed")
            done.wait(2.0)


def epochs(loops: Loops, stop: threading.Event, debounce_s: float = DEBOUNCE_S, max_debounce_s: float = MAX_DEBOUNCE_S,
           per_object_s: float = SETTLE_PER_OBJECT_S) -> None:
    """The macro and micro epochs, one at a time. A flagged macro epoch waits for the changes to
    settle (:class:`Settle`); meanwhile neither a periodic macro nor a periodic micro epoch runs (the
    macro epoch that plans the settled changes comes within the cap), but a micro epoch a handler
    asks for (a node change) does."""
    next_macro = 0.0
    next_micro = 0.0
    settle = Settle(debounce_s, max_debounce_s, per_object_s)
    while not stop.is_set():
        try:
            macro_s, micro_s = state.epochs(loops.reader.policy() if loops.reader is not None else state.get_policy(loops.custom))
        except Exception:  # the API server is away: keep the defaults, try the epochs anyway
            macro_s, micro_s = state.epochs(None)
        try:
            now = time.monotonic()
            if loops.macro_due.is_set():
                loops.macro_due.clear()
                settle.change(now)
            ready = settle.deadline(loops.objects())
            if ready is not None and now >= ready:
                waited = settle.end(now)
                if waited > debounce_s + 1:
                    log.info("macro epoch after %.1fs of changes (%d StreamJobs and StreamTemplates)", waited, loops.objects())
                next_macro = 0.0
            # while a zone is disrupted (issue 46) the macro epoch waits: admission and candidates planned on
            # nodes that only look gone would move running work once they are back; micro epochs keep what runs
            if settle.first is None and now >= next_macro and not getattr(loops, "deletions_paused", False):
                next_macro = next_micro = time.monotonic() + micro_s  # if it raises: a micro epoch later
                loops.macro_epoch()
                next_macro = time.monotonic() + macro_s
                next_micro = time.monotonic() + micro_s
            elif (settle.first is None and now >= next_micro) or loops.micro_due.is_set():
                loops.micro_due.clear()
                next_micro = time.monotonic() + micro_s
                loops.micro_epoch()
                next_micro = time.monotonic() + micro_s
        except Fenced:
            log.info("stopped mid-epoch: no more writes from this replica")
            return
        except Exception:  # never crash-loop: log and try again later
            metrics.EPOCH_FAILURES.inc()
            log.exception("epoch failed")
            stop.wait(2.0)
        ready = settle.deadline(loops.objects())
        wait = max(0.05, (ready if ready is not None else min(next_macro, next_micro)) - time.monotonic())
        # wake early when a handler flags work
        for _ in range(int(wait / 0.1) + 1):
            if stop.is_set() or loops.macro_due.is_set() or loops.micro_due.is_set():
                break
            time.sleep(min(0.1, wait))
