"""Exact oracles for small instances (brute force), used only by the tests."""

from __future__ import annotations

import itertools
import math

import numpy as np

from soda_optimizer.graph import glue
from soda_optimizer.importance import Evaluator
from soda_optimizer.model import Scenario, floor_units
from soda_optimizer.soda.macroq import revised_ranks


def rank_legal(admitted: set[str], rev: dict[str, int]) -> bool:
    out = [rev[j] for j in rev if j not in admitted]
    return all(rev[j] <= min(out, default=math.inf) for j in admitted)


def promised_bruteforce(s: Scenario, unit: float) -> tuple[set[str], set[str]]:
    """The admission rule for required jobs, by brute force: of every set of required jobs whose
    minima (with the jobs they import from, transitively) fit, the one that is best in the rule's
    order (lexicographically: the first required job in, then the second, ...). Returns
    (promised jobs including their exporters, refused required jobs)."""
    U = int(math.floor(s.capacity_mips / unit + 1e-9))
    req = sorted((j for j in s.jobs if j.required), key=lambda j: (not j.incumbent, j.rank, j.created == "", j.created, j.name))

    best: tuple[bool, ...] = ()
    best_set: set[str] = set()
    for bits in itertools.product([True, False], repeat=len(req)):
        chosen = {j.name for j, b in zip(req, bits) if b}
        if need_units(s, closure_of(s, chosen), unit) <= U and bits > best:
            best, best_set = bits, chosen
    return closure_of(s, best_set), {j.name for j in req} - best_set


def closure_of(s: Scenario, names: set[str]) -> set[str]:
    """``names`` and every job they import from, transitively."""
    jobs = {j.name: j for j in s.jobs}
    out = set(names)
    while True:
        more = {imp.job for n in out for imp in jobs[n].imports} - out
        if not more:
            return out
        out |= more


def need_units(s: Scenario, names: set[str], unit: float) -> int:
    """Sum of the jobs' minima in units, each in its cheapest candidate template."""
    jobs = {j.name: j for j in s.jobs}
    return sum(min(sum(floor_units(p, unit, s.policy.pe_floor_mips) for p in s.template(t).pes) for t in jobs[n].candidate_templates)
               for n in names)


def admission_sets(s: Scenario, unit: float) -> tuple[set[str], set[str], dict[str, int]]:
    """(promised, refused, revised ranks of the jobs among which rank legality holds): the jobs
    that are neither promised, refused, nor hopeless (fit in no list beside the promised jobs)."""
    promised, refused = promised_bruteforce(s, unit)
    rev = revised_ranks(s, refused)
    U = int(math.floor(s.capacity_mips / unit + 1e-9))
    held = need_units(s, promised, unit)
    hopeless = {j.name for j in s.jobs if j.name not in promised and j.name not in refused
                and not (closure_of(s, {j.name}) & refused)
                and held + need_units(s, closure_of(s, {j.name}) - promised, unit) > U}
    return promised, refused, {j: r for j, r in rev.items() if j not in promised and j not in refused and j not in hopeless}


def macroq_bruteforce(s: Scenario, unit: float) -> tuple[float, dict[str, str] | None]:
    """Best importance over every dependency-closed job/template list that contains the promised
    jobs (:func:`promised_bruteforce`), none of the refused ones, is rank-legal among the other
    jobs, and every discrete allocation (ceil(min/unit) .. floor(max/unit) units per PE, total <=
    floor(H/unit))."""
    promised, refused, free_rev = admission_sets(s, unit)
    U = int(math.floor(s.capacity_mips / unit + 1e-9))
    names = [j.name for j in s.jobs]
    jobs = {j.name: j for j in s.jobs}
    best, best_choice = -1.0, None
    for k in range(len(names) + 1):
        for sub in itertools.combinations(names, k):
            js = set(sub)
            if not promised <= js or js - promised - free_rev.keys() or not rank_legal(js - promised, free_rev):
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
                lo = [floor_units(p, unit, s.policy.pe_floor_mips) for p in specs]
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
