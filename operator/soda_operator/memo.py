"""What the operator's handlers share, typed: one object instead of a bag of keys.

Kopf hands every handler a ``memo`` (``kopf.run(memo=...)``) and shallow-copies it per watched
object, so the fields below are shared by every object of every kind: each system's state is keyed
by (namespace, name) of its own objects. Each allocation system owns one field, set here and read
only by its own package:

- every system: the operator's own watches (:mod:`.kube.reflector`): ``pods``, whose indexes every
  system reads instead of Kopf's, and SODA's ``jobs`` and ``templates`` (Kopf's per-event cost on them
  was most of the operator's CPU at scale);
- SODA: the loops, the grace before the first epoch (peering), where snapshots come from, Kopf's
  event loop (set at startup), the last seen state of each node and the specs last seen of
  templates and the policy (to tell a change from a resync);
- :class:`FairYieldState`, :class:`DispatchState`, :class:`FlowsState`: the related systems' clocks,
  caches and counters (:mod:`.fair_yield`, :mod:`.dispatch`, :mod:`.flows`).
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .flows.decide import Planned
    from .flows.members import Members
    from .flows.status import Counters
    from .kube.lease import Lease
    from .kube.periodic import Ticker
    from .kube.reflector import Reflector
    from .soda.epochs import Loops

Key = tuple[str, str]  # (namespace, name) of an object


@dataclass
class FairYieldState:
    last: dict[Key, float] = field(default_factory=dict)  # monotonic time of each YieldGroup's last epoch
    running: dict[Key, Any] = field(default_factory=dict)  # each YieldGroup's decision still running (fair_yield.worker)


@dataclass
class DispatchState:
    last: dict[Key, float] = field(default_factory=dict)  # monotonic time of each BatchDispatch's last decision
    measured: dict[Key, set[str]] = field(default_factory=dict)  # task pods whose durations were taken into the speeds
    warned: set[Key] = field(default_factory=set)  # Jobs warned once that they will miss their deadline
    changed: dict[str, float] = field(default_factory=dict)  # namespace ("" = every one) -> monotonic time of its last event
    nodes: dict[str, Any] = field(default_factory=dict)  # node -> what a decision reads of it, to tell a change
    inflight: dict[Key, dict[str, tuple[str, float]]] = field(default_factory=dict)  # pods released, not yet seen so: pod -> (node, when)


@dataclass
class FlowsState:
    members: Members | None = None  # clients of the member clusters (runner sets it from the flags)
    # (epoch length, group: flows connected through their pools) -> the epoch's plan and its fingerprint; one lock per
    # group, so no flow waits on the plan of flows it shares no pool with (issue 45)
    plans: dict[tuple[float, str], Planned] = field(default_factory=dict)
    plan_locks: dict[tuple[float, str], asyncio.Lock] = field(default_factory=dict)
    counters: dict[str, Counters] = field(default_factory=dict)  # JobFlow key -> epochs, totals, generated, dropped
    recent: dict[str, dict[tuple[Any, ...], float]] = field(default_factory=dict)  # JobFlow key -> what a tick did, until when not to redo it


@dataclass
class Memo:
    loops: Loops
    startup_grace_s: float = 0.0
    snapshots: str = "index"  # or "list"
    event_loop: asyncio.AbstractEventLoop | None = None
    nodes: dict[str, Any] = field(default_factory=dict)
    template_specs: dict[Key, Any] = field(default_factory=dict)
    policy_specs: dict[str, Any] = field(default_factory=dict)
    fair_yield: FairYieldState = field(default_factory=FairYieldState)
    dispatch: DispatchState = field(default_factory=DispatchState)
    flows: FlowsState = field(default_factory=FlowsState)
    # the operator's own watches (kube.reflector.Reflector; runner sets them), not Kopf's: the pod indexes
    # of every system, SODA's StreamJobs and StreamTemplates
    pods: Reflector | None = None
    jobs: Reflector | None = None
    templates: Reflector | None = None
    # this replica's lease on its peering record (kube.lease.Lease; peering only): the loops' fence
    lease: Lease | None = None
    # the related systems' periodic handlers, without Kopf's timers and their finalizers (kube.periodic; issue 48)
    ticker: Ticker | None = None
    # Kopf's own indexes by name, and set once Kopf has filled them (its first event handler call comes after)
    kopf_indices: dict[str, Any] = field(default_factory=dict)
    kopf_indexed: threading.Event = field(default_factory=threading.Event)

    def watches(self) -> list[Reflector]:
        return [w for w in (self.pods, self.jobs, self.templates) if w is not None]
