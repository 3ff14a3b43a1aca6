"""Shared helpers for the job-flow tests (tiny problems and plan summaries)."""

from __future__ import annotations

from collections import defaultdict

from soda_optimizer.flows import Flow as FlowModel
from soda_optimizer.flows import FlowEpochStats, JobCounts, LoadMap, Plan, PolicyEntry, Pool, Problem, SimResult, Step

FLAT1 = LoadMap(points=((0.0, 0.0), (1.0, 1.0), (2.0, 1.0)))


def pool(name: str, cap: float, epochs: int = 1, load_map: LoadMap = FLAT1) -> Pool:
    return Pool(name=name, capacity=(cap,) * epochs, load_map=load_map)


def flow(
    name: str,
    pools: list[str],
    rate: float | tuple[float, ...],
    utility: float = 1.0,
    lifespan: float = 1e4,
    epochs: int = 1,
) -> FlowModel:
    rates = rate if isinstance(rate, tuple) else (rate,) * epochs
    steps = tuple(Step(name=f"s{i}", run_time=1.0, pools=(p,)) for i, p in enumerate(pools))
    return FlowModel(name=name, steps=steps, lifespan=lifespan, utility=utility, arrival_rate=rates)


def admit_all(problem: Problem, epochs: range | None = None) -> Plan:
    """Every fresh cohort goes straight through its steps (first allowed pool), from its arrival epoch on: an entry
    in every epoch of its life (issue 50: a job served late, after waiting in a queue, goes on to its next step)."""
    entries = []
    tau = problem.epoch_length
    for a in epochs if epochs is not None else range(problem.epochs):
        for f in problem.flows:
            for e in range(a, problem.epochs):
                if e > a and e * tau >= (a + 1) * tau + f.lifespan:
                    break
                for s, st in enumerate(f.steps):
                    entries.append(PolicyEntry(epoch=e, flow=f.name, cohort=a, step=s, pools={st.pools[0]: 1.0}))
    return Plan(entries=tuple(entries))


def stats(
    res: SimResult, flow: str | None = None, epoch: int | None = None, cohort: int | None = None
) -> FlowEpochStats:
    """Sum of the flow records matching the filters, as one record."""
    tot: dict[str, float] = defaultdict(float)
    for s in res.flows:
        if (
            (flow is None or s.flow == flow)
            and (epoch is None or s.epoch == epoch)
            and (cohort is None or s.cohort == cohort)
        ):
            for k in JobCounts.model_fields:
                tot[k] += getattr(s, k)
    return FlowEpochStats(epoch=-1, flow=flow or "*", cohort=-1, **tot)
