"""Placements without SODA, for comparison (SODA paper 7.2 compares with hand-made placements):

- ``rand``: each PE on a random node with room for its goal (any node if none has room);
- ``rr``: round-robin over the nodes in name order;
- ``spread``: kube-scheduler-like "least allocated": each PE, in decreasing goal, on the node with
  the most free mips; no knowledge of streams.

Each returns fractions f(p, n) in the same shape as microW, so the same metrics apply; a PE whose
goal exceeds a node's free capacity is split over further nodes in the same order.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from .model import Scenario


def _place(scenario: Scenario, goals: dict[str, float], order: list[str], pick: Callable[[str, dict[str, float]], list[str]]) -> dict[str, dict[str, float]]:
    H = {n.name: n.mips for n in scenario.usable_nodes()}
    free = dict(H)
    out: dict[str, dict[str, float]] = {}
    for p in order:
        need = goals[p]
        out[p] = {}
        for n in pick(p, free):
            if need <= 1e-9:
                break
            take = min(need, free[n])
            if take <= 1e-9:
                continue
            out[p][n] = take / H[n]
            free[n] -= take
            need -= take
    return out


def rand(scenario: Scenario, goals: dict[str, float], seed: int = 0) -> dict[str, dict[str, float]]:
    rng = random.Random(seed)
    names = sorted(n.name for n in scenario.usable_nodes())

    def pick(p: str, free: dict[str, float]) -> list[str]:
        roomy = [n for n in names if free[n] >= goals[p]]
        first = [rng.choice(roomy)] if roomy else []
        rest = names[:]
        rng.shuffle(rest)
        return first + rest

    return _place(scenario, goals, sorted(goals), pick)


def rr(scenario: Scenario, goals: dict[str, float]) -> dict[str, dict[str, float]]:
    names = sorted(n.name for n in scenario.usable_nodes())
    state = {"i": 0}

    def pick(p: str, free: dict[str, float]) -> list[str]:
        i = state["i"]
        state["i"] = (i + 1) % len(names)
        return names[i:] + names[:i]

    return _place(scenario, goals, sorted(goals), pick)


def spread(scenario: Scenario, goals: dict[str, float]) -> dict[str, dict[str, float]]:
    def pick(p: str, free: dict[str, float]) -> list[str]:
        return sorted(free, key=lambda n: (-free[n], n))

    return _place(scenario, goals, sorted(goals, key=lambda p: (-goals[p], p)), pick)
