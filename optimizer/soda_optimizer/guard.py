"""The pipeline guard: when planning still fails, the jobs that make it fail are found and set
aside, and everyone else is planned as without them (no paper section: SODA plans one trusted
workload; kubesoda plans every namespace's at once, so one tenant's object must cost only itself).

Bounds (:mod:`.bounds`) and the screen (:mod:`.screen`) stop the failures we foresee. The guard is
for the ones we do not: a stage that raises, or a plan with a number that is not finite. It runs
the planning function; on failure it plans again without every *suspect* (the jobs that changed
since the last good plan; all jobs when there is none), and when that succeeds it gives the
suspects back half by half, keeping each half whose return still plans (adaptive group testing:
about ``2 k log2(n/k)`` extra runs for k culprits among n suspects). A culprit is a suspect that
fails the plan even when every other suspect is absent or already shown harmless. When even the
plan without any suspect fails, when no job is suspect, or when every one of several suspects fails
alone (a fault that comes with any job: a node, the policy, a stage), the fault is not in a job:
:class:`Unplannable` is raised and the caller keeps its last good plan rather than quarantine
everyone.

The policy is a suspect before any job (issue 45): a job is blamed only for its own fields. When
planning fails and a ``fallback`` policy is given (the caller's last policy that planned, else the
defaults) that differs from the scenario's, the plan is made again under the fallback; when that
plans, the fault is the policy's (:attr:`Outcome.policy_fault`), no job is set aside, and the plan
made under the fallback is the one returned. When even the fallback fails, the jobs are tested as
above, under the scenario's policy and then under the fallback.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from .model import Policy, Scenario
from .plan import Plan

PlanFn = Callable[[Scenario], Plan]


class Unplannable(RuntimeError):
    """Planning fails even without every suspect job."""


@dataclass(frozen=True)
class Outcome:
    plan: Plan
    quarantined: dict[str, str]  # job -> why (the error it caused)
    runs: int  # planning runs made (1 when nothing failed)
    # why planning failed under the scenario's own policy when only the fallback planned ("": the policy planned);
    # the plan is then the fallback's
    policy_fault: str = ""


def unsound(plan: Plan) -> str | None:
    """Why ``plan`` cannot be applied (a number that is not finite), or None."""
    if not math.isfinite(plan.importance):
        return f"the plan's importance is {plan.importance}"
    for d in plan.jobs:
        if not (math.isfinite(d.importance) and math.isfinite(d.mips)):
            return f"job {d.job}: importance {d.importance}, mips {d.mips}"
    for p in plan.pes:
        if not (math.isfinite(p.goal_mips) and all(math.isfinite(f) and f >= 0 for f in p.fractions.values())):
            return f"PE {p.pe}: goal {p.goal_mips}, fractions {p.fractions}"
    return None


def without(scenario: Scenario, jobs: Iterable[str]) -> Scenario:
    """``scenario`` without ``jobs``, the jobs that import from them (transitively) and the
    templates no remaining job uses."""
    gone = set(jobs)
    changed = True
    while changed:
        changed = False
        for j in scenario.jobs:
            if j.name not in gone and any(i.job in gone for i in j.imports):
                gone.add(j.name)
                changed = True
    keep = tuple(j for j in scenario.jobs if j.name not in gone)
    used = {t for j in keep for t in j.templates}
    return scenario.model_copy(update={"jobs": keep, "templates": tuple(t for t in scenario.templates if t.name in used)})


def run(scenario: Scenario, plan_fn: PlanFn, suspects: Iterable[str] | None = None, fallback: Policy | None = None) -> Outcome:
    """``plan_fn(scenario)``; when it fails, the plan under the ``fallback`` policy when that plans (the policy's
    fault), else the plan without the suspects that make it fail (see the module)."""
    counted = [0]
    plan, why = _attempt(scenario, plan_fn, counted)
    if plan is not None:
        return Outcome(plan, {}, counted[0])
    if fallback is None or fallback == scenario.policy:
        return _jobs(scenario, plan_fn, suspects, why, counted)
    alt = scenario.model_copy(update={"policy": fallback})
    plan, _ = _attempt(alt, plan_fn, counted)
    if plan is not None:
        return Outcome(plan, {}, counted[0], policy_fault=why)
    try:  # a job's fault under either policy
        return _jobs(scenario, plan_fn, suspects, why, counted)
    except Unplannable:
        out = _jobs(alt, plan_fn, suspects, why, counted)
        return Outcome(out.plan, out.quarantined, out.runs, policy_fault=why)


def _attempt(s: Scenario, plan_fn: PlanFn, counted: list[int]) -> tuple[Plan | None, str]:
    counted[0] += 1
    try:
        plan = plan_fn(s)
    except Exception as e:  # noqa: BLE001 - any stage's fault is what the guard is for
        return None, f"{type(e).__name__}: {e}"
    why = unsound(plan)
    return (None, why) if why else (plan, "")


def _jobs(scenario: Scenario, plan_fn: PlanFn, suspects: Iterable[str] | None, why: str, counted: list[int]) -> Outcome:
    """The plan without the suspects that make ``scenario`` fail (its first attempt failed with ``why``)."""
    def attempt(s: Scenario) -> tuple[Plan | None, str]:
        return _attempt(s, plan_fn, counted)

    names = [j.name for j in scenario.jobs]
    sus = names if suspects is None else [n for n in names if n in set(suspects)]
    if not sus:
        raise Unplannable(f"planning fails and no job changed since the last good plan (the fault is elsewhere: a node, the policy): {why}")
    out: list[str] = list(sus)  # set aside for now
    best, _ = attempt(without(scenario, out))
    if best is None:
        raise Unplannable(f"planning fails even without the {len(sus)} suspect job(s): {why}")
    culprits: dict[str, str] = {}

    def settle(group: list[str]) -> None:
        """Give ``group`` (all currently set aside) back, keeping it if the plan survives."""
        nonlocal best
        rest = [n for n in out if n not in set(group)]
        p, err = attempt(without(scenario, rest))
        if p is not None:
            out[:] = rest
            best = p
            return
        if len(group) == 1:
            culprits[group[0]] = err
            return
        half = len(group) // 2
        settle(group[:half])
        settle(group[half:])

    half = len(sus) // 2  # all of them together is the failure we started from
    for group in (sus[:half], sus[half:]) if len(sus) > 1 else ():
        settle(group)
    if len(sus) == 1:
        culprits[sus[0]] = why
    if len(sus) > 1 and len(culprits) == len(sus):
        # every suspect fails alone: the fault comes with any job (a node, the policy, a stage),
        # not from one of them; quarantining them all would cost everyone their place
        raise Unplannable(f"planning fails with each of the {len(sus)} suspect jobs alone, so the fault is not in one of them: {why}")
    assert best is not None
    return Outcome(best, culprits, counted[0])
