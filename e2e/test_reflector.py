"""The operator's pod watch (kube.reflector) against the real API server: it lists, then follows
creates, changes and deletes, into indexes shaped like Kopf's, applied on an event loop; and it
resumes after the API server ends its watch (a short server timeout here)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Hashable, Mapping
from typing import Any

import pytest

from soda_operator.kube.reflector import Reflector

pytestmark = pytest.mark.e2e


def by_app(body: Mapping[str, Any]) -> dict[Hashable, Any]:
    md = body["metadata"]
    app = (md.get("labels") or {}).get("app")
    return {(md["namespace"], app): md["name"]} if app else {}


def pod(name: str, app: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"app": app}},
            "spec": {"schedulerName": "nobody", "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}


@pytest.fixture
def loop() -> Any:
    lp = asyncio.new_event_loop()
    t = threading.Thread(target=lp.run_forever, daemon=True)
    t.start()
    yield lp
    lp.call_soon_threadsafe(lp.stop)
    t.join(5)


def view(r: Reflector, lp: asyncio.AbstractEventLoop, ns: str) -> dict[str, list[str]]:
    """The index as the loop sees it (read on the loop, as every reader does)."""
    async def read() -> dict[str, list[str]]:
        ix = r.indexes["by_app"]
        return {k[1]: sorted(ix[k]) for k in ix if k[0] == ns}

    return asyncio.run_coroutine_threadsafe(read(), lp).result(10)


def test_the_pod_watch_lists_follows_and_resumes(kube, namespace, wait_for, loop) -> None:
    core = kube.core
    core.create_namespaced_pod(namespace, pod("before", "a"))  # there before the list
    told: list[tuple[str, str]] = []
    r = Reflector(core.list_pod_for_all_namespaces, {"by_app": by_app},
                  [lambda t, b: told.append((t, b["metadata"]["name"]))], server_timeout_s=3)
    r.start(loop)
    try:
        wait_for(r.synced.is_set, timeout=30, what="the first list")
        assert view(r, loop, namespace) == {"a": ["before"]}
        for i in range(5):
            core.create_namespaced_pod(namespace, pod(f"p{i}", "a" if i % 2 else "b"))
        wait_for(lambda: view(r, loop, namespace) == {"a": ["before", "p1", "p3"], "b": ["p0", "p2", "p4"]}, timeout=30,
                 what="the creates indexed")
        # past several server timeouts (3 s): the watch resumed from its resourceVersion, nothing lost or doubled
        threading.Event().wait(8)
        core.patch_namespaced_pod("p0", namespace, {"metadata": {"labels": {"app": "a"}}})
        core.delete_namespaced_pod("before", namespace, grace_period_seconds=0)
        wait_for(lambda: view(r, loop, namespace) == {"a": ["p0", "p1", "p3"], "b": ["p2", "p4"]}, timeout=30,
                 what="the change and the delete indexed")
        mine = [t for t, n in told if n in {"before", "p0", "p1", "p2", "p3", "p4"}]
        assert mine.count("DELETED") >= 1 and mine.count("ADDED") == 6  # the listed one and the five created
    finally:
        r.stop()
