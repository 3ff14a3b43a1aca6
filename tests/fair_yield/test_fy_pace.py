"""Issue 47 item 3: the stages beside SCIP stop early by the longest stall they have seen (:mod:`.pace`), so that a
stall after their last look at the clock does not carry the call past its deadline. Deterministic: a scripted
clock (``time.monotonic`` replaced), no timing."""

from __future__ import annotations

import time

import numpy as np
import pytest

from soda_optimizer.fair_yield import solve_mcb
from soda_optimizer.fair_yield.generator import REGIMES, off_grid
from soda_optimizer.fair_yield.improve import search
from soda_optimizer.fair_yield.pace import Pace


class StallingClock:
    """A clock that moves on 1 ms at every read, and once, at read ``stall_at``, 100 ms (the process not run)."""

    def __init__(self, stall_at: int) -> None:
        self.now, self.reads, self.stall_at = 1000.0, 0, stall_at

    def __call__(self) -> float:
        self.reads += 1
        self.now += 0.1 if self.reads == self.stall_at else 0.001
        return self.now


def test_pace_remembers_the_worst_stall(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = StallingClock(stall_at=4)
    monkeypatch.setattr(time, "monotonic", clock)
    pace = Pace()  # read 1
    assert pace.now() == pytest.approx(1000.002) and pace.worst == pytest.approx(0.001)
    assert not pace.passed(1000.2)  # read 3: 1000.003 + 0.001
    pace.now()  # read 4: the stall
    assert pace.worst == pytest.approx(0.1)
    assert pace.passed(1000.2)  # read 5: 1000.104 + 0.1 >= 1000.2, although 1000.2 is still ahead
    assert pace.left(1000.3) == pytest.approx(1000.3 - 0.1 - 1000.105)
    pace.mark()  # the work before a loop is no stall
    assert pace.worst == pytest.approx(0.1)


def test_the_search_beside_scip_stops_by_the_worst_stall_before_its_stop(monkeypatch: pytest.MonkeyPatch) -> None:
    """A search given until = start + 0.3 s on a clock that stalls 100 ms once early on: it stops at the first
    look at the clock where a stall like that one would take it past the stop, not at the stop itself (main's
    search ran to its stop, and a stall there made the call late)."""
    rng = np.random.default_rng(3)
    inst = next(i for i in (off_grid(rng, REGIMES[k % 3]) for k in range(30)) if solve_mcb(i, 8).min_yield < 0.9)
    start = np.asarray(solve_mcb(inst, 8).placement, dtype=np.int64)
    clock = StallingClock(stall_at=10)
    monkeypatch.setattr(time, "monotonic", clock)
    until = 1000.0 + 0.3
    search(inst.tasks(), [start], until)
    assert clock.reads > 10  # the stall was seen
    assert clock.now < until - 0.09, (clock.now, until)
