"""Required jobs: which of them the capacity can honour (SODA paper section 5.1.1, constraint 3).

The paper: "Required jobs must be admitted. (Without loss of generality we can assume required
jobs have rank 1.)", and when their minima do not fit, macroQ has no solution (section 7.1: "a
macroQ run at 20% of the PNs would not find a feasible solution"). A scheduler that serves many
tenants cannot answer "no solution": one StreamJob asking for more than the cluster holds, or a
lost rack, would stop every job. So, on purpose, we depart from the paper here:

**The admission rule for required jobs.** Required jobs are *promised* their capacity one at a
time, in this order:

1. jobs admitted by an earlier epoch (incumbents) before jobs not yet admitted;
2. better declared rank (``spec.rank``) first;
3. earlier creation first (``metadata.creationTimestamp``; jobs without one come after);
4. name, as the last tie-break.

A job is promised when its minimum (the sum of its PEs' minimum mips in its cheapest candidate
template, plus, transitively, the minima of the jobs it imports from that are not promised yet)
fits the capacity that the jobs promised before it leave. A job that does not fit is *refused*
(reason ``infeasible-required``) with the numbers, and only it: the rule goes on with the next
job, so a smaller required job behind a refused one is still promised.

Promised jobs are admitted whatever their rank (the paper's "rank 1"); rank legality applies to the
other jobs among themselves. Consequences that the tests check: adding a job never takes the
place of an admitted required job (incumbents come first), and a job never loses its place to a
job of worse rank.

The minima are counted in macroQ's atomic units when a unit is given (``ceil(min / unit)`` per
PE, as macroQ counts them), so a promise always fits the discrete problem macroQ solves.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import networkx as nx

from ..model import PE, Job, Scenario, floor_mips, floor_units


@dataclass(frozen=True)
class Promise:
    promised: frozenset[str]  # required jobs (and the jobs they import from) whose minima fit
    refused: dict[str, str] = field(default_factory=dict)  # required job -> why it was refused (numbers)
    order: tuple[str, ...] = ()  # the required jobs in the rule's order


def rule_key(job: Job) -> tuple[bool, int, bool, str, str]:
    """The sort key of the admission rule (see the module docstring)."""
    return (not job.incumbent, job.rank, job.created == "", job.created, job.name)


def job_minimum(scenario: Scenario, job: Job, unit: float | None = None) -> float:
    """A job's minimum in mips (or in units of ``unit``): its cheapest candidate template's PE
    floors (each PE's minimum, the policy's floor, and one unit)."""
    floor = scenario.policy.pe_floor_mips

    def amount(p: PE) -> float:
        return floor_units(p, unit, floor) if unit else floor_mips(p, floor)

    return min(sum(amount(p) for p in scenario.template(t).pes) for t in job.candidate_templates)


def promise(scenario: Scenario, unit: float | None = None) -> Promise:
    """Apply the admission rule to the required jobs of ``scenario`` (capacity: its usable nodes)."""
    jobs = {j.name: j for j in scenario.jobs}
    required = sorted((j for j in scenario.jobs if j.required), key=rule_key)
    if not required:
        return Promise(frozenset())
    g = scenario.job_graph()
    H = scenario.capacity_mips
    cap = math.floor(H / unit + 1e-9) if unit else H
    scale = unit or 1.0
    held = 0.0
    promised: set[str] = set()
    refused: dict[str, str] = {}
    for j in required:
        group = ({j.name} | nx.ancestors(g, j.name)) - promised
        need = sum(job_minimum(scenario, jobs[x], unit) for x in group)
        if held + need <= cap + 1e-9:
            promised |= group
            held += need
            continue
        ahead = [x.name for x in required if x.name in promised]
        with_deps = f" with the {len(group) - 1} job(s) it imports from" if len(group) > 1 else ""
        shown = ", ".join(ahead[:5]) + (", ..." if len(ahead) > 5 else "")
        refused[j.name] = (
            f"required, but its minimum of {need * scale:.0f} mips{with_deps} does not fit: the usable nodes offer "
            f"{H:.0f} mips, {held * scale:.0f} of them promised to {len(ahead)} required job(s) ahead of it"
            f"{f' ({shown})' if ahead else ''}; short by {need * scale - (cap - held) * scale:.0f} mips"
        )
    return Promise(frozenset(promised), refused, tuple(j.name for j in required))
