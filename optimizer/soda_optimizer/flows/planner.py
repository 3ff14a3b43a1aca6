"""Levels 2 and 3 of the planner, under a deadline (Montana & Zinky, sections 3.2 and 3.3).

- Level 2 (multi-flow, single epoch): a steady-state order-based GA (:mod:`.ga`) searches the order in which the
  rapid route builder (:mod:`.route`) routes the flows of the epoch; an ordering is scored by simulating the plan
  (:mod:`.sim`, eq. (2)) from that epoch to the end of the horizon.
- Level 3 (multi-epoch): the epochs are optimised one at a time from the last to the first, each seeing the load the
  later epochs' plans put on the pools (so that backlogging into a later epoch knows what is already there).

Deadline: before any GA runs, one route build per epoch (last to first) with a heuristic ordering (shortest lifespan
first, then highest utility) gives a complete, valid plan; the first answer. The GA then improves the epochs from
the last one back. When the deadline passes, the epochs not yet optimised are rebuilt with the heuristic ordering
against the loads of the optimised ones, and the better of that plan and the first one is returned. The deadline is
checked between evaluations, so it can be overrun by one evaluation and the final rebuild; the first answer itself
is always completed.

Departures from the paper, on purpose:
- the heuristic first plan, and the seeding of each GA population with two heuristic orderings (shortest lifespan
  first, then utility; highest utility first, then lifespan) -- the paper starts from random orderings only; it
  makes the first answer useful and costs two evaluations per epoch;
- the score of an ordering at Level 2 is the score of the epochs from the current one on, with the earlier epochs
  not yet planned (they are planned later, Level 3 order), which is what the paper's backward sweep implies.
"""

from __future__ import annotations

import random
import time

from pydantic import BaseModel, ConfigDict, Field

from .compiled import Compiled, compile_problem
from .ga import steady_state_ga
from .model import Hop, Plan, Problem, Route, SimResult
from .route import Item, Ledger, RouteSpec, build_epoch, epoch_items, policy_from_routes
from .sim import plan_entries, simulate_policy


class PlannerParams(BaseModel):
    """Knobs of the planner. ``evaluations`` per epoch is the paper's GA budget (population = evaluations / 5)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    evaluations: int = Field(default=100, ge=1)
    deadline_s: float | None = Field(default=None, gt=0)
    seed: int = 0
    split_threshold: float = Field(default=0.2, gt=0, le=1)
    crossover_rate: float = Field(default=0.7, ge=0, le=1)


class PlanResult(BaseModel):
    """The plan, its simulated outcome, and what the search cost."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    plan: Plan
    result: SimResult
    first_score: float  #: score of the heuristic first plan
    evaluations: int
    elapsed_s: float
    timed_out: bool
    epochs_optimised: int


def heuristic_order(cp: Compiled, items: list[Item]) -> list[int]:
    """Shortest lifespan first, then highest utility, then flow index."""
    return sorted(range(len(items)), key=lambda i: (cp.lifespan[items[i].flow], -cp.flow_utility[items[i].flow], i))


def utility_order(cp: Compiled, items: list[Item]) -> list[int]:
    """Highest utility first, then shortest lifespan, then flow index."""
    return sorted(range(len(items)), key=lambda i: (-cp.flow_utility[items[i].flow], cp.lifespan[items[i].flow], i))


def _build(cp: Compiled, ledger: Ledger, e: int, order: list[int] | None, threshold: float) -> list[RouteSpec]:
    items = epoch_items(cp, e)
    if order is None:
        order = heuristic_order(cp, items)
    return build_epoch(cp, ledger, items, order, threshold)


def _to_plan(cp: Compiled, routes: list[RouteSpec]) -> Plan:
    names = [p.name for p in cp.problem.pools]
    policy = policy_from_routes(cp, routes)
    return Plan(
        entries=plan_entries(cp.problem, policy),
        routes=tuple(
            Route(
                flow=cp.problem.flows[r.flow].name,
                cohort=r.cohort,
                share=r.share,
                first_step=r.first_step,
                hops=tuple(Hop(epoch=e, pool=names[c]) for e, c in r.hops),
            )
            for r in routes
        ),
    )


def plan_flows(problem: Problem, params: PlannerParams | None = None) -> PlanResult:
    """Plan routing and backlog for every epoch of ``problem``."""
    params = params or PlannerParams()
    t0 = time.monotonic()
    deadline = t0 + params.deadline_s if params.deadline_s is not None else None
    cp = compile_problem(problem)
    rng = random.Random(params.seed)
    E = cp.n_epochs
    th = params.split_threshold

    # the first answer: heuristic orderings, last epoch first
    led0 = Ledger(cp)
    first_routes: list[RouteSpec] = []
    for e in reversed(range(E)):
        first_routes += _build(cp, led0, e, None, th)
    first_policy = policy_from_routes(cp, first_routes)
    first_score = simulate_policy(cp, first_policy, detail=False).score

    # Level 3 over Level 2
    ledger = Ledger(cp)
    committed: list[RouteSpec] = []
    evaluations = 0
    timed_out = False
    optimised = 0
    for e in reversed(range(E)):
        if deadline is not None and time.monotonic() >= deadline:
            timed_out = True
            break
        items = epoch_items(cp, e)
        if not items:
            optimised += 1
            continue

        def evaluate(
            order: list[int], e: int = e, items: list[Item] = items, committed: list[RouteSpec] = committed
        ) -> float:
            led = ledger.copy()
            routes = build_epoch(cp, led, items, order, th)
            return simulate_policy(cp, policy_from_routes(cp, committed + routes), start_epoch=e, detail=False).score

        res = steady_state_ga(
            len(items),
            evaluate,
            params.evaluations,
            rng,
            seeds=[heuristic_order(cp, items), utility_order(cp, items)],
            deadline=deadline,
            crossover_rate=params.crossover_rate,
        )
        evaluations += res.evaluations
        routes = build_epoch(cp, ledger, items, res.best, th)
        committed += routes
        optimised += 1
        if res.timed_out:
            timed_out = True
            break
    # epochs not reached: heuristic orderings against the optimised epochs' loads
    for e in reversed(range(E - optimised)):
        committed += _build(cp, ledger, e, None, th)
    policy = policy_from_routes(cp, committed)
    final = simulate_policy(cp, policy)
    routes_out = committed
    if first_score < final.score:
        final = simulate_policy(cp, first_policy)
        routes_out = first_routes
    return PlanResult(
        plan=_to_plan(cp, routes_out),
        result=final,
        first_score=first_score,
        evaluations=evaluations,
        elapsed_s=time.monotonic() - t0,
        timed_out=timed_out,
        epochs_optimised=optimised,
    )


__all__ = ["PlanResult", "PlannerParams", "heuristic_order", "plan_flows", "utility_order"]
