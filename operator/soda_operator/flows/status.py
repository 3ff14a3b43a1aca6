"""What JobFlows and FlowPools report (Montana & Zinky, section 2.5: the figures the evaluation function scores --
jobs completed, backlogged, dropped, utility -- here counted as they happen, per epoch beside the plan's own
expectation, and in total).

A JobFlow's ``status``: ``state`` and ``message`` with the ``Routing`` condition (reasons Routing, MissingPools (naming
the steps), InvalidPlan, Unroutable (a step no pool of positive capacity serves: the planner refuses the flow's
jobs, issue 36), InvalidSpec) and the ``WithinBudget`` condition (issue 45: False with reason ForecastCapped when the
plan capped ``spec.arrivals.forecast`` at what the flow's pools can serve, DeadlinePassed when its group's plan stopped
at ``spec.planner.deadlineSeconds`` with the best plan so far), the epoch, the plan's current entries, the last :data:`EPOCHS_KEPT` epochs' counts
against the plan, totals, where the unfinished jobs are now, the forecast jobs made this epoch, unreachable pools.
A FlowPool's: ``reachable`` with the ``Reachable`` condition (Reachable, Unreachable, KubeconfigRefused,
InvalidSpec) and, from the current plan, its capacity, load and throughput. Counters live in memory
(:class:`Counters`), seeded from the status after a restart; a tick writes only the fields that changed.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..kube import clock, conditions
from ..kube.errors import TranslationError
from .decide import Entries, Planned
from .jobs import FlowJob
from .spec import FlowSpec, PoolSpec

EPOCHS_KEPT = 12
CONDITION = {"JobFlow": "Routing", "FlowPool": "Reachable"}  # the one condition of each kind
ROUTING_REASONS = {"routing": "Routing", "waiting": "MissingPools", "invalid": "InvalidPlan", "unroutable": "Unroutable"}


@dataclass
class Counters:
    """A JobFlow's counts between ticks: kept in memory, seeded from its status (an operator restart continues them)."""

    uid: str | None
    epochs: list[dict[str, Any]]
    totals: dict[str, Any]
    generated: tuple[int, int]  # (epoch, forecast jobs made in it)
    dropped: set[str] = field(default_factory=set)  # flow jobs dropped: not acted on again while their Jobs go

    @classmethod
    def seeded(cls, uid: str | None, status: Mapping[str, Any]) -> Counters:
        gen = status.get("generated") or {}
        return cls(uid=uid, epochs=copy.deepcopy(list(status.get("epochs") or [])), totals=copy.deepcopy(dict(status.get("totals") or {})),
                   generated=(int(gen.get("epoch", -1)), int(gen.get("count", 0))))


def entries_status(flow: FlowSpec, entries: Entries) -> list[dict[str, Any]]:
    """The plan's current entries as ``status.plan.entries``: per cohort and step, pool probabilities and backlog."""
    return [{"cohort": c, "step": s, "stepName": flow.steps[s].name if s < len(flow.steps) else str(s),
             "pools": {p: round(v, 4) for p, v in sorted(probs.items())}, "backlog": round(bl, 4)}
            for (c, s), (probs, bl) in sorted(entries.items(), key=lambda kv: (kv[0][1], kv[0][0]))]


def where_now(flow: FlowSpec, jobs: Sequence[FlowJob]) -> dict[str, Any]:
    """Where the flow's unfinished jobs are: backlogged (suspended) and running per pool."""
    backlogged = 0
    by_pool: dict[str, int] = {}
    for j in jobs:
        cur = j.current
        if cur.deleting or cur.failed or (cur.complete and cur.step >= len(flow.steps) - 1):
            continue
        if cur.suspended and cur.pool is None:
            backlogged += 1
        elif cur.pool and not cur.complete:
            by_pool[cur.pool] = by_pool.get(cur.pool, 0) + 1
    return {"backlogged": backlogged, "running": sum(by_pool.values()), "byPool": dict(sorted(by_pool.items()))}


