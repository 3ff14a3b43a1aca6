"""The operator's pod watch (kube.reflector): its indexes hold exactly what Kopf's would.

Oracle: the index recomputed from scratch from the objects alive at the end (each object's last
body through the indexer, grouped by key) must equal what the reflector built event by event, for
any sequence of ADDED/MODIFIED/DELETED events and relists (hypothesis). The watch itself, against a
real API server, is e2e/test_reflector.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable, Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from soda_operator.kube.reflector import Reflector


def by_node(body: Mapping[str, Any]) -> dict[Hashable, Any]:
    node = body["spec"].get("nodeName")
    return {node: body["metadata"]["name"]} if node else {}


def by_label(body: Mapping[str, Any]) -> dict[Hashable, Any]:
    app = (body["metadata"].get("labels") or {}).get("app")
    return {(body["metadata"]["namespace"], app): body["spec"].get("nodeName")} if app else {}


INDEXERS = {"by_node": by_node, "by_label": by_label}


def pod(i: int, node: str | None, app: str | None) -> dict[str, Any]:
    return {"metadata": {"namespace": f"ns{i % 2}", "name": f"p{i}", "labels": {"app": app} if app else {}}, "spec": {"nodeName": node}}


events = st.lists(st.tuples(st.sampled_from(["ADDED", "MODIFIED", "DELETED", "RELIST"]), st.integers(0, 6),
                            st.sampled_from([None, "n0", "n1", "n2"]), st.sampled_from([None, "a", "b"])), max_size=40)


def expected(alive: dict[tuple[str, str], dict[str, Any]]) -> dict[str, dict[Hashable, list[Any]]]:
    out: dict[str, dict[Hashable, list[Any]]] = {n: {} for n in INDEXERS}
    for body in alive.values():
        for n, fn in INDEXERS.items():
            for k, v in fn(body).items():
                out[n].setdefault(k, []).append(v)
    return {n: {k: sorted(map(str, vs)) for k, vs in ix.items()} for n, ix in out.items()}


def seen(r: Reflector) -> dict[str, dict[Hashable, list[Any]]]:
    return {n: {k: sorted(map(str, ix[k])) for k in ix} for n, ix in r.indexes.items()}


@settings(max_examples=300, deadline=None)
@given(events)
def test_the_indexes_equal_a_recomputation_from_the_live_objects(evs: list[tuple[str, int, str | None, str | None]]) -> None:
    told: list[tuple[str, str]] = []
    r = Reflector(lambda **_: None, INDEXERS, [lambda t, b: told.append((t, b["metadata"]["name"]))])
    alive: dict[tuple[str, str], dict[str, Any]] = {}
    r._apply([], relist=True)
    assert r.synced.is_set()
    for type_, i, node, app in evs:
        body = pod(i, node, app)
        key = (body["metadata"]["namespace"], body["metadata"]["name"])
        if type_ == "RELIST":  # a relist that no longer has pod i (and has every other live one)
            alive.pop(key, None)
            r._apply([("ADDED", k, r._contributions(b), b) for k, b in alive.items()], relist=True)
        elif type_ == "DELETED":
            alive.pop(key, None)
            r._apply([("DELETED", key, None, body)])
        else:
            alive[key] = body
            r._apply([(type_, key, r._contributions(body), body)])
        assert seen(r) == expected(alive)
    assert len(told) >= len([e for e in evs if e[0] != "RELIST"])


def test_a_failing_indexer_costs_that_entry_only() -> None:
    def broken(body: Mapping[str, Any]) -> dict[Hashable, Any]:
        raise KeyError("spec")

    r = Reflector(lambda **_: None, {"ok": by_node, "broken": broken})
    body = pod(1, "n0", None)
    r._apply([("ADDED", ("ns1", "p1"), r._contributions(body), body)], relist=True)
    assert dict(r.indexes["ok"]) and list(r.indexes["ok"]["n0"]) == ["p1"] and not r.indexes["broken"]


def test_events_reach_the_indexes_through_the_event_loop() -> None:
    """The thread posts, the loop applies: after the loop ran, the index has the object."""
    r = Reflector(lambda **_: None, INDEXERS)

    async def main() -> None:
        r._loop = asyncio.get_running_loop()
        body = pod(3, "n2", "a")
        r._post([("ADDED", ("ns1", "p3"), r._contributions(body), body)], relist=True)
        assert not r.synced.is_set()  # not before the loop ran the callback
        await asyncio.sleep(0)
        assert r.synced.is_set() and list(r.indexes["by_node"]["n2"]) == ["p3"]

    asyncio.run(main())



@pytest.mark.parametrize("outage", [0.5, 3.0, 30.0, 75.0, 600.0])
def test_the_watch_resumes_within_seconds_of_an_outage_of_any_length(outage: float) -> None:
    """Issue 46: the API server away for ``outage`` seconds (every list refused), then back: the
    reflector's next try comes at most 4 s after its return, the first one fast."""
    clock = [0.0]
    waits: list[float] = []
    tries: list[float] = []

    class Stop:
        def is_set(self) -> bool:
            return bool(tries) and tries[-1] >= outage

        def wait(self, t: float) -> bool:
            waits.append(t)
            clock[0] += t
            return False

    def refused(**_: Any) -> Any:
        tries.append(clock[0])
        raise ConnectionRefusedError("the API server is away")

    loop = asyncio.new_event_loop()
    r = Reflector(refused, INDEXERS)
    r._loop = loop
    r._stop = Stop()  # type: ignore[assignment]
    try:
        r._run()
    finally:
        loop.close()
    assert waits[0] <= 0.5
    assert min(t for t in tries if t >= outage) - outage <= 4.0 + 1e-9
