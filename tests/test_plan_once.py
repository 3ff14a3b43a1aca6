"""Plan once what was applied (issue 39): the macro epoch waits for a stream of changes to settle
(soda_operator.soda.loop, played on a fake clock: no sleeps), and a pod whose create is in flight
(sent, not yet in the pod index) is neither created again nor planned as missing by the next epoch,
until the index shows it or a timeout passes (soda_operator.soda.apply.Inflight, through
Loops.snapshot as the epochs use it). The API server is a stand-in that answers 409 for a pod it
already holds, as the real one does."""

from __future__ import annotations

import threading
from typing import Any

from fake_core import RecordingCore, Response
from kubernetes import client
from kubernetes.client.rest import ApiException

from soda_operator.kube import metrics
from soda_operator.soda import apply, indexes, loop
from soda_operator.soda.epochs import Loops
from soda_operator.soda.state import Snapshot

# ---------------------------------------------------------------------------------- the settle rule


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class Stream:
    """A fake ``stop`` flag on a fake clock whose ``wait`` lets time pass, and with it the arrivals
    scheduled then: each one flags ``due`` (the handlers' macro_due) and adds to the objects known.
    ``on_epoch`` records when a macro epoch ran and how many objects it saw, then stops the loop."""

    def __init__(self, arrivals: list[float], known: int = 0, rewrites: float | None = None):
        self.clock = Clock()
        self.due = threading.Event()
        self.arrivals = sorted(arrivals)
        self.known = known  # objects there before the stream (a controller rewriting them, say)
        self.rewrites = rewrites  # a change every that many seconds, forever (a stream that never quiets)
        self.next_rewrite = 0.0 if rewrites else None
        self.arrived = 0
        self.stopped = False
        self.epochs: list[tuple[float, int]] = []
        self.micro: list[float] = []
        self.node_changes: list[float] = []  # when a handler asks for a micro epoch
        self.micro_due = threading.Event()
        self._advance(0.0)

    def _advance(self, dt: float) -> None:
        self.clock.t += dt
        while self.arrived < len(self.arrivals) and self.arrivals[self.arrived] <= self.clock.t + 1e-9:
            self.arrived += 1
            self.due.set()
        while self.node_changes and self.node_changes[0] <= self.clock.t + 1e-9:
            self.node_changes.pop(0)
            self.micro_due.set()
        while self.next_rewrite is not None and self.next_rewrite <= self.clock.t + 1e-9:
            self.next_rewrite += self.rewrites  # type: ignore[operator]
            self.due.set()

    def objects(self) -> int:
        return self.known + self.arrived

    # the stop flag
    def is_set(self) -> bool:
        return self.stopped

    def wait(self, timeout: float | None = None) -> bool:
        self._advance(timeout or 0.0)
        return self.stopped


class FakeLoops:
    """What loop.epochs reads of :class:`~soda_operator.soda.epochs.Loops`."""

    def __init__(self, s: Stream):
        self.s = s
        self.macro_due = s.due
        self.micro_due = s.micro_due
        self.reader = self
        self.objects = s.objects

    def policy(self) -> None:
        return None  # the defaults: macro 60 s, micro 10 s

    def macro_epoch(self) -> None:
        self.s.epochs.append((self.s.clock.t, self.s.objects()))
        self.s.stopped = True

    def micro_epoch(self) -> None:
        self.s.micro.append(self.s.clock.t)


def first_epoch(s: Stream, monkeypatch: Any) -> tuple[float, int]:
    """Run the loops (loop.epochs, as `kubesoda run` does) on ``s``'s clock until the first macro epoch."""
    monkeypatch.setattr(loop.time, "monotonic", s.clock)
    monkeypatch.setattr(loop.time, "sleep", lambda dt: s._advance(dt))
    assert s.due.is_set(), "the stream starts with an arrival"
    loop.epochs(FakeLoops(s), s)  # type: ignore[arg-type]
    assert s.epochs
    return s.epochs[0]


def test_an_apply_that_arrives_over_a_minute_is_planned_whole(monkeypatch):
    """1,040 jobs and as many templates arriving at 20 objects a second (``kubectl apply`` at 2,000
    nodes managed 24-40): the first macro epoch sees every one of them, 1 s after the last. Before,
    it planned what had come after 10 s (about 200)."""
    n = 2080
    s = Stream([i * 0.05 for i in range(n)])
    t, seen = first_epoch(s, monkeypatch)
    assert seen == n
    assert (n - 1) * 0.05 + 1.0 <= t <= (n - 1) * 0.05 + 1.0 + 0.25


