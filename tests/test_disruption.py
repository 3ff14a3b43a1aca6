"""Disruption is not intent (issue 46): a NotReady node keeps its PE pods for their grace (the
pods' not-ready/unreachable tolerations, 300 s by default), takes no new instance meanwhile, and a
disrupted zone (kube-controller-manager's ComputeZoneState) keeps them however long it lasts.
Played through the real translation and the real planner (pipeline.run, then pipeline.rerun as a
micro epoch does) on the pods the first plan would create."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import yaml
from hypothesis import given
from hypothesis import strategies as st

from soda_operator.soda import desired, disruption
from soda_operator.soda.apply import pod_body
from soda_operator.soda.state import Snapshot
from soda_optimizer import pipeline

ROOT = Path(__file__).resolve().parent.parent
NOW = datetime.now(UTC)


def _node(name: str, zone: str = "a", ready: str = "True", since_s: float = 0.0) -> dict:
    at = (NOW - timedelta(seconds=since_s)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"topology.kubernetes.io/zone": zone, "kubesoda.io/rack": f"{zone}-r"}},
            "status": {"allocatable": {"cpu": "4", "memory": "16Gi"},
                       "conditions": [{"type": "Ready", "status": ready, "lastTransitionTime": at}]}}


def _objects() -> tuple[list[dict], list[dict]]:
    docs = [d for d in yaml.safe_load_all((ROOT / "examples" / "small-pipeline" / "pipeline.yaml").read_text()) if d]
    for d in docs:
        d["metadata"]["namespace"] = "ns"
        d["metadata"]["uid"] = f"uid-{d['metadata']['name']}"
    return [d for d in docs if d["kind"] == "StreamTemplate"], [d for d in docs if d["kind"] == "StreamJob"]


def _running(snap: Snapshot, scen, plan) -> list[dict]:
    """The PE pods the plan's apply creates, bound and Running where planned."""
    pods = []
    for inst in desired.instances(plan, snap, scen):
        p = pod_body(inst)
        p["spec"]["nodeName"] = inst.node
        p["status"] = {"phase": "Running"}
        pods.append(p)
    return pods


def _replan(zones: dict[str, str], flipped: dict[str, tuple[str, float]], tolerations: list | None = None):
    """First plan on Ready nodes (name -> zone), then its pods Running; nodes in ``flipped`` go
    (status, seconds ago) and a micro epoch replans. Returns (fractions before, after, the
    disruption judged)."""
    templates, jobs = _objects()
    snap = Snapshot([_node(n, z) for n, z in zones.items()], templates, jobs, None, [])
    scen, errors = snap.scenario()
    assert not errors
    plan = pipeline.run(scen)
    pods = _running(snap, scen, plan)
    for p in pods:
        if tolerations is not None:
            p["spec"]["tolerations"] = tolerations
    nodes = [_node(n, z, *flipped.get(n, ("True", 0.0))) for n, z in zones.items()]
    snap2 = Snapshot(nodes, templates, jobs, None, pods)
    scen2, _ = snap2.scenario()
    after = pipeline.rerun(scen2, plan)
    frac = lambda pl: {(pe.name, n): f for pe in pl.pes for n, f in pe.fractions.items() if f > 0}  # noqa: E731
    return frac(plan), frac(after), snap2.disruption()


ZONES = {"n1": "a", "n2": "a", "n3": "b", "n4": "b"}


def _busiest(before: dict) -> str:
    on: dict[str, int] = {}
    for _, n in before:
        on[n] = on.get(n, 0) + 1
    return max(sorted(on), key=lambda n: on[n])


def test_a_node_notready_within_grace_keeps_its_instances_and_takes_no_new_one():
    before, _, _ = _replan(ZONES, {})
    node = _busiest(before)
    before, after, dis = _replan(ZONES, {node: ("Unknown", 30.0)})
    assert node in dis.held and not dis.paused
    kept = {k: f for k, f in before.items() if k[1] == node}
    assert kept and all(after.get(k, 0.0) > 0 for k in kept), f"instances on {node} dropped: before {kept}, after {after}"
    assert {k for k in after if k[1] == node} <= set(kept), "a new instance was placed on a NotReady node"


