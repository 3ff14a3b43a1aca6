"""The Scenario: everything one SODA epoch consumes (SODA paper, sections 3, 5.1.1, 5.2.1, 5.3.1, 5.4.1).

A :class:`Scenario` is an immutable, validated snapshot: processing nodes (PNs, here Kubernetes
Nodes), stream templates (PEs joined by streams), jobs (a rank, required or not, alternative
templates), the scheduling policy, and the previous epoch's decisions (candidate nodes and
fractions) that the incremental-change constraints are measured against.

Units: mips everywhere (a Node's mips = cores x mips-per-core); rates are in the domain of the
value functions (tuples/s); times are seconds.

Identifiers:
- a job is named by ``Job.name`` (the operator uses ``namespace/name``);
- a PE of a job is named globally by ``pe_id(job, pe)`` = ``"job:pe"``;
- a stream inside a template is named by ``stream_id(src, dst)`` = ``"src->dst"``.

Departures from the paper, on purpose:
- the risk r_{p,n} of constraint 16 is factored as ``PE.risk * Node.risk`` (the paper leaves it a
  free matrix; Kubernetes has no place to write one);
- the Chinese-wall sets X_n of constraint 18 are cluster-wide (``Policy.incompatible_colors``)
  unless a node names its own;
- H_{p,n} (usable mips of PE p on PN n) is ``min(H_n, mips_per_core)`` for single-threaded PEs,
  ``max_instances``-limited PEs are otherwise unrestricted.

Bad input raises :class:`pydantic.ValidationError` whose message names the object (job, template,
PE or stream) and the field.

Over 400 lines on purpose: the model's classes validate against each other (a job's templates, a
stream's PEs, the policy's bounds), and the Scenario owns the look-ups every stage shares (the
glued graph per choice, the cached job graph); split, each part would import the others.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator, Mapping
from datetime import datetime
from enum import Enum
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

from . import bounds

if TYPE_CHECKING:
    import networkx as nx

    from .graph import GluedGraph

NonNeg = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Pos = Annotated[float, Field(gt=0)]  # may be infinite (an absent maximum)
PosFinite = Annotated[float, Field(gt=0, allow_inf_nan=False)]


# the numbers a tenant writes, finite and bounded (:mod:`.bounds`)
Weight = Annotated[float, Field(ge=0, le=bounds.MAX_WEIGHT, allow_inf_nan=False)]
Slope = Annotated[float, Field(ge=0, le=bounds.MAX_SLOPE, allow_inf_nan=False)]
Rate = Annotated[float, Field(ge=0, le=bounds.MAX_RATE, allow_inf_nan=False)]
Value = Annotated[float, Field(ge=0, le=bounds.MAX_VALUE, allow_inf_nan=False)]
Selectivity = Annotated[float, Field(ge=0, le=bounds.MAX_SELECTIVITY, allow_inf_nan=False)]
RF = Annotated[float, Field(gt=0, le=bounds.MAX_RF, allow_inf_nan=False)]
BytesPerTuple = Annotated[float, Field(gt=0, le=bounds.MAX_BYTES_PER_TUPLE, allow_inf_nan=False)]
# issue 45: the other numbers of the CRDs' specs, bounded as the CRDs bound them (:mod:`.bounds`)
Count = Annotated[int, Field(ge=0, le=bounds.MAX_COUNT)]
PosCount = Annotated[int, Field(ge=1, le=bounds.MAX_COUNT)]
Mips = Annotated[float, Field(ge=0, le=bounds.MAX_MIPS, allow_inf_nan=False)]
EpochS = Annotated[float, Field(gt=0, le=bounds.MAX_EPOCH_S, allow_inf_nan=False)]
DeadlineS = Annotated[float, Field(gt=0, le=bounds.MAX_DEADLINE_S, allow_inf_nan=False)]
ObjectiveWeight = Annotated[float, Field(ge=0, le=bounds.MAX_OBJECTIVE_WEIGHT, allow_inf_nan=False)]
Link = Annotated[float, Field(ge=bounds.MIN_LINK, le=bounds.MAX_LINK, allow_inf_nan=False)]
Budget = Annotated[float, Field(ge=0, le=bounds.MAX_BUDGET, allow_inf_nan=False)]
MeritNumber = Annotated[float, Field(ge=-bounds.MAX_MERIT, le=bounds.MAX_MERIT, allow_inf_nan=False)]
Rank = Annotated[int, Field(ge=1, le=bounds.MAX_RANK)]


def pe_id(job: str, pe: str) -> str:
    """Global PE identifier used by every stage and the Plan."""
    return f"{job}:{pe}"


def split_pe_id(pid: str) -> tuple[str, str]:
    """(job, pe) of a :func:`pe_id` (job names may hold '/', never ':')."""
    job, _, pe = pid.rpartition(":")
    return job, pe


def stream_id(src: str, dst: str) -> str:
    """Identifier of the stream src -> dst inside one template."""
    return f"{src}->{dst}"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# --------------------------------------------------------------------------- value & resource functions


class ValueFunction(_Frozen):
    """A non-negative value function of a stream's rate (paper section 3).

    - ``zero``: 0 everywhere (the common case for non-terminal streams);
    - ``linear``: slope * rate;
    - ``capped``: slope * min(rate, cap);
    - ``piecewise``: linear interpolation through ``points`` (x ascending, starting at x=0),
      constant after the last point.
    """

    kind: Literal["zero", "linear", "capped", "piecewise"] = "linear"
    slope: Slope = 1.0
    cap: Rate | None = None
    points: tuple[tuple[Rate, Value], ...] = ()

    @model_validator(mode="after")
    def _check(self) -> ValueFunction:
        if self.kind == "capped" and self.cap is None:
            raise ValueError("value function 'capped' needs field 'cap'")
        if self.kind == "piecewise":
            if len(self.points) < 2:
                raise ValueError("value function 'piecewise' needs at least 2 'points'")
            xs = [p[0] for p in self.points]
            if xs[0] != 0 or any(b <= a for a, b in zip(xs, xs[1:])):
                raise ValueError("value function 'points' must start at x=0 with strictly increasing x")
        return self


Point = tuple[Annotated[float, Field(ge=0, le=bounds.MAX_RATE, allow_inf_nan=False)],
              Annotated[float, Field(ge=0, le=bounds.MAX_RATE, allow_inf_nan=False)]]


class ResourceFunction(_Frozen):
    """A PE's resource function (paper section 3, 6.1): output rate from input rate and mips.

    Default form ``r_o = min(a * r_i * m, b * r_i)`` where r_i combines the input streams' rates
    (``combine``: sum, min or max); for a source PE, r_i is its primal rate and the form is
    ``r_o = min(a * m, r_i)`` (the paper's ``min(A m, primal rate)``), i.e. ``a`` is output per mips.
    For transforms, ``a`` is output tuples per (input tuple x mips) and ``b`` the output per input
    tuple at saturation.

    **Curves** (issue 38; a departure: the paper has only the form above). With ``need`` given the
    function is the one the learner's family describes (:mod:`.learn.family`): ``need`` is the mips
    needed to process ``p`` tuples/s, points ``(p, mips)`` from ``p = 0`` (a background CPU term when
    its mips are positive), strictly increasing and convex (a cost per tuple that may grow with the
    rate); ``output`` the output rate when ``p`` tuples/s are processed, points ``(p, r_o)`` from
    ``p = 0``, non-decreasing (a selectivity that depends on the rate); without ``output``,
    ``r_o = b p``. Both are piecewise linear, extended past their last point by their last segment.
    With ``m`` mips and input (or primal) rate ``r_i`` the PE processes ``p = min(r_i, need^-1(m))``
    (nothing below ``need(0)``), emits ``output(p)`` and uses ``min(m, need(r_i))`` mips: its output
    is a concave, piecewise-linear function of its mips for each input rate, and the mips that
    saturate it grow with its input rate. ``a`` and ``b`` then hold the paper's form matched at a
    typical input rate, for whatever reads only them (the fluid data plane, the CRD's rendering).
    Without ``need`` the function is exactly the paper's form (every scenario and CRD before).
    """

    a: RF = 1.0
    b: RF = 1.0
    combine: Literal["sum", "min", "max"] = "sum"
    need: tuple[Point, ...] = ()
    output: tuple[Point, ...] = ()
    # issue 52 item 3: False when the saturation is only the bound a learned model's samples imply
    # (a PE seen at one allocation: it saturates there or further): the knee (soda/knee.py) does not
    # trim goals to it. Declared functions count as identified
    saturation_identified: bool = True

    @model_validator(mode="after")
    def _check_curves(self) -> ResourceFunction:
        if self.output and not self.need:
            raise ValueError("resource function: 'output' needs 'need'")
        for name, pts, strict in (("need", self.need, True), ("output", self.output, False)):
            if not pts:
                continue
            xs, ys = [p[0] for p in pts], [p[1] for p in pts]
            if len(pts) < 2 or xs[0] != 0 or any(b <= a for a, b in zip(xs, xs[1:])):
                raise ValueError(f"resource function '{name}': at least 2 points, from rate 0, rates strictly increasing")
            if any((b <= a) if strict else (b < a) for a, b in zip(ys, ys[1:])):
                raise ValueError(f"resource function '{name}': values must {'strictly ' if strict else ''}increase with the rate")
        if self.need:
            sl = [(b[1] - a[1]) / (b[0] - a[0]) for a, b in zip(self.need, self.need[1:])]
            if any(t < s * (1 - 1e-9) for s, t in zip(sl, sl[1:])):
                raise ValueError("resource function 'need': must be convex (the mips per tuple/s never fall as the rate grows)")
        return self

    @property
    def curved(self) -> bool:
        """True when the function is given by curves (``need``), False for the paper's form."""
        return bool(self.need)

    # vectorised evaluation (numpy arrays or floats, broadcast); ``source``: r_i is the primal rate
    def rate_out(self, r_i: Any, m: Any, source: bool = False) -> Any:
        """The output rate at input (a source's primal) rate ``r_i`` and ``m`` mips."""
        import numpy as np

        if not self.need:
            return np.minimum(self.a * m, r_i) if source else np.minimum(self.a * r_i * m, self.b * r_i)
        return self._out(np.minimum(r_i, _pwl(self.need, m, inverse=True)))

    def mips_used(self, r_i: Any, m: Any, source: bool = False) -> Any:
        """The mips a PE uses of the ``m`` it has at input rate ``r_i``."""
        import numpy as np

        return np.minimum(m, self.saturation(r_i, source))

    def saturation(self, r_i: Any, source: bool = False) -> Any:
        """The mips beyond which the output at input rate ``r_i`` no longer grows (``b/a`` for the
        paper's transforms, whatever the rate; ``r_i/a`` for its sources; ``need(r_i)`` with curves)."""
        import numpy as np

        if not self.need:
            return np.asarray(r_i, dtype=float) / self.a if source else np.full(np.shape(r_i), self.b / self.a)
        return _pwl(self.need, r_i)

    def max_output(self, r_i: Any, source: bool = False) -> Any:
        """The output at input rate ``r_i`` with unbounded mips (an upper bound over allocations)."""
        import numpy as np

        if not self.need:
            return np.asarray(r_i, dtype=float) * (1.0 if source else self.b)
        return self._out(np.asarray(r_i, dtype=float))

    def scaled(self, parameter: Literal["a", "b"], factor: float) -> ResourceFunction:
        """The function with the paper's ``parameter`` times ``factor`` and the curves moved alike:
        ``a`` (output per mips) x f divides the need by f; ``b`` (output at saturation) x f
        multiplies both the output and the mips that reach it by f (the same cost per tuple)."""
        upd: dict[str, Any] = {parameter: getattr(self, parameter) * factor}
        if self.need:
            k = 1.0 / factor if parameter == "a" else factor
            upd["need"] = tuple((p, y * k) for p, y in self.need)
            if parameter == "b":
                out = self.output or ((0.0, 0.0), (1.0, self.b))
                upd["output"] = tuple((p, y * factor) for p, y in out)
        return self.model_copy(update=upd)

    def _out(self, p: Any) -> Any:
        return _pwl(self.output, p) if self.output else self.b * p


def _pwl(points: tuple[tuple[float, float], ...], x: Any, inverse: bool = False) -> Any:
    """The piecewise-linear function through ``points`` at ``x`` (its inverse with ``inverse``),
    extended past the last point by the last segment; the inverse is 0 below the first value."""
    import numpy as np

    xp, fp = _arrays(points)
    if inverse:
        xp, fp = fp, xp
    x = np.asarray(x, dtype=float)
    slope = (fp[-1] - fp[-2]) / (xp[-1] - xp[-2])
    with np.errstate(invalid="ignore", over="ignore"):
        past = fp[-1] + (x - xp[-1]) * slope if slope > 0 else np.full(x.shape, fp[-1])
    y = np.interp(x, xp, fp, left=0.0 if inverse else fp[0])
    return np.where(x > xp[-1], past, y)


@functools.lru_cache(maxsize=4096)
def _arrays(points: tuple[tuple[float, float], ...]) -> tuple[Any, Any]:
    import numpy as np

    a = np.array(points, dtype=float)
    return a[:, 0].copy(), a[:, 1].copy()


# --------------------------------------------------------------------------- templates


DEFAULT_PE_MEMORY = 64 * 2**20  # a PE instance's memory when its template names none (64Mi)


class PEKind(str, Enum):
    source = "source"
    transform = "transform"
    sink = "sink"


class PE(_Frozen):
    """A processing element of a template (one logical operator)."""

    name: str = Field(min_length=1)
    kind: PEKind = PEKind.transform
    min_mips: NonNeg = 0.0  # m_p
    max_mips: Pos = float("inf")  # M_p
    memory_bytes: Annotated[float, Field(ge=0, le=bounds.MAX_MEMORY, allow_inf_nan=False)] = DEFAULT_PE_MEMORY  # each instance's memory request = limit (rigid, never resized)
    rf: ResourceFunction = ResourceFunction()
    single_threaded: bool = False  # H_{p,n} <= one core of n
    all_or_nothing: bool = False  # microW legal fraction set {0, 1} of H_{p,n}
    max_instances: PosCount | None = None
    licenses: tuple[str, ...] = ()  # floating licenses (constraint 13)
    integrity: Annotated[int, Field(ge=-bounds.MAX_INTEGRITY, le=bounds.MAX_INTEGRITY)] = 0  # i_p (constraints 14, 15)
    risk: Annotated[float, Field(ge=0, le=bounds.MAX_RISK, allow_inf_nan=False)] = 0.0  # r_{p,n} = risk * node.risk (constraint 16)
    color: str | None = None  # Chinese wall (constraints 17, 18)
    node_selector: dict[str, str] = Field(default_factory=dict)  # resource matching A_{p,n}
    isolated: bool = False  # exlocated from every other PE (constraint 28)
    fairness: Annotated[float, Field(ge=0, le=bounds.MAX_FAIRNESS, allow_inf_nan=False)] = 0.0  # phi_p (constraint 19)
    min_candidates: PosCount = 1  # m~_p (constraint 25)
    max_candidates: PosCount | None = None  # M~_p (constraint 26)
    max_change: Count | None = None  # Delta-bar_p (constraint 23)

    @model_validator(mode="after")
    def _check(self) -> PE:
        if self.min_mips > self.max_mips:
            raise ValueError(f"PE '{self.name}': minMips {self.min_mips} > maxMips {self.max_mips}")
        if self.max_candidates is not None and self.min_candidates > self.max_candidates:
            raise ValueError(f"PE '{self.name}': minCandidates > maxCandidates")
        return self


def floor_mips(pe: PE, floor: float) -> float:
    """The mips a PE of an admitted job gets at least: its minimum, and the policy's floor
    (``Policy.pe_floor_mips``) capped by its maximum. Admitted means every PE runs."""
    return max(pe.min_mips, min(floor, pe.max_mips))


def floor_units(pe: PE, unit: float, floor: float) -> int:
    """:func:`floor_mips` in atomic units of ``unit`` mips, and at least one unit."""
    return max(1, math.ceil(floor_mips(pe, floor) / unit - 1e-9))


class Stream(_Frozen):
    """A stream src -> dst inside one template, with weight, value function and selectivity."""

    src: str
    dst: str
    weight: Weight = 0.0
    value: ValueFunction = ValueFunction(kind="zero")
    selectivity: Selectivity = 1.0  # share of the producer's output rate carried by this stream
    bytes_per_tuple: BytesPerTuple = 1.0  # traffic t(p1,p2) = rate * bytes_per_tuple

    @property
    def id(self) -> str:
        return stream_id(self.src, self.dst)


class PrimalInput(_Frozen):
    """An external (primal) stream feeding a source PE."""

    pe: str
    rate: Rate


class Export(_Frozen):
    """A stream a template offers to other jobs: the output of ``pe`` under ``name``."""

    name: str = Field(min_length=1)
    pe: str
    selectivity: Selectivity = 1.0


class Sink(_Frozen):
    """A terminal output of a PE (a stream leaving the system) that carries value."""

    pe: str
    weight: Weight = 1.0
    value: ValueFunction = ValueFunction(kind="linear")


class Template(_Frozen):
    """A stream template: a PE/stream graph (paper Fig. 1 and 3)."""

    name: str = Field(min_length=1)
    pes: tuple[PE, ...] = Field(min_length=1)
    streams: tuple[Stream, ...] = ()
    sinks: tuple[Sink, ...] = ()  # terminal, valued outputs
    primal_inputs: tuple[PrimalInput, ...] = ()
    exports: tuple[Export, ...] = ()
    allow_cycles: bool = False

    @model_validator(mode="after")
    def _check(self) -> Template:
        names = [p.name for p in self.pes]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"template '{self.name}': duplicate PE names {sorted(dup)}")
        known = set(names)
        for i, s in enumerate(self.streams):
            for end in ("src", "dst"):
                if getattr(s, end) not in known:
                    raise ValueError(
                        f"template '{self.name}': streams[{i}].{end} names unknown PE '{getattr(s, end)}'"
                    )
        ids = [s.id for s in self.streams]
        if len(set(ids)) != len(ids):
            raise ValueError(f"template '{self.name}': duplicate streams")
        for field, items in (("primalInputs", self.primal_inputs), ("exports", self.exports), ("sinks", self.sinks)):
            for i, it in enumerate(items):
                ref = getattr(it, "pe")  # noqa: B009
                if ref not in known:
                    raise ValueError(f"template '{self.name}': {field}[{i}].pe names unknown PE '{ref}'")
        if not self.allow_cycles:
            cyc = _find_cycle(names, [(s.src, s.dst) for s in self.streams])
            if cyc:
                raise ValueError(f"template '{self.name}': streams form a cycle {' -> '.join(cyc)} (allowCycles is false)")
        return self

    def pe(self, name: str) -> PE:
        for p in self.pes:
            if p.name == name:
                return p
        raise KeyError(name)


# --------------------------------------------------------------------------- jobs


class Import(_Frozen):
    """This job consumes another job's exported stream into one of its PEs (inter-job glue)."""

    job: str  # the exporting job's name
    export: str  # the export's name in that job's template
    pe: str  # the consuming PE of this job
    weight: Weight = 0.0
    value: ValueFunction = ValueFunction(kind="zero")


class Job(_Frozen):
    """A job: alternative templates in preference order, a rank (1 best), required or not."""

    name: str = Field(min_length=1)
    rank: Rank = 1
    required: bool = False
    owner: str = ""
    created: str = ""  # creation time (RFC 3339, sorts as text): the tie-break of the admission rule
    templates: tuple[str, ...] = Field(min_length=1)
    chosen_template: str | None = None  # fixed once the job runs
    weight_overrides: dict[str, Weight] = Field(default_factory=dict)  # stream id or "sink:pe" -> weight
    imports: tuple[Import, ...] = ()
    colocate: tuple[tuple[str, str], ...] = ()
    exlocate: tuple[tuple[str, str], ...] = ()

    @model_validator(mode="after")
    def _check(self) -> Job:
        if self.chosen_template is not None and self.chosen_template not in self.templates:
            raise ValueError(f"job '{self.name}': chosenTemplate '{self.chosen_template}' is not one of its templates")
        return self

    @property
    def incumbent(self) -> bool:
        """Admitted by an earlier epoch (its template is fixed from then on)."""
        return self.chosen_template is not None

    @property
    def candidate_templates(self) -> tuple[str, ...]:
        """Templates macroQ may choose: only the chosen one once the job runs (paper 5.1.1)."""
        return (self.chosen_template,) if self.chosen_template else self.templates


# --------------------------------------------------------------------------- nodes & policy


class Node(_Frozen):
    """A processing node (PN): a Kubernetes Node."""

    name: str = Field(min_length=1)
    mips: PosFinite  # H_n
    mips_per_core: PosFinite = 1000.0
    memory_bytes: Pos = float("inf")  # memory kubesoda's PE instances may request here (inf: not counted)
    rack: str = "default"  # SODA cluster kappa_n
    zone: str = "default"
    labels: dict[str, str] = Field(default_factory=dict)
    ready: bool = True
    schedulable: bool = True
    max_pes: int | None = Field(default=None, ge=0)  # V_n (constraint 24)
    integrity_range: int | None = Field(default=None, ge=0)  # Delta_n (constraints 14, 15)
    risk: NonNeg = 1.0
    incompatible_colors: tuple[tuple[str, str], ...] | None = None  # X_n; None = policy default

    @property
    def cores(self) -> float:
        return self.mips / self.mips_per_core

    @property
    def usable(self) -> bool:
        return self.ready and self.schedulable


class LinkCapacities(_Frozen):
    """Capacities K_e of the network tree's links, in traffic units (bytes/s)."""

    rack_uplink: Link = 1.25e9  # 10 Gb/s
    zone_uplink: Link = 5.0e9  # 40 Gb/s
    overrides: dict[str, Link] = Field(default_factory=dict)  # "rack:<name>" or "zone:<name>" -> K_e


class Budgets(_Frozen):
    """Per-owner processing budgets for a long interval (months, quarters) and what each owner has
    spent so far, in mips x seconds (BDRM, BDWM: :mod:`.managers.budget`). An owner missing from
    ``allocated`` has the ``default`` allocation; ``""`` is the owner of jobs that name none.
    ``compare``: remaining budgets are compared as a fraction of the allocation (every budget
    depletes at the same rate) or in absolute mips x seconds (the paper's literal words)."""

    allocated: dict[str, Budget] = Field(default_factory=dict)
    spent: dict[str, NonNeg] = Field(default_factory=dict)  # spec's (at most MAX_BUDGET, the CRD) + the operator's charges
    default: Budget = 0.0
    compare: Literal["fraction", "absolute"] = "fraction"


class MeritWeights(_Frozen):
    """Weights of the MDRM's merit terms (lower merit = better rank; :mod:`.managers.merit`)."""

    rank: MeritNumber = 1.0  # the job's declared rank
    owner: MeritNumber = 0.0  # the owner's external priority
    age: MeritNumber = 0.0  # hours since creation (negative: ageing)


class MeritWindow(_Frozen):
    """Weights in force on some days (ISO weekdays, 1 = Monday) from ``start_hour`` to ``end_hour``
    (end excluded; start > end wraps past midnight), in the time zone of ``Scenario.now``."""

    days: tuple[Annotated[int, Field(ge=1, le=7)], ...] = (1, 2, 3, 4, 5, 6, 7)
    start_hour: Annotated[int, Field(ge=0, le=23)] = 0
    end_hour: Annotated[int, Field(ge=1, le=24)] = 24
    weights: MeritWeights = MeritWeights()

    @model_validator(mode="after")
    def _check(self) -> MeritWindow:
        if self.start_hour == self.end_hour:
            raise ValueError(f"merit window: startHour = endHour = {self.start_hour} is empty (a whole day is 0 to 24)")
        return self


class Merit(_Frozen):
    """The MDRM's configuration: default weights, time windows (the first that matches wins),
    bucket size B, and the owners' external priorities (lower = more important)."""

    weights: MeritWeights = MeritWeights()
    windows: tuple[MeritWindow, ...] = ()
    bucket: Annotated[float, Field(ge=bounds.MIN_BUCKET, le=bounds.MAX_BUCKET, allow_inf_nan=False)] = 1.0  # B
    owner_priority: dict[str, MeritNumber] = Field(default_factory=dict)
    default_owner_priority: MeritNumber = 0.0


class Policy(_Frozen):
    """The SchedulingPolicy: epochs, deadlines, objective weights and global constraints."""

    macro_epoch_s: EpochS = 60.0
    micro_epoch_s: EpochS = 10.0
    macroq_deadline_s: DeadlineS = 2.0  # issue 39: on LSD at 30 nodes 5 s gained 0.07% importance for 2.7 s more
    macrow_deadline_s: DeadlineS = 10.0
    microq_deadline_s: DeadlineS = 1.0
    microw_deadline_s: DeadlineS = 1.0
    # macroQ resolution: fix the number of atomic units, or the unit size in mips (reproducible
    # runs, oracle comparisons); None = the granularity loop refines while the deadline allows.
    resolution_units: Annotated[int, Field(ge=1, le=bounds.MAX_UNITS)] | None = None
    unit_mips: Annotated[float, Field(gt=0, le=bounds.MAX_MIPS, allow_inf_nan=False)] | None = None
    # macroW objective weights W1..W4 (average/max node utilisation, average/max link utilisation)
    w1: ObjectiveWeight = 1.0
    w2: ObjectiveWeight = 1.0
    w3: ObjectiveWeight = 1.0
    w4: ObjectiveWeight = 1.0
    links: LinkCapacities = LinkCapacities()
    licenses: dict[str, Count] = Field(default_factory=dict)  # lambda_l
    global_risk_limit: Annotated[float, Field(ge=0, le=bounds.MAX_RISK_LIMIT, allow_inf_nan=False)] | None = None  # R
    incompatible_colors: tuple[tuple[str, str], ...] = ()  # X_n for every node
    max_candidate_change: Count | None = None  # Delta-bar (constraint 22)
    overallocation: Annotated[float, Field(ge=1.0, le=bounds.MAX_OVERALLOCATION, allow_inf_nan=False)] = 1.5  # candidate capacity vs goal (phi default)
    # microW churn limits (constraints 47-53)
    micro_max_change: Mips | None = None  # delta: total |f - f_hat| x H_n in mips
    micro_max_change_per_pe: Mips | None = None  # delta_p
    micro_max_touched_nodes: Count | None = None  # zeta
    # every PE of an admitted job gets at least max(its minimum, this, one resolution unit) mips:
    # admitted means every PE runs (a job whose floors do not fit is not admitted)
    pe_floor_mips: Mips = 10.0
    # CPU cores per node kept free for what kubesoda does not see coming (headroom); a node offers
    # kubesoda its allocatable CPU minus the requests of other pods bound to it minus this
    node_reserved_cores: NonNeg = 0.0
    # Scenario -> Scenario steps before the policy (soda_optimizer.managers); only implemented
    # managers are accepted. budgets: read by the budget managers (BDRM, BDWM); merit: by the MDRM
    rank_manager: Literal["static", "budget", "merit"] = "static"
    weight_manager: Literal["static", "simple", "budget"] = "static"
    # the administrator's word, after the rank manager: "namespace/name" -> rank (SODA 6.2: "ranks
    # ... overridable by the site administrator"; the SchedulingPolicy is cluster-scoped, so a
    # namespace's users cannot write it)
    rank_overrides: dict[str, Rank] = Field(default_factory=dict)
    budgets: Budgets = Budgets()
    merit: Merit = Merit()
    # the allocation policy (soda_optimizer.policy): SODA, or a placement baseline of the paper's
    # comparisons placing macroQ's goals without SODA's macroW/microW
    placement: Literal["soda", "rr", "rand", "spread"] = "soda"


class PreviousState(_Frozen):
    """What the last epochs decided, read back from the cluster (never from memory)."""

    candidates: dict[str, tuple[str, ...]] = Field(default_factory=dict)  # pe_id -> node names (v-hat)
    fractions: dict[str, dict[str, float]] = Field(default_factory=dict)  # pe_id -> node -> f-hat


# --------------------------------------------------------------------------- the scenario


class _Memo(dict[str, Any]):
    """A Scenario's look-ups: derived from its fields, so two Scenarios with equal fields are equal
    whatever either has cached (pydantic compares private attributes too)."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Memo)

    __hash__ = None  # type: ignore[assignment]


class Scenario(_Frozen):
    """One epoch's input. Cross-references are checked here, so every stage can trust them."""

    nodes: tuple[Node, ...] = ()
    templates: tuple[Template, ...] = ()
    jobs: tuple[Job, ...] = ()
    policy: Policy = Policy()
    previous: PreviousState = PreviousState()
    now: datetime | None = None  # the epoch's time (MDRM's time windows and job ages); None = timeless

    @model_validator(mode="after")
    def _check(self) -> Scenario:
        for kind, items in (("node", self.nodes), ("template", self.templates), ("job", self.jobs)):
            names = [x.name for x in items]
            dup = sorted({n for n in names if names.count(n) > 1})
            if dup:
                raise ValueError(f"duplicate {kind} names: {dup}")
        tmpl = {t.name: t for t in self.templates}
        jobs = {j.name: j for j in self.jobs}
        for j in self.jobs:
            for i, t in enumerate(j.templates):
                if t not in tmpl:
                    raise ValueError(f"job '{j.name}': templates[{i}] names unknown template '{t}'")
            pes_all = {p.name for t in j.templates for p in tmpl[t].pes}
            for i, imp in enumerate(j.imports):
                src = jobs.get(imp.job)
                if src is None:
                    raise ValueError(f"job '{j.name}': imports[{i}].job names unknown job '{imp.job}'")
                if not any(e.name == imp.export for t in src.templates for e in tmpl[t].exports):
                    raise ValueError(
                        f"job '{j.name}': imports[{i}].export '{imp.export}' is not exported by job '{imp.job}'"
                    )
                if imp.pe not in pes_all:
                    raise ValueError(f"job '{j.name}': imports[{i}].pe names unknown PE '{imp.pe}'")
            for field, pairs in (("colocate", j.colocate), ("exlocate", j.exlocate)):
                for i, (a, b) in enumerate(pairs):
                    for x in (a, b):
                        if x not in pes_all:
                            raise ValueError(f"job '{j.name}': {field}[{i}] names unknown PE '{x}'")
        cyc = _cycle_of(self.job_graph())
        if cyc:
            raise ValueError(f"jobs import each other in a cycle: {' -> '.join(cyc)}")
        return self

    # look-ups, built once per Scenario (it is immutable); the one owner of "which template, which
    # job, which glued graph" for every stage
    _memo: _Memo | None = PrivateAttr(default=None)

    def _cache(self) -> dict[str, Any]:
        # model_copy() shares private attributes with the copy: the owner check keeps a copy
        # (another Scenario) from reading the original's cache. Read off the private dict itself
        # (issue 49: pydantic's ``__getattr__``, three per call, cost 4.4 us a look-up, 0.05 s of
        # macroQ's first answer on 10x LSD, 11,273 calls)
        memo = self.__pydantic_private__.get("_memo")  # type: ignore[union-attr]
        if memo is None or memo.get("owner") != id(self):
            memo = self._memo = _Memo(owner=id(self), templates={t.name: t for t in self.templates},
                                      jobs={j.name: j for j in self.jobs}, glued={})
        return memo

    def job_graph(self) -> nx.DiGraph:
        """The job import graph, built once per Scenario: a node per job, an edge exporter ->
        importer per import. Shared by every stage: read it (or take a view), never change it."""
        memo = self._cache()
        if "job_graph" not in memo:
            import networkx as nx  # lazily: the extender reads Scenarios without it

            g = nx.DiGraph()
            g.add_nodes_from(j.name for j in self.jobs)
            g.add_edges_from((imp.job, j.name) for j in self.jobs for imp in j.imports)
            memo["job_graph"] = g
        return memo["job_graph"]  # type: ignore[no-any-return]

    def template(self, name: str) -> Template:
        return self._cache()["templates"][name]  # type: ignore[no-any-return]

    def job(self, name: str) -> Job:
        return self._cache()["jobs"][name]  # type: ignore[no-any-return]

    def glued(self, choice: Mapping[str, str]) -> GluedGraph:
        """The glued graph of a job/template choice (:func:`.graph.glue`), built once per choice."""
        from .graph import glue

        memo = self._cache()["glued"]
        key = tuple(sorted(choice.items()))
        if key not in memo:
            if len(memo) > 4096:
                memo.clear()
            memo[key] = glue(self, choice)
        return memo[key]  # type: ignore[no-any-return]

    def usable_nodes(self) -> Iterator[Node]:
        return (n for n in self.nodes if n.usable)

    def pe_mips_cap(self, single_threaded: bool) -> float:
        """The most mips one PE can get anywhere: its instances all run in one rack (macroW's
        constraints 6-11), on one core each if it is single-threaded. The glued graph caps every
        PE's ``max_mips`` with it, so macroQ never plans a goal that no rack can host."""
        memo = self._cache()
        key = f"pe_cap:{single_threaded}"
        if key not in memo:
            racks: dict[str, float] = {}
            for n in self.usable_nodes():
                racks[n.rack] = racks.get(n.rack, 0.0) + (min(n.mips, n.mips_per_core) if single_threaded else n.mips)
            memo[key] = max(racks.values(), default=0.0)
        return memo[key]  # type: ignore[no-any-return]

    @property
    def capacity_mips(self) -> float:
        """H: the total processing power of usable nodes."""
        return float(sum(n.mips for n in self.usable_nodes()))


def _find_cycle(nodes: list[str], edges: list[tuple[str, str]]) -> list[str] | None:
    import networkx as nx

    g = nx.DiGraph()
    g.add_nodes_from(nodes)
    g.add_edges_from(edges)
    return _cycle_of(g)


def _cycle_of(g: nx.DiGraph) -> list[str] | None:
    import networkx as nx

    try:
        cyc = nx.find_cycle(g)
    except nx.NetworkXNoCycle:
        return None
    return [u for u, _ in cyc] + [cyc[-1][1]]
