"""JobFlows and FlowPools as typed, validated settings (Montana & Zinky, section 2: a flow's steps, mean run
times, lifespan, utility and routing constraints, 2.1; a cluster's capacity and load-to-throughput map, 2.2;
epochs, 2.4).

The CRDs (``crds/jobflows.yaml``, ``crds/flowpools.yaml``) are the one source of defaults: live objects come
defaulted by the API server, tests and files go through :func:`soda_operator.schema.with_defaults`; nothing here
states a default. A value out of range is refused, never clamped: :func:`flow_of` and :func:`pool_of` raise a
:class:`~..kube.errors.TranslationError` naming the field as the CRD spells it (``spec.epochSeconds``,
``spec.steps[0].runSeconds``, ``spec.loadMap``). The ranges are :mod:`soda_optimizer.flows.limits`' (the CRDs' minimum
and maximum), checked here again for objects stored before the CRDs had them (issue 45).

Derived values, not defaults: a step without ``name`` is ``step-<index>`` (reporting only); a flow without
``horizonEpochs`` looks ahead over its forecast's length (1 epoch without a forecast); a Secret reference without
``namespace`` names the operator's own (:mod:`.kubeconfigs`); a load map gets the paper's implied (0, 0).

Departures from the paper: capacities and arrivals are given per epoch and cycled over the absolute epoch index
(section 2.4's predictions as a periodic schedule); epochs are aligned to the Unix clock (:func:`epoch_index`); a
pool is a node selector of this cluster or a member cluster reached through a kubeconfig Secret.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from soda_optimizer import flows as fl
from soda_optimizer.flows import limits as lim
from soda_optimizer.flows.limits import FLOW_RANGES as FR
from soda_optimizer.flows.limits import POOL_RANGES as PR

from ..kube.errors import TranslationError, from_validation

LOCAL = ""  # the cluster key of the cluster kubesoda runs in

Capacity = Annotated[float, Field(ge=PR["capacity[]"][0], le=PR["capacity[]"][1], allow_inf_nan=False)]
Forecast = Annotated[float, Field(ge=FR["arrivals.forecast[]"][0], le=FR["arrivals.forecast[]"][1], allow_inf_nan=False)]
LabelValue = Annotated[str, Field(max_length=lim.MAX_LABEL_VALUE)]
AnnotationValue = Annotated[str, Field(max_length=lim.MAX_ANNOTATION_VALUE)]
Namespace = Annotated[str, Field(max_length=lim.MAX_LABEL_VALUE, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")]


class _Model(BaseModel):
    """The CRD's shape: field aliases are the CRD's names, so an error's place is the field the user wrote."""

    model_config = ConfigDict(frozen=True, extra="ignore")


class _SecretRef(_Model):
    namespace: str | None = None  # absent: the operator's namespace
    name: str = Field(min_length=1)
    key: str = Field(min_length=1)


class _Cluster(_Model):
    kubeconfig_secret: _SecretRef = Field(alias="kubeconfigSecret")


class _LoadPoint(_Model):
    load: float = Field(ge=PR["loadMap[].load"][0], le=PR["loadMap[].load"][1], allow_inf_nan=False)
    throughput: float = Field(ge=PR["loadMap[].throughput"][0], le=PR["loadMap[].throughput"][1], allow_inf_nan=False)


class _Pool(_Model):
    node_selector: dict[str, LabelValue] | None = Field(None, alias="nodeSelector", max_length=lim.MAX_SELECTOR_LABELS)
    cluster: _Cluster | None = None
    allowed_namespaces: list[Namespace] | None = Field(None, alias="allowedNamespaces", max_length=lim.MAX_ALLOWED_NAMESPACES)
    capacity: list[Capacity] = Field(min_length=1)
    load_map: list[_LoadPoint] = Field(alias="loadMap")

    @model_validator(mode="after")
    def _somewhere(self) -> _Pool:
        if self.node_selector is None and self.cluster is None:
            raise ValueError("a FlowPool needs a nodeSelector (this cluster) or a cluster (a member cluster)")
        return self


class _TemplateMeta(_Model):
    """A step's ``jobTemplate.metadata``: its labels and annotations go on the step's Job, within Kubernetes' limits."""

    model_config = ConfigDict(frozen=True, extra="allow")
    labels: dict[str, LabelValue] | None = Field(None, max_length=lim.MAX_TEMPLATE_LABELS)
    annotations: dict[str, AnnotationValue] | None = Field(None, max_length=lim.MAX_TEMPLATE_ANNOTATIONS)


