"""CRD objects <-> optimizer Scenario/Plan: the only module that knows both worlds.

Objects are plain dicts as the API server (or a YAML file) gives them. Units are converted here:
CPU quantities (``500m``, ``2``, ``1.5``) become mips. A Node's mips are its allocatable cores x
its ``kubesoda.io/mips-per-core`` label (default 1000). A PE's ``minCpu``/``maxCpu`` are in cores
of a reference node of ``REFERENCE_MIPS_PER_CORE`` mips per core (the label's default), since a
PE's needs are stated before anyone knows where it will run.

Names: a StreamJob is ``namespace/name`` in the Scenario; its template references resolve in its
namespace (``namespace/template``); an import's ``job`` may be ``name`` (same namespace) or
``namespace/name``.

Bad objects never cost another job its place: :func:`scenario_from_objects` drops each bad object
with one :class:`ObjectError` (file, kind, namespace/name, field, message) and builds the Scenario
from the rest; jobs that depend on a dropped object are dropped with their own error.

Over 400 lines on purpose: this is the one module that knows both models, and its translations
(nodes, templates, jobs, the policy, the previous state) share the error paths, the bounds and the
unit conversions; the reverse direction (Scenario -> objects) is :mod:`.render`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from pydantic import ValidationError

from soda_optimizer import bounds
from soda_optimizer.model import (
    PE,
    Export,
    Import,
    Job,
    LinkCapacities,
    Node,
    Policy,
    PreviousState,
    PrimalInput,
    ResourceFunction,
    Scenario,
    Sink,
    Stream,
    Template,
    ValueFunction,
)

# the API group, the field error and the quantities are the kube package's; crd re-exports them
# because every SODA module names them through the translation (crd.GROUP, crd.TranslationError)
from ..kube.api import API_VERSION as API_VERSION
from ..kube.api import GROUP as GROUP
from ..kube.api import VERSION as VERSION
from ..kube.errors import TranslationError as TranslationError
from ..kube.errors import from_validation
from ..kube.pods import LABEL_JOB as LABEL_JOB
from ..kube.pods import TERMINAL, job_of, requests
from ..kube.quantities import cores as cores
from ..kube.quantities import memory as memory
from ..kube.quantities import shown
from . import refs, resizes

MIPS_LABEL = "kubesoda.io/mips-per-core"
ZONE_LABEL = "topology.kubernetes.io/zone"
DEFAULT_RACK_LABEL = "kubesoda.io/rack"
REFERENCE_MIPS_PER_CORE = 1000.0
ANN_NODE = "kubesoda.io/node"
ANN_FRACTION = "kubesoda.io/fraction"
LABEL_PE = "kubesoda.io/pe"


T = TypeVar("T")

@dataclass(frozen=True)
class ObjectError:
    kind: str
    name: str  # namespace/name or name
    field: str
    message: str
    source: str | None = None  # file (and document index) when known
    reason: str = "InvalidSpec"  # or "Quarantined": the pipeline guard set the job aside

    def __str__(self) -> str:
        where = f"{self.source}: " if self.source else ""
        fld = f" field {self.field}:" if self.field else ":"
        return f"{where}{self.kind} {self.name}{fld} {self.message}"


def key(obj: Mapping[str, Any]) -> str:
    md = obj.get("metadata") or {}
    ns = md.get("namespace")
    return f"{ns}/{md.get('name')}" if ns else str(md.get("name"))


def _ns(obj: Mapping[str, Any], default: str = "default") -> str:
    return (obj.get("metadata") or {}).get("namespace") or default


# the model's field names as the CRDs spell them (error paths name what the user wrote)
_CRD_NAMES = {"bytes_per_tuple": "bytesPerTuple", "primal_inputs": "primalInputs", "src": "from", "dst": "to", "min_mips": "minCpu",
              "max_mips": "maxCpu", "memory_bytes": "memory", "rf": "resourceFunction", "single_threaded": "singleThreaded",
              "all_or_nothing": "allOrNothing", "max_instances": "maxInstances", "node_selector": "nodeSelector",
              "min_candidates": "minCandidates", "max_candidates": "maxCandidates", "max_change": "maxChange",
              "allow_cycles": "allowCycles", "mips_per_core": f"labels[{MIPS_LABEL}]"}


def _pydantic_error(e: ValidationError, prefix: str = "spec") -> TranslationError:
    return from_validation(e, prefix, _CRD_NAMES)


# ------------------------------------------------------------------------------------ to model


def node_from_object(obj: Mapping[str, Any], rack_label: str = DEFAULT_RACK_LABEL, held_cores: float = 0.0,
                     reserved_cores: float = 0.0, held_memory: float = 0.0, pinned_memory: float | None = None) -> Node:
    """A Node as kubesoda may use it: its allocatable cores minus ``held_cores`` (the requests of
    the other pods bound to it) minus ``reserved_cores`` (the policy's headroom), x mips-per-core;
    its allocatable memory minus ``held_memory`` (theirs), unlimited when the node states none.
    A node left with nothing is not usable; nor is one whose Ready condition is not True, unless
    it is held (:mod:`.disruption`, issue 46: NotReady within its pods' grace, or in a disrupted
    zone): ``pinned_memory`` is then the memory its PE pods hold, and it counts as ready offering
    only that memory, so its instances keep their fractions and no new one is placed there."""
    md, st, sp = obj.get("metadata") or {}, obj.get("status") or {}, obj.get("spec") or {}
    labels = dict(md.get("labels") or {})
    alloc = (st.get("allocatable") or st.get("capacity") or {}).get("cpu", "0")
    try:
        mpc = float(labels.get(MIPS_LABEL, REFERENCE_MIPS_PER_CORE))
    except ValueError as e:
        raise TranslationError(f"metadata.labels[{MIPS_LABEL}]", f"'{shown(labels.get(MIPS_LABEL))}' is not a number") from e
    if not (math.isfinite(mpc) and 0 < mpc <= bounds.MAX_MIPS_PER_CORE):
        raise TranslationError(f"metadata.labels[{MIPS_LABEL}]",
                               f"'{shown(labels.get(MIPS_LABEL))}' is out of range: a number above 0, at most {bounds.MAX_MIPS_PER_CORE:g}")
    c = max(cores(alloc, "status.allocatable.cpu") - held_cores - reserved_cores, 0.0)
    mem_q = (st.get("allocatable") or st.get("capacity") or {}).get("memory")
    mem = float("inf") if mem_q is None else max(memory(mem_q, "status.allocatable.memory") - held_memory, 1.0)
    ready = any(x.get("type") == "Ready" and x.get("status") == "True" for x in st.get("conditions") or [])
    if not st.get("conditions"):
        ready = True  # a node manifest without status (offline planning) counts as ready
    if pinned_memory is not None and not ready:  # held: keeps what runs there, takes nothing new
        ready, mem = True, max(pinned_memory, 1.0)
    try:
        return Node(
            name=md["name"],
            mips=max(c * mpc, 1e-9),
            mips_per_core=mpc,
            memory_bytes=mem,
            rack=labels.get(rack_label, "default"),
            zone=labels.get(ZONE_LABEL, "default"),
            labels=labels,
            ready=ready and c > 0,
            schedulable=not sp.get("unschedulable", False),
        )
    except ValidationError as e:
        raise _pydantic_error(e, "metadata") from e


def _vf(d: Mapping[str, Any] | None, default: str) -> ValueFunction:
    if not d:
        return ValueFunction(kind=default)  # type: ignore[arg-type]
    pts = tuple((float(p["x"]), float(p["y"])) for p in d.get("points") or ())
    return ValueFunction(kind=d.get("kind", "linear"), slope=d.get("slope", 1.0), cap=d.get("cap"), points=pts)


def _each(items: Any, field: str, fn: Callable[[Mapping[str, Any]], T]) -> tuple[T, ...]:
    """``fn`` of each item of the list at ``spec.<field>``; a bad item's error names its index
    (``spec.sinks[0].value.slope``, not the path inside the sub-model alone)."""
    out = []
    for i, it in enumerate(items or ()):
        try:
            out.append(fn(it))
        except ValidationError as e:
            raise _pydantic_error(e, f"spec.{field}[{i}]") from e
        except TranslationError as e:
            raise TranslationError(f"spec.{field}[{i}].{e.field}", e.message) from e
    return tuple(out)


def _valued(make: Callable[..., T], value: Mapping[str, Any] | None, default: str, **kw: Any) -> T:
    """A Stream/Sink with its value function, whose errors name ``value.<field>``."""
    try:
        vf = _vf(value, default)
    except ValidationError as e:
        raise _pydantic_error(e, "value") from e
    return make(value=vf, **kw)


def template_from_object(obj: Mapping[str, Any]) -> Template:
    sp = obj.get("spec") or {}
    name = f"{_ns(obj)}/{(obj.get('metadata') or {}).get('name')}"
    pes = []
    for i, p in enumerate(sp.get("pes") or []):
        rf = p.get("resourceFunction") or {}
        kw: dict[str, Any] = {}
        if "minCpu" in p:
            kw["min_mips"] = cores(p["minCpu"], f"spec.pes[{i}].minCpu") * REFERENCE_MIPS_PER_CORE
        if "maxCpu" in p:
            kw["max_mips"] = cores(p["maxCpu"], f"spec.pes[{i}].maxCpu") * REFERENCE_MIPS_PER_CORE
        if "memory" in p:
            kw["memory_bytes"] = memory(p["memory"], f"spec.pes[{i}].memory")
        for src, dst in (("maxInstances", "max_instances"), ("fairness", "fairness"), ("maxCandidates", "max_candidates"),
                         ("maxChange", "max_change"), ("color", "color")):
            if p.get(src) is not None:
                kw[dst] = p[src]
        try:
            rfn = ResourceFunction(a=rf.get("a", 1.0), b=rf.get("b", 1.0), combine=rf.get("combine", "sum"))
        except ValidationError as e:
            raise _pydantic_error(e, f"spec.pes[{i}].resourceFunction") from e
        try:
            pes.append(
                PE(
                    name=p.get("name", ""),
                    kind=p.get("kind", "transform"),
                    rf=rfn,
                    single_threaded=p.get("singleThreaded", False),
                    all_or_nothing=p.get("allOrNothing", False),
                    licenses=tuple(p.get("licenses") or ()),
                    integrity=p.get("integrity", 0),
                    risk=p.get("risk", 0.0),
                    node_selector=dict(p.get("nodeSelector") or {}),
                    isolated=p.get("isolated", False),
                    min_candidates=p.get("minCandidates", 1),
                    **kw,
                )
            )
        except ValidationError as e:
            raise _pydantic_error(e, f"spec.pes[{i}]") from e
    streams = _each(sp.get("streams"), "streams", lambda s: _valued(
        Stream, s.get("value"), "zero", src=s.get("from", ""), dst=s.get("to", ""), weight=s.get("weight", 0.0),
        selectivity=s.get("selectivity", 1.0), bytes_per_tuple=s.get("bytesPerTuple", 1.0)))
    sinks = _each(sp.get("sinks"), "sinks", lambda s: _valued(Sink, s.get("value"), "linear", pe=s.get("pe", ""), weight=s.get("weight", 1.0)))
    primal = _each(sp.get("primalInputs"), "primalInputs", lambda x: PrimalInput(pe=x.get("pe", ""), rate=x.get("rate", -1)))
    exports = _each(sp.get("exports"), "exports", lambda x: Export(name=x.get("name", ""), pe=x.get("pe", ""), selectivity=x.get("selectivity", 1.0)))
    try:
        return Template(name=name, pes=tuple(pes), streams=streams, sinks=sinks, primal_inputs=primal, exports=exports,
                        allow_cycles=sp.get("allowCycles", False))
    except ValidationError as e:
        raise _pydantic_error(e, "spec") from e


def _job_ref(ref: str, ns: str) -> str:
    return ref if "/" in ref else f"{ns}/{ref}"


_JOB_FIELDS = {"weight_overrides": "weightOverrides", "chosen_template": "chosenTemplate"}


def owners_from(obj: Mapping[str, Any] | None) -> dict[str, tuple[str, ...]]:
    """The administrator's binding of namespaces to owners (SchedulingPolicy ``spec.owners``,
    issue 45): namespace -> the owners its jobs may name, the first one its jobs' default."""
    raw = ((obj or {}).get("spec") or {}).get("owners") or {}
    if not isinstance(raw, Mapping):
        raise TranslationError("spec.owners", "must map a namespace to a list of owner names")
    out: dict[str, tuple[str, ...]] = {}
    for ns, names in raw.items():
        if not isinstance(names, list) or not names or not all(isinstance(x, str) and x for x in names):
            raise TranslationError(f"spec.owners[{shown(ns)}]", "must be a non-empty list of owner names")
        out[str(ns)] = tuple(names)
    return out