def test_bursts_closer_than_the_debounce_are_one_epoch(monkeypatch):
    """Three bursts of 30 objects 0.8 s apart (less than the 1 s debounce): one epoch, after the last."""
    arrivals = [b * 1.5 + i * 0.02 for b in range(3) for i in range(30)]
    s = Stream(arrivals)
    t, seen = first_epoch(s, monkeypatch)
    assert seen == 90 and max(arrivals) + 1.0 <= t <= max(arrivals) + 1.25


def test_a_quiet_second_plans_what_came(monkeypatch):
    """The debounce itself: a burst, 1.5 s of quiet, another burst: the first epoch plans the first burst."""
    s = Stream([i * 0.02 for i in range(30)] + [2.1 + i * 0.02 for i in range(30)])
    t, seen = first_epoch(s, monkeypatch)
    assert seen == 30 and 1.58 <= t <= 1.85


def test_a_stream_that_never_quiets_waits_at_most_the_cap(monkeypatch):
    """A change every 0.2 s forever: the epoch comes at max(10 s, 0.1 s x objects known)."""
    for known, cap in ((40, 10.0), (500, 50.0)):
        s = Stream([0.0], known=known - 1, rewrites=0.2)
        t, seen = first_epoch(s, monkeypatch)
        assert seen == known
        assert cap <= t <= cap + 0.15, (known, t)
        assert loop.settle_cap(known) == cap


def test_a_node_change_while_changes_settle_gets_its_micro_epoch(monkeypatch):
    """30 s of arrivals: no periodic epoch runs meanwhile (micro every 10 s by default), but the
    micro epoch a node change asks for (at 12 s) does, at once, and the macro epoch still waits."""
    s = Stream([i * 0.05 for i in range(600)])
    s.node_changes = [12.0]
    t, seen = first_epoch(s, monkeypatch)
    assert seen == 600 and 30.9 <= t <= 31.2
    assert len(s.micro) == 1 and 11.99 <= s.micro[0] <= 12.15


# ------------------------------------------------------------------------- creates in flight


class PodCore(RecordingCore):
    """The pod calls of the applier against a store that answers like the API server: a create of a
    name it holds is 409 AlreadyExists. ``lose`` names pods whose create is answered 201 but that
    are gone before any watch shows them (deleted by someone else at once)."""

    def __init__(self) -> None:
        super().__init__()
        self.store: dict[tuple[str, str], dict[str, Any]] = {}
        self.sent: list[str] = []
        self.lose: set[str] = set()

    def create_namespaced_pod(self, namespace: str, body: dict[str, Any], **_: Any) -> Response:
        name = body["metadata"]["name"]
        self.sent.append(name)
        if (namespace, name) in self.store:
            raise ApiException(status=409, reason="AlreadyExists")
        if name not in self.lose:
            self.store[(namespace, name)] = body
        return Response()

    def delete_namespaced_pod(self, name: str, namespace: str, **_: Any) -> Response:
        super().delete_namespaced_pod(name, namespace)
        if self.store.pop((namespace, name), None) is None:
            raise ApiException(status=404, reason="NotFound")
        return Response()

    def patch_namespaced_pod(self, name: str, namespace: str, body: Any, **_: Any) -> Response:
        super().patch_namespaced_pod(name, namespace, body)
        return Response()

    def patch_namespaced_pod_resize(self, name: str, namespace: str, body: Any, **_: Any) -> Response:
        self.patches.append((name, body))
        return Response()

    def create_namespaced_service(self, namespace: str, body: dict[str, Any], **_: Any) -> Response:
        name = body["metadata"]["name"]
        self.sent.append(f"service/{name}")
        if (namespace, f"service/{name}") in self.store:
            raise ApiException(status=409, reason="AlreadyExists")
        self.store[(namespace, f"service/{name}")] = body
        return Response()