class _JobTemplate(_Model):
    """A step's ``jobTemplate``: the metadata checked, the rest (a batch/v1 JobSpec) kept as written."""

    model_config = ConfigDict(frozen=True, extra="allow")
    metadata: _TemplateMeta | None = None


class _Step(_Model):
    name: str | None = None
    run_seconds: float = Field(alias="runSeconds", ge=FR["steps[].runSeconds"][0], le=FR["steps[].runSeconds"][1], allow_inf_nan=False)
    pools: list[str] = Field(min_length=1)
    job_template: _JobTemplate | None = Field(None, alias="jobTemplate")


class _Arrivals(_Model):
    mode: Literal["external", "forecast"]
    forecast: list[Forecast] | None = None


class _Planner(_Model):
    evaluations: int = Field(ge=FR["planner.evaluations"][0], le=FR["planner.evaluations"][1])
    deadline_seconds: float = Field(alias="deadlineSeconds", gt=FR["planner.deadlineSeconds"][0], le=FR["planner.deadlineSeconds"][1],
                                    allow_inf_nan=False)
    seed: int = Field(ge=FR["planner.seed"][0], le=FR["planner.seed"][1])


class _Flow(_Model):
    steps: list[_Step] = Field(min_length=1)
    utility: float = Field(gt=FR["utility"][0], le=FR["utility"][1], allow_inf_nan=False)
    lifespan_seconds: float = Field(alias="lifespanSeconds", ge=FR["lifespanSeconds"][0], le=FR["lifespanSeconds"][1], allow_inf_nan=False)
    epoch_seconds: float = Field(alias="epochSeconds", ge=FR["epochSeconds"][0], le=FR["epochSeconds"][1], allow_inf_nan=False)
    horizon_epochs: int | None = Field(None, alias="horizonEpochs", ge=FR["horizonEpochs"][0], le=FR["horizonEpochs"][1])
    arrivals: _Arrivals
    planner: _Planner


@dataclass(frozen=True)
class PoolSpec:
    """A FlowPool: where (selector, member cluster) and how much (capacity per epoch, cycled; load map)."""

    name: str
    selector: Mapping[str, str]
    kubeconfig: tuple[str, str, str] | None  # Secret (namespace, name, key) of a member cluster; namespace "": the operator's
    capacity: tuple[float, ...]
    load_map: tuple[tuple[float, float], ...]
    generation: int = 0
    allowed: frozenset[str] | None = None  # spec.allowedNamespaces: the namespaces whose flows may name it; None: every one

    def allows(self, namespace: str) -> bool:
        """Whether a JobFlow of ``namespace`` may name this pool (the administrator's ``allowedNamespaces``)."""
        return self.allowed is None or namespace in self.allowed

    @property
    def cluster(self) -> str:
        """The cluster key step Jobs of this pool live in: LOCAL, or the pool's name for a member cluster."""
        return self.name if self.kubeconfig else LOCAL

    def capacity_at(self, k: int) -> float:
        return self.capacity[k % len(self.capacity)] if self.capacity else 0.0


@dataclass(frozen=True)
class StepSpec:
    name: str
    run_seconds: float
    pools: tuple[str, ...]
    template: Mapping[str, Any]  # the Job template: {"metadata": {...}, "spec": {...}}


@dataclass(frozen=True)
class FlowSpec:
    """A JobFlow. ``forecast`` is jobs per epoch, cycled over the absolute epoch index."""

    namespace: str
    name: str
    steps: tuple[StepSpec, ...]
    utility: float
    lifespan_s: float
    forecast: tuple[float, ...]
    mode: str  # "forecast" (kubesoda creates the jobs) or "external"
    epoch_s: float
    horizon: int
    evaluations: int
    deadline_s: float
    seed: int
    generation: int = 0

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def forecast_at(self, k: int) -> float:
        return self.forecast[k % len(self.forecast)] if self.forecast else 0.0


def _spec(model: type[_Model], body: Mapping[str, Any]) -> Any:
    try:
        return model.model_validate(body.get("spec") or {})
    except ValidationError as e:
        raise from_validation(e, "spec") from e