def effective_owner(namespace: str, written: Any, owners: Mapping[str, tuple[str, ...]]) -> str:
    """The owner a job of ``namespace`` is planned, ranked and charged as: its ``spec.owner`` when
    the administrator binds that owner to the namespace, else the namespace's first bound owner,
    else (an unbound namespace) the namespace's own name. A tenant never names another's owner."""
    bound = owners.get(namespace) or (namespace,)
    return written if isinstance(written, str) and written in bound else bound[0]


def job_from_object(obj: Mapping[str, Any], owners: Mapping[str, tuple[str, ...]] | None = None) -> Job:
    """A StreamJob as the optimizer plans it; its owner is :func:`effective_owner` under ``owners``
    (the SchedulingPolicy's binding; none: every namespace is its own owner)."""
    sp, st = obj.get("spec") or {}, obj.get("status") or {}
    ns = _ns(obj)
    chosen = st.get("chosenTemplate") if st.get("phase") in ("Admitted", "Running", "Degraded") else None
    imports = _each(sp.get("imports"), "imports", lambda i: Import(job=_job_ref(i.get("job", ""), ns), export=i.get("export", ""),
                                                                    pe=i.get("pe", ""), weight=i.get("weight", 0.0)))
    try:
        return Job(
            name=key({"metadata": {"namespace": ns, "name": (obj.get("metadata") or {}).get("name")}}),
            rank=sp.get("rank", 1),
            required=sp.get("required", False),
            owner=effective_owner(ns, sp.get("owner", ""), owners or {}),
            created=str((obj.get("metadata") or {}).get("creationTimestamp") or ""),
            templates=tuple(f"{ns}/{t}" for t in sp.get("templates") or ()),
            chosen_template=f"{ns}/{chosen}" if chosen else None,
            weight_overrides=dict(sp.get("weightOverrides") or {}),
            imports=imports,
            colocate=tuple(tuple(x) for x in sp.get("colocate") or ()),  # type: ignore[misc]
            exlocate=tuple(tuple(x) for x in sp.get("exlocate") or ()),  # type: ignore[misc]
        )
    except ValidationError as e:
        err = _pydantic_error(e, "spec")
        head, _, rest = err.field.removeprefix("spec.").partition(".")
        if head in _JOB_FIELDS:
            fld = "status.chosenTemplate" if head == "chosen_template" else f"spec.{_JOB_FIELDS[head]}" + (f"[{rest}]" if rest else "")
            raise TranslationError(fld, err.message) from e
        raise err from e