def add_counts(epochs: list[dict[str, Any]], totals: dict[str, Any], k: int, counts: Mapping[str, float], planned: Mapping[str, float] | None,
               epoch_s: float) -> None:
    """Add one tick's counts to the epoch record ``k`` and to the totals; the record keeps the figures of the first
    plan seen in the epoch."""
    rec = next((e for e in epochs if e.get("epoch") == k), None)
    if rec is None:
        rec = {"epoch": k, "start": clock.iso(k * epoch_s), "arrivals": 0, "completed": 0, "backlogged": 0, "released": 0, "dropped": 0,
               "utilityEarned": 0.0, "utilityPlanned": 0.0, "planned": {}}
        epochs.append(rec)
        epochs.sort(key=lambda e: e["epoch"])
        del epochs[:-EPOCHS_KEPT]
    if planned is not None and not rec.get("planned"):  # the plan made at the epoch's start (a mid-epoch replan sees only the rest)
        rec["planned"] = {k2: v for k2, v in planned.items() if k2 != "utility"}
        rec["utilityPlanned"] = planned.get("utility", 0.0)
    for key in ("arrivals", "completed", "backlogged", "released", "dropped"):
        rec[key] = int(rec.get(key, 0)) + int(counts.get(key, 0))
        totals[key] = int(totals.get(key, 0)) + int(counts.get(key, 0))
    rec["utilityEarned"] = round(float(rec.get("utilityEarned", 0.0)) + float(counts.get("utility", 0.0)), 6)
    totals["utilityEarned"] = round(float(totals.get("utilityEarned", 0.0)) + float(counts.get("utility", 0.0)), 6)



def flow_status(flow: FlowSpec, k: int, counters: Counters, jobs: Sequence[FlowJob], unreachable: Mapping[str, str], missing: Sequence[str],
                planned: Planned | None, entries: Entries, planned_with: int, old: Iterable[Mapping[str, Any]] | None) -> dict[str, Any]:
    """A JobFlow's status after a tick at epoch ``k``: ``planned`` is its group's plan (None while pools are
    missing), ``planned_with`` how many flows it was made for, ``old`` the conditions it has now."""
    out: dict[str, Any] = {}
    out["epoch"] = k
    out["epochStart"] = clock.iso(k * flow.epoch_s)
    out["generated"] = {"epoch": counters.generated[0], "count": counters.generated[1]}
    out["epochs"] = copy.deepcopy(counters.epochs)
    out["totals"] = copy.deepcopy(counters.totals)
    out["now"] = where_now(flow, [j for j in jobs if j.id not in counters.dropped])
    out["unreachablePools"] = dict(unreachable) or None
    refused = [u for u in planned.result.unroutable if u.flow == flow.key and u.cohort is None] \
        if planned is not None and planned.result is not None else []
    if missing:
        out["state"] = "waiting"
        steps = [s.name for s in flow.steps if set(s.pools) & set(missing)]
        out["message"] = f"missing or invalid FlowPools: {', '.join(missing)} (step {', '.join(steps)})"
    elif planned is not None and planned.error:
        out["state"] = "invalid"
        out["message"] = planned.error
    elif refused:
        out["state"] = "unroutable"
        out["message"] = f"refused: {refused[0].reason}"
    else:
        out["state"] = "routing"
        out["message"] = ""
    out["conditions"] = [conditions.condition(CONDITION["JobFlow"], out["state"] == "routing", ROUTING_REASONS[out["state"]],
                                              out["message"] or f"epoch {k}: routing by the plan", flow.generation or None, old)]
    result = planned.result if planned is not None else None
    if planned is not None and result is not None:
        out["conditions"].append(budget(flow, planned, planned_with, old))
    if planned is not None and result is not None:
        out["plan"] = {"epoch": planned.k, "plannedAt": planned.at, "seconds": round(planned.seconds, 3), "timedOut": result.timed_out,
                       "score": round(result.result.score, 6), "evaluations": result.evaluations,
                       "bound": round(result.bound, 6) if result.bound is not None else None,
                       "gap": round(result.gap, 6) if result.gap is not None else None,
                       "flows": planned_with, "entries": entries_status(flow, entries)}
    return out


