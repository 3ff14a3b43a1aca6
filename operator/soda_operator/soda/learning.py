"""The resource function learner, live (issue 14 items 3-4): signatures of the running PEs, each micro
epoch's observations fed to a :class:`soda_optimizer.learn.Learner`, the models kept as
cluster-scoped ``ResourceProfile`` objects (one per signature node, named by its key), and the
functions each macro epoch plans with.

- **Namespaces** (issue 45): every signature is scoped to the namespace of its template (and so
  of the job and pods it is observed through): a profile's name is ``<namespace>.<key>``, its status
  and label ``kubesoda.io/namespace`` say the namespace, and one namespace's observations reach only
  its own profiles (its own kind roots included). A profile without a namespace (written before
  issue 45, or by an administrator) is cluster-wide: no observation ever updates it, and planning
  uses it only when pinned (:func:`soda_optimizer.learn.functions.choose`), a read-only prior;
- **Signatures** (:func:`template_signatures`): a PE's kind (``source`` when the template feeds it
  no stream), its image (by digest when a pod's status reports one: ``imageID`` of container
  ``pe``), the hash of its command, args and env, and its flowspec: the template streams into it,
  each named ``<src>-><dst>`` with its producer's arguments-level key, plus ``primal`` for a primal
  input. Producers are always keyed by image *reference*, never by digest, so a flowspec computed
  at submission time (no pods yet) is the one observed later;
- **Observing** (:meth:`Learning.observe`, each micro epoch): per running PE a sample
  ``<r_i, m, r_o, m_used>`` (:func:`soda_optimizer.learn.sample_from_observation`), ``m`` the sum of
  its Running pods' CPU limits x their nodes' mips per core. A sample is only taken once that
  allocation has held for the whole observation window plus a scrape (``rate()`` over a window
  that straddles a resize mixes two allocations);
- **Storage** (:meth:`Learning.sync`, one cycle per macro epoch, on a thread of its own, off the
  epoch lock; issue 38 item 4): the profiles are read (the first time, on the epoch, the PEs' own
  and the roots' and the pinned ones, so a restarted operator plans with what it learned from its
  first macro epoch; the other levels one tier per cycle after it, :data:`TIERS`), the
  administrators' pins applied (``spec.pinned``, optional ``spec.a``/``spec.b``; unpinned again when
  the flag goes), the models refitted (below) and a profile written only once it holds a fit and
  when its fit or pin moved (created when absent, then its status), within the cycle's budget, the
  most useful first (:meth:`Learning.write`). A status carries the fit (``status.model``, restored as
  is after a restart) and a summary of the sample window, never the window: the samples live in
  memory. The operator never writes a profile's spec. A macro epoch's learning (its share on the
  epoch and the cycle) stays within :data:`LEARNING_BUDGET_S`: many new PEs at once (a cold start)
  are fitted, chosen and written over several macro epochs. Issue 52 item 4: at any load: the
  refits, the choice of functions and the writes each stop when their share is spent, checked
  before each item (no forced fit, choice or write); what waits is done by a later cycle, the
  longest waiting first; the cycle's wall and CPU seconds are logged and exported;
- **Refits** (:meth:`Learning.refit`): the learner refits lazily on read, every node observed, and
  one family fit costs 15-60 ms: 7,000 PEs observed every micro epoch took ~3 minutes per macro
  epoch. Here the learner's lazy refit is turned off (:meth:`Learning.take` marks an observed node
  fitted) and each cycle refits, within ``fit_budget_s``, the nodes that need it most: never
  fitted; new samples the current fit does not predict (median error beyond ``max(0.1, 2 x its
  held-out error)``); a fit not yet trusted whose window grew by a quarter; a window replaced as a
  whole. A node whose new samples the fit predicts keeps it (a refit would change it by little).
  Each fit runs on a copy of the node, outside the learner's lock; a fit restored from a status
  stands until the samples taken since give one at least as confident. The functions for the next
  macro epoch are chosen after the refits and published; the epoch takes them (a template not seen
  yet is chosen on the epoch, within what the learning's budget leaves; the others plan with their
  declared functions until a cycle chooses them, :meth:`Learning._publish`);
- **Planning** (:meth:`Learning.choose_all`): per template PE, :func:`soda_optimizer.learn.functions.choose`
  (pinned > declared when the policy says so > learned > declared > the policy's per-kind
  default), applied with :func:`soda_optimizer.learn.functions.apply_functions` to the macro
  epoch's Scenario and, unchanged, to the micro epochs' until the next macro epoch;
- **Exploration** (:meth:`Learning.explore`, at each macro epoch, when
  ``spec.learning.exploration.enabled``): the PEs whose learned model has a parameter not identified
  are planned, a few at a time, with a bounded optimistic function for one macro epoch
  (:mod:`soda_optimizer.learn.explore`), so that their next samples fall in the regime not seen;
- **Status** (:meth:`Learning.status_of`): ``status.pes[].resourceFunction`` of each StreamJob:
  ``{a, b, source}``, source ``declared``, ``learned:<level>``, ``pinned`` or ``default``.

Nothing here may stop an epoch: a bad profile, a failed list or write is logged, counted
(``kubesoda_learning_errors_total``) and skipped.

Over 400 lines: the RFL's operator side is one cycle (profiles read, samples taken, functions
chosen, profiles written) around one learner and its cache; the pure parts are in
:mod:`soda_optimizer.learn`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

import numpy as np
from kubernetes import client
from prometheus_client import Counter, Gauge
from pydantic import ValidationError

from soda_optimizer import bounds
from soda_optimizer.learn import LearnConfig, Learner, Signature, sample_from_observation
from soda_optimizer.learn.explore import Probe, select
from soda_optimizer.learn.family import FamilyFit
from soda_optimizer.learn.functions import Choice, ExplorationSettings, LearningSettings, choose
from soda_optimizer.learn.model import Fit, Sample
from soda_optimizer.learn.signature import PRIMAL_PRODUCER, Level
from soda_optimizer.learn.window import columns
from soda_optimizer.model import PEKind, ResourceFunction, Scenario, pe_id
from soda_optimizer.observed import PEObservation
from soda_optimizer.plan import Plan

from ..kube import conditions, quantities
from ..kube.pods import job_of
from . import crd, observe

log = logging.getLogger("kubesoda.learning")

PLURAL = "resourceprofiles"
KIND = "ResourceProfile"
DEFAULT_IMAGE = "registry.k8s.io/pause:3.10"  # the StreamTemplate schema's default
SCRAPE_MARGIN_S = 2.0  # an allocation must have held for the window plus this before it is sampled
FIT_BUDGET_S = 3.0  # issue 38: the seconds of refits per cycle (a macro epoch); with the writes within 10% of 60 s
WRITE_BUDGET_S = 1.0  # the seconds of profile writes per cycle at least (a cold start's 42,000 calls spread over macro epochs)
LEARNING_BUDGET_S = 5.5  # a macro epoch's learning (its share on the epoch + the cycle) within 10% of 60 s, with a margin
CHOOSE_GUESS_S = 1.0  # the choice's seconds the first cycle reserves (after it: its measured cost per template)
CHOOSE_SHARE = 0.5  # issue 52 item 4: the choice's reserve is at most this share of what the writes leave (the refits the rest)
CYCLE_BUDGET_S = 4.5  # the cycle's own budget (list, refits, choice, writes): with the epoch's share (its choice of
# the templates not chosen yet, within LEARNING_BUDGET_S less the writes' reserve) within 10% of 60 s
WRITERS = 4  # concurrent status writes
STATUS_REFRESH_S = 3600.0  # a profile whose fit moved by little is rewritten at least this often (its counts)
SURPRISE = 0.1  # new samples further than max(this, 2 x the held-out error) from the fit: refitted first
GROWTH = 0.25  # an untrusted fit whose window grew by this share is refitted
# issue 38: the profiles a restarted operator lists, by label, one tier per macro epoch: what planning
# looks up first (a PE's own node; its kind's root) on the epoch, before the first plan (with the pins,
# by field selector); the other levels (a new PE's fallbacks) in the cycles after it, so no macro
# epoch lists every profile (21,002 at 7,000 PEs: 68 MB, 10 s under load)
LEVEL_LABEL = "kubesoda.io/signature-level"
NAMESPACE_LABEL = "kubesoda.io/namespace"  # issue 45: the namespace whose observations a profile learned from
TIERS = (f"{LEVEL_LABEL} in (kind,flowspec)", f"{LEVEL_LABEL} in (arguments)", f"{LEVEL_LABEL} in (executable)",
         f"{LEVEL_LABEL} notin (kind,flowspec,arguments,executable)")
ROLL = 10  # a template's functions are due to be chosen again at least every ROLL cycles
AGED = 10  # issue 52 item 4: a node whose refit waited this many cycles comes before any fresher need (no starvation)
FULL_WINDOW = 20  # samples a window needs before "replaced as a whole" calls for a refit

ERRORS = Counter("kubesoda_learning_errors_total", "Resource profiles that could not be read, loaded or written (skipped)", ["what"])
PROBES = Counter("kubesoda_learning_probes_total", "PEs planned with an exploration probe for a macro epoch (spec.learning.exploration)")
PROFILES = Gauge("kubesoda_resource_profiles", "Signature nodes the resource function learner holds")
SAMPLES = Counter("kubesoda_learning_samples_total", "Observations of PEs given to the resource function learner")
REFITS = Counter("kubesoda_learning_refits_total", "Signature nodes refitted by the learner's cycle")
DEFERRED = Gauge("kubesoda_learning_refits_deferred", "Nodes that needed a refit and waited for the next cycle (the fit budget was spent)")
DEFERRED_CHOICES = Gauge("kubesoda_learning_choices_deferred",
                         "Templates whose functions were due to be chosen and wait for the next cycle (the budget was spent; they keep their last)")
CYCLE = Gauge("kubesoda_learning_cycle_seconds", "The last learner cycle (pins, refits, choice, writes), off the epoch lock: wall seconds")
CYCLE_CPU = Gauge("kubesoda_learning_cycle_cpu_seconds", "The CPU seconds of the last learner cycle's own thread (time.thread_time)")


# ------------------------------------------------------------------------------------ pure parts


def _num(x: Any) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) and v > 0 else None


def settings_from(policy: Mapping[str, Any] | None) -> LearningSettings:
    """The SchedulingPolicy's ``spec.learning`` (the defaults where a field is missing or bad)."""
    spec = (policy or {}).get("spec") if isinstance(policy, Mapping) else None
    sp = (spec.get("learning") if isinstance(spec, Mapping) else None) or {}
    if not isinstance(sp, Mapping):
        return LearningSettings()
    kw: dict[str, Any] = {}
    for src, dst in (("enabled", "enabled"), ("declaredWins", "declared_wins"), ("minConfidence", "min_confidence"),
                     ("overrideLevel", "override_level")):
        if sp.get(src) is not None:
            kw[dst] = sp[src]
    defaults = {}
    dflt = sp.get("defaults") or {}
    for kind, rf in (dflt.items() if isinstance(dflt, Mapping) else ()):
        if isinstance(rf, Mapping) and kind in PEKind.__members__:
            a, b = _num(rf.get("a", 1.0)), _num(rf.get("b", 1.0))
            if a is not None and b is not None:
                try:  # issue 45: past the CRD's maximum (a policy stored before it) is left out, as a non-number is
                    defaults[PEKind(kind)] = ResourceFunction(a=a, b=b)
                except ValidationError as e:
                    log.warning("spec.learning.defaults.%s of the SchedulingPolicy is out of range, left out: %s", kind, e.errors()[0].get("msg"))
    kw["defaults"] = defaults
    ex = sp.get("exploration")
    if isinstance(ex, Mapping):
        ekw = {dst: ex[src] for src, dst in (("enabled", "enabled"), ("step", "step"), ("period", "period"),
                                             ("maxShare", "max_share"), ("minSamples", "min_samples")) if ex.get(src) is not None}
        try:
            kw["exploration"] = ExplorationSettings(**ekw)
        except ValidationError as e:
            log.warning("spec.learning.exploration of the SchedulingPolicy is invalid, exploration off: %s", e.errors()[0].get("msg"))
    try:
        return LearningSettings(**kw)
    except ValidationError as e:
        log.warning("spec.learning of the SchedulingPolicy is invalid, using the defaults: %s", e.errors()[0].get("msg"))
        return LearningSettings(defaults=defaults)


