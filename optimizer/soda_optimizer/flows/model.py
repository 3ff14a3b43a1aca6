"""The job-flow model (Montana & Zinky, "Optimizing Routing and Backlogs for Job Flows", section 2).

Inputs (frozen pydantic models, validated):
- :class:`LoadMap` -- the piecewise-linear load-to-throughput map of section 2.2 (Fig. 2), both axes normalised by
  the pool capacity;
- :class:`Pool` -- a cluster (here: a pool of nodes, a zone, a member cluster) with a capacity per epoch in standard
  task-minutes per minute (= number of standard servers) and its map;
- :class:`Step` / :class:`Flow` -- a flow of identical jobs (section 2.1): ordered steps with a mean run time and the
  pools allowed for each, a mean lifespan, a utility, and an arrival rate per epoch (jobs per minute);
- :class:`Waiting` -- jobs already in the system at time 0: in a pool's input queue or in backlog (section 2.2);
- :class:`Problem` -- pools, flows, waiting jobs, the epochs (section 2.4) and the deferral constant P of eq. (2).

Outputs:
- :class:`Plan` -- the routing/backlog policy of section 2.3: per (epoch, flow, cohort, step) the probabilities of the
  allowed pools and of backlog, plus the single-path routes of the subflows it was built from (section 3.1);
- :class:`SimResult` -- what the fluid simulator (:mod:`.sim`) predicts for a plan, and the score of eq. (2).

Units: minutes and jobs. Capacities in task-minutes per minute; loads and throughputs reported both in task-minutes
per minute and normalised.

Departures from the paper, on purpose:
- a policy entry is keyed by the *cohort* (the epoch in which its jobs arrived) as well as by (epoch, flow, step):
  the paper keys it by (epoch, flow, step) only, but its own Level 1 gives each subflow an epoch per step, so jobs
  of one flow that arrived in different epochs need different decisions in one epoch (backlogged jobs of epoch 1
  released in epoch 3 while the fresh jobs of epoch 3 are backlogged);
- waiting jobs at time 0 are cohort -1 (they arrived before the horizon); their deadlines are uniform on the
  remaining-lifespan range given.
"""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

NonNeg = Annotated[float, Field(ge=0, allow_inf_nan=False)]
PosFinite = Annotated[float, Field(gt=0, allow_inf_nan=False)]

_M = TypeVar("_M", bound=BaseModel)

BACKLOG = "backlog"  #: the pseudo-destination of a policy entry: hold the jobs until a later epoch
INITIAL_COHORT = -1  #: cohort of the jobs waiting at time 0


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


def built(cls: type[_M], fields: dict[str, Any]) -> _M:
    """An instance of a frozen model from fields the planner or simulator computed (already of the right types):
    pydantic's validation costs 4.5 us and ``model_construct`` 4.9 us an object, this 2 us, which at 20,000 flows is
    the difference between 3 s and 1.5 s for a plan's 720,000 entries (issue 36). Never for user input."""
    o = cls.__new__(cls)
    object.__setattr__(o, "__dict__", fields)
    object.__setattr__(o, "__pydantic_fields_set__", set(fields))
    object.__setattr__(o, "__pydantic_extra__", None)
    object.__setattr__(o, "__pydantic_private__", None)
    return o


class LoadMap(_Frozen):
    """Normalised load -> normalised throughput, piecewise linear, flat after the last point (section 2.2, Fig. 2)."""

    points: tuple[tuple[NonNeg, NonNeg], ...]

    @model_validator(mode="after")
    def _check(self) -> LoadMap:
        pts = self.points
        if len(pts) < 2 or pts[0] != (0.0, 0.0):
            raise ValueError("LoadMap.points: at least two points, starting at (0, 0)")
        for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
            if x1 <= x0:
                raise ValueError("LoadMap.points: loads must increase")
            if y1 < y0:
                raise ValueError("LoadMap.points: throughput must not decrease with load")
        for x, y in pts:
            if y > x + 1e-12 or y > 1.0:
                raise ValueError("LoadMap.points: throughput must stay <= load and <= 1 (section 2.2)")
        return self

    def __call__(self, load: float) -> float:
        pts = self.points
        if load <= 0.0:
            return 0.0
        for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
            if load <= x1:
                return y0 + (y1 - y0) * (load - x0) / (x1 - x0)
        return pts[-1][1]

    @property
    def max_throughput(self) -> float:
        return self.points[-1][1]