def budget(flow: FlowSpec, planned: Planned, planned_with: int, old: Iterable[Mapping[str, Any]] | None) -> dict[str, Any]:
    """The ``WithinBudget`` condition of a flow (issue 45): its forecast capped at what its pools serve, or its group's
    plan stopped at the deadline, naming the field."""
    cap = planned.capped.get(flow.key)
    if cap is not None:
        msg = (f"spec.arrivals.forecast: {cap[0]:.6g} jobs per epoch is more than the flow's pools can serve "
               f"({cap[1]:.6g} per epoch at their peak capacity): planned and generated with {cap[1]:.6g}")
        return conditions.condition("WithinBudget", False, "ForecastCapped", msg, flow.generation or None, old)
    if planned.result is not None and planned.result.timed_out:
        msg = (f"spec.planner.deadlineSeconds: the plan of this flow's group ({planned_with} flow(s)) stopped at its deadline "
               f"(the smallest in the group): the best plan so far, {planned.result.epochs_optimised} epoch(s) optimised")
        return conditions.condition("WithinBudget", False, "DeadlinePassed", msg, flow.generation or None, old)
    return conditions.condition("WithinBudget", True, "WithinBudget", "planned within the deadline, the forecast as given",
                                flow.generation or None, old)


def pool_status(pool: PoolSpec, reach: Mapping[str, Any], refused: bool, plans: Mapping[tuple[float, str], Planned],
                old: Iterable[Mapping[str, Any]] | None) -> dict[str, Any]:
    """A FlowPool's status: ``reach`` its ``reachable`` (and for a member cluster ``message``), ``refused`` whether its
    kubeconfig was refused; from each group's current plan, the pool's figures of the current epoch."""
    out: dict[str, Any] = dict(reach)
    for (epoch_s, _group), plan in sorted(plans.items()):
        if plan.result is None:
            continue
        for ps in plan.result.result.pools:
            if ps.pool == pool.name and ps.epoch == 0:
                out["epoch"] = plan.k
                out["epochSeconds"] = epoch_s
                out["capacity"] = ps.capacity
                out["plannedLoad"] = round(ps.load, 4)
                out["plannedThroughput"] = round(ps.throughput, 4)
    why = "Reachable" if out["reachable"] else "KubeconfigRefused" if refused else "Unreachable"
    out["conditions"] = [conditions.condition(CONDITION["FlowPool"], bool(out["reachable"]), why,
                                              out.get("message") or ("a member cluster" if pool.kubeconfig is not None else "this cluster"),
                                              pool.generation or None, old)]
    return out


def refused(kind: str, err: TranslationError, generation: int | None, old: Iterable[Mapping[str, Any]] | None) -> dict[str, Any]:
    """The status of a JobFlow or FlowPool whose spec cannot be taken: its condition False, reason InvalidSpec,
    the message naming the field; nothing else of the status changes."""
    message = f"{err.field}: {err.message}"
    out: dict[str, Any] = {"state": "invalid", "message": message} if kind == "JobFlow" else {"reachable": False, "message": message}
    out["conditions"] = [conditions.condition(CONDITION[kind], False, err.reason, message, generation, old)]
    return out


def reported(old: Iterable[Mapping[str, Any]] | None, new: Iterable[Mapping[str, Any]]) -> bool:
    """Whether the object's conditions already say what ``new`` says (its Event was posted then)."""
    return conditions.same(old, new)


def changed(target: MutableMapping[str, Any], status: Mapping[str, Any], out: Mapping[str, Any]) -> None:
    """Only the fields that changed go into ``target`` (the status patch): a tick with nothing new writes nothing."""
    for key, value in out.items():
        if status.get(key) != value:
            target[key] = value