POLICY_FIELDS = {
    "macroEpochSeconds": "macro_epoch_s",
    "microEpochSeconds": "micro_epoch_s",
    "macroQDeadlineSeconds": "macroq_deadline_s",
    "macroWDeadlineSeconds": "macrow_deadline_s",
    "microQDeadlineSeconds": "microq_deadline_s",
    "microWDeadlineSeconds": "microw_deadline_s",
    "resolutionUnits": "resolution_units",
    "unitMips": "unit_mips",
    "peFloorMips": "pe_floor_mips",
    "globalRiskLimit": "global_risk_limit",
    "maxCandidateChange": "max_candidate_change",
    "overallocation": "overallocation",
    "microMaxChangeMips": "micro_max_change",
    "microMaxChangePerPEMips": "micro_max_change_per_pe",
    "microMaxTouchedNodes": "micro_max_touched_nodes",
    "rankManager": "rank_manager",
    "weightManager": "weight_manager",
    "placement": "placement",
}


def policy_from_object(obj: Mapping[str, Any] | None) -> tuple[Policy, str]:
    """The Policy and the rack label key."""
    if not obj:
        return Policy(), DEFAULT_RACK_LABEL
    sp = obj.get("spec") or {}
    kw: dict[str, Any] = {dst: sp[src] for src, dst in POLICY_FIELDS.items() if sp.get(src) is not None}
    ow = sp.get("objectiveWeights") or {}
    kw.update({k: ow[k] for k in ("w1", "w2", "w3", "w4") if k in ow})
    lk = sp.get("links") or {}
    kw["links"] = {"rack_uplink": lk.get("rackUplink", LinkCapacities().rack_uplink),
                   "zone_uplink": lk.get("zoneUplink", LinkCapacities().zone_uplink), "overrides": dict(lk.get("overrides") or {})}
    if sp.get("nodeReservedCpu") is not None:
        kw["node_reserved_cores"] = cores(sp["nodeReservedCpu"], "spec.nodeReservedCpu")
    kw["budgets"] = budgets_from(sp.get("budgets") or {}, (obj.get("status") or {}).get("budgetSpent") or {})
    kw["merit"] = merit_from(sp.get("merit") or {})
    kw["rank_overrides"] = {str(k): v for k, v in (sp.get("rankOverrides") or {}).items()}
    kw["licenses"] = dict(sp.get("licenses") or {})
    kw["incompatible_colors"] = tuple(tuple(x) for x in sp.get("incompatibleColors") or ())
    try:
        return Policy(**kw), sp.get("rackLabel", DEFAULT_RACK_LABEL)
    except ValidationError as e:
        raise from_validation(e, "spec", _POLICY_NAMES) from e