class Pool(_Frozen):
    """A cluster of section 2.2: capacity per epoch (task-minutes per minute) and its load-to-throughput map."""

    name: str = Field(min_length=1)
    capacity: tuple[NonNeg, ...]
    load_map: LoadMap


class Step(_Frozen):
    """One task of a job: mean run time on a standard server (minutes) and the allowed pools (section 2.3)."""

    name: str = Field(min_length=1)
    run_time: PosFinite
    pools: tuple[str, ...] = Field(min_length=1)


class Flow(_Frozen):
    """A flow of identical jobs (section 2.1). ``arrival_rate`` is jobs per minute in each epoch."""

    name: str = Field(min_length=1)
    steps: tuple[Step, ...] = Field(min_length=1)
    lifespan: PosFinite
    utility: PosFinite
    arrival_rate: tuple[NonNeg, ...]
    labels: dict[str, str] = Field(default_factory=dict)


class Waiting(_Frozen):
    """Jobs of a flow already in the system at time 0, before step ``step``: in ``pool``'s input queue, or in
    backlog when ``pool`` is None. Their deadlines are uniform on [min_remaining, max_remaining] minutes from now."""

    flow: str
    step: int = Field(ge=0)
    pool: str | None = None
    jobs: PosFinite
    min_remaining: PosFinite
    max_remaining: PosFinite

    @model_validator(mode="after")
    def _check(self) -> Waiting:
        if self.max_remaining < self.min_remaining:
            raise ValueError("Waiting: max_remaining < min_remaining")
        return self


class Problem(_Frozen):
    """Everything the planner and the simulator consume.

    ``discount_per_hour`` is P of eq. (2) per hour of deferral (the paper gives no value)."""

    pools: tuple[Pool, ...] = Field(min_length=1)
    flows: tuple[Flow, ...] = Field(min_length=1)
    epochs: int = Field(ge=1)
    epoch_length: PosFinite = 240.0
    discount_per_hour: float = Field(default=0.995, gt=0, lt=1)
    waiting: tuple[Waiting, ...] = ()

    @model_validator(mode="after")
    def _check(self) -> Problem:
        names = [p.name for p in self.pools]
        if len(set(names)) != len(names):
            raise ValueError("Problem.pools: duplicate pool name")
        fnames = [f.name for f in self.flows]
        if len(set(fnames)) != len(fnames):
            raise ValueError("Problem.flows: duplicate flow name")
        known = set(names)
        for p in self.pools:
            if len(p.capacity) != self.epochs:
                raise ValueError(f"pool {p.name}: capacity needs one value per epoch ({self.epochs})")
        for f in self.flows:
            if len(f.arrival_rate) != self.epochs:
                raise ValueError(f"flow {f.name}: arrival_rate needs one value per epoch ({self.epochs})")
            for s in f.steps:
                unknown = set(s.pools) - known
                if unknown:
                    raise ValueError(f"flow {f.name} step {s.name}: unknown pools {sorted(unknown)}")
        by_name = {f.name: f for f in self.flows}
        for w in self.waiting:
            if w.flow not in by_name:
                raise ValueError(f"waiting jobs: unknown flow {w.flow}")
            fl = by_name[w.flow]
            if w.step >= len(fl.steps):
                raise ValueError(f"waiting jobs of {w.flow}: step {w.step} out of range")
            if w.pool is not None and w.pool not in fl.steps[w.step].pools:
                raise ValueError(f"waiting jobs of {w.flow}: pool {w.pool} not allowed for step {w.step}")
        return self

    def pool_index(self) -> dict[str, int]:
        return {p.name: i for i, p in enumerate(self.pools)}

    def flow_index(self) -> dict[str, int]:
        return {f.name: i for i, f in enumerate(self.flows)}


