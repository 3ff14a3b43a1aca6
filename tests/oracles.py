"""Exact oracles for small instances (brute force), used only by the tests."""

from __future__ import annotations

import itertools
import math

import numpy as np

from soda_optimizer.graph import glue
from soda_optimizer.importance import Evaluator
from soda_optimizer.macroq import revised_ranks
from soda_optimizer.model import Scenario


def rank_legal(admitted: set[str], rev: dict[str, int]) -> bool:
    out = [rev[j] for j in rev if j not in admitted]
    return all(rev[j] <= min(out, default=math.inf) for j in admitted)


def macroq_bruteforce(s: Scenario, unit: float) -> tuple[float, dict[str, str] | None]:
    """Best importance over every rank-legal, dependency-closed job/template list containing the
    required jobs, and every discrete allocation (ceil(min/unit) .. floor(max/unit) units per PE,
    total <= floor(H/unit))."""
    rev = revised_ranks(s)
    U = int(math.floor(s.capacity_mips / unit + 1e-9))
    names = [j.name for j in s.jobs]
    jobs = {j.name: j for j in s.jobs}
    best, best_choice = -1.0, None
    for k in range(len(names) + 1):
        for sub in itertools.combinations(names, k):
            js = set(sub)
            if not rank_legal(js, rev) or not {j for j in names if jobs[j].required} <= js:
                continue
            if any(imp.job not in js for j in js for imp in jobs[j].imports):
                continue
            for combo in itertools.product(*[jobs[j].candidate_templates for j in sub]):
                choice = dict(zip(sub, combo))
                if not choice:
                    if best < 0:
                        best, best_choice = 0.0, {}
                    continue
                ev = Evaluator(glue(s, choice))
                specs = [ev.graph.nodes[p]["spec"] for p in ev.pes]
                lo = [math.ceil(p.min_mips / unit - 1e-9) for p in specs]
                hi = [min(U, math.floor(p.max_mips / unit + 1e-9)) if math.isfinite(p.max_mips) else U for p in specs]
                grid = list(_bounded(lo, hi, U))
                if not grid:
                    continue
                v = float(ev.importance(np.array(grid, dtype=float) * unit).max())
                if v > best + 1e-9:
                    best, best_choice = v, choice
    return best, best_choice


def _bounded(lo: list[int], hi: list[int], budget: int, prefix: tuple[int, ...] = ()):
    """Every integer vector lo <= x <= hi with sum(x) <= budget."""
    i = len(prefix)
    if i == len(lo):
        yield prefix
        return
    rest_min = sum(lo[i + 1 :])
    for v in range(lo[i], min(hi[i], budget - rest_min) + 1):
        yield from _bounded(lo, hi, budget - v, prefix + (v,))
