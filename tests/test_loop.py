"""The Running refresh's thread (soda_operator.loop.refresh): a refresh that raises is counted in
``kubesoda_refresh_failures_total`` and retried, the thread survives it, and a fenced replica's
refresh ends. The API server being away is played by a stand-in whose ``refresh_running`` raises
what the kubernetes client raises then (a refused connection)."""

from __future__ import annotations

import threading

from soda_operator.kube import metrics
from soda_operator.soda.apply import Fenced
from soda_operator.soda.loop import refresh


class Away:
    """Loops with one job awaiting its pods; ``outcomes`` are raised or returned in turn, then the
    job is no longer awaited (so a refresh running on after the last outcome calls nothing more)."""

    def __init__(self, *outcomes: object):
        self.awaiting = {("ns", "job"): object()}
        self.outcomes = list(outcomes)
        self.calls = 0
        self.emptied = threading.Event()

    def refresh_running(self) -> int:
        self.calls += 1
        out = self.outcomes.pop(0)
        if not self.outcomes:
            self.awaiting = {}
            self.emptied.set()
        if isinstance(out, BaseException):
            raise out
        return out


def failures() -> float:
    return metrics.REGISTRY.get_sample_value("kubesoda_refresh_failures_total") or 0.0


def run_refresh(loops: Away, *, ends_itself: bool = False) -> None:
    """Run the refresh thread until it has used every outcome (or, ``ends_itself``, until it returns)."""
    done = threading.Event()
    t = threading.Thread(target=refresh, args=(loops, threading.Event(), done, 0.01), daemon=True)
    t.start()
    if not ends_itself:
        assert loops.emptied.wait(10), "the refresh stopped calling refresh_running"
        done.set()
    t.join(10)
    assert not t.is_alive()


def test_a_failing_refresh_is_counted_and_retried():
    before = failures()
    loops = Away(ConnectionRefusedError(111, "Connection refused"), 0, 1)
    run_refresh(loops)
    assert failures() - before == 1
    assert loops.calls == 3  # after the failure it went on until the job was promoted


def test_a_fenced_refresh_ends_without_counting_a_failure():
    before = failures()
    loops = Away(Fenced(), 1)
    run_refresh(loops, ends_itself=True)
    assert loops.calls == 1 and failures() == before