class PolicyEntry(_Frozen):
    """Where the jobs of ``flow`` that arrived in epoch ``cohort`` go before step ``step`` during ``epoch``:
    probabilities per pool, ``backlog`` held for a later epoch (section 2.3, Fig. 3), and ``refused`` dropped now
    (ours: the share of jobs no legal route can complete, refused rather than sent where they would only take
    capacity from others)."""

    epoch: int = Field(ge=0)
    flow: str
    cohort: int = Field(ge=INITIAL_COHORT)
    step: int = Field(ge=0)
    pools: dict[str, NonNeg]
    backlog: NonNeg = 0.0
    refused: NonNeg = 0.0

    @model_validator(mode="after")
    def _check(self) -> PolicyEntry:
        total = sum(self.pools.values()) + self.backlog + self.refused
        if abs(total - 1.0) > 1e-6:
            raise ValueError(f"policy entry {self.flow}/{self.cohort}/{self.step}@{self.epoch}: sums to {total}")
        return self


class Hop(_Frozen):
    """One step of a single-path route: executed in ``epoch`` at ``pool``."""

    epoch: int
    pool: str


class Route(_Frozen):
    """The single-path route of one subflow (section 3.1): ``share`` of the cohort's jobs, one hop per step from
    ``first_step`` on."""

    flow: str
    cohort: int
    share: PosFinite
    first_step: int = 0
    hops: tuple[Hop, ...]


class Unroutable(_Frozen):
    """A flow (or one cohort of it) that no route can complete: step ``step`` (index ``step_index``) has no allowed
    pool of positive capacity while its jobs live. Its jobs are refused as a whole and take no capacity."""

    flow: str
    step: str
    step_index: int
    cohort: int | None = None  #: None: every cohort (no allowed pool of the step has capacity in any epoch)
    reason: str


class Plan(_Frozen):
    """A routing/backlog policy for every epoch, and the routes it was aggregated from."""

    entries: tuple[PolicyEntry, ...]
    routes: tuple[Route, ...] = ()


class JobCounts(_Frozen):
    """Counts of jobs, the one statistics record of the simulator (eq. (2)'s d and b among them).

    ``arrived``: fresh arrivals; ``admitted``: sent to a pool for the first step; ``completed``: finished their
    last step; ``dropped``: deadline passed (the d of eq. (2)), including, in the last epoch, jobs still in the
    system when the horizon ends; ``backlogged``: put into backlog; ``released``: taken out of backlog into a
    pool; ``held``: jobs in backlog (the b of eq. (2))."""

    arrived: float = 0.0
    admitted: float = 0.0
    completed: float = 0.0
    dropped: float = 0.0
    backlogged: float = 0.0
    released: float = 0.0
    held: float = 0.0


class FlowEpochStats(JobCounts):
    """What happens during ``epoch`` to the jobs of ``flow`` that arrived in epoch ``cohort``: the
    :class:`JobCounts` of those jobs."""

    epoch: int
    flow: str
    cohort: int


class PoolEpochStats(_Frozen):
    """Load and throughput of a pool during an epoch, in task-minutes per minute and normalised by capacity."""

    epoch: int
    pool: str
    capacity: float
    load: float
    throughput: float
    jobs_in: float  #: jobs per minute entering the pool
    jobs_out: float  #: jobs per minute completing their step at the pool


class SimResult(_Frozen):
    """The fluid simulator's prediction for a plan and its score (eq. (2), lower is better)."""

    score: float
    score_by_epoch: tuple[float, ...]
    flows: tuple[FlowEpochStats, ...]
    pools: tuple[PoolEpochStats, ...]
    left_at_horizon: float  #: jobs still queued or backlogged when the horizon ends (charged as dropped)