class Index:
    """The pod index as the watch fills it: only what ``show`` has delivered so far."""

    def __init__(self, core: PodCore):
        self.core = core
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}

    def show(self, loops: Loops | None = None) -> None:
        """The watch catches up: the index holds what the API server holds (and tells the loops, as
        indexes.kubesoda_pods does)."""
        self.pods = {k: {**v, "status": {"phase": "Running"}} for k, v in self.core.store.items() if not k[1].startswith("service/")}
        if loops is not None:
            for k in self.pods:
                loops.applier.inflight.seen(k)

    def snapshot(self) -> Snapshot:
        return Snapshot(nodes=[], templates=[], jobs=[], policy=None, pods=list(self.pods.values()))

    def count(self) -> int:
        return 0


OWNER = {"metadata": {"name": "clicks", "uid": "u1"}}
MANAGED = {("team", "clicks")}


def instances(*nodes: str) -> list[apply.Instance]:
    return [apply.Instance("team", "clicks", pe, n, 0.25, 4.0, (n,), {}, OWNER, "") for n in nodes for pe in ("parse", "score")]


def setup(timeout_s: float = 60.0) -> tuple[Loops, PodCore, Index, Clock]:
    loops = Loops(client.ApiClient(), workers=4)
    core = PodCore()
    loops.applier.core = core  # type: ignore[assignment]
    clock = Clock()
    loops.applier.inflight = apply.Inflight(timeout_s, clock)
    loops.applier.inflight_services = apply.Inflight(timeout_s, clock)
    index = Index(core)
    loops.reader = index
    return loops, core, index, clock


def epoch(loops: Loops, wanted: list[apply.Instance]) -> dict[str, int]:
    """What a macro or micro epoch does with the pods: a snapshot, then the pods synced to the plan."""
    snap = loops.snapshot()
    return loops.applier.sync_pods(wanted, snap.pods, MANAGED)  # type: ignore[arg-type]


def creates(result: str) -> float:
    return metrics.REGISTRY.get_sample_value("kubesoda_pod_creates_total", {"result": result}) or 0.0


def test_a_create_in_flight_is_not_issued_twice():
    """Epoch 1 creates 4 pods; the watch has not shown them when epoch 2 runs, nor when epoch 3 runs:
    neither sends a create (before: 4 more each, every one answered 409), and both see the pods as
    they were planned (a resize to the same fraction is no write). Once the index shows them
    nothing is in flight any more."""
    loops, core, index, clock = setup()
    wanted = instances("n1", "n2")
    before = creates("created"), creates("exists")
    assert epoch(loops, wanted)["create"] == 4
    clock.t += 5
    assert epoch(loops, wanted) == {"delete": 0, "resize": 0, "create": 0}
    clock.t += 5
    assert epoch(loops, wanted) == {"delete": 0, "resize": 0, "create": 0}
    assert sorted(core.sent) == sorted(i.name for i in wanted) and core.patches == [] and core.deleted == []
    assert (creates("created") - before[0], creates("exists") - before[1]) == (4, 0)
    index.show(loops)
    assert len(loops.applier.inflight) == 0
    assert epoch(loops, wanted) == {"delete": 0, "resize": 0, "create": 0} and len(core.sent) == 4


def test_the_next_epoch_plans_from_the_pods_in_flight():
    """The snapshot an epoch plans from holds the pods in flight as pending pods, with the planned
    node and fraction (what crd reads back as f-hat), and the status the last epoch wrote."""
    loops, core, index, clock = setup()
    wanted = instances("n1")
    epoch(loops, wanted)
    loops.written[("team", "clicks", "u1")] = {"phase": "Admitted", "pes": [{"name": "parse", "candidates": ["n1"]}]}
    index.snapshot = lambda: Snapshot(nodes=[], templates=[], jobs=[{"metadata": {"namespace": "team", "name": "clicks", "uid": "u1"},
                                                                    "status": {"phase": "Pending", "reason": "x"}}], policy=None, pods=[])
    snap = loops.snapshot()
    got = {p["metadata"]["name"]: (p["metadata"]["annotations"]["kubesoda.io/node"], p["metadata"]["annotations"]["kubesoda.io/fraction"],
                                   p["spec"]["containers"][0]["resources"]["limits"]["cpu"], p["status"]["phase"]) for p in snap.pods}
    assert got == {i.name: ("n1", "0.250000", "1000m", "Pending") for i in wanted}
    assert snap.jobs[0]["status"] == {"phase": "Admitted", "reason": "x", "pes": [{"name": "parse", "candidates": ["n1"]}]}


