"""Budget driven managers: the Budget Driven Rank Manager, BDRM (SODA paper section 6.2.1), the
Budget Driven Weight Manager, BDWM (section 6.3: "very much like the BDRM in design, so we will
omit details"), and the budget bookkeeping between epochs.

Budgets (:class:`..model.Budgets`, per owner, in mips x seconds) are allocated for a long interval
by people, outside kubesoda; ``spent`` is what the owner's jobs used during *overloaded* epochs.

**BDRM, as the paper states it.** Users do not set ranks, only the relative order of their own jobs
(here: the job's declared ``rank``, ties by job name). Required jobs get rank 1 and their cost is
charged, hypothetically, to their owners first. Then, from Π = 2: among the remaining jobs, take each
owner's most preferred one; the job(s) whose owner has the largest remaining budget get rank Π
(owners whose remaining budgets are equal tie, and all their head jobs get the same Π); each such
owner's remaining budget is hypothetically depleted by that job's cost; Π grows by one; repeat
until every job has a rank. Nothing is written back to ``Budgets``: only :func:`charge`, from what
really ran, depletes budgets.

**A job's cost** is the mips it is sure to hold if admitted, for one macro epoch: the sum of its
PEs' floors (:func:`..model.floor_mips`: each PE's minimum and the policy's ``pe_floor_mips``) in
its cheapest candidate template (the chosen template once it runs), the same minimum the admission
rule uses, times ``Policy.macro_epoch_s``. It needs only the Scenario, no observation.

**Comparing remaining budgets.** ``Budgets.compare == "fraction"`` (the default) compares
``remaining / allocation``, so that "every user's budget should deplete at the same rate" (the
paper's stated aim) also holds between a big and a small budget; ``"absolute"`` compares remaining
mips x seconds (the paper's literal words, "largest remaining user budgets"). Remaining budgets
within a relative 1e-9 of each other are equal (float noise must not break ties).

Departures from the paper, on purpose:

- when no job is required, the first round gets rank 1, not 2 (the paper's Π = 2 would leave rank 1
  empty; ranks are only compared with each other, so the order is the same and ranks stay 1..k);
- in ``fraction`` mode an owner without allocation (0) cannot be put on a fraction scale: every
  owner with an allocation comes before every owner without one, and owners without one are
  compared by absolute remaining (minus what they spent). With the default ``Budgets()`` (nobody
  has an allocation) this is the absolute comparison: the owner who spent least goes first;
- the paper's optional site-administrator override of computed ranks is not a manager's business
  (a job's ``required`` flag is the override kubesoda has).

**BDWM** (the paper gives no details; this is our design, in the BDRM's spirit). It weighs the same
budget order the BDRM computes: with BDRM ranks 1..K, every sink of a job of BDRM rank Π weighs
``(K - Π + 1) / K`` (1 for the first round, down to 1/K for the last; always in (0, 1]), and, as the
SWM does, every other stream and every import weighs 0, whatever the users typed (a user who could
set weights would set them all high, the reason the paper gives for not letting users set ranks).
So an owner with more budget left gets more weight for its next job, and each further job of the
same owner weighs less, as its budget depletes hypothetically. Value functions stay as declared.

**Bookkeeping.** :func:`charge` adds an epoch's use to ``spent`` only when the epoch was
overloaded: "We don't deplete budgets during underloaded epochs: Every jobs gets in, and it is a
good idea to encourage users to submit jobs during underloaded epochs." Which epochs are overloaded
(e.g. some job was refused for capacity) is the caller's judgement.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from ..model import Budgets, Job, Scenario, floor_mips
from .weights import sink_weights

_REL_TOL = 1e-9


def job_cost(scenario: Scenario, job: Job) -> float:
    """A job's cost in mips x seconds: its cheapest candidate template's PE floors for one macro epoch."""
    floor = scenario.policy.pe_floor_mips
    mips = min(sum(floor_mips(p, floor) for p in scenario.template(t).pes) for t in job.candidate_templates)
    return mips * scenario.policy.macro_epoch_s


def allocation(budgets: Budgets, owner: str) -> float:
    return budgets.allocated.get(owner, budgets.default)


def remaining(budgets: Budgets, owner: str) -> float:
    """The owner's allocation minus what it spent (negative when overspent)."""
    return allocation(budgets, owner) - budgets.spent.get(owner, 0.0)


