"""Near-identical flows planned as groups (issue 50, item 3; ours, the paper plans every flow).

At 5,000-20,000 flows the search does not get past its first answer within seconds. Flows with the same steps (run
times and allowed pools) and utility whose lifespans differ by at most ``tolerance`` (relative to the shortest of the
group) are planned as one flow: the group's arrival rates summed, its lifespan the longest of its members (so the
group's plan has an entry in every epoch of every member's life). The group plan's decisions are then given to every
member (:func:`expand_arrays`, over arrays) and the result is simulated on the real flows: the planner compares it
with its other candidates on the real problem's score, so grouping can only help.

Bound: the LP relaxation (:mod:`.bound`) of the grouped problem is a lower bound on the real one: a real plan's
variables summed over a group's members satisfy the group's constraints (capacities and step order add up; each
member's deadline row n_f G_f(t) is at most the group's N G_max(t), G growing with the lifespan), and its drop cost
sum_f max(0, n_f (1 - G_f) - C_f) is at least max(0, N (1 - G_max) - C). So the bound at scale is the aggregate LP over
the groups.

Admit-on-arrival over every flow, the candidate the grouped plan is compared with, is built the same way
(:func:`admit_classes`): exactly, per class of flows whose admit-on-arrival entries are the same.

Departure: identical flows (:func:`.planner._group`) are grouped exactly; here the grouping is an approximation whose
plan is scored on the real flows, never reported from the grouped problem's own figures.
"""

from __future__ import annotations

import numpy as np

from .compiled import Compiled, compile_problem
from .fastsim import PolicyArrays
from .model import Flow, Problem


def merged(problem: Problem, members: list[int], **fields: object) -> Flow:
    """One flow standing for ``members`` (indexes into ``problem.flows``): the first's fields, the
    members' arrival rates summed per epoch, and ``fields`` over them."""
    first = problem.flows[members[0]]
    rates = tuple(sum(problem.flows[f].arrival_rate[e] for f in members) for e in range(problem.epochs))
    return Flow.model_construct(**{**dict(first), "arrival_rate": rates, **fields})

def near_groups(problem: Problem, tolerance: float) -> tuple[Problem, list[list[int]]]:
    """The grouped problem and each group's member flows (indices into ``problem.flows``). Flows with jobs waiting
    at time 0 stay alone."""
    waiting = {w.flow for w in problem.waiting}
    by_key: dict[object, list[int]] = {}
    alone: list[list[int]] = []
    for f, fl in enumerate(problem.flows):
        if fl.name in waiting:
            alone.append([f])
            continue
        by_key.setdefault((tuple((s.run_time, s.pools) for s in fl.steps), fl.utility), []).append(f)
    members: list[list[int]] = []
    for fs in by_key.values():
        fs.sort(key=lambda f: problem.flows[f].lifespan)
        cur: list[int] = []
        for f in fs:
            if cur and problem.flows[f].lifespan > problem.flows[cur[0]].lifespan * (1.0 + tolerance):
                members.append(cur)
                cur = []
            cur.append(f)
        members.append(cur)
    members += alone
    members.sort(key=lambda m: m[0])
    flows = []
    for m in members:
        first = problem.flows[m[0]]
        if len(m) == 1:
            flows.append(first)
            continue
        flows.append(merged(problem, m, name=f"{first.name}+{len(m) - 1}", lifespan=max(problem.flows[f].lifespan for f in m)))
    red = Problem.model_construct(**{**dict(problem), "flows": tuple(flows)})
    return red, members


