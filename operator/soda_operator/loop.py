"""When the epochs run: the macro loop, the micro loop and the Running refresh, on one thread.

- a macro epoch every ``macroEpochSeconds``, and soon after a handler flags a relevant change,
  debounced (a ``kubectl apply`` of many jobs arrives over several seconds; planning on half of
  them would place the rest around them) but never delayed more than ``max_debounce_s``;
- a micro epoch every ``microEpochSeconds`` or when a handler flags a node change;
- between epochs, a 1 s refresh that turns Admitted jobs Running as soon as their pods run.

An epoch that raises is logged, counted and retried a micro epoch later, never in a tight loop.
Once ``stop`` is set the epoch in progress writes nothing more (the applier's fence).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

from . import metrics, state
from .apply import Fenced

if TYPE_CHECKING:
    from .epochs import Loops

log = logging.getLogger("kubesoda.loop")


def run(loops: Loops, stop: threading.Event, debounce_s: float = 1.0, max_debounce_s: float = 10.0, refresh_s: float = 1.0) -> None:
    loops.applier.fence = stop.is_set
    next_macro = 0.0
    next_micro = 0.0
    next_refresh = 0.0
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
            elif loops.awaiting and now >= next_refresh:
                loops.refresh_running()
                next_refresh = time.monotonic() + refresh_s
        except Fenced:
            log.info("stopped mid-epoch: no more writes from this replica")
            return
        except Exception:  # never crash-loop: log and try again later
            metrics.EPOCH_FAILURES.inc()
            log.exception("epoch failed")
            stop.wait(2.0)
        wait = max(0.05, min(next_macro, next_micro, next_refresh if loops.awaiting else next_micro) - time.monotonic())
        # wake early when a handler flags work
        for _ in range(int(wait / 0.1) + 1):
            if stop.is_set() or loops.macro_due.is_set() or loops.micro_due.is_set():
                break
            time.sleep(min(0.1, wait))
