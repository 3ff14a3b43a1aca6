"""The clock of one allocation call, with the longest stall it has seen (issue 47 item 3, ours).

On a loaded machine the process is not run for tens of milliseconds at a time (measured at load 16-17 on 2
cores: a bare loop of numpy calls saw gaps of 50-90 ms between two reads of the clock, with no other thread).
A stage that reads the clock, finds time left and starts a step of a millisecond can so return a stall later;
the writes after SCIP is stopped (its answer read, the allocation built) can too. So the stages that loop on the
clock read it through :class:`Pace`, which remembers the longest gap between two of its reads, and stop early by
that much: a stop time is treated as passed once ``now + worst`` reaches it, "were the worst stall seen so far
to hit now, we would still be on time". On a quiet machine the worst gap is a step's own time (well under a
millisecond), so nothing changes there.
"""

from __future__ import annotations

import time


class Pace:
    """``time.monotonic()`` that remembers the longest gap between two of its reads (``worst``)."""

    def __init__(self) -> None:
        self.last = time.monotonic()
        self.worst = 0.0

    def mark(self) -> None:
        """Start counting gaps from now (the work before, e.g. a whole heuristic, is no stall)."""
        self.last = time.monotonic()

    def now(self) -> float:
        t = time.monotonic()
        self.worst = max(self.worst, t - self.last)
        self.last = t
        return t

    def passed(self, stop: float | None) -> bool:
        """``stop`` (a ``time.monotonic()`` value; None: never) is passed, or would be after the worst stall seen."""
        return stop is not None and self.now() + self.worst >= stop

    def left(self, stop: float) -> float:
        """The time left before ``stop``, less the worst stall seen (at least 0)."""
        return max(0.0, stop - self.worst - self.now())
