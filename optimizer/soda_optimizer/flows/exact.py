"""An exact stage for plans small enough to enumerate (issue 50; ours, beside the paper's Level 3, section 3.3).

Section 3.3 of Montana & Zinky names where its answer can be suboptimal: the best policy of an epoch may be built by
no ordering of the rapid route builder, the GA is a heuristic, and the epochs are optimised one at a time rather than
in one optimisation. On small problems all three show: one flow with two steps on a pool that is empty in epoch 0 and
has 4 in epoch 1 (arrivals 6/min in both epochs, lifespan 60) is best served by three coordinated decisions -- hold
cohort 0 at entry, run both its steps in epoch 1, refuse cohort 1 -- which neither the route builder's epoch-by-epoch
plans nor the entry-by-entry polish (:mod:`.polish`, one decision at a time) reach (540.59 where 539.9955 is
possible).

This stage searches all the epochs' decisions together: over a grid of simple decisions per (epoch, flow, cohort,
step) entry -- all to one pool that has capacity then, evenly over those pools, in proportion to their capacity, all
to backlog (not in the last epoch), all refused (duplicates dropped) -- every combination is simulated over the whole
horizon (eq. (2), :mod:`.sim`) and the best kept. Only when the combinations are at most ``limit`` (the planner's
``exact_combinations``), and under the planner's ``stop``: each simulation starts only if one fits, and it returns the
best combination so far (``complete`` False). Entries of a cohort no schedule completes (:func:`.reach.doomed_cohorts`)
keep their refusal (the planner's rule for such cohorts); every other entry is searched.

Departures: the paper has no such stage; the optimum is over the grid, not over every split (a fractional split
between the grid's points is reached only by the other candidates, of which the planner keeps the best); and a
plan is enumerated, not modelled (the fluid simulator's stacked load maps and queues carried over epochs are what
eq. (2) scores: a CP-SAT or MILP model of them would be a second simulator to keep in step with the first).
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from .compiled import Compiled
from .polish import alternatives
from .reach import doomed_cohorts
from .sim import Decision, Policy, PolicyKey, simulate_policy


def grid(cp: Compiled, key: PolicyKey) -> list[Decision]:
    """The decisions tried for an entry (module docstring): :func:`.polish.alternatives` and the even split over the
    pools with capacity then, without duplicates."""
    e, f, _a, s = key
    out = alternatives(cp, key)
    live = [c for c in sorted(cp.allowed[f][s]) if cp.caps[e, c] > 0]
    if len(live) > 1:
        out.append((tuple((c, 1.0 / len(live)) for c in live), 0.0))
    return list(dict.fromkeys(out))


def combinations(
    cp: Compiled, policy: Policy, limit: int | None = None
) -> tuple[list[PolicyKey], list[list[Decision]], int]:
    """The entries searched, their grids, and the number of combinations (the product of the grids' sizes); with
    ``limit``, counting stops once past it (the entries and grids are then partial)."""
    doomed = doomed_cohorts(cp)
    keys: list[PolicyKey] = []
    grids: list[list[Decision]] = []
    n = 1
    for k in sorted(policy):
        if (k[1], k[2]) in doomed:
            continue
        keys.append(k)
        grids.append(grid(cp, k))
        n *= len(grids[-1])
        if limit is not None and n > limit:
            break
    return keys, grids, n


@dataclass
class Exact:
    """The best combination found (None: none scored below the incumbent), its score, the simulations run, and
    whether every combination was simulated."""

    policy: Policy | None
    score: float
    runs: int
    complete: bool


def exhaust(cp: Compiled, policy: Policy, score: float, fits: Callable[[float], bool], t_sim: float,
            limit: int) -> Exact | None:
    """Every grid combination over the entries of ``policy`` (a complete plan, scored ``score``), when there are at
    most ``limit`` of them (None otherwise). ``fits(cost)`` says whether a stage of ``cost`` seconds still fits the
    deadline; the search stops when a simulation no longer does and returns the best so far."""
    keys, grids, n = combinations(cp, policy, limit)
    if n > limit or n <= 1:
        return None
    best: Policy | None = None
    cand = dict(policy)
    runs = 0
    for combo in itertools.product(*grids):
        if not fits(t_sim):
            return Exact(best, score, runs, False)
        cand.update(zip(keys, combo))
        t0 = time.monotonic()
        sc = simulate_policy(cp, cand, detail=False).score
        t_sim = max(t_sim, time.monotonic() - t0)
        runs += 1
        if math.isfinite(sc) and sc < score - 1e-9 * max(1.0, abs(score)):
            best, score = dict(cand), sc
    return Exact(best, score, runs, True)


__all__ = ["Exact", "combinations", "exhaust", "grid"]
