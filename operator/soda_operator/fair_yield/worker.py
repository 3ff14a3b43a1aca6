"""Each YieldGroup's decision off Kopf's event loop, on a thread of its own, waited for within the group's
budget (issue 45 item 1, for fair yield): one group's decision that runs over never delays another's.

Kopf runs every group's timer as its own task on one event loop; :func:`decide` starts the decision on a
new daemon thread (not the shared default executor, which a few slow decisions would fill) and waits for it
at most ``budget`` seconds. When the budget passes, the waiting stops (:class:`OverBudget`), nothing of that
decision is applied, and the group's next ticks find it still running (:class:`Busy`) and start none until
it ends; a Python thread cannot be killed, but it holds no lock another group needs, and the optimizer's
stages check their deadlines, so it ends. Every other group decides as before.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
Key = tuple[str, str]


class OverBudget(Exception):
    """The decision did not end within its budget; it goes on, unwaited for, and is discarded."""


class Busy(Exception):
    """A decision of this group started earlier is still running."""


async def decide(running: dict[Key, concurrent.futures.Future[object]], key: Key, fn: Callable[[], T], budget: float) -> T:
    """``fn()`` on a thread of its own; its result within ``budget`` seconds, else :class:`OverBudget`.
    ``running``: the decisions still running, by group (one at a time per group: :class:`Busy`)."""
    old = running.get(key)
    if old is not None and not old.done():
        raise Busy(key)
    fut: concurrent.futures.Future[object] = concurrent.futures.Future()

    def run() -> None:
        try:
            fut.set_result(fn())
        except BaseException as e:  # noqa: BLE001 - handed to the waiting task, which re-raises it
            fut.set_exception(e)

    running[key] = fut
    threading.Thread(target=run, name=f"yield-decide {key[0]}/{key[1]}", daemon=True).start()
    try:
        result = await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(fut)), budget)
    except TimeoutError as e:
        raise OverBudget(key) from e
    running.pop(key, None)
    return result  # type: ignore[return-value]
