"""One writer at any instant (issue 46): this replica's own lease on its Kopf peering record, and the fence on it.

Kopf's peering elects the highest-priority live replica: a peer is live until its record's
``lastseen + lifetime`` (``ClusterKopfPeering.status[identity]``), and Kopf renews the record every
``lifetime - 5..10`` s from its event loop. A replica whose event loop is busy or stalled renews late,
the standby takes over at ``lastseen + lifetime``, and the old leader, which learns that it lost only
when its own loop processes the peering event, went on writing: under load both replicas ran the
loops for 89 s (keep-alive gaps of 10.8-15.8 s against a 10 s lifetime).

Two rules close that:

- **renewal off the event loop**: :meth:`Lease.run`, a thread, writes this replica's record (Kopf's
  own format: priority, lifetime, lastseen) every ``lifetime / 4`` s, so a busy event loop no longer
  lets the lease lapse while the process writes; Kopf's keep-alive goes on beside it;
- **the fence**: :meth:`Lease.holds` is True only while this replica's last *successful* renewal (its
  ``lastseen``, taken before the request was sent) is younger than ``lifetime - margin``. The applier
  checks it before every write request (:class:`..soda.apply.Applier`'s fence), so a replica that
  could not renew (stalled by SIGSTOP, starved of CPU, cut off from the API server) stops writing
  ``margin`` seconds before any other replica may take over, by its own clock. The margin covers a
  write that passed the check and is slow to land, and clock skew between replicas. After a lapse the
  loops stop, and start again only once the lease has been held for ``margin`` seconds (the replica
  that took over meanwhile sees the renewed record and pauses; :func:`..soda.handlers.scheduler_loops`).
  A renewal that comes after a lapse counts as one (:attr:`Lease.lapses`): the loops that ran before
  it stay fenced even though the lease holds again.

Kopf's own keep-alive builds its record's ``lastseen`` before it awaits the request, so a stalled
event loop can land a record older than this thread's last one, until the next renewal replaces it:
the margin must exceed the longest event-loop stall (the chart's 20 s does the measured 15.8 s).

Departure: not a ``coordination.k8s.io`` Lease (Kopf's peering stays the election, so the replicas of
an older version still see each other); the fence is the renew-deadline half of client-go's leader
election, on Kopf's record.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from kubernetes import client

log = logging.getLogger("kubesoda.lease")
GROUP, VERSION, PLURAL = "kopf.dev", "v1", "clusterkopfpeerings"


def margin_for(lifetime_s: float) -> float:
    """The default margin: a third of the lifetime (20 s of the chart's 60 s, above the 10.8-15.8 s
    stalls measured under load), at least 1 s."""
    return max(1.0, lifetime_s / 3)


class Lease:
    """This replica's record in the peering object ``peering``, renewed by :meth:`run`; :meth:`holds`
    is the fence (module docstring). ``clock`` is wall-clock seconds (the records' ``lastseen`` is)."""

    def __init__(self, custom: client.CustomObjectsApi | None, peering: str, identity: str, priority: int, lifetime_s: float,
                 margin_s: float | None = None, clock: Callable[[], float] = time.time):
        self.custom, self.peering, self.identity, self.priority = custom, peering, identity, priority
        self.lifetime_s = float(lifetime_s)
        self.margin_s = margin_for(self.lifetime_s) if margin_s is None else float(margin_s)
        if not 0 < self.margin_s < self.lifetime_s:
            raise ValueError(f"the lease margin ({self.margin_s:g} s) must be above 0 and below the lifetime ({self.lifetime_s:g} s)")
        self.renew_s = max(0.5, self.lifetime_s / 4)
        self.clock = clock
        self.renewed: float | None = None  # lastseen of the last renewal the API server accepted
        self.lapses = 0  # renewals that came after the lease had lapsed
        self.stopped = threading.Event()

    def holds(self) -> bool:
        """Whether this replica may write now: its last successful renewal is younger than the
        lifetime less the margin."""
        return self.renewed is not None and self.clock() - self.renewed < self.lifetime_s - self.margin_s

    def held_for(self) -> float:
        """Seconds the lease has been held since the last successful renewal's lastseen (0 when it does not hold)."""
        return self.clock() - self.renewed if self.holds() and self.renewed is not None else 0.0

    def record(self, at: float) -> dict[str, Any]:
        """The peering record Kopf writes (kopf._core.engines.peering.Peer.as_dict), seen at ``at``."""
        return {"priority": int(self.priority), "lifetime": int(self.lifetime_s),
                "lastseen": datetime.fromtimestamp(at, UTC).isoformat()}

    def renew(self) -> bool:
        """Write this replica's record once; True (and :attr:`renewed` moved) when the API server took it."""
        if self.custom is None:
            return False
        at = self.clock()
        try:
            self.custom.patch_cluster_custom_object(GROUP, VERSION, PLURAL, self.peering, {"status": {self.identity: self.record(at)}},
                                                    _request_timeout=self.renew_s)  # a hung request is a failed renewal
        except Exception as e:  # noqa: BLE001 - the API server away, a timeout: the fence decides what that costs
            log.warning("lease renewal failed (%s): %s", type(e).__name__, e)
            return False
        if self.renewed is not None and at - self.renewed >= self.lifetime_s - self.margin_s:
            self.lapses += 1  # renewed after the fence had tripped: another replica may have acted meanwhile
        if self.renewed is None or at > self.renewed:
            self.renewed = at
        return True

    def run(self) -> None:
        """Renew every ``renew_s`` (a second after a failure) until :meth:`stop`."""
        while not self.stopped.is_set():
            ok = self.renew()
            self.stopped.wait(self.renew_s if ok else 1.0)

    def start(self) -> threading.Thread:
        t = threading.Thread(target=self.run, name="kubesoda-lease", daemon=True)
        t.start()
        return t

    def stop(self) -> None:
        self.stopped.set()


def fence(stop: Callable[[], bool], lease: Lease | None) -> Callable[[], bool]:
    """The applier's fence for loops starting now: True (write nothing) once ``stop`` says so (peering
    paused the daemon), the lease no longer holds, or it lapsed since (renewed again, but another
    replica may have acted in between: the loops stop and wait, :func:`..soda.handlers.scheduler_loops`)."""
    if lease is None:
        return stop
    lapses = lease.lapses
    return lambda: stop() or not lease.holds() or lease.lapses != lapses
