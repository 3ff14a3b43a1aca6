"""Randomized rounding of the rational relaxation: RRND and RRNZ (section 3.2).

The relaxation of the section 2.5 MILP is solved with GLOP (not the closed form of 3.1, whose e = 1/H everywhere
carries no information -- as the paper says). Then each task, in order, goes to a host drawn with probability
e[t, j]; a host where the task's memory does not fit gets probability 0 and the draw is repeated among the rest;
RRND fails when no host is left. RRNZ first replaces every e[t, j] = 0 with epsilon = 0.01 (the paper's value),
so it only fails when the task fits nowhere. The placement's best minimum yield and the average phase follow.

Departures: the draws come from a seeded numpy generator (reproducible); the draw among the remaining hosts is
done at once on the masked distribution (the same law as the paper's repeated attempts); the LP gets the
deadline as its time limit and the rounding checks it per task.
"""

from __future__ import annotations

import time

import numpy as np

from .average import finish
from .milp import relaxation
from .model import EPS, Allocation, Instance, Tasks

EPSILON = 0.01  #: RRNZ's replacement for zero probabilities (section 3.2)


def solve_rounding(
    inst: Instance | Tasks, nonzero: bool = False, deadline_s: float | None = 10.0, seed: int = 0
) -> Allocation:
    """RRND (``nonzero=False``) or RRNZ (``nonzero=True``)."""
    t0 = time.monotonic()
    tasks = inst.tasks() if isinstance(inst, Instance) else inst
    name = "rrnz" if nonzero else "rrnd"
    deadline = t0 + deadline_s if deadline_s is not None else None
    _, e = relaxation(tasks, time_limit_s=deadline_s)
    if e is None:
        timed_out = deadline is not None and time.monotonic() >= deadline
        return finish(tasks, None, name, "deadline" if timed_out else "infeasible", t0)
    if nonzero:
        e = np.where(e <= 0.0, EPSILON, e)
    rng = np.random.default_rng(seed)
    free = tasks.mem_cap.astype(float).copy()
    placement = np.full(tasks.n, -1, dtype=np.int64)
    may = tasks.may()
    for t in range(tasks.n):
        if deadline is not None and time.monotonic() >= deadline:
            return finish(tasks, None, name, "deadline", t0)
        p = np.where((free + EPS >= tasks.mem[t]) & may[t], e[t], 0.0)  # RRNZ's epsilon never opens a forbidden host
        total = p.sum()
        if total <= 0.0:
            return finish(tasks, None, name, "infeasible", t0)
        j = int(rng.choice(tasks.hosts, p=p / total))
        placement[t] = j
        free[j] -= tasks.mem[t]
    return finish(tasks, placement, name, "feasible", t0)
