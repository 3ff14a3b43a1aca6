"""Polishing a small plan entry by entry (issue 50; ours, the paper has no such stage).

The route builder prices one hop at a time against a ledger and routes subflows one after the other, so on small
problems its plan can miss what changing one decision would gain (a cohort held at entry to an epoch with less
capacity than its first step has now, when only its second step has to wait). This stage is a coordinate descent
over the plan's entries: for each (epoch, flow, cohort, step) entry in turn, each simple alternative -- all to one
pool that has capacity then, spread over those pools in proportion to capacity, all to backlog (not in the last
epoch), all refused -- is simulated over the whole horizon and kept when it lowers eq. (2); passes repeat until one
changes nothing. Only for plans of at most ``max_entries`` entries (each pass costs up to ~4 simulations an entry),
and under the planner's ``stop``: it returns the best policy so far.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from .compiled import Compiled
from .reach import HOLD, REFUSE, proportional
from .sim import Decision, Policy, simulate_policy


def alternatives(cp: Compiled, key: tuple[int, int, int, int]) -> list[Decision]:
    """The simple decisions tried for an entry (module docstring)."""
    e, f, _a, s = key
    live = [c for c in sorted(cp.allowed[f][s]) if cp.caps[e, c] > 0]
    out: list[Decision] = [(((c, 1.0),), 0.0) for c in live]
    if len(live) > 1:
        out.append(proportional(cp, f, s, e))
    if e < cp.n_epochs - 1:
        out.append(HOLD)
    out.append(REFUSE)
    return out


def polish(cp: Compiled, policy: Policy, score: float, fits: Callable[[float], bool], t_sim: float,
           max_passes: int = 3) -> tuple[Policy, float, int]:
    """Coordinate descent from ``policy`` (scored ``score``); ``fits(cost)`` says whether a stage of ``cost``
    seconds still fits the deadline. Returns the best policy, its score and the simulations run."""
    best = dict(policy)
    runs = 0
    for _ in range(max_passes):
        moved = False
        for key in sorted(best):
            cur = best[key]
            for dec in alternatives(cp, key):
                if dec == cur:
                    continue
                if not fits(t_sim):
                    return best, score, runs
                best[key] = dec
                t0 = time.monotonic()
                sc = simulate_policy(cp, best, detail=False).score
                t_sim = max(t_sim, time.monotonic() - t0)
                runs += 1
                if sc < score - 1e-9 * max(1.0, abs(score)) and math.isfinite(sc):
                    score, cur, moved = sc, dec, True
                else:
                    best[key] = cur
        if not moved:
            break
    return best, score, runs


__all__ = ["alternatives", "polish"]