# the Policy's field names as the SchedulingPolicy spells them (an error names what the administrator wrote)
_POLICY_NAMES = {**{dst: src for src, dst in POLICY_FIELDS.items()}, **{w: f"objectiveWeights.{w}" for w in ("w1", "w2", "w3", "w4")},
                 "rack_uplink": "rackUplink", "zone_uplink": "zoneUplink", "node_reserved_cores": "nodeReservedCpu",
                 "rank_overrides": "rankOverrides", "incompatible_colors": "incompatibleColors", "start_hour": "startHour",
                 "end_hour": "endHour", "owner_priority": "ownerPriority", "default_owner_priority": "defaultOwnerPriority"}


def budgets_from(b: Mapping[str, Any], charged: Mapping[str, Any]) -> dict[str, Any]:
    """spec.budgets with what the operator charged so far (status.budgetSpent) added to spent."""
    spent = {str(k): float(v) for k, v in (b.get("spent") or {}).items()}
    for k, v in spent.items():  # the model bounds spent with the charges added: the spec's own bound is the CRD's
        if not (math.isfinite(v) and 0 <= v <= bounds.MAX_BUDGET):
            raise TranslationError(f"spec.budgets.spent[{k}]", f"{shown(v)} is out of range: from 0 to {bounds.MAX_BUDGET:g} mips x seconds")
    for k, v in charged.items():
        spent[str(k)] = spent.get(str(k), 0.0) + float(v)
    out: dict[str, Any] = {"allocated": dict(b.get("allocated") or {}), "spent": spent}
    for k in ("default", "compare"):
        if b.get(k) is not None:
            out[k] = b[k]
    return out


