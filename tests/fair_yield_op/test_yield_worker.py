"""Issue 45 item 1 for the fair-yield groups: every decision goes through ``soda_optimizer.systems.decide
('fair_yield', ...)``, off Kopf's event loop, on a thread of the group's own, waited for within the group's
budget; one group's decision over its budget is not applied, says so (state ``overBudget``, a Warning Event),
starts no second decision while it runs, and never delays another group's."""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace
from unittest.mock import MagicMock

import pytest
from test_yield_handlers import epoch, gated, group, posted

from soda_operator.fair_yield import decide as decide_mod
from soda_operator.fair_yield import worker
from soda_operator.memo import Memo
from soda_optimizer import systems


def test_one_groups_decision_over_budget_never_delays_anothers():
    """Group A's decision blocks (until released); group B's, started after it, answers while A's still runs,
    and A's wait ends at its budget with OverBudget. Deterministic: A never ends before the test releases it."""
    release = threading.Event()
    running: dict = {}
    order: list[str] = []

    def stuck() -> str:
        release.wait(30)
        return "a"

    async def main() -> None:
        a = asyncio.create_task(worker.decide(running, ("ns", "a"), stuck, budget=0.2))
        await asyncio.sleep(0)
        b = await worker.decide(running, ("ns", "b"), lambda: "b", budget=30)
        order.append(b)
        assert not a.done()  # B answered while A's decision still runs
        with pytest.raises(worker.OverBudget):
            await a
        order.append("a over")
        with pytest.raises(worker.Busy):  # A's next tick: still running, no second decision
            await worker.decide(running, ("ns", "a"), lambda: "again", budget=30)
        release.set()
        await asyncio.wrap_future(running[("ns", "a")])
        assert await worker.decide(running, ("ns", "a"), lambda: "a2", budget=30) == "a2"  # once it ended: decides again

    asyncio.run(main())
    assert order == ["b", "a over"]


def test_a_decision_runs_off_the_event_loop():
    loop_threads: list[bool] = []

    async def main() -> None:
        me = threading.get_ident()
        await worker.decide({}, ("ns", "g"), lambda: loop_threads.append(threading.get_ident() != me), budget=30)

    asyncio.run(main())
    assert loop_threads == [True]


def test_the_epoch_decides_through_the_one_entry(monkeypatch):
    seen: list[tuple] = []
    real = systems.decide

    def spy(system, spec, inputs, deadline_s=None):
        seen.append((system, spec.algorithm, deadline_s, threading.current_thread().name))
        return real(system, spec, inputs, deadline_s)

    monkeypatch.setattr(decide_mod.systems, "decide", spy)
    status = epoch(group(deadlineSeconds=0.5), MagicMock())
    assert status["state"] == "optimal" and status["deadlineSeconds"] == 0.5 and 0 <= status["decisionSeconds"]
    (call,) = seen
    assert call[:3] == ("fair_yield", "anytime", 0.5) and call[3].startswith("yield-decide ns/g")


def test_a_group_still_deciding_is_over_budget_and_writes_nothing():
    import concurrent.futures

    core = MagicMock()
    memo = Memo(loops=SimpleNamespace(core=core))  # type: ignore[arg-type]
    memo.fair_yield.running[("ns", "g")] = concurrent.futures.Future()  # a decision still running
    status = epoch(group(), core, memo=memo, pods=[gated("a")])
    assert status["state"] == "overBudget" and "spec.deadlineSeconds (1 s)" in status["message"]
    (cond,) = status["conditions"]
    assert (cond["status"], cond["reason"]) == ("False", "OverBudget")
    assert not core.patch_namespaced_pod.called and not core.patch_namespaced_pod_resize.called
    (ev,) = posted(core)
    assert ev["reason"] == "OverBudget" and ev["type"] == "Warning"
    memo.fair_yield.last.clear()  # the next epoch, due: still running, still over, no second Event
    again = epoch(group(), core, memo=memo, status=status, pods=[gated("a")])
    assert again["state"] == "overBudget" and len(posted(core)) == 1