def test_the_grace_runs_out():
    before, _, _ = _replan(ZONES, {})
    node = _busiest(before)
    _, after, dis = _replan(ZONES, {node: ("False", 301.0)})
    assert node not in dis.held
    assert not any(n == node for _, n in after)


def test_the_pods_own_toleration_sets_the_grace():
    before, _, _ = _replan(ZONES, {})
    node = _busiest(before)
    short = [{"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 20}]
    _, after, dis = _replan(ZONES, {node: ("Unknown", 30.0)}, short)
    assert node not in dis.held and not any(n == node for _, n in after)
    forever = [{"operator": "Exists"}]
    _, after, dis = _replan(ZONES, {node: ("Unknown", 3000.0)}, forever)
    assert node in dis.held and any(n == node for _, n in after)


def test_a_fully_disrupted_zone_keeps_its_pods_past_the_grace():
    before, _, _ = _replan(ZONES, {})
    zone = ZONES[_busiest(before)]
    gone = {n: ("Unknown", 600.0) for n, z in ZONES.items() if z == zone}
    before, after, dis = _replan(ZONES, gone)
    assert dis.zones[zone][0] == "FullDisruption" and dis.paused and "FullDisruption" in dis.message()
    assert set(dis.held) == {n for n in gone if any(k[1] == n for k in before)}
    for k in before:
        if k[1] in gone:
            assert after.get(k, 0.0) > 0, f"{k} dropped in a disrupted zone"


def test_keep_leaves_out_unwanted_pods_on_held_nodes_only():
    pods = [{"metadata": {"namespace": "ns", "name": f"p{i}"}, "spec": {"nodeName": n}} for i, n in enumerate(("n1", "n2", "n1"))]
    kept = disruption.keep(pods, {"n1": 1.0}, {("ns", "p0")})
    assert [p["metadata"]["name"] for p in kept] == ["p0", "p1"]
    assert disruption.keep(pods, {}, set()) is pods


@given(st.integers(0, 60), st.integers(0, 60))
def test_zone_state_is_the_node_lifecycle_controllers(ready, not_ready):
    state = disruption.zone_state(ready, not_ready)
    if not_ready and not ready:
        assert state == "FullDisruption"
    elif not_ready > 2 and not_ready >= 0.55 * (ready + not_ready):
        assert state == "PartialDisruption"
    else:
        assert state == "Normal"


def test_macro_epochs_wait_while_a_zone_is_disrupted(monkeypatch):
    """While deletions are paused only micro epochs run (a macro epoch would plan admission and
    candidates on nodes that only look gone); the first macro epoch comes once the disruption ends."""
    from soda_operator.soda import loop

    clock = [0.0]

    class Loops:
        reader = None
        macro_due = threading.Event()
        micro_due = threading.Event()
        deletions_paused = True
        macros: list[float] = []
        micros: list[float] = []

        def objects(self) -> int:
            return 0

        def macro_epoch(self) -> None:
            self.macros.append(clock[0])

        def micro_epoch(self) -> None:
            self.micros.append(clock[0])
            if clock[0] >= 100:
                self.deletions_paused = False

    class Stop:
        def is_set(self) -> bool:
            return bool(Loops.macros)

        def wait(self, t: float) -> bool:
            clock[0] += t
            return False

    monkeypatch.setattr(loop.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(loop.time, "sleep", lambda dt: clock.__setitem__(0, clock[0] + dt))
    monkeypatch.setattr(loop.state, "get_policy", lambda custom: None)  # the defaults: macro 60 s, micro 10 s
    loops = Loops()
    loops.custom = None  # type: ignore[attr-defined]
    loop.epochs(loops, Stop())  # type: ignore[arg-type]
    assert loops.macros and loops.macros[0] >= 100, (loops.macros, loops.micros[:5])
    assert len([t for t in loops.micros if t < 100]) >= 9  # every 10 s meanwhile