def merit_from(m: Mapping[str, Any]) -> dict[str, Any]:
    """spec.merit in the model's field names (startHour -> start_hour, ...)."""
    def window(w: Mapping[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {"weights": dict(w.get("weights") or {})}
        for src, dst in (("days", "days"), ("startHour", "start_hour"), ("endHour", "end_hour")):
            if w.get(src) is not None:
                out[dst] = tuple(w[src]) if src == "days" else w[src]
        return out

    out: dict[str, Any] = {"weights": dict(m.get("weights") or {}), "windows": tuple(window(w) for w in m.get("windows") or ()),
                           "owner_priority": dict(m.get("ownerPriority") or {})}
    for src, dst in (("bucket", "bucket"), ("defaultOwnerPriority", "default_owner_priority")):
        if m.get(src) is not None:
            out[dst] = m[src]
    return out


def previous_from(jobs: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]]) -> PreviousState:
    """v-hat from the StreamJobs' status, f-hat from the PE pods' annotations (never from memory);
    a pod whose resize the kubelet has not done yet (:mod:`.resizes`) counts the CPU it holds."""
    cands: dict[str, tuple[str, ...]] = {}
    for j in jobs:
        jk = key(j)
        for pe in (j.get("status") or {}).get("pes") or []:
            if pe.get("candidates"):
                cands[f"{jk}:{pe['name']}"] = tuple(pe["candidates"])
    fr: dict[str, dict[str, float]] = {}
    for p in pods:
        md = p.get("metadata") or {}
        lb, an = md.get("labels") or {}, md.get("annotations") or {}
        if LABEL_JOB not in lb or LABEL_PE not in lb or ANN_NODE not in an:
            continue
        if md.get("deletionTimestamp"):
            continue
        pid = f"{md.get('namespace')}/{job_of(md)}:{lb[LABEL_PE]}"
        try:
            f = float(an.get(ANN_FRACTION, 0))
        except ValueError:
            continue
        if resizes.pending(p) is not None:  # asked, not done (issue 46): count what the pod holds
            held, want = resizes.in_force(p), resizes.asked(p)
            if held is not None and want and held != want:
                f *= held / want
        fr.setdefault(pid, {})[an[ANN_NODE]] = f
    return PreviousState(candidates=cands, fractions=fr)