def pool_of(body: Mapping[str, Any]) -> PoolSpec:
    """A FlowPool object as a :class:`PoolSpec`; :class:`TranslationError` naming the field it cannot take."""
    md = body.get("metadata") or {}
    sp: _Pool = _spec(_Pool, body)
    ref = sp.cluster.kubeconfig_secret if sp.cluster else None
    pts = tuple(sorted((p.load, p.throughput) for p in sp.load_map))
    if not pts or pts[0] != (0.0, 0.0):
        pts = ((0.0, 0.0), *pts)
    try:
        fl.LoadMap(points=pts)
    except ValidationError as e:
        raise TranslationError("spec.loadMap", str(e.errors()[0]["msg"]).removeprefix("Value error, ").removeprefix("LoadMap.points: ")) from e
    return PoolSpec(
        name=str(md.get("name", "")),
        selector=dict(sp.node_selector or {}),
        kubeconfig=(ref.namespace or "", ref.name, ref.key) if ref else None,
        capacity=tuple(sp.capacity),
        load_map=pts,
        generation=int(md.get("generation") or 0),
        allowed=frozenset(sp.allowed_namespaces) if sp.allowed_namespaces is not None else None,
    )


def _template(t: _JobTemplate | None) -> dict[str, Any]:
    """A step's Job template as written (a copy: the object's body is not shared)."""
    return copy.deepcopy(t.model_dump(exclude_unset=True)) if t is not None else {}


def flow_of(body: Mapping[str, Any]) -> FlowSpec:
    """A JobFlow object as a :class:`FlowSpec`; :class:`TranslationError` naming the field it cannot take."""
    md = body.get("metadata") or {}
    sp: _Flow = _spec(_Flow, body)
    forecast = tuple(sp.arrivals.forecast or ())
    return FlowSpec(
        namespace=str(md.get("namespace") or "default"),
        name=str(md.get("name", "")),
        steps=tuple(StepSpec(name=s.name or f"step-{i}", run_seconds=s.run_seconds, pools=tuple(s.pools),
                             template=_template(s.job_template)) for i, s in enumerate(sp.steps)),
        utility=sp.utility,
        lifespan_s=sp.lifespan_seconds,
        forecast=forecast,
        mode=sp.arrivals.mode,
        epoch_s=sp.epoch_seconds,
        horizon=sp.horizon_epochs or len(forecast) or 1,
        evaluations=sp.planner.evaluations,
        deadline_s=sp.planner.deadline_seconds,
        seed=sp.planner.seed,
        generation=int(md.get("generation") or 0),
    )


def pools_of(bodies: Iterable[Mapping[str, Any]]) -> dict[str, PoolSpec]:
    """The FlowPools that can be taken, by name; the others report their error in their own status."""
    out = {}
    for b in bodies:
        try:
            p = pool_of(b)
        except TranslationError:
            continue
        out[p.name] = p
    return out


def flows_of(bodies: Iterable[Mapping[str, Any]]) -> list[FlowSpec]:
    """The JobFlows that can be taken, by key; the others report their error in their own status."""
    out = []
    for b in bodies:
        try:
            out.append(flow_of(b))
        except TranslationError:
            continue
    return sorted(out, key=lambda f: f.key)


def check_shared(flow: FlowSpec, pools: Mapping[str, PoolSpec]) -> None:
    """A :class:`TranslationError` naming ``spec.steps[i].pools`` when a step names a FlowPool that is not shared
    with the flow's namespace (its ``allowedNamespaces`` leaves it out): FlowPools are cluster-scoped and an
    administrator's, so a tenant's flow competes only in pools the administrator shares with it (issue 45).
    Missing pools are :func:`missing_pools`' concern."""
    for i, s in enumerate(flow.steps):
        refused = sorted(p for p in s.pools if p in pools and not pools[p].allows(flow.namespace))
        if refused:
            raise TranslationError(f"spec.steps[{i}].pools", f"FlowPool {', '.join(refused)} is not shared with namespace "
                                   f"{flow.namespace} (its spec.allowedNamespaces)")


def shared(flow: FlowSpec, pools: Mapping[str, PoolSpec]) -> bool:
    """Whether every pool the flow names that exists is shared with its namespace (:func:`check_shared`)."""
    try:
        check_shared(flow, pools)
    except TranslationError:
        return False
    return True


def missing_pools(flow: FlowSpec, pools: Mapping[str, PoolSpec]) -> list[str]:
    """The pools the flow's steps name that do not exist (or could not be taken)."""
    return sorted({p for s in flow.steps for p in s.pools} - set(pools))


def epoch_index(now: float, epoch_s: float) -> int:
    """The epoch of Unix time ``now``: epoch k covers [k x epoch_s, (k + 1) x epoch_s)."""
    return int(math.floor(now / epoch_s + 1e-9))
