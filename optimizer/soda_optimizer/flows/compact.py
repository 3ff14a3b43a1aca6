"""A compact form of a plan: flows with the same entries listed once (issue 50; ours, section 2.3's policy regrouped).

At 20,016 flows the plan is 1,921,536 :class:`~.model.PolicyEntry` objects (4-8.6 s and +1.9 GiB to build,
docs/benchmarks/flows.md), yet the flows whose decisions are all the same are few: the groups' plan gives every
member its group's entries, admit-on-arrival gives every flow of a class the same ones (:mod:`.nearby`). A
:class:`CompactPlan` lists each set of flows with the same entries once: its flows' names and one flow's entries
(:meth:`CompactPlan.expand` gives back the plan's entries, sorted by epoch, flow name, cohort and step). Flows are put together only when
their (epoch, cohort, step) keys and decisions are all equal, checked row by row, so the compact form is exact.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .compiled import Compiled
from .fastsim import PolicyArrays
from .model import Plan, PolicyEntry, _Frozen
from .sim import Policy


class PlanClass(_Frozen):
    """Flows with the same entries: ``entries`` are those of ``flows[0]``; every other flow has the same ones."""

    flows: tuple[str, ...]
    entries: tuple[PolicyEntry, ...]


class CompactPlan(_Frozen):
    """A plan with the flows of equal entries listed once (module docstring)."""

    classes: tuple[PlanClass, ...]

    @property
    def size(self) -> int:
        """Entries held (the plan's own count: sum of entries x flows)."""
        return sum(len(c.entries) for c in self.classes)

    def expand(self) -> Plan:
        """The plan's entries, every flow's, sorted by (epoch, flow name, cohort, step)."""
        out = [x if f == c.flows[0] else x.model_copy(update={"flow": f})
               for c in self.classes for f in c.flows for x in c.entries]
        out.sort(key=lambda x: (x.epoch, x.flow, x.cohort, x.step))
        return Plan.model_construct(entries=tuple(out), routes=())


def flow_classes(cp: Compiled, policy: Policy | PolicyArrays) -> list[list[int]]:
    """The flows of ``cp`` (with at least one entry) grouped by equal entries: same keys, same decisions."""
    if not isinstance(policy, PolicyArrays):
        rows: dict[int, list[tuple[object, ...]]] = {}
        for (e, f, a, s), d in sorted(policy.items()):
            rows.setdefault(f, []).append((e, a, s, d))
        by: dict[object, list[int]] = {}
        for f, r in rows.items():
            by.setdefault(tuple(r), []).append(f)
        return sorted(by.values())
    pa = policy
    if len(pa) == 0:
        return []
    S, A, F = pa.S, pa.E + 1, pa.F
    c = pa.codes
    f = (c // (S * A)) % F
    eas = (c // (S * A * F)) * (A * S) + c % (S * A)  # (epoch, cohort, step) within the flow
    # a decision is a run of the shared (pool, probability) table and a backlog share: equal runs, equal decisions
    _, blid = np.unique(pa.bl, return_inverse=True)
    raw = (pa.start * (int(pa.lens.max(initial=0)) + 1) + pa.lens) * (int(blid.max()) + 1) + blid.reshape(-1)
    _, did = np.unique(raw, return_inverse=True)
    rk = eas * (int(did.max()) + 1) + did.reshape(-1)
    order = np.lexsort((rk, f))
    fs, rks = f[order], rk[order]
    cnt = np.bincount(fs, minlength=F)
    off = np.cumsum(cnt) - cnt
    # a hash per flow (sum of mixed row keys; the rows are in order), then every row checked against the first flow
    # of its (count, hash) bucket, so a collision only splits a class
    x = rks.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    x ^= x >> np.uint64(29)
    h = np.zeros(F, dtype=np.uint64)
    np.add.at(h, fs, x)
    live = np.nonzero(cnt)[0]
    key = np.stack([cnt[live].astype(np.int64), h[live].view(np.int64)], axis=1)
    _, first, inv = np.unique(key, axis=0, return_index=True, return_inverse=True)
    rep = np.full(F, -1, dtype=np.int64)
    rep[live] = live[first][inv.reshape(-1)]
    local = np.arange(len(fs)) - off[fs]
    bad = np.zeros(F, dtype=bool)
    bad[fs[rks != rks[off[rep[fs]] + local]]] = True
    rep[bad] = np.nonzero(bad)[0]
    out: dict[int, list[int]] = {}
    for g in live.tolist():
        out.setdefault(int(rep[g]), []).append(g)
    return sorted(out.values())


def compact(cp: Compiled, policy: Policy | PolicyArrays, names: Callable[[int], list[str]],
            entries_of: Callable[[Policy], list[PolicyEntry]], extra: list[PlanClass]) -> CompactPlan:
    """The compact plan of ``policy`` on ``cp``: ``names(g)`` the problem's flows standing for flow g of ``cp`` (its
    exact group), ``entries_of`` the plan entries of a sub-policy (the planner's own conversion), ``extra`` the
    classes of flows outside ``cp`` (refused flows)."""
    classes = flow_classes(cp, policy)
    reps = {m[0] for m in classes}
    if isinstance(policy, PolicyArrays):
        S, A, F = policy.S, policy.E + 1, policy.F
        f = (policy.codes // (S * A)) % F
        rows = np.nonzero(np.isin(f, np.array(sorted(reps), dtype=np.int64)))[0]
        sub = PolicyArrays.of(cp, policy.codes[rows], policy.lens[rows], policy.bl[rows], policy.start[rows],
                              policy.pool, policy.prob, sorted_codes=True).to_policy()
    else:
        sub = {k: d for k, d in policy.items() if k[1] in reps}
    by_flow: dict[str, list[PolicyEntry]] = {}
    for x in entries_of(sub):
        by_flow.setdefault(x.flow, []).append(x)
    out = list(extra)
    for m in classes:
        flows = tuple(n for g in m for n in names(g))  # m[0] is in ``sub``: its first name has entries
        out.append(PlanClass(flows=flows, entries=tuple(by_flow[flows[0]])))
    return CompactPlan(classes=tuple(out))


__all__ = ["CompactPlan", "PlanClass", "compact", "flow_classes"]
