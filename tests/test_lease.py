"""The fenced leader (issue 46): a replica writes only while its own last successful renewal is younger
than the lifetime less the margin, a renewal after a lapse keeps the loops that ran before it fenced,
and the loops rejoin only once the lease has been held for the margin. On a fake clock; the record is
checked against Kopf's own reading of it (kopf's Peer), the live pair is e2e/test_leader.py's part."""

from __future__ import annotations

import pytest
from kopf._core.engines.peering import Peer

from soda_operator.kube.lease import Lease, fence, margin_for
from soda_operator.soda.handlers import rejoin


class Clock:
    def __init__(self, t: float = 1_800_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


class Peering:
    """The peering object's status as the API server keeps it; ``down`` refuses every write."""

    def __init__(self) -> None:
        self.status: dict[str, dict] = {}
        self.down = False

    def patch_cluster_custom_object(self, group, version, plural, name, body, **_):
        if self.down:
            raise ConnectionError("the API server is away")
        self.status.update(body["status"])


def _lease(lifetime: float = 60.0, margin: float | None = None) -> tuple[Lease, Peering, Clock]:
    api, clock = Peering(), Clock()
    return Lease(api, "p", "me", 7, lifetime, margin, clock=clock), api, clock  # type: ignore[arg-type]


def test_the_fence_trips_a_margin_before_the_others_may_take_over():
    lease, api, clock = _lease(60, 20)
    assert not lease.holds()  # never renewed: never writes
    assert lease.renew()
    peer = Peer(identity="me", **api.status["me"])  # the standby's view: dead at lastseen + lifetime
    assert peer.priority == 7 and abs(peer.deadline.timestamp() - (clock.t + 60)) < 1e-3
    writes = fence(lambda: False, lease)
    clock.t += 39.9
    assert lease.holds() and not writes()
    api.down = True
    assert not lease.renew()  # a failed renewal moves nothing
    clock.t += 0.2
    assert not lease.holds() and writes()
    assert clock.t < peer.deadline.timestamp() - 19  # stopped writing 20 s before the standby may act


def test_a_renewal_after_a_lapse_keeps_the_earlier_loops_fenced():
    lease, api, clock = _lease(8, 3)
    lease.renew()
    before = fence(lambda: False, lease)
    clock.t += 2
    lease.renew()  # in time: no lapse
    assert lease.lapses == 0 and not before()
    clock.t += 12  # stalled past the lifetime (SIGSTOP)
    assert before()
    lease.renew()
    assert lease.holds() and lease.lapses == 1
    assert before(), "the loops that ran before the lapse wrote again"
    assert not fence(lambda: False, lease)()  # loops started after it may write
    assert fence(lambda: True, lease)()  # peering paused the daemon


def test_rejoin_waits_the_margin_of_an_unbroken_lease():
    lease, api, clock = _lease(8, 3)
    lease.renew()

    class Stopped:
        """Kopf's DaemonStopped on the fake clock; renews every 1 s of waiting, fails while ``api.down``."""

        def __init__(self, until: float) -> None:
            self.until = until

        def wait(self, t: float) -> bool:
            clock.t += t
            if int(clock.t * 2) % 2 == 0:
                lease.renew()
            return clock.t >= self.until

    start = clock.t
    assert rejoin(lease, Stopped(start + 100))  # type: ignore[arg-type]
    assert 3 <= clock.t - start <= 4
    api.down = True  # lapsed and never held again: stopped before rejoining
    clock.t += 10
    assert not rejoin(lease, Stopped(clock.t + 20))  # type: ignore[arg-type]


def test_margins():
    assert margin_for(60) == 20 and margin_for(2) == 1
    for bad in (0, 8, 9):
        with pytest.raises(ValueError, match="margin"):
            Lease(None, "p", "me", 1, 8, bad)
