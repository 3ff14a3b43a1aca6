"""macroQ's saturation bound (issue 49: small instances stop as soon as they are proven).

When every value function is nondecreasing (weights, slopes and values are nonnegative by the
model; a piecewise function may still fall), importance is nondecreasing in every PE's mips: a
PE's output ``min(a r_i m, b r_i)`` (sources ``min(a m, primal)``; curves are nondecreasing) grows
with its mips and its inputs, streams carry a share of it, and the combines (sum, min, max) are
monotone; a job more in the glued graph only adds streams and sinks. So the importance of every
job on its best template with every PE at its cap (its maximum, its saturation, the capacity) is
an upper bound of any admission and any allocation, continuous or on a grid. An answer that
reaches it is proven optimal at once: a what-if of one job that fits stops after its first pass
(the SODA paper's macroQ has no such test; it is the trivial bound of its section 5.1 problem).
"""

from __future__ import annotations

import itertools
import math

import networkx as nx
import numpy as np

from ..importance import Evaluator
from ..model import Scenario, ValueFunction, floor_mips

MAX_JOBS = 64  # beyond, only when every job has one template (one Evaluator, the answer's own)
COMBO_LIMIT = 16  # template combinations per import group; beyond, no bound
MAX_COMBOS = 1024  # with an answer's Evaluator: the combinations of the groups with alternatives evaluated at most


def nondecreasing(vf: ValueFunction) -> bool:
    return vf.kind != "piecewise" or all(b[1] >= a[1] for a, b in zip(vf.points, vf.points[1:]))


def at_caps(ev: Evaluator, H: float, floor: float) -> float | None:
    """The importance of ``ev``'s graph with every PE at its cap, or None when some value function
    falls (importance is then not monotone)."""
    g = ev.graph
    if not all(nondecreasing(d["value"]) for _, _, d in g.edges(data=True)):
        return None
    if not all(nondecreasing(vf) for p in ev.pes for _, vf in g.nodes[p]["sinks"]):
        return None
    specs = [ev.glued.spec(p) for p in ev.pes]
    lo = np.array([floor_mips(s, floor) for s in specs], dtype=float)
    cap = np.minimum(np.minimum(np.array([s.max_mips for s in specs], dtype=float), ev.saturation()), H)
    return float(ev.importance(np.maximum(cap, lo)[None, :])[0])


def bound(scenario: Scenario, ev_of: dict[str, str] | None = None, ev: Evaluator | None = None) -> float | None:
    """The saturation bound of ``scenario`` (module docstring), or None when it is not known cheaply
    or importance is not monotone. ``ev_of``/``ev``: an answer's choice and its Evaluator; when every
    job is in it, one evaluation of it at caps counts every import group at its chosen templates,
    and a group with alternatives adds what its best combination at caps has over the chosen one
    (issue 49: 1,040 jobs on 2,000 nodes all fit saturated, but with some alternatives the bound
    was not computed past MAX_JOBS jobs, so nothing proved the first answer and every later pass
    ran to the deadline)."""
    H, floor = scenario.capacity_mips, scenario.policy.pe_floor_mips
    jobs = scenario.jobs
    g = scenario.job_graph()
    known = {j.name for j in jobs}
    groups = [sorted(grp & known) for grp in nx.weakly_connected_components(g)]
    alts_of = {j.name: j.candidate_templates for j in jobs}
    if ev is not None and ev_of is not None and all(j.name in ev_of for j in jobs):
        base = at_caps(ev, H, floor)
        multi = [names for names in groups if math.prod(len(alts_of[j]) for j in names) > 1]
        if base is None or sum(math.prod(len(alts_of[j]) for j in names) for names in multi) > MAX_COMBOS:
            return None
        for names in multi:
            got = _best(scenario, names, H, floor, tuple(ev_of[j] for j in names))
            if got is None:
                return None
            base += got[0] - got[1]
        return base
    if len(jobs) > MAX_JOBS:
        return None
    total = 0.0
    for names in groups:
        got = _best(scenario, names, H, floor)
        if got is None:
            return None
        total += got[0]
    return total


def _best(scenario: Scenario, names: list[str], H: float, floor: float,
          chosen: tuple[str, ...] | None = None) -> tuple[float, float] | None:
    """(the best importance at caps over the group's template combinations, that of ``chosen``), or
    None past COMBO_LIMIT combinations or when importance is not monotone."""
    alts = [scenario.job(j).candidate_templates for j in names]
    if math.prod(len(a) for a in alts) > COMBO_LIMIT:
        return None
    best, mine = 0.0, 0.0
    for combo in itertools.product(*alts):
        v = at_caps(Evaluator(scenario.glued(dict(zip(names, combo)))), H, floor)
        if v is None:
            return None
        best = max(best, v)
        if combo == chosen:
            mine = v
    return best, mine