def expand_arrays(cp: Compiled, group_cp: Compiled, policy: PolicyArrays, members: list[list[int]]) -> PolicyArrays:
    """The group plan's decisions given to every member flow of ``cp`` (the real problem).

    Built already sorted, with no sort of the 1.9 million keys of 20,016 flows (issue 50): for each epoch and real
    flow in order, the rows of its group in that epoch, a contiguous run of the group plan's sorted keys in (cohort,
    step) order, which is the order of the real keys within (epoch, flow)."""
    S, A, G = policy.S, policy.E + 1, policy.F
    c = policy.codes
    s = c % S
    a = (c // S) % A - 1
    F, E, S2 = cp.n_flows, cp.n_epochs, max(cp.n_steps)
    group_of = np.empty(F, dtype=np.int64)
    for g, m in enumerate(members):
        group_of[m] = g
    # the run of each (epoch, group) in the group plan's keys: codes sorted by (epoch, group, cohort, step)
    bounds = np.searchsorted(c, np.arange(E * G + 1, dtype=np.int64) * (S * A))
    lo, cnt = bounds[:-1].reshape(E, G), np.diff(bounds).reshape(E, G)
    pair_lo = lo[:, group_of].ravel()  # per (epoch, real flow), epoch-major
    pair_cnt = cnt[:, group_of].ravel()
    tot = int(pair_cnt.sum())
    first = np.cumsum(pair_cnt) - pair_cnt
    row = np.repeat(pair_lo, pair_cnt) + (np.arange(tot, dtype=np.int64) - np.repeat(first, pair_cnt))
    ef = np.repeat(np.arange(E * F, dtype=np.int64), pair_cnt)  # e * F + f
    codes = (ef * (E + 1) + (a[row] + 1)) * S2 + s[row]
    return PolicyArrays.of(cp, codes, policy.lens[row], policy.bl[row], policy.start[row], policy.pool, policy.prob,
                           sorted_codes=True)


def admit_classes(cp: Compiled) -> PolicyArrays:
    """:func:`.fastsim.admit_arrays` over every flow, built on one flow per class and given to its members
    (:func:`expand_arrays`): the same keys and decisions (issue 50: admit-on-arrival over every flow compared at scale
    under a short deadline; built per flow it cost 0.99 s at 20,016 flows, about a simulation).

    Admit on arrival (:func:`.reach.admit_decision`) depends on a flow's allowed pools per step, the epochs in which
    it has arrivals (its cohorts) and the last epoch of each cohort's life: flows equal in these are a class and get
    the same entries. Flows with jobs waiting at time 0 are each a class of their own."""
    from .fastsim import admit_arrays

    F, E, tau = cp.n_flows, cp.n_epochs, cp.tau
    sets: dict[object, int] = {}
    allowed = np.fromiter((sets.setdefault(a, len(sets)) for a in cp.allowed), dtype=np.int64, count=F)
    waiting = {w.flow for w in cp.problem.waiting}
    alone = np.array([i + 1 if f.name in waiting else 0 for i, f in enumerate(cp.problem.flows)], dtype=np.int64)
    # the last epoch of each cohort's life (:func:`.reach.life_end`, the arithmetic of :func:`.fastsim.admit_arrays`)
    a0 = np.arange(E, dtype=np.int64)[None, :]
    hi = (a0 + 1) * tau + np.array(cp.lifespan)[:, None]
    end = np.broadcast_to(a0, (F, E)).copy()
    for e in range(1, E):
        end = np.where((e >= a0) & (e * tau < hi), np.maximum(end, e), end)
    arrives = cp.rates > 0
    sig = np.concatenate([allowed[:, None], alone[:, None], arrives.astype(np.int64), np.where(arrives, end, -1)], axis=1)
    _, first, cls = np.unique(sig, axis=0, return_index=True, return_inverse=True)
    cls = cls.reshape(-1)
    if len(first) == F:
        return admit_arrays(cp)
    reps = [cp.problem.flows[int(f)] for f in first]
    names = {f.name for f in reps}
    red = Problem.model_construct(**{**dict(cp.problem), "flows": tuple(reps),
                                     "waiting": tuple(w for w in cp.problem.waiting if w.flow in names)})
    r_cp = compile_problem(red)
    order = np.argsort(cls, kind="stable")
    members = np.split(order, np.cumsum(np.bincount(cls, minlength=len(first)))[:-1])
    return expand_arrays(cp, r_cp, admit_arrays(r_cp), [m.tolist() for m in members])


__all__ = ["admit_classes", "expand_arrays", "near_groups"]
