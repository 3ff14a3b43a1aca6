"""One epoch of a running allocation (sections 3 and 6.1 as the operator's YieldGroups run them, every epoch with
the chosen algorithm): :func:`replace`, which :class:`soda_optimizer.systems.FairYield` calls when its spec gives
a ``previous`` placement.

- nothing running yet (every previous host -1): the algorithm's own allocation from scratch (sections 3.2-3.4;
  ``anytime``: a complete MCB8, then the MILP warm-started from it within the deadline), ``dynamic``: the
  re-placement heuristic;
- pods running: ``anytime`` solves section 6.1's MILP within the migration budget, warm-started from the
  re-placement heuristic (:func:`.anytime.solve_anytime`); ``dynamic`` is that heuristic alone; a named
  algorithm's own allocation is taken when its moves fit the budget, move no ``fixed`` task and beat the
  heuristic's re-placement, else the re-placement (said in the answer's ``algorithm``: ``dynamic (mcb8: moves
  beyond the migration budget)``).

Departure (ours): the paper runs its algorithms apart; the named-algorithm fallback and the pinned ``fixed`` tasks
(pods without a controller) are the Kubernetes side's.
"""

from __future__ import annotations

import time

import numpy as np

from .anytime import solve_anytime
from .dynamic import migration_cost, reallocate
from .model import Allocation, Instance

DYNAMIC = "dynamic"  #: the re-placement heuristic within the migration budget (section 6.1)
DEFAULT = "anytime"


def replace(inst: Instance, algorithm: str, previous: np.ndarray | list[int], budget: float,
            fixed: np.ndarray | list[bool], deadline_s: float | None) -> Allocation:
    """The epoch's allocation by ``algorithm`` from ``previous`` (one host per task, -1: new) within ``budget``;
    its ``algorithm`` field says what ran."""
    from . import allocate  # the package's registry of named algorithms

    prev, pin = np.asarray(previous, dtype=np.int64), np.asarray(fixed, dtype=bool)
    if (prev < 0).all():
        if algorithm == DYNAMIC:
            return reallocate(inst, prev, budget, deadline_s=deadline_s)
        return allocate(inst, algorithm, deadline_s=deadline_s)
    if algorithm == DEFAULT:
        return solve_anytime(inst, deadline_s=deadline_s, previous=prev, budget=budget, fixed=pin)
    start = time.monotonic()
    half = deadline_s if algorithm == DYNAMIC or deadline_s is None else deadline_s / 2
    within = reallocate(inst, prev, budget, deadline_s=half, fixed=pin)
    if algorithm == DYNAMIC:
        return within
    left = None if deadline_s is None else max(0.01, deadline_s - (time.monotonic() - start))
    own = allocate(inst, algorithm, deadline_s=left)
    if own.ok:
        p = np.array(own.placement, dtype=np.int64)
        moved = (prev >= 0) & (p != prev)
        fits = not (moved & pin).any() and migration_cost(inst.tasks(), prev, p) <= budget + 1e-9
        if fits and (not within.ok or own.min_yield >= within.min_yield - 1e-12):
            return own
    why = "moves beyond the migration budget" if own.ok else "no placement"
    return within.model_copy(update={"algorithm": f"{DYNAMIC} ({algorithm}: {why})"})
