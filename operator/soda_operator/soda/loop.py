"""When the epochs run: the macro loop and the micro loop on one thread, the Running refresh on another.

- a macro epoch every ``macroEpochSeconds``, and soon after a handler flags a relevant change,
  debounced (a ``kubectl apply`` of many jobs arrives over several seconds; planning on half of
  them would place the rest around them) but never delayed more than ``max_debounce_s``;
- a micro epoch every ``microEpochSeconds`` or when a handler flags a node change;
- every second, on a thread of its own, a refresh that turns Admitted jobs Running as soon as
  their pods run, also while an epoch is still creating the pods of later jobs (a first macro
  epoch at 2,000 nodes creates thousands of pods over minutes; :meth:`.epochs.Loops.refresh_running`).

An epoch that raises is logged, counted and retried a micro epoch later, never in a tight loop; a
refresh that raises is logged, counted (``kubesoda_refresh_failures_total``) and retried 2 s later.
Once ``stop`` is set the epoch in progress writes nothing more (the applier's fence).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

from ..kube import metrics
from . import state
from .apply import Fenced

if TYPE_CHECKING:
    from .epochs import Loops

log = logging.getLogger("kubesoda.loop")


def run(loops: Loops, stop: threading.Event, debounce_s: float = 1.0, max_debounce_s: float = 10.0, refresh_s: float = 1.0) -> None:
    loops.applier.fence = stop.is_set
    done = threading.Event()  # ``stop`` may be Kopf's DaemonStopped, which only the daemon's owner sets
    refresher = threading.Thread(target=refresh, args=(loops, stop, done, refresh_s), name="kubesoda-refresh", daemon=True)
    refresher.start()
    try:
        epochs(loops, stop, debounce_s, max_debounce_s)
    finally:
        done.set()  # the refresh ends with the epochs
        refresher.join(timeout=30)


def refresh(loops: Loops, stop: threading.Event, done: threading.Event, refresh_s: float = 1.0) -> None:
    """Every ``refresh_s`` while jobs wait for their pods: promote those whose pods all run."""
    while not done.wait(refresh_s) and not stop.is_set():
        if not loops.awaiting:
            continue
        try:
            n = loops.refresh_running()
            if n:
                log.info("%d job(s) Running", n)
        except Fenced:
            return
        except Exception:  # the API server is away: the next tick tries again
            metrics.REFRESH_FAILURES.inc()
            log.exception("Running refresh failed")
            done.wait(2.0)


def epochs(loops: Loops, stop: threading.Event, debounce_s: float = 1.0, max_debounce_s: float = 10.0) -> None:
    next_macro = 0.0
    next_micro = 0.0
    while not stop.is_set():
        try:
            macro_s, micro_s = state.epochs(loops.reader.policy() if loops.reader is not None else state.get_policy(loops.custom))
        except Exception:  # the API server is away: keep the defaults, try the epochs anyway
            macro_s, micro_s = state.epochs(None)
        try:
            now = time.monotonic()
            if loops.macro_due.is_set():
                first = time.monotonic()
                while True:
                    loops.macro_due.clear()
                    if stop.wait(debounce_s) or not loops.macro_due.is_set() or time.monotonic() - first >= max_debounce_s:
                        break
                next_macro = 0.0
            if now >= next_macro:
                next_macro = next_micro = time.monotonic() + micro_s  # if it raises: a micro epoch later
                loops.macro_epoch()
                next_macro = time.monotonic() + macro_s
                next_micro = time.monotonic() + micro_s
            elif now >= next_micro or loops.micro_due.is_set():
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
        wait = max(0.05, min(next_macro, next_micro) - time.monotonic())
        # wake early when a handler flags work
        for _ in range(int(wait / 0.1) + 1):
            if stop.is_set() or loops.macro_due.is_set() or loops.micro_due.is_set():
                break
            time.sleep(min(0.1, wait))