def test_a_create_that_never_shows_up_is_issued_again_after_the_timeout():
    """A pod created (201) but never shown by the watch (gone at once): kept as existing for the
    timeout, then created again by the next epoch."""
    loops, core, index, clock = setup(timeout_s=60.0)
    wanted = instances("n1")
    lost = wanted[0].name
    core.lose.add(lost)
    epoch(loops, wanted)
    index.show(loops)  # the watch shows the other pod, never the lost one
    clock.t += 59
    assert epoch(loops, wanted)["create"] == 0
    clock.t += 2
    core.lose.clear()
    assert epoch(loops, wanted)["create"] == 1
    assert core.sent.count(lost) == 2 and core.sent.count(wanted[1].name) == 1


def test_a_pod_the_index_showed_and_lost_is_created_again_at_once():
    """Seen by the index, then deleted by someone else: the next epoch creates it again, without
    waiting for the timeout (the index speaks for it once it has shown it)."""
    loops, core, index, clock = setup()
    wanted = instances("n1")
    epoch(loops, wanted)
    index.show(loops)
    core.store.pop(("team", wanted[0].name))
    index.show(loops)
    assert epoch(loops, wanted)["create"] == 1 and core.sent.count(wanted[0].name) == 2


def test_a_409_counts_as_created_without_a_retry():
    """A pod that exists but is not in the index (an operator restarted before the watch showed it):
    one create, answered 409, not retried, counted as ``exists``, and the pod is taken as existing
    by the next epoch (no second 409)."""
    loops, core, index, clock = setup()
    wanted = instances("n1")
    core.store[("team", wanted[0].name)] = apply.pod_body(wanted[0])
    before = creates("exists")
    assert epoch(loops, wanted)["create"] == 1  # the other one
    assert core.sent.count(wanted[0].name) == 1 and creates("exists") - before == 1
    assert epoch(loops, wanted)["create"] == 0 and len(core.sent) == 2


def test_a_refused_create_is_not_in_flight():
    """A create the API server refuses (422, say) leaves nothing in flight: the next epoch tries again."""
    loops, core, index, clock = setup()
    wanted = instances("n1")[:1]

    def refuse(namespace: str, body: dict[str, Any], **_: Any) -> Response:
        core.sent.append(body["metadata"]["name"])
        raise ApiException(status=422, reason="Invalid")

    core.create_namespaced_pod = refuse  # type: ignore[method-assign]
    epoch(loops, wanted)
    assert len(loops.applier.inflight) == 0
    epoch(loops, wanted)
    assert len(core.sent) == 2


def test_the_pod_index_function_clears_a_create_in_flight():
    """indexes.kubesoda_pods and its listener, as the operator's pod watch calls them for a watch
    event: the pod is indexed and no longer in flight."""
    loops, core, index, clock = setup()
    wanted = instances("n1")[:1]
    epoch(loops, wanted)
    assert len(loops.applier.inflight) == 1

    class Memo:
        pass

    memo = Memo()
    memo.loops = loops  # type: ignore[attr-defined]
    body = core.store[("team", wanted[0].name)]
    out = indexes.kubesoda_pods(body)
    assert ("team", wanted[0].name) in out and len(loops.applier.inflight) == 1  # indexing alone clears nothing
    indexes.inflight_listener(memo)("ADDED", body)
    assert len(loops.applier.inflight) == 0


def test_a_service_create_in_flight_is_not_issued_twice():
    """The job's headless Service, created by one epoch and not yet in the Service index: the next
    epoch does not create it again (before: once more per epoch until the index showed it, a 409
    each time); after the timeout it does."""
    loops, core, index, clock = setup()
    wanted = [("team", "clicks", OWNER)]
    for _ in range(3):
        snap = loops.snapshot()
        loops.applier.sync_services(wanted, snap.services, MANAGED)  # type: ignore[arg-type]
        clock.t += 5
    assert core.sent == ["service/clicks"]
    clock.t += 60
    snap = loops.snapshot()
    assert loops.applier.sync_services(wanted, snap.services, MANAGED)["service"] == 0  # type: ignore[arg-type]
    assert core.sent == ["service/clicks"] * 2  # issued again: answered 409, the Service is there