def fingerprints(jobs: Iterable[Mapping[str, Any]], templates: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """job (namespace/name) -> a digest of its spec and its templates' specs: what the tenant
    wrote. The pipeline guard suspects the jobs whose digest changed since the last good plan and
    releases a quarantined job when its digest changes."""
    import hashlib
    import json

    def digest(x: Any) -> str:
        return hashlib.sha256(json.dumps(x, sort_keys=True, default=str).encode()).hexdigest()

    tmpl = {f"{_ns(t)}/{(t.get('metadata') or {}).get('name')}": digest(t.get("spec")) for t in templates}
    out = {}
    for j in jobs:
        sp = j.get("spec") or {}
        refs: list[Any] = sp["templates"] if isinstance(sp.get("templates"), list) else []
        out[f"{_ns(j)}/{(j.get('metadata') or {}).get('name')}"] = digest([sp, [tmpl.get(f"{_ns(j)}/{t}") for t in refs]])
    return out


def _held_by_dropped(pods: Iterable[Mapping[str, Any]], kept: set[str]) -> dict[str, tuple[float, float]]:
    """node -> (CPU cores, memory bytes) requested by the bound, live PE pods of jobs not in ``kept``
    (invalid or quarantined jobs: their pods run on as they are)."""

    extra: dict[str, tuple[float, float]] = {}
    for p in pods:
        md, sp = p.get("metadata") or {}, p.get("spec") or {}
        job = job_of(md)
        if job is None or f"{md.get('namespace')}/{job}" in kept or not sp.get("nodeName") or md.get("deletionTimestamp"):
            continue
        if (p.get("status") or {}).get("phase") in TERMINAL:
            continue
        try:
            c, m = requests(dict(p))
        except (ValueError, TypeError, ArithmeticError):
            continue
        a, b = extra.get(sp["nodeName"], (0.0, 0.0))
        extra[sp["nodeName"]] = (a + c, b + m)
    return extra


_TEMPLATES: dict[str, tuple[int, tuple[Template, dict[str, frozenset[str]]]]] = {}
_TEMPLATES_MAX = 50_000


def _template_cached(obj: Mapping[str, Any], validate: bool) -> tuple[Template, dict[str, frozenset[str]]]:
    """A StreamTemplate's translation and export consent, remembered per uid at its generation (the
    translation reads only the spec, and name and namespace, which a uid never changes; a status
    write bumps the resourceVersion, not the generation). Templates are frozen, so one translation
    serves every epoch until the spec changes: every epoch translated every template again, at 10x
    LSD (1,179 templates) a large share of a micro epoch's CPU (issue 53). One entry per uid, replaced
    when the generation moves. Objects without both (files) and schema-checked ones are not cached;
    errors are not cached either (raised again each time, as before)."""
    md = obj.get("metadata") or {}
    uid, gen = str(md.get("uid") or ""), md.get("generation")
    if validate or not uid or not isinstance(gen, int):
        return template_from_object(obj), refs.export_consent(obj)
    hit = _TEMPLATES.get(uid)
    if hit is not None and hit[0] == gen:
        return hit[1]
    value = (template_from_object(obj), refs.export_consent(obj))
    if len(_TEMPLATES) >= _TEMPLATES_MAX:
        _TEMPLATES.clear()  # a crude bound on deleted templates' entries: the live ones are translated again
    _TEMPLATES[uid] = (gen, value)
    return value


def scenario_from_objects(
    nodes: Iterable[Mapping[str, Any]],
    templates: Iterable[Mapping[str, Any]],
    jobs: Iterable[Mapping[str, Any]],
    policy: Mapping[str, Any] | None = None,
    pods: Iterable[Mapping[str, Any]] = (),
    source: Mapping[str, str] | None = None,
    foreign: Mapping[str, Iterable[tuple[str, float, float]]] | None = None,
    validate: bool = False,
    now: datetime | None = None,
    quarantined: Mapping[str, str] | None = None,
    held_nodes: Mapping[str, float] | None = None,
) -> tuple[Scenario, list[ObjectError]]:
    """Build a Scenario from whatever is valid; one ObjectError per dropped object.

    ``source`` maps an object key ("Kind/namespace/name") to where it came from (a file).
    ``foreign`` maps a node name to the (pod, CPU cores, memory bytes) requests of the other
    workloads' pods bound to it: the node offers kubesoda what they leave. ``validate`` checks each
    object against its schema first (:mod:`.schema`; objects from files, which no API server saw).
    ``now``: the epoch's time (the merit manager's job ages and time windows). ``quarantined``
    maps a job (namespace/name) to why the pipeline guard set it aside (:mod:`soda_optimizer.guard`):
    it is dropped like an invalid job. So is a job :func:`soda_optimizer.screen.screen` names (its
    importance or rates overflow at its largest allocation). The bound pods of every dropped job
    keep running as they are and hold their requests (``foreign``), so nobody else is planned
    onto the CPU they use. ``held_nodes`` maps a NotReady node whose PE pods keep their place
    (:mod:`.disruption`) to the memory they hold (:func:`node_from_object`'s ``pinned_memory``).
    """
    src = source or {}
    errors: list[ObjectError] = []

    def translate(kind: str, obj: Mapping[str, Any], fn: Callable[[], T]) -> T:
        """``fn()``, with the object checked against its schema first when ``validate``; any
        malformed shape the translation trips over becomes a TranslationError (never a crash)."""
        if validate:
            from .. import schema

            why = schema.problem(obj)
            if why is not None:
                fld, _, msg = why.partition(": ")
                raise TranslationError(fld, msg)
        try:
            return fn()
        except TranslationError:
            raise
        except RecursionError as e:
            raise TranslationError("spec", "nested too deeply") from e
        except (AttributeError, TypeError, ValueError, KeyError, IndexError, OverflowError) as e:
            raise TranslationError("spec" if kind != "Node" else "", f"malformed {kind}: {type(e).__name__}: {e}") from e

    def err(kind: str, obj: Mapping[str, Any], e: TranslationError | Exception) -> None:
        fld = e.field if isinstance(e, TranslationError) else ""
        msg = e.message if isinstance(e, TranslationError) else str(e)
        why = e.reason if isinstance(e, TranslationError) else "InvalidSpec"
        errors.append(ObjectError(kind, key(obj), fld, msg, src.get(f"{kind}/{key(obj)}"), why))

    pol, rack_label = Policy(), DEFAULT_RACK_LABEL
    if policy:
        try:
            pol, rack_label = translate("SchedulingPolicy", policy, lambda: policy_from_object(policy))
        except TranslationError as e:
            err("SchedulingPolicy", policy, e)
    owners: dict[str, tuple[str, ...]] = {}
    if policy:
        try:
            owners = owners_from(policy)
        except TranslationError as e:  # reported; meanwhile every namespace is its own owner
            err("SchedulingPolicy", policy, e)
    node_objs = []
    raw_nodes: dict[str, Mapping[str, Any]] = {}

    def node(n: Mapping[str, Any], extra: tuple[float, float] = (0.0, 0.0)) -> Node:
        theirs = list((foreign or {}).get((n.get("metadata") or {}).get("name", ""), ()))
        return node_from_object(n, rack_label, sum(c for _, c, _ in theirs) + extra[0], pol.node_reserved_cores,
                                sum(m for _, _, m in theirs) + extra[1], (held_nodes or {}).get((n.get("metadata") or {}).get("name", "")))

    for n in nodes:
        try:
            node_objs.append(translate("Node", n, lambda n=n: node(n)))  # type: ignore[misc]
            raw_nodes[node_objs[-1].name] = n
        except TranslationError as e:
            err("Node", n, e)
    tmpl = {}
    consent: dict[str, dict[str, frozenset[str]]] = {}  # template -> export -> the other namespaces it is exported to
    bad_tmpl: dict[str, str] = {}  # namespace/name -> why it was dropped
    for t in templates:
        try:
            tt, consent_t = translate("StreamTemplate", t, lambda t=t: _template_cached(t, validate))  # type: ignore[misc]
            tmpl[tt.name] = tt
            consent[tt.name] = consent_t
        except TranslationError as e:
            err("StreamTemplate", t, e)
            bad_tmpl[f"{_ns(t)}/{(t.get('metadata') or {}).get('name')}"] = f"{e.field}: {e.message}" if e.field else e.message
    job_objs: dict[str, tuple[Job, Mapping[str, Any]]] = {}
    for j in jobs:
        try:
            jj = translate("StreamJob", j, lambda j=j: job_from_object(j, owners))  # type: ignore[misc]
            job_objs[jj.name] = (jj, j)
        except TranslationError as e:
            err("StreamJob", j, e)
    for name, why in (quarantined or {}).items():
        if name in job_objs:
            err("StreamJob", job_objs.pop(name)[1], TranslationError("", f"planning failed with this job ({why}); it is set aside, "
                                                                           "its running pods kept as they are, until it or its templates change",
                                                                     "Quarantined"))
    refs.drop_unresolved(job_objs, tmpl, bad_tmpl, lambda o, e: err("StreamJob", o, e), consent)
    # numbers that overflow only in combination (a chain of selectivities, weight x slope x rate)
    if job_objs:
        from soda_optimizer import screen

        bad = screen.screen([jj for jj, _ in job_objs.values()], tmpl)
        for p in bad:
            err("StreamJob", job_objs.pop(p.job)[1], TranslationError(p.field, p.message))
        if bad:
            refs.drop_unresolved(job_objs, tmpl, bad_tmpl, lambda o, e: err("StreamJob", o, e), consent)
    held = _held_by_dropped(pods, set(job_objs))
    used = {t for jj, _ in job_objs.values() for t in jj.templates}
    if held:  # the dropped jobs' bound pods hold their CPU and memory
        node_objs = [node(raw_nodes[n.name], held[n.name]) if n.name in held else n for n in node_objs]
    prev = previous_from([o for _, o in job_objs.values()], pods)
    scen = Scenario(
        nodes=tuple(node_objs),
        templates=tuple(t for n, t in tmpl.items() if n in used),
        jobs=tuple(jj for jj, _ in job_objs.values()),
        policy=pol,
        previous=prev,
        now=now,
    )
    return scen, errors