def standing(budgets: Budgets, owner: str, left: float) -> tuple[int, float]:
    """The sort key of an owner with ``left`` mips x seconds remaining: larger is better (see the
    module docstring for the two comparisons and owners without allocation)."""
    if budgets.compare == "absolute":
        return (0, left)
    alloc = allocation(budgets, owner)
    return (1, left / alloc) if alloc > 0 else (0, left)


def _ties(key: tuple[int, float], best: tuple[int, float]) -> bool:
    return key[0] == best[0] and key[1] >= best[1] - _REL_TOL * max(1.0, abs(best[1]))


def preference(job: Job) -> tuple[int, str]:
    """An owner's relative order of its own jobs: declared rank, then name."""
    return (job.rank, job.name)


def budget_ranks(scenario: Scenario) -> dict[str, int]:
    """The BDRM's rank for every job (module docstring)."""
    budgets = scenario.policy.budgets
    left: dict[str, float] = {}

    def deplete(job: Job) -> None:
        o = job.owner
        left[o] = left.get(o, remaining(budgets, o)) - job_cost(scenario, job)

    ranks: dict[str, int] = {}
    for j in sorted((j for j in scenario.jobs if j.required), key=lambda j: j.name):
        ranks[j.name] = 1
        deplete(j)
    queues: dict[str, list[Job]] = {}
    for j in sorted((j for j in scenario.jobs if not j.required), key=preference):
        queues.setdefault(j.owner, []).append(j)
    pi = 2 if ranks else 1
    while queues:
        keys = {o: standing(budgets, o, left.get(o, remaining(budgets, o))) for o in queues}
        best = max(keys.values())
        for o in sorted(o for o, k in keys.items() if _ties(k, best)):
            j = queues[o].pop(0)
            ranks[j.name] = pi
            deplete(j)
            if not queues[o]:
                del queues[o]
        pi += 1
    return ranks


def budget_rank_manager(scenario: Scenario) -> Scenario:
    """BDRM as a Scenario -> Scenario step: every job's ``rank`` is replaced by the BDRM's."""
    ranks = budget_ranks(scenario)
    jobs = tuple(j.model_copy(update={"rank": ranks[j.name]}) for j in scenario.jobs)
    return scenario.model_copy(update={"jobs": jobs})


def budget_weights(scenario: Scenario) -> dict[str, float]:
    """The BDWM's sink weight of every job: (K - Π + 1) / K for BDRM rank Π of K."""
    ranks = budget_ranks(scenario)
    k = max(ranks.values(), default=1)
    return {name: (k - r + 1) / k for name, r in ranks.items()}


def budget_weight_manager(scenario: Scenario) -> Scenario:
    """BDWM as a Scenario -> Scenario step (weight overrides, like the SWM)."""
    weights = budget_weights(scenario)
    return sink_weights(scenario, lambda job: weights[job.name])


def charge(budgets: Budgets, usage_by_owner_mips: Mapping[str, float], seconds: float, overloaded: bool) -> Budgets:
    """The budgets after an epoch of ``seconds`` in which each owner's jobs used
    ``usage_by_owner_mips`` mips: ``spent += mips x seconds``, only if the epoch was overloaded."""
    if not (math.isfinite(seconds) and seconds >= 0):
        raise ValueError(f"charge: seconds must be finite and >= 0, got {seconds}")
    for owner, mips in usage_by_owner_mips.items():
        if not (math.isfinite(mips) and mips >= 0):
            raise ValueError(f"charge: usage of owner '{owner}' must be finite and >= 0 mips, got {mips}")
    if not overloaded:
        return budgets
    spent = dict(budgets.spent)
    for owner, mips in usage_by_owner_mips.items():
        if mips > 0 and seconds > 0:
            spent[owner] = spent.get(owner, 0.0) + mips * seconds
    return budgets.model_copy(update={"spent": spent})