def _env(spec: Mapping[str, Any]) -> dict[str, str]:
    return {str(e["name"]): str(e.get("value", "")) for e in spec.get("env") or [] if isinstance(e, Mapping) and e.get("name")}


def effective_kind(pe: Mapping[str, Any], inputs: int) -> PEKind:
    """The PE's kind as the planner and the data plane treat it: a PE no template stream feeds is a source."""
    try:
        kind = PEKind(pe.get("kind") or "transform")
    except ValueError:
        kind = PEKind.transform
    return PEKind.source if inputs == 0 else (PEKind.transform if kind is PEKind.source else kind)


def template_pes(spec: Mapping[str, Any]) -> tuple[dict[str, Mapping[str, Any]], dict[str, list[str]]]:
    """A StreamTemplate spec's PEs by name, and for each PE the PEs whose streams feed it (in stream order)."""
    pes = {str(p.get("name")): p for p in spec.get("pes") or [] if isinstance(p, Mapping) and p.get("name")}
    into: dict[str, list[str]] = {}
    for x in spec.get("streams") or []:
        if isinstance(x, Mapping) and str(x.get("from")) in pes and str(x.get("to")) in pes:
            into.setdefault(str(x.get("to")), []).append(str(x.get("from")))
    return pes, into


def template_signatures(template: Mapping[str, Any], digests: Mapping[str, str] | None = None) -> dict[str, Signature]:
    """The full signature (down to the flowspec) of each PE of a StreamTemplate object, by PE name,
    scoped to the template's namespace (issue 45; ``default`` when it names none); ``digests`` maps
    a PE name to the ``imageID`` its pods report (their executable then)."""
    ns = str((template.get("metadata") or {}).get("namespace") or "default")
    sp = template.get("spec") or {}
    pes, into = template_pes(sp)
    primal = {str(x.get("pe")) for x in sp.get("primalInputs") or [] if isinstance(x, Mapping)}

    def base(name: str, digest: str | None) -> Signature:
        p = pes[name]
        return Signature.build(effective_kind(p, len(into.get(name, []))), str(p.get("image") or DEFAULT_IMAGE), digest=digest,
                               command=[str(x) for x in p.get("command") or []], args=[str(x) for x in p.get("args") or []],
                               env=_env(p), namespace=ns)

    # producers by their unscoped key: a path is the same in every namespace (the namespace is in the key only)
    by_ref = {name: base(name, None).at(Level.arguments).shared().key for name in pes}
    out = {}
    for name in pes:
        inputs = [(by_ref[src], f"{src}->{name}") for src in into.get(name, [])]
        if name in primal:
            inputs.append((PRIMAL_PRODUCER, "primal"))
        sig = base(name, (digests or {}).get(name))
        out[name] = Signature(namespace=ns, kind=sig.kind, executable=sig.executable, arguments=sig.arguments,
                              flowspec=Signature.build(sig.kind, sig.image or DEFAULT_IMAGE, inputs=inputs).flowspec, image=sig.image)
    return out


def declared_function(pe: Mapping[str, Any]) -> ResourceFunction | None:
    """The ``resourceFunction`` a template PE declares (None when it has none)."""
    rf = pe.get("resourceFunction")
    if not isinstance(rf, Mapping):
        return None
    return ResourceFunction(a=rf.get("a", 1.0), b=rf.get("b", 1.0), combine=rf.get("combine", "sum"))


def pod_digests(pods: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str, str], str]:
    """(namespace, job, PE) -> the ``imageID`` the status of one of its pods reports for container ``pe``."""
    out: dict[tuple[str, str, str], str] = {}
    for p in pods:
        md = p.get("metadata") or {}
        lab = md.get("labels") or {}
        if not (lab.get(crd.LABEL_JOB) and lab.get(crd.LABEL_PE)):
            continue
        for cs in (p.get("status") or {}).get("containerStatuses") or []:
            if cs.get("name") == "pe" and cs.get("imageID"):
                out.setdefault((md.get("namespace", ""), job_of(md) or "", lab[crd.LABEL_PE]), str(cs["imageID"]))
    return out


def allocated_mips(pods: Iterable[Mapping[str, Any]], mips_per_core: Mapping[str, float]) -> dict[str, float]:
    """Per global PE id, the mips of its Running pods: CPU limit of container ``pe`` x the node's mips per core."""
    out: dict[str, float] = {}
    for p in pods:
        md, sp = p.get("metadata") or {}, p.get("spec") or {}
        lab = md.get("labels") or {}
        if not (lab.get(crd.LABEL_JOB) and lab.get(crd.LABEL_PE)) or (p.get("status") or {}).get("phase") != "Running" \
                or md.get("deletionTimestamp"):
            continue
        lim = next(((c.get("resources") or {}).get("limits") or {} for c in sp.get("containers") or [] if c.get("name") == "pe"), {})
        try:
            cores = quantities.amount(lim.get("cpu"), 0.0)
        except (ValueError, TypeError):
            continue
        pid = pe_id(f"{md.get('namespace')}/{job_of(md)}", lab[crd.LABEL_PE])
        out[pid] = out.get(pid, 0.0) + cores * mips_per_core.get(sp.get("nodeName") or "", crd.REFERENCE_MIPS_PER_CORE)
    return out


