"""The range of every number a JobFlow or FlowPool holds, the work caps of a plan derived from them, and the cap of a
flow's forecast at what its pools can serve (issue 45). One table for the CRDs' ``minimum``/``maximum``
(``crds/jobflows.yaml``, ``crds/flowpools.yaml``; tests/flows_op/test_flows_bounds.py holds them equal), the operator's
own check of objects stored before the bounds, and the caps of :mod:`.route`. Pure: no Kubernetes, no I/O.

The paper (Montana & Zinky) states no bounds. What a tenant's number controls:

- the route builder cuts a flow into N subflows (section 3.1), N growing with arrival rate x run time / capacity:
  ``forecast: [1e308]`` was a loop of 1e307 route builds. N is capped at :data:`MAX_SPLITS` (the last subflows then
  load a pool above the threshold: a coarser multipath policy), and every route build checks the plan's deadline;
- a flow's forecast is what the planner believes will arrive: a number that costs its writer nothing moved every
  flow sharing a pool (``forecast: [1e4]`` beside a flow of 4 jobs per epoch left that flow 0.016 of its jobs,
  utility-ordered service sharing a pool pro rata). :func:`cap_arrivals` caps each flow's arrival rate at what its
  pools could serve if it had them to itself at their peak (:func:`serve_rate`): the jobs above it would be dropped
  whatever the plan, so the cap costs the flow nothing the planner could have earned, and another flow on the same
  pool shares it with at most one full pool's worth of claims. The operator reports it in the JobFlow's condition
  and generates (``mode: forecast``) no more than that.
"""

from __future__ import annotations

from dataclasses import dataclass

from .model import Flow, Pool, Problem

MAX_SPLITS = 64  #: subflows of one (flow, epoch) item in the route builder (section 3.1's N)

# maps a tenant writes that end up on Kubernetes objects: Kubernetes' own limits (a label value 63 characters,
# annotations 256 KiB in all: 32 values of 4096 characters and their keys fit)
MAX_SELECTOR_LABELS = 16  #: a FlowPool's ``nodeSelector``
MAX_LABEL_VALUE = 63  #: a label value (``nodeSelector``, a step's ``jobTemplate.metadata.labels``)
MAX_TEMPLATE_LABELS = 64  #: a step's ``jobTemplate.metadata.labels``
MAX_TEMPLATE_ANNOTATIONS = 32  #: a step's ``jobTemplate.metadata.annotations``
MAX_ANNOTATION_VALUE = 4096  #: one of those annotations' values
MAX_ALLOWED_NAMESPACES = 1000  #: a FlowPool's ``allowedNamespaces``

#: JobFlow spec field path (as the CRD spells it, ``[]`` for list items) -> (minimum, maximum)
FLOW_RANGES: dict[str, tuple[float, float]] = {
    "steps[].runSeconds": (1.0, 1e6),  # a second (a Job runs no shorter; the model's minutes stay > 0) to ~11.6 days
    "utility": (0.0, 1e9),  # exclusive minimum
    "lifespanSeconds": (1.0, 3.2e7),  # a second (5e-324 rounded to a lifespan of 0 minutes) to ~1 year
    "epochSeconds": (1.0, 86400.0),
    "horizonEpochs": (1, 1000),
    "arrivals.forecast[]": (0.0, 1e5),  # jobs per epoch
    "planner.evaluations": (1, 100000),
    "planner.deadlineSeconds": (0.0, 60.0),  # exclusive minimum
    "planner.seed": (0, 2147483647),
}
#: FlowPool spec field path -> (minimum, maximum)
POOL_RANGES: dict[str, tuple[float, float]] = {
    "capacity[]": (0.0, 1e5),  # standard servers
    "loadMap[].load": (0.0, 1e3),
    "loadMap[].throughput": (0.0, 1.0),
}
EXCLUSIVE_MINIMUM = frozenset({"utility", "planner.deadlineSeconds"})


@dataclass(frozen=True)
class Capped:
    """A flow whose arrival rate was capped: the most it asked for in an epoch and the cap (jobs per minute)."""

    flow: str
    asked: float
    cap: float


def serve_rate(flow: Flow, pools: dict[str, Pool]) -> float:
    """Jobs per minute the flow's pools could complete if the flow had them to itself, each at its peak capacity and
    full throughput: the smallest over its steps of sum(capacity x max throughput) / run time (0: a step has no pool)."""
    rate = float("inf")
    for s in flow.steps:
        servers = sum(max(pools[p].capacity, default=0.0) * max(y for _, y in pools[p].load_map.points) for p in s.pools if p in pools)
        rate = min(rate, servers / s.run_time)
    return 0.0 if rate == float("inf") else rate


def cap_arrivals(problem: Problem) -> tuple[Problem, tuple[Capped, ...]]:
    """The problem with each flow's arrival rate capped at :func:`serve_rate` (a flow no pool serves is left as it
    is: the planner refuses it as unroutable), and the flows capped."""
    pools = {p.name: p for p in problem.pools}
    flows, capped = [], []
    for f in problem.flows:
        cap = serve_rate(f, pools)
        asked = max(f.arrival_rate, default=0.0)
        if cap > 0 and asked > cap * (1 + 1e-9):
            capped.append(Capped(f.name, asked, cap))
            f = f.model_copy(update={"arrival_rate": tuple(min(r, cap) for r in f.arrival_rate)})
        flows.append(f)
    if not capped:
        return problem, ()
    return problem.model_copy(update={"flows": tuple(flows)}), tuple(capped)


__all__ = ["EXCLUSIVE_MINIMUM", "FLOW_RANGES", "MAX_ALLOWED_NAMESPACES", "MAX_ANNOTATION_VALUE", "MAX_LABEL_VALUE", "MAX_SELECTOR_LABELS", "MAX_SPLITS",
           "MAX_TEMPLATE_ANNOTATIONS", "MAX_TEMPLATE_LABELS", "POOL_RANGES", "Capped", "cap_arrivals", "serve_rate"]