def _sig(x: float) -> float:
    return float(f"{x:.6g}")


CONFIDENT = 0.5  # the Fitted condition's threshold (the policy's default minConfidence)


def window_summary(samples: Sequence[Sample]) -> dict[str, Any]:
    """What a status says of a node's sample window (the window itself stays in memory): how many,
    when, the ranges of input rate, mips allocated and output rate, how many censored (from the
    window's columns, issue 52 item 4)."""
    out: dict[str, Any] = {"n": len(samples)}
    if not samples:
        return out
    c = columns(samples)
    ts = c.t[~np.isnan(c.t)]
    if ts.size:
        out.update({"from": float(ts.min()), "to": float(ts.max())})
    for k, v in (("ri", c.r_i), ("m", c.m), ("ro", c.r_o)):
        out[k] = [_sig(float(v.min())), _sig(float(v.max()))]
    cen = int(c.censored.sum())
    if cen:
        out["censored"] = cen
    return out


def profile_status(model: Any, now: float) -> dict[str, Any]:
    """A ResourceProfile's status from a :class:`soda_optimizer.learn.LearnedModel`: the fit (the
    figures, and ``model``: the fit as the learner holds it, restored after a restart) and a summary
    of the window, as of the node's latest fit."""
    f = model.fit
    st: dict[str, Any] = {
        "key": model.key, **({"namespace": model.namespace} if model.namespace else {}),
        "kind": model.kind.value, "level": model.level.value, "path": list(model.path),
        "a": _sig(model.a), "b": _sig(model.b), "samples": int(model.fitted_n or model.observed),
        "confidence": round(model.confidence, 4),
        "lastUpdate": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(model.updated_at if model.updated_at is not None else now)),
        "updatedAt": model.updated_at,
        "window": window_summary(model.samples),
    }
    if f is not None:
        st.update(relativeError=round(f.rel_residual, 4), effectiveSamples=round(f.n_eff, 2), aIdentified=f.a_identified,
                  bIdentified=f.b_identified, outlierFraction=round(f.outlier_fraction, 4))
        st["model"] = {"fit": _compact(f.model_dump(mode="json")),
                       **({"family": _compact(model.family.model_dump(mode="json"))} if model.family else {}),
                       # the last trusted fit, what drift is judged against (issue 52): a restart keeps it
                       **({"anchor": _compact(model.anchor.model_dump(mode="json"))} if model.anchor is not None else {})}
    ok = f is not None and model.confidence >= CONFIDENT and (model.pinned or f.trusted is not False)
    if f is not None and f.held_out_error is not None:
        st["heldOutError"] = round(f.held_out_error, 4)
    if model.family is not None:
        ff = model.family
        st["form"] = {"need": ff.need, "c": [_sig(x) for x in ff.c], "knot": _sig(ff.knot), "selectivity": ff.selectivity,
                      "s": _sig(ff.s), "beta": round(ff.beta, 4), "p0": _sig(ff.p0), "rate": _sig(ff.rate)}
    if model.drifts:
        st["drifts"] = int(model.drifts)
    st["conditions"] = [conditions.condition(
        "Fitted", ok, "Confident" if ok else ("NoFit" if f is None or f.no_fit else "LowConfidence"),
        f"confidence {model.confidence:.2f} from {int(model.fitted_n or model.observed)} sample(s)"
        + (f", relative error {f.rel_residual:.1%}" if f is not None else ""),
        None, at=st["lastUpdate"])]
    return st


def status_moved(old: Mapping[str, Any] | None, new: Mapping[str, Any], age_s: float) -> bool:
    """Whether ``new`` should replace the status ``old`` written ``age_s`` ago: the fit moved (a or b by
    1%, confidence by 0.02, held-out error by 0.01, the form, the condition, a drift), or it is
    older than ``STATUS_REFRESH_S`` (the summary's counts); the counts alone never cause a write."""
    if not old or age_s > STATUS_REFRESH_S:
        return True
    for k in ("key", "namespace", "kind", "level", "path", "drifts", "aIdentified", "bIdentified"):
        if old.get(k) != new.get(k):
            return True
    for k, tol in (("a", 0.01), ("b", 0.01)):
        a, b = old.get(k), new.get(k)
        if (a is None) != (b is None) or (a is not None and abs(float(a) - float(b)) > tol * max(abs(float(a)), abs(float(b)), 1e-12)):  # type: ignore[arg-type]
            return True
    for k, tol in (("confidence", 0.02), ("heldOutError", 0.01), ("relativeError", 0.02)):
        a, b = old.get(k), new.get(k)
        if (a is None) != (b is None) or (a is not None and abs(float(a) - float(b)) > tol):  # type: ignore[arg-type]
            return True
    fo, fn = old.get("form") or {}, new.get("form") or {}
    if (fo.get("need"), fo.get("selectivity")) != (fn.get("need"), fn.get("selectivity")):
        return True
    co, cn = (old.get("conditions") or [{}])[0], (new.get("conditions") or [{}])[0]
    return bool((co.get("status"), co.get("reason")) != (cn.get("status"), cn.get("reason")))


def model_from_profile(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The learner's model dict (:meth:`Learner.add_model`) from a ResourceProfile object; ValueError when it holds none.

    The fit comes back from ``status.model`` (no samples: they were in memory; the restored fit
    stands until new samples give one at least as confident). A status of an operator before issue
    38 carries its window (a list of samples) instead: those are loaded and refitted."""
    md, st, sp = obj.get("metadata") or {}, obj.get("status") or {}, obj.get("spec") or {}
    name = md.get("name")
    if not st.get("path") or not st.get("kind") or not st.get("level"):
        raise ValueError(f"ResourceProfile {name}: no status.path/kind/level (not written by the operator yet)")
    if st.get("key", name) != name:
        raise ValueError(f"ResourceProfile {name}: status.key is {st.get('key')}")
    scope, dot, _ = str(name).partition(".")
    ns = scope if dot else None  # issue 45: the name's scope is the namespace (a status that says otherwise is refused)
    if st.get("namespace") and st["namespace"] != ns:
        raise ValueError(f"ResourceProfile {name}: status.namespace {st['namespace']} is not the scope of its name")
    win = st.get("window")
    samples = [{"r_i": s["ri"], "m": s["m"], "r_o": s["ro"], **({"m_used": s["mUsed"]} if s.get("mUsed") is not None else {}),
                **({"t": s["t"]} if s.get("t") is not None else {}), **({"r_p": s["rp"]} if s.get("rp") is not None else {}),
                **({"censored": True} if s.get("censored") else {})} for s in (win if isinstance(win, list) else [])]
    observed = int(st.get("samples", len(samples)))
    out = {"key": name, "path": list(st["path"]), "namespace": ns, "level": st["level"], "kind": st["kind"], "samples": samples,
           "observed": observed, "updated_at": st.get("updatedAt"), "stale": bool(samples),
           "pinned": bool(sp.get("pinned", False))}
    held = st.get("model") if isinstance(st.get("model"), Mapping) else {}
    if held and not samples:
        try:  # the learner's own schema: a fit stored by another version of it is dropped, not fatal
            fit = Fit.model_validate(held.get("fit"))
            fam = FamilyFit.model_validate(held["family"]) if held.get("family") else None
            anchor = FamilyFit.model_validate(held["anchor"]) if held.get("anchor") else None
            out.update(fit=fit, family=fam, anchor=anchor, fitted_n=observed)
        except ValidationError as e:
            log.info("ResourceProfile %s: stored fit not usable by this learner (%s); learned again", name, e.errors()[0].get("msg"))
    for k in ("a", "b"):
        v = _num(sp.get(k)) if sp.get("pinned") and sp.get(k) is not None else _num(st.get(k))
        if v is not None:
            out[k] = v
    return out


# ------------------------------------------------------------------------------------ the operator side


class Learning:
    """The operator's learner: observations in, ResourceProfiles out, functions for planning.

    With an API (``custom``) the storage and the refits run as one cycle per macro epoch
    (:meth:`sync`) on a thread of its own (``background``; :meth:`sync` may be called directly, as
    the tests and the benchmark do); the learner is shared under :attr:`lock`, held only for short
    steps (an observation, a node copied or its fit installed, one template's functions chosen)."""

    def __init__(self, custom: client.CustomObjectsApi | None, config: LearnConfig | None = None,
                 clock: Callable[[], float] = time.time, fence: Callable[[], bool] | None = None, *,
                 fit_budget_s: float = FIT_BUDGET_S, write_budget_s: float = WRITE_BUDGET_S, cycle_budget_s: float = CYCLE_BUDGET_S,
                 background: bool = True, timer: Callable[[], float] = time.perf_counter):
        self.custom = custom
        self.timer = timer  # the seconds every budget is counted in (issue 52 item 4: a test's clock counts a cost)
        self.learner = Learner(config)
        self.clock = clock
        self.fence = fence or (lambda: False)
        self.loaded = False
        self.dirty: set[str] = set()  # nodes whose status may have moved since written (a fit, a pin, a new node)
        self.functions: dict[str, Choice] = {}  # template PE id -> the function chosen (the best estimate)
        self.probes: dict[str, Probe] = {}  # template PE id -> this macro epoch's exploration probe
        self.macro_epochs = 0
        self.settings = LearningSettings()
        self.held: dict[str, tuple[float, float]] = {}  # PE id -> (allocated mips, since when)
        self.spec_pins: dict[str, tuple[bool, float | None, float | None]] = {}
        self.summary = ""  # the last "planning with" counts logged
        # issue 38 item 4: the cycle's state
        self.lock = threading.RLock()  # the learner and what is derived from it
        self.scheduled = custom is not None  # refits by the cycle (else the learner's own lazy refit)
        self.fit_budget_s = fit_budget_s
        self.write_budget_s = write_budget_s
        self.cycle_budget_s = cycle_budget_s
        self.epoch_share_s = 0.0  # what the macro epoch that started the cycle spent on learning (on the epoch)
        self.background = background
        self.written: dict[str, tuple[dict[str, Any], float]] = {}  # key -> (status last written, when)
        self.exists: set[str] = set()  # profiles the API holds (listed or created)
        self.tiers: list[str] = []  # the label selectors of the profiles not listed yet since the start (TIERS)
        self.restored: set[str] = set()  # nodes holding a fit restored from their status, not yet bettered
        self.published: dict[str, tuple[str, dict[str, Choice]]] = {}  # template -> (version, its PEs' functions)
        # what the cycle chooses for: the macro epoch's templates, and what the epoch chose itself (template -> (version, functions))
        self.pending: tuple[set[str], list[Mapping[str, Any]], dict[str, tuple[str, dict[str, Choice]]]] | None = None
        self.due: dict[str, tuple[int, int]] = {}  # template -> (0 no current choice / 1 nodes changed or its roll, since which cycle)
        self.waiting: dict[str, int] = {}  # node -> the refit cycle since which its refit waits (AGED)
        self._refits = 0  # refit cycles
        self._choose_cost: float | None = None  # seconds per template choice (measured)
        self._epoch_choices = (0, 0)  # the last macro epoch's choices on the epoch: (chosen, left to the cycle)
        self.stats: dict[str, Any] = {}  # the last cycle's figures
        self.changed: set[str] = set()  # nodes whose fit or pin changed since the functions were last chosen
        self._lineages: dict[str, tuple[str, set[str]]] = {}  # template -> (version, its PEs' signature nodes)
        self._rolls = 0
        self._kick = threading.Event()
        self._idle = threading.Event()
        self._idle.set()
        self._thread: threading.Thread | None = None
        self._pool: ThreadPoolExecutor | None = None

    # ---------------------------------------------------------------- observing (the learner's side)
    def take(self, sig: Signature, samples: list[Sample], now: float) -> list[str]:
        """Give ``samples`` of ``sig`` to the learner; returns the nodes updated. Under the cycle the
        nodes are not left for the learner's lazy refit (:meth:`refit` decides)."""
        with self.lock:
            keys = self.learner.observe(sig, samples, now)
            for k in keys:
                if self.scheduled:
                    self.learner.models[k].stale = False
                if k not in self.written:
                    self.dirty.add(k)
            return keys

    # ---------------------------------------------------------------- storage
    def sync(self) -> None:
        """One cycle: read the profiles (load them the first time, apply pins every time), refit
        within the budget, choose the functions pending, write the profiles whose fit moved.

        Issue 52 item 4: the cycle holds its budget at any load. The budget is the cycle's
        (:attr:`cycle_budget_s`) less what its macro epoch spent on learning on the epoch (within
        :data:`LEARNING_BUDGET_S` together); after the reads, the writes keep :attr:`write_budget_s`
        of it, the choice a reserve (its measured cost of the templates due, at most
        :data:`CHOOSE_SHARE` of what the writes leave), the refits the rest (at most
        :attr:`fit_budget_s`). Each step stops when its share is spent, the refits and the choice
        before they start anything (no forced fit, no forced choice, no forced write); what waits
        is done by a later cycle, the oldest first. The reads (an API list) are not bounded here:
        they are measured, and what they take the other steps do not get. The cycle's wall seconds
        and the CPU seconds of its thread (``time.thread_time``; the process's in ``stats``) are
        logged and exported (``kubesoda_learning_cycle_seconds``, ``..._cycle_cpu_seconds``)."""
        if self.custom is None:
            return
        t0, cpu0, proc0 = self.timer(), time.thread_time(), time.process_time()
        stats: dict[str, Any] = {}
        if not self.loaded:
            self._load()
        else:
            self._pins()
            if self.tiers:  # the rest of a restart's profiles, one tier per cycle
                stats["loaded"] = self._load_tier(self.tiers[0])
        t1 = self.timer()
        stats["list_s"] = t1 - t0
        budget = self.cycle_budget_s if math.isinf(self.cycle_budget_s) else min(self.cycle_budget_s, LEARNING_BUDGET_S - self.epoch_share_s)
        stats["budget_s"] = budget
        stats["epoch_chosen"], stats["epoch_deferred"] = self._epoch_choices
        self.epoch_share_s = 0.0
        room = budget - (t1 - t0) - self.write_budget_s  # what the writes leave to the refits and the choice
        reserve = min(self._choose_demand(), CHOOSE_SHARE * max(room, 0.0))
        fit_s = room - reserve
        if self.stats.get("own_unwritten"):  # PEs' own fits (what a restart plans with) wait: the writes get half
            fit_s = min(fit_s, (budget - (t1 - t0) - reserve) / 2)
        stats.update(self.refit(max(0.0, min(self.fit_budget_s, fit_s))))
        t2 = self.timer()
        stats["refit_s"] = t2 - t1
        stats.update(self._publish(max(0.0, budget - self.write_budget_s - (t2 - t0))))
        t3 = self.timer()
        stats["choose_s"] = t3 - t2
        # the writes get what the refits and the choice left of the cycle's budget
        stats["written"] = self.write(max(0.0, budget - (t3 - t0)))
        stats["write_s"] = self.timer() - t3
        stats["unwritten"] = len(self.dirty)
        with self.lock:  # the PEs' own (flowspec) fits planning would use after a restart, not written yet
            stats["own_unwritten"] = sum(1 for k in self.dirty if (m := self.learner.models.get(k)) is not None
                                         and m.level is Level.flowspec and m.fit is not None and m.trusted)
        stats["cycle_s"] = self.timer() - t0
        stats["cycle_cpu_s"] = time.thread_time() - cpu0
        stats["process_cpu_s"] = time.process_time() - proc0
        self.stats = stats
        CYCLE.set(stats["cycle_s"])
        CYCLE_CPU.set(stats["cycle_cpu_s"])
        PROFILES.set(len(self.learner.models))
        log.info("learning cycle: %.2f s (budget %.2f s), %.2f CPU s (process %.2f); refitted %d (%d wait), chose %d template(s) "
                 "(%d wait), wrote %d profile(s) (%d wait)", stats["cycle_s"], budget, stats["cycle_cpu_s"], stats["process_cpu_s"],
                 stats.get("refitted", 0), stats.get("deferred", 0), stats.get("chosen", 0), stats.get("choices_deferred", 0),
                 stats["written"], stats["unwritten"])

    def _choose_demand(self) -> float:
        """The seconds the choice is expected to need this cycle: its measured cost per template times
        the templates due after the last cycle and as many as it chose (the refits and the roll make
        about as many due again)."""
        if self.pending is None:
            return 0.0
        if self._choose_cost is None:
            return CHOOSE_GUESS_S
        return self._choose_cost * (len(self.due) + int(self.stats.get("chosen", 0)))

    def _list(self, selector: str | None = None, labels: str | None = None) -> list[Any] | None:
        assert self.custom is not None
        try:
            kw: dict[str, Any] = {"field_selector": selector} if selector else {}
            if labels:
                kw["label_selector"] = labels
            resp = self.custom.list_cluster_custom_object(crd.GROUP, crd.VERSION, PLURAL, _request_timeout=60, **kw)
            return list((cast(dict[str, Any], resp) or {}).get("items") or [])
        except Exception as e:  # noqa: BLE001  (404: the CRD is not installed; anything else: next epoch)
            if selector and isinstance(e, client.ApiException) and e.status == 400:
                raise
            ERRORS.labels("list").inc()
            log.warning("ResourceProfiles could not be listed: %s", getattr(e, "reason", e))
            return None

    def _load(self) -> None:
        """A start's first list (on the epoch, before the first plan): the profiles of the PEs' own
        nodes and the kinds' roots (:data:`TIERS`), and the pinned ones at any level, so a restarted
        operator plans from its first macro epoch with what it learned; the other levels follow, one
        tier per cycle (:meth:`_load_tier`). Tried again at the next macro epoch when it fails."""
        if self._load_tier(TIERS[0]) is None:
            return
        self.tiers = list(TIERS[1:])
        self._pins()
        self.loaded = True

    def _load_tier(self, labels: str) -> int | None:
        """The profiles a label selector names, restored (those not known yet); None when the list failed."""
        items = self._list(labels=labels)
        if items is None:
            return None
        with self.lock:
            self._read(items, restore=True)
            if labels in self.tiers:
                self.tiers.remove(labels)
        log.info("resource function learner: %d profile(s) loaded (%s)", len(items), labels)
        return len(items)

    def _pins(self) -> None:
        """The pinned profiles only (``fieldSelector spec.pinned=true``: the CRD's selectable field);
        a profile pinned before and missing from them was unpinned. An API server that cannot select
        on the field: every profile, as before."""
        try:
            items = self._list("spec.pinned=true")
        except client.ApiException:
            items = self._list()
        if items is None:
            return
        names = {str((o.get("metadata") or {}).get("name", "")) for o in items}
        gone = [{"metadata": {"name": n}, "spec": {"pinned": False}} for n, pin in self.spec_pins.items() if pin[0] and n not in names]
        with self.lock:
            self._read(items, restore=True)  # a pinned profile not loaded yet (a later tier, or new): restored first
            self._read(gone)

    def read_profiles(self, items: Iterable[Mapping[str, Any]]) -> list[tuple[str, str]]:
        """Load ResourceProfile objects (``kubesoda plan`` reads them from files) and apply their
        pins, as a macro epoch does; returns (name, why) for each profile skipped."""
        with self.lock:
            out = self._read(list(items), restore=True)
            self.loaded = True
            return out

    def _read(self, items: list[Any], restore: bool = False) -> list[tuple[str, str]]:
        """Apply the profiles' pins; with ``restore``, first restore the profiles not known yet."""
        skipped: list[tuple[str, str]] = []
        for obj in items:
            name = (obj.get("metadata") or {}).get("name", "")
            sp = obj.get("spec") or {}
            try:
                pinned = bool(sp.get("pinned", False))
                for k in ("a", "b"):  # issue 45: the CRD's maximum, for a profile stored before it (or a file)
                    v = _num(sp.get(k))
                    if pinned and v is not None and v > bounds.MAX_RF:
                        raise ValueError(f"spec.{k}: {quantities.shown(sp.get(k))} is out of range: at most {bounds.MAX_RF:g}")
                if restore and name not in self.exists:
                    self._restore(name, obj)
                pin = (pinned, _num(sp.get("a")), _num(sp.get("b")))
                m = self.learner.models.get(name)
                if m is None:
                    continue
                if pinned and (not m.pinned or self.spec_pins.get(name) != pin):
                    self.learner.pin(name, a=pin[1], b=pin[2])
                    self.dirty.add(name)
                    self.changed.add(name)
                    log.info("ResourceProfile %s pinned (a=%s, b=%s)", name, m.a, m.b)
                elif not pinned and m.pinned:
                    self.learner.unpin(name)
                    m.stale = bool(m.samples)
                    m.fitted_n = 0 if m.samples else m.fitted_n  # refitted by the next cycle
                    self.dirty.add(name)
                    self.changed.add(name)
                    log.info("ResourceProfile %s unpinned: learned again", name)
                self.spec_pins[name] = pin
            except (ValueError, TypeError, KeyError, ValidationError) as e:
                ERRORS.labels("load").inc()
                log.warning("ResourceProfile %s skipped: %s", name, str(e).splitlines()[0])
                skipped.append((name, str(e).splitlines()[0]))
        return skipped

    def _restore(self, name: str, obj: Mapping[str, Any]) -> None:
        """A profile's model into the learner. A node observed since the start (its profile listed in a
        later tier) keeps its samples and takes the stored fit when it has none as confident (which
        then stands until the new samples give one), and the stored count of samples."""
        data = model_from_profile(obj)
        m = self.learner.models.get(name)
        if m is None:
            added = self.learner.add_model(data)
            if added.fit is not None and not added.samples:
                self.restored.add(name)
        elif not m.pinned:
            stored = int(data.get("observed") or 0)
            fit = data.get("fit")
            if fit is not None and (m.fit is None or fit.confidence > m.confidence):
                m.fit, m.family, m.a, m.b = fit, data.get("family"), float(data.get("a", fit.a)), float(data.get("b", fit.b))
                m.anchor = data.get("anchor") or m.anchor
                m.observed += stored
                m.fitted_n = m.observed
                m.stale = False
                self.restored.add(name)
                self.changed.add(name)
            else:
                m.observed += stored
                m.fitted_n += stored
        self.exists.add(name)
        if obj.get("status"):  # as written: nothing to write until the fit moves
            self.written[name] = (dict(obj["status"]), time.monotonic())

    # ---------------------------------------------------------------- refits
    def refit(self, budget_s: float | None = None) -> dict[str, Any]:
        """Refit the nodes that need it most, each on a copy outside the lock, until ``budget_s``
        (default :attr:`fit_budget_s`) has passed; returns counts (candidates, refitted, deferred).

        The nodes of one PE's path that hold the very same window (its levels, until another PE
        shares one of them) are scored and fitted once and next to each other, so a budget spent
        half-way never leaves a PE with one level fitted and the others to fit again next cycle.

        Issue 52 item 4: a step given no budget (0: the cycle's was spent before it) fits nothing
        (before, every cycle made at least one fit and the refits had at least 0.5 s); a step given
        a share fits the first window of its queue, then checks the budget before each window. The
        first fit is not held back by the scoring of the queue itself: at 7,000 PEs that pass
        (21,002 nodes, 0.1 CPU s, more when a garbage collection of the samples lands in it) took
        the whole share at a tenth of a core, and no cycle fitted anything. What waits is refitted
        by a later cycle: by need, except that a node which has waited :data:`AGED` cycles comes
        before every fresher need, the longest waiting first, so a steady stream of urgent refits
        (new PEs, drift) cannot starve a lesser one for good."""
        budget = self.fit_budget_s if budget_s is None else budget_s
        t0 = self.timer()
        self._refits += 1
        if budget <= 0:  # nothing can start: the nodes waiting are counted, not scored (0.1 CPU s at 21,002 nodes)
            with self.lock:
                n = sum(1 for m in self.learner.models.values() if not m.pinned and m.samples and m.observed > m.fitted_n)
            DEFERRED.set(n)
            return {"candidates": n, "refitted": 0, "deferred": n}
        with self.lock:
            views = [(k, m.kind, m.fit, m.family, m.samples[-max(1, m.observed - m.fitted_n):], len(m.samples),
                      m.observed - m.fitted_n, m.fitted_n, _window_id(m)) for k, m in self.learner.models.items()
                     if not m.pinned and m.samples and m.observed > m.fitted_n]
        queue: list[tuple[tuple[Any, ...], tuple[Any, ...], str]] = []
        scores: dict[tuple[Any, ...], float] = {}
        for key, kind, fit, fam, new, n, fresh, fitted, wid in views:
            sk = (wid, id(fit), fresh, fitted)  # the same window, fit and counts: the same need
            score = scores.get(sk)
            if score is None:
                score = scores[sk] = _need_score(kind, fit, fam, new, n, fresh, fitted)
            if score > 0:
                since = self.waiting.get(key)
                aged = since is not None and self._refits - since >= AGED
                queue.append(((0, since) if aged else (1, -score), wid, key))
        # the aged first (longest waiting), then the highest need; the nodes of one window next to each other (fitted once)
        queue.sort(key=lambda x: (x[0], x[1], x[2]))
        memo: dict[tuple[Any, ...], Any] = {}
        done = 0
        left: list[str] = []
        for i, (_, wid, key) in enumerate(queue):
            # the budget is checked before a fit only, never before a node whose window was just fitted;
            # a step given a share makes its first window's fit whatever scoring the queue took
            if wid not in memo and (budget <= 0 or (done > 0 and self.timer() - t0 > budget)):
                left = [k for _, _, k in queue[i:]]
                break
            with self.lock:
                m = self.learner.models.get(key)
                if m is None or m.pinned:
                    continue
                copy = m.model_copy(update={"stale": True})  # its window is immutable (issue 52 item 4): shared
            fits: dict[tuple[Any, ...], Any] = memo.setdefault(wid, {})
            self.learner._refit(copy, fits)  # the learner's refit, on the copy: nothing shared is touched
            with self.lock:
                m = self.learner.models.get(key)
                if m is None or m.pinned:
                    continue
                if key in self.restored and (copy.fit is None or copy.fit.confidence < m.confidence):
                    m.fitted_n = copy.observed  # the restored fit stands; tried again once more samples came
                    continue
                self.restored.discard(key)
                m.fit, m.family, m.a, m.b, m.fitted_n = copy.fit, copy.family, copy.a, copy.b, copy.observed
                if m.drifts == copy.drifts:  # the learner's refit sets it too (issue 52: drift judged by the last trusted
                    m.anchor = copy.anchor  # fit); a drift seen while the copy was fitted dropped it, and it stays dropped
                m.stale = False
                self.dirty.add(key)
                self.changed.add(key)
            done += 1
        self.waiting = {k: self.waiting.get(k, self._refits) for k in left}
        REFITS.inc(done)
        DEFERRED.set(len(left))
        return {"candidates": len(queue), "refitted": done, "deferred": len(left)}

    # ---------------------------------------------------------------- writes
    def write(self, budget_s: float | None = None) -> int:
        """Create (if absent) and write the status of the nodes whose fit moved (:func:`status_moved`)
        since written, a few at a time, most useful first, until ``budget_s`` (default
        :attr:`write_budget_s`) has passed; returns how many were written. The rest stay dirty for
        the next cycle (``stats["unwritten"]``).

        A node without a fit (not pinned) is not written: it has nothing worth keeping (its samples
        are in memory) and its first fit makes it dirty again. The order (:func:`_write_rank`):
        pins and the kinds' roots; new profiles of the PEs' own trusted fits (what a restarted
        operator plans with; a new profile costs two calls); profiles that exist and whose fit moved
        (one call each: what a restart would restore is out of date); new profiles of trusted fits
        of the ancestor levels; new profiles of fits not trusted. While own fits wait, the next
        cycle's refits get half of what the writes and the choice leave (:meth:`sync`). At a cold start (every PE new) this spreads the 2 x 21,002 calls of 7,000
        PEs over macro epochs at a bounded cost each, the fits planning uses first."""
        if self.custom is None or not self.dirty:
            return 0
        budget = self.write_budget_s if budget_s is None else budget_s
        now = self.clock()
        t = time.monotonic()
        todo: list[tuple[tuple[int, int, str], str]] = []
        with self.lock:
            for key in list(self.dirty):
                model = self.learner.models.get(key)
                if model is None or (model.fit is None and not model.pinned):
                    self.dirty.discard(key)  # nothing to keep yet: its first fit makes it dirty again
                    continue
                todo.append((_write_rank(model, key in self.written, key in self.exists), key))
        if not todo:
            return 0
        todo.sort()
        if budget <= 0:  # issue 52 item 4: no write starts once the cycle's budget is spent (before: WRITERS always)
            return 0
        deadline = self.timer() + budget
        if self._pool is None:
            self._pool = ThreadPoolExecutor(WRITERS, thread_name_prefix="kubesoda-profiles")
        return sum(self._pool.map(lambda x: self._write_next(x[1], now, t, deadline), todo))

    def _write_next(self, key: str, now: float, at: float, deadline: float) -> bool:
        """One node of :meth:`write`'s queue: nothing once the deadline passed (it stays dirty), else
        its status, written when it moved."""
        if self.timer() > deadline:
            return False
        with self.lock:
            model = self.learner.models.get(key)
            if model is None:
                self.dirty.discard(key)
                return False
            st = profile_status(model, now)
            old = self.written.get(key)
            if old is not None and not status_moved(old[0], st, at - old[1]):
                self.dirty.discard(key)
                return False
            kind, level, ns = model.kind.value, model.level.value, model.namespace
        return self._write_one(key, st, kind, level, at, ns)

    def _write_one(self, key: str, st: dict[str, Any], kind: str, level: str, at: float, namespace: str | None = None) -> bool:
        assert self.custom is not None
        if self.fence():
            return False
        try:
            if key not in self.exists:
                body = {"apiVersion": crd.API_VERSION, "kind": KIND,
                        "metadata": {"name": key, "labels": {"kubesoda.io/pe-kind": kind, LEVEL_LABEL: level,
                                                             **({NAMESPACE_LABEL: namespace} if namespace else {})}},
                        "spec": {"pinned": False}}
                try:
                    self.custom.create_cluster_custom_object(crd.GROUP, crd.VERSION, PLURAL, body, _request_timeout=10)
                except client.ApiException as e:
                    if e.status != 409:
                        raise
                    if self.tiers:  # a restart's profile in a tier not listed yet: restored with it, not overwritten
                        return False
                self.exists.add(key)
            self.custom.patch_cluster_custom_object_status(crd.GROUP, crd.VERSION, PLURAL, key, {"status": st}, _request_timeout=10)
            with self.lock:
                self.written[key] = (st, at)
                self.dirty.discard(key)
            return True
        except Exception as e:  # noqa: BLE001  (a failed write waits for the next macro epoch)
            if isinstance(e, client.ApiException) and e.status == 404:
                self.exists.discard(key)  # deleted by someone: created again next time
            ERRORS.labels("write").inc()
            log.warning("ResourceProfile %s not written: %s", key, getattr(e, "reason", None) or e)
            return False

    # ---------------------------------------------------------------- the cycle's thread
    def _start(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name="kubesoda-learning", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while True:
            self._kick.wait()
            self._kick.clear()
            self._idle.clear()
            try:
                self.sync()
            except Exception:  # noqa: BLE001  (the next macro epoch tries again)
                ERRORS.labels("cycle").inc()
                log.exception("resource function learner: cycle failed")
            finally:
                self._idle.set()

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until no cycle runs or is asked for (tests, benchmarks)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not self._idle.wait(left):
                return False
            if not self._kick.is_set():
                return True
            time.sleep(0.01)

    # ---------------------------------------------------------------- planning
    def choose_all(self, scen: Scenario, templates: Iterable[Mapping[str, Any]], policy: Mapping[str, Any] | None) -> dict[str, Choice]:
        """The function of every PE of the Scenario's templates (kept for the micro epochs), in one
        step and without a budget: ``kubesoda plan`` and the operator without an API (its learner
        holds no profile and no sample, so each choice is a lookup that finds nothing). The
        operator's cycle chooses within its budget (:meth:`_publish`, :meth:`macro`)."""
        self.settings = settings_from(policy)
        names = {t.name for t in scen.templates}
        out: dict[str, Choice] = {}
        for obj in templates:
            tname = _template_name(obj)
            if tname in names:
                out.update(self._choose_template(tname, obj))
        self._set_functions(out)
        return out

    def _choose_template(self, tname: str, obj: Mapping[str, Any], version: str | None = None) -> dict[str, Choice]:
        """The functions of a template's PEs; with its ``version``, its signature nodes kept too
        (:meth:`_nodes`: computed here, where the signatures are, not by the next cycle for every
        template: 0.5 CPU s at 1,000 templates)."""
        out: dict[str, Choice] = {}
        try:
            with self.lock:
                sigs = template_signatures(obj)
                for p in (obj.get("spec") or {}).get("pes") or []:
                    sig = sigs.get(str(p.get("name")))
                    if sig is None:
                        continue
                    out[pe_id(tname, str(p.get("name")))] = choose(sig.kind, declared_function(p), sig, self.learner, self.settings,
                                                            combine=(p.get("resourceFunction") or {}).get("combine"))
                if version is not None:
                    self._lineages[tname] = (version, self._lineage(sigs.values()))
        except Exception as e:  # noqa: BLE001  (the template keeps what the translation gave it)
            ERRORS.labels("choose").inc()
            log.warning("resource functions of StreamTemplate %s: %s", tname, e)
            return {}
        return out

    def _declared_template(self, tname: str, obj: Mapping[str, Any]) -> dict[str, Choice]:
        """Issue 52 item 4: a template not chosen yet (a cold start, or its spec changed) while the
        budget is spent: each PE its declared function, else the policy's default for its kind (no
        learner lookup: a few microseconds a PE); learned by a later cycle's choice."""
        out: dict[str, Choice] = {}
        pes, into = template_pes(obj.get("spec") or {})
        for name, p in pes.items():
            try:
                out[pe_id(tname, name)] = choose(effective_kind(p, len(into.get(name, []))), declared_function(p), None, None, self.settings,
                                                 combine=(p.get("resourceFunction") or {}).get("combine"))
            except (ValidationError, ValueError, TypeError) as e:  # the PE keeps what the translation gave it
                ERRORS.labels("choose").inc()
                log.warning("resource function of %s: %s", pe_id(tname, name), e)
        return out

    def _settings_version(self) -> str:
        return hashlib.sha1(self.settings.model_dump_json().encode()).hexdigest()[:16]

    def _version(self, obj: Mapping[str, Any], settings_version: str | None = None) -> str:
        """What the functions chosen for a template depend on besides the learner: its spec (before
        the ``/``) and the settings (after it)."""
        h = hashlib.sha1(json.dumps(obj.get("spec") or {}, sort_keys=True, default=str).encode()).hexdigest()
        return f"{h}/{settings_version or self._settings_version()}"

    def _publish(self, budget_s: float = math.inf) -> dict[str, Any]:
        """The cycle's choice of functions for the templates of the last macro epoch (after its
        refits), within ``budget_s``; returns counts (chosen, choices_deferred).

        A template is due when it has no choice for its spec and settings (a new one the epoch left
        to the cycle, a changed spec or policy), when a node of its PEs changed (a fit or a pin),
        and every :data:`ROLL` cycles in turn (the pooled root, refitted every cycle, rarely wins
        and is not worth every template every cycle). Issue 52 item 4: the due templates are chosen
        in order (those with no choice first, then the longest due: a template due stays due until
        chosen, so every one is reached) until the budget is spent, checked before each (a budget
        of 0 chooses none); the others keep the functions they have, and wait for the next cycle
        (``kubesoda_learning_choices_deferred``)."""
        pending, self.pending = self.pending, None
        if pending is None:
            return {}
        names, templates, chose = pending
        t0 = self.timer()
        with self.lock:
            changed, self.changed = self.changed, set()
            # a kind's root is below no template's lineage (:meth:`_nodes`): its refit makes none due
            changed = {k for k in changed if (m := self.learner.models.get(k)) is None or m.level is not Level.kind}
        self._rolls += 1
        for tname, got in chose.items():  # what the epoch chose itself: current, unless its nodes change below
            self.published[tname] = got
            self.due.pop(tname, None)
        sv = self._settings_version()
        index: dict[str, tuple[int, Mapping[str, Any], str]] = {}
        for i, obj in enumerate(templates):
            tname = _template_name(obj)
            if tname not in names or tname in index:
                continue
            version = self._version(obj, sv)
            index[tname] = (i, obj, version)
            prev = self.published.get(tname)
            if prev is None or prev[0] != version:
                self._due(tname, 0)
            elif (i + self._rolls) % ROLL == 0:
                self._due(tname, 1)
            elif changed and tname not in self.due:  # (a template due already needs no lineage: it is chosen in its turn)
                lin = self._lineages.get(tname)
                if lin is not None and lin[0] == version:
                    if lin[1] & changed:
                        self._due(tname, 1)
                elif budget_s <= 0 or self.timer() - t0 > budget_s:
                    self._due(tname, 1)  # its nodes not known within the budget: chosen (and they kept) in its turn
                elif self._nodes(tname, version, obj) & changed:
                    self._due(tname, 1)
        self.due = {k: v for k, v in self.due.items() if k in index}
        out = {k: v for k, v in self.published.items() if k in index}
        chosen = 0
        for tname in sorted(self.due, key=lambda k: (*self.due[k], index[k][0])):
            if budget_s <= 0 or self.timer() - t0 > budget_s:
                break
            _, obj, version = index[tname]
            out[tname] = (version, self._choose_template(tname, obj, version))
            del self.due[tname]
            chosen += 1
        self.published = out
        if chosen:
            took = (self.timer() - t0) / chosen
            self._choose_cost = took if self._choose_cost is None else 0.5 * (self._choose_cost + took)
        DEFERRED_CHOICES.set(len(self.due))
        return {"chosen": chosen, "choices_deferred": len(self.due)}

    def _due(self, tname: str, why: int) -> None:
        """Mark a template due to be chosen (0: it has no current choice; 1: a node changed, or its
        roll), since this cycle unless it already was (then it keeps its place)."""
        cur = self.due.get(tname)
        self.due[tname] = (why, self._rolls) if cur is None else (min(cur[0], why), cur[1])

    def _nodes(self, tname: str, version: str, obj: Mapping[str, Any]) -> set[str]:
        """The signature nodes below the root of a template's PEs (and of their aliased digests)."""
        got = self._lineages.get(tname)
        if got is not None and got[0] == version:
            return got[1]
        with self.lock:
            keys = self._lineage(template_signatures(obj).values())
        self._lineages[tname] = (version, keys)
        return keys

    def _lineage(self, sigs: Iterable[Signature]) -> set[str]:
        keys: set[str] = set()
        for sig in sigs:
            for s in (sig, self.learner.resolve(sig)):
                keys.update(n.key for n in s.lineage() if n.level is not Level.kind)
        return keys

    def _set_functions(self, out: dict[str, Choice]) -> None:
        self.functions = out
        counts: dict[str, int] = {}
        for c in out.values():
            src = c.source.split(":", 1)[0]
            counts[src] = counts.get(src, 0) + 1
        summary = ", ".join(f"{counts.get(k, 0)} {k}" for k in ("pinned", "learned", "declared", "default"))
        if summary != self.summary:
            log.info("planning with resource functions: %s", summary)
            self.summary = summary

    def macro(self, scen: Scenario, templates: Iterable[Mapping[str, Any]], policy: Mapping[str, Any] | None) -> dict[str, Choice]:
        """The macro epoch's part: the functions to plan with (``pipeline.run(scen, functions=...)``,
        the pipeline's first step), exploration probes picked. With an API and ``background``: the
        functions the last cycle published (a template it has not seen chosen here), every profile
        loaded first the first time, and the next cycle started (off the epoch lock); else
        everything here, as one step."""
        try:
            t0 = self.timer()
            tlist = list(templates)
            if self.custom is None or not self.background:
                self.sync()
                self.choose_all(scen, tlist, policy)
            else:
                self.settings = settings_from(policy)
                if not self.loaded:  # the first macro epoch plans with what was learned before
                    self._load()
                names = {t.name for t in scen.templates}
                out: dict[str, Choice] = {}
                chose: dict[str, tuple[str, dict[str, Choice]]] = {}
                sv = self._settings_version()
                # issue 52 item 4: the templates with no current choice are chosen here within what the
                # macro epoch's learning has left (LEARNING_BUDGET_S less the writes' reserve); the rest
                # keep their last choice when only the settings changed, else plan with their declared
                # functions, and are the first the cycle chooses. While the learner holds no fit and no
                # pin (a cold start) the choice is the declared function for every PE: made without
                # lookups (0.04 CPU s at 1,000 templates; at a tenth of a core the lookups took the
                # budget of four macro epochs, and no refit started in them)
                budget = LEARNING_BUDGET_S - self.write_budget_s
                left = 0
                with self.lock:  # nothing learned yet (a cold start): every choice is the declared function, without lookups
                    learned = any(m.fit is not None or m.pinned for m in self.learner.models.values())
                for obj in tlist:
                    tname = _template_name(obj)
                    if tname not in names or tname in chose:
                        continue
                    version = self._version(obj, sv)
                    pub = self.published.get(tname)
                    if pub is not None and pub[0] == version:
                        out.update(pub[1])
                    elif not learned:
                        chose[tname] = (version, self._declared_template(tname, obj))
                        out.update(chose[tname][1])
                    elif self.timer() - t0 <= budget:
                        chose[tname] = (version, self._choose_template(tname, obj, version))
                        out.update(chose[tname][1])
                    else:
                        left += 1
                        same_spec = pub is not None and pub[0].split("/")[0] == version.split("/")[0]
                        out.update(pub[1] if pub is not None and same_spec else self._declared_template(tname, obj))
                self._set_functions(out)
                self._epoch_choices = (len(chose), left)
                self.pending = (names, tlist, chose)
                self.epoch_share_s = self.timer() - t0
                self._start()
                self._kick.set()
            with self.lock:
                self.probes = self.explore()
            return self.planned()
        except Exception:  # noqa: BLE001  (planning goes on with the declared functions)
            ERRORS.labels("macro").inc()
            log.exception("resource function learner: macro epoch step failed")
            self.probes = {}
            return {}

    def planned(self) -> dict[str, Choice]:
        """The functions of the last macro epoch, each probed PE with its probe's function instead."""
        return {**self.functions, **{pe: p.choice for pe, p in self.probes.items()}}

    def explore(self) -> dict[str, Probe]:
        """This macro epoch's probes (:func:`soda_optimizer.learn.explore.select`; none unless
        ``spec.learning.exploration.enabled``), logged and counted."""
        if not self.settings.enabled:
            return {}
        probes = select(self.functions, self.learner, self.settings.exploration, self.macro_epochs)
        self.macro_epochs += 1
        if probes:
            PROBES.inc(len(probes))
            log.info("exploration: probing %d PE(s): %s", len(probes),
                     ", ".join(f"{p.pe} ({p.parameter} x{p.factor:g})" for p in probes.values()))
        return probes

    def status_of(self, plan: Plan, job: str) -> dict[str, dict[str, Any]]:
        """PE name -> ``{a, b, source}`` for ``job``'s chosen template (empty when it has none)."""
        return self.statuses_of(plan).get(job, {})

    def statuses_of(self, plan: Plan) -> dict[str, dict[str, dict[str, Any]]]:
        """:meth:`status_of` of every job of ``plan``, in one pass over the plan and the functions (one
        call per job scanned both each time: quadratic at 1,040 jobs)."""
        by_template: dict[str, dict[str, dict[str, Any]]] = {}
        for k, c in self.functions.items():
            template, sep, pe = k.partition(":")
            if sep:
                by_template.setdefault(template, {})[pe] = {"a": _sig(c.rf.a), "b": _sig(c.rf.b), "source": c.source}
        return {d.job: dict(by_template.get(d.template, {})) for d in plan.jobs if d.template}

    # ---------------------------------------------------------------- observing
    def observe(self, scen: Scenario, plan: Plan, templates: Iterable[Mapping[str, Any]], pods: list[dict[str, Any]],
                policy: Mapping[str, Any] | None, observations: Mapping[str, PEObservation]) -> int:
        """Give each running PE's observation of this micro epoch to the learner; returns the samples taken."""
        if not observations:
            return 0
        try:
            return self._observe(scen, plan, templates, pods, policy, observations)
        except Exception:  # noqa: BLE001
            ERRORS.labels("observe").inc()
            log.exception("resource function learner: observation step failed")
            return 0

    def _observe(self, scen: Scenario, plan: Plan, templates: Iterable[Mapping[str, Any]], pods: list[dict[str, Any]],
                 policy: Mapping[str, Any] | None, observations: Mapping[str, PEObservation]) -> int:
        settings = settings_from(policy)
        if not settings.enabled:
            return 0
        window, _ = observe.settings(policy)
        now = self.clock()
        mpc = {n.name: n.mips_per_core for n in scen.nodes}
        alloc = allocated_mips(pods, mpc)
        for pid, m in alloc.items():
            old = self.held.get(pid)
            if old is None or abs(old[0] - m) > 1e-6 * max(m, 1.0):
                self.held[pid] = (m, now)
        for pid in set(self.held) - set(alloc):
            del self.held[pid]
        digests = pod_digests(pods)
        by_name = {f"{(t.get('metadata') or {}).get('namespace') or 'default'}/{(t.get('metadata') or {}).get('name')}": t
                   for t in templates}
        taken = 0
        for dec in plan.jobs:
            if not dec.admitted or not dec.template or dec.template not in by_name:
                continue
            tobj = by_name[dec.template]
            ns, jname = dec.job.split("/", 1)
            if dec.template.split("/", 1)[0] != ns:  # issue 45: a job's samples only ever go to its own namespace's nodes
                continue
            pes = {str(p.get("name")): p for p in (tobj.get("spec") or {}).get("pes") or []}
            sigs = template_signatures(tobj, {pe: d for (n, j, pe), d in digests.items() if n == ns and j == jname})
            sel = {f"{s.get('from')}->{s.get('to')}": float(s.get("selectivity", 1.0)) for s in (tobj.get("spec") or {}).get("streams") or []}
            for name, sig in sigs.items():
                pid = pe_id(dec.job, name)
                ob, held = observations.get(pid), self.held.get(pid)
                if ob is None or held is None or now - held[1] < window + SCRAPE_MARGIN_S:
                    continue
                comb = (pes[name].get("resourceFunction") or {}).get("combine", "sum")
                s = sample_from_observation(ob, sig.kind, held[0], now, selectivity=sel, combine=comb)
                if s is None:
                    continue
                self.take(sig, [s], now)
                taken += 1
        SAMPLES.inc(taken)
        return taken


def _template_name(obj: Mapping[str, Any]) -> str:
    md = obj.get("metadata") or {}
    return f"{md.get('namespace') or 'default'}/{md.get('name')}"


def _need_score(kind: PEKind, fit: Fit | None, family: FamilyFit | None, new: Sequence[Sample], n: int, fresh: int, fitted: int) -> float:
    """How much a node with ``fresh`` samples since its fit (of ``n`` in its window) needs a refit: 0
    not at all (its fit predicts them); higher first. Never fitted > surprised by the new samples >
    an untrusted fit grown by a quarter > a window replaced as a whole."""
    if fit is None:
        return 1000.0 + fresh if n >= 3 or fresh >= n else 0.0
    err = _error(kind, fit, family, new)
    limit = max(SURPRISE, 2.0 * (fit.held_out_error if fit.held_out_error is not None else fit.rel_residual))
    if err > limit:
        return 100.0 + min(err, 10.0)
    if (fit.trusted is False or fit.confidence < CONFIDENT) and fresh >= max(1.0, GROWTH * max(fitted, 1)) and fresh >= 1:
        return 10.0 + fresh / max(n, 1)
    if fresh >= n >= FULL_WINDOW:  # a whole window since the fit (not merely the few samples since a restart)
        return 1.0 + fresh / max(n, 1)
    return 0.0


def _window_id(m: Any) -> tuple[Any, ...]:
    """What identifies a node's window cheaply: the nodes of one PE's path share one window object
    (:meth:`Learner.observe` keeps one for levels holding the same samples, issue 52 item 4) until
    another PE's samples reach one of them."""
    return (m.kind.value, m.updated_at, len(m.samples), id(m.samples))


_LEVEL_ORDER = {Level.flowspec: 0, Level.arguments: 1, Level.executable: 2, Level.kind: 3}


def _write_rank(model: Any, written: bool, exists: bool) -> tuple[int, int, str]:
    """The order of :meth:`Learning.write` (lower first): pins and roots; a PE's own (flowspec)
    trusted fit not written yet (what a restart plans with: lost with it otherwise); an existing
    profile whose fit moved; a new trusted fit of an ancestor level; a new fit not trusted; the most
    specific level first within each."""
    trusted = model.fit is not None and model.fit.trusted is not False and model.confidence >= CONFIDENT
    if model.pinned or model.level is Level.kind:
        tier = 0
    elif written or exists:
        tier = 2
    elif trusted:
        tier = 1 if model.level is Level.flowspec else 3
    else:
        tier = 4
    return (tier, _LEVEL_ORDER.get(model.level, 4), model.key)


def _error(kind: PEKind, fit: Fit, family: FamilyFit | None, samples: Sequence[Sample]) -> float:
    """The median |predicted / observed - 1| of output rate and (measured) mips used of a fit on ``samples``."""
    c = columns(samples)  # issue 52 item 4: the window's columns, no sample objects
    ok = (c.r_o > 0) & (c.m > 0) & (c.r_i > 0)
    if not ok.any():
        return 0.0
    r_i = np.where(c.censored[ok], np.inf, c.r_i[ok])
    m, r_o, mu = c.m[ok], c.r_o[ok], c.m_used[ok]
    if family is not None:
        pr, pu = family.predict(r_i, m)
    else:
        ri = c.r_i[ok]
        if kind is PEKind.source:
            pr, pu = np.minimum(fit.a * m, ri), np.minimum(m, ri / fit.a)
        else:
            pr, pu = np.minimum(fit.a * ri * m, fit.b * ri), np.minimum(m, np.full_like(m, fit.b / fit.a))
    with np.errstate(divide="ignore", invalid="ignore"):
        eo = np.abs(pr / r_o - 1.0)
        eu = np.where(np.isfinite(mu) & (mu > 0), np.abs(pu / np.where(mu > 0, mu, 1.0) - 1.0), eo)
    e = 0.5 * (eo + eu)
    e = e[np.isfinite(e)]
    return float(np.median(e)) if e.size else float("inf")


def _compact(x: Any) -> Any:
    """Floats to 6 significant digits (a status, not a checkpoint of every bit)."""
    if isinstance(x, float):
        return _sig(x) if math.isfinite(x) else x
    if isinstance(x, dict):
        return {k: _compact(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_compact(v) for v in x]
    return x
