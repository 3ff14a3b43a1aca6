"""The resource function learner, live (issue 14 items 3-4): signatures of the running PEs, each micro
epoch's observations fed to a :class:`soda_optimizer.learn.Learner`, the models kept as
cluster-scoped ``ResourceProfile`` objects (one per signature node, named by its key), and the
functions each macro epoch plans with.

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
- **Storage** (:meth:`Learning.sync`, at each macro epoch): the profiles are read (the first time:
  every model is loaded, so a restarted operator plans with what it learned from its first macro
  epoch), the administrators' pins applied (``spec.pinned``, optional ``spec.a``/``spec.b``; unpinned
  again when the flag goes), and the models that changed since the last macro epoch written
  (created when absent, then their status). The operator never writes a profile's spec;
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

import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, cast

from kubernetes import client
from prometheus_client import Counter, Gauge
from pydantic import ValidationError

from soda_optimizer.learn import LearnConfig, Learner, Signature, sample_from_observation
from soda_optimizer.learn.explore import Probe, select
from soda_optimizer.learn.functions import Choice, ExplorationSettings, LearningSettings, choose
from soda_optimizer.learn.signature import PRIMAL_PRODUCER, Level
from soda_optimizer.model import PEKind, ResourceFunction, Scenario, pe_id
from soda_optimizer.observed import PEObservation
from soda_optimizer.plan import Plan

from ..kube import conditions, quantities
from . import crd, observe

log = logging.getLogger("kubesoda.learning")

PLURAL = "resourceprofiles"
KIND = "ResourceProfile"
DEFAULT_IMAGE = "registry.k8s.io/pause:3.10"  # the StreamTemplate schema's default
SCRAPE_MARGIN_S = 2.0  # an allocation must have held for the window plus this before it is sampled
MAX_PROFILES_LOADED = 100000  # issue 38: 7,000 distinct PEs hold 21,002 profiles
STATUS_WINDOW = 32  # the newest samples a status carries (the learner keeps up to max_samples in memory)

ERRORS = Counter("kubesoda_learning_errors_total", "Resource profiles that could not be read, loaded or written (skipped)", ["what"])
PROBES = Counter("kubesoda_learning_probes_total", "PEs planned with an exploration probe for a macro epoch (spec.learning.exploration)")
PROFILES = Gauge("kubesoda_resource_profiles", "Signature nodes the resource function learner holds")
SAMPLES = Counter("kubesoda_learning_samples_total", "Observations of PEs given to the resource function learner")


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
                defaults[PEKind(kind)] = ResourceFunction(a=a, b=b)
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


def template_signatures(template: Mapping[str, Any], digests: Mapping[str, str] | None = None) -> dict[str, Signature]:
    """The full signature (down to the flowspec) of each PE of a StreamTemplate object, by PE name;
    ``digests`` maps a PE name to the ``imageID`` its pods report (their executable then)."""
    sp = template.get("spec") or {}
    pes = {str(p.get("name")): p for p in sp.get("pes") or [] if isinstance(p, Mapping) and p.get("name")}
    streams = [(str(s.get("from")), str(s.get("to"))) for s in sp.get("streams") or [] if isinstance(s, Mapping)]
    primal = {str(x.get("pe")) for x in sp.get("primalInputs") or [] if isinstance(x, Mapping)}
    into: dict[str, list[str]] = {}
    for src, dst in streams:
        if src in pes and dst in pes:
            into.setdefault(dst, []).append(src)

    def base(name: str, digest: str | None) -> Signature:
        p = pes[name]
        return Signature.build(effective_kind(p, len(into.get(name, []))), str(p.get("image") or DEFAULT_IMAGE), digest=digest,
                               command=[str(x) for x in p.get("command") or []], args=[str(x) for x in p.get("args") or []],
                               env=_env(p))

    by_ref = {name: base(name, None).at(Level.arguments).key for name in pes}
    out = {}
    for name in pes:
        inputs = [(by_ref[src], f"{src}->{name}") for src in into.get(name, [])]
        if name in primal:
            inputs.append((PRIMAL_PRODUCER, "primal"))
        sig = base(name, (digests or {}).get(name))
        out[name] = Signature(kind=sig.kind, executable=sig.executable, arguments=sig.arguments,
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
                out.setdefault((md.get("namespace", ""), lab[crd.LABEL_JOB], lab[crd.LABEL_PE]), str(cs["imageID"]))
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
        pid = pe_id(f"{md.get('namespace')}/{lab[crd.LABEL_JOB]}", lab[crd.LABEL_PE])
        out[pid] = out.get(pid, 0.0) + cores * mips_per_core.get(sp.get("nodeName") or "", crd.REFERENCE_MIPS_PER_CORE)
    return out


def _sig(x: float) -> float:
    return float(f"{x:.6g}")


CONFIDENT = 0.5  # the Fitted condition's threshold (the policy's default minConfidence)


def profile_status(model: Any, now: float) -> dict[str, Any]:
    """A ResourceProfile's status from a :class:`soda_optimizer.learn.LearnedModel`."""
    f = model.fit
    st: dict[str, Any] = {
        "key": model.key, "kind": model.kind.value, "level": model.level.value, "path": list(model.path),
        "a": _sig(model.a), "b": _sig(model.b), "samples": int(model.observed), "confidence": round(model.confidence, 4),
        "lastUpdate": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(model.updated_at if model.updated_at is not None else now)),
        "updatedAt": model.updated_at,
        "window": [{k: v for k, v in (("ri", _sig(s.r_i)), ("m", _sig(s.m)), ("ro", _sig(s.r_o)),
                                      ("mUsed", None if s.m_used is None else _sig(s.m_used)), ("t", s.t),
                                      ("rp", None if s.r_p is None else _sig(s.r_p)), ("censored", True if s.censored else None))
                    if v is not None}
                   for s in model.samples[-STATUS_WINDOW:]],
    }
    if f is not None:
        st.update(relativeError=round(f.rel_residual, 4), effectiveSamples=round(f.n_eff, 2), aIdentified=f.a_identified,
                  bIdentified=f.b_identified, outlierFraction=round(f.outlier_fraction, 4))
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
        f"confidence {model.confidence:.2f} from {int(model.observed)} sample(s)" + (f", relative error {f.rel_residual:.1%}" if f is not None else ""),
        None, at=st["lastUpdate"])]
    return st


def model_from_profile(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The learner's model dict (:meth:`Learner.add_model`) from a ResourceProfile object; ValueError when it holds none."""
    md, st, sp = obj.get("metadata") or {}, obj.get("status") or {}, obj.get("spec") or {}
    name = md.get("name")
    if not st.get("path") or not st.get("kind") or not st.get("level"):
        raise ValueError(f"ResourceProfile {name}: no status.path/kind/level (not written by the operator yet)")
    if st.get("key", name) != name:
        raise ValueError(f"ResourceProfile {name}: status.key is {st.get('key')}")
    samples = [{"r_i": s["ri"], "m": s["m"], "r_o": s["ro"], **({"m_used": s["mUsed"]} if s.get("mUsed") is not None else {}),
                **({"t": s["t"]} if s.get("t") is not None else {}), **({"r_p": s["rp"]} if s.get("rp") is not None else {}),
                **({"censored": True} if s.get("censored") else {})} for s in st.get("window") or []]
    out = {"key": name, "path": list(st["path"]), "level": st["level"], "kind": st["kind"], "samples": samples,
           "observed": int(st.get("samples", len(samples))), "updated_at": st.get("updatedAt"), "stale": bool(samples),
           "pinned": bool(sp.get("pinned", False))}
    for k in ("a", "b"):
        v = _num(sp.get(k)) if sp.get("pinned") and sp.get(k) is not None else _num(st.get(k))
        if v is not None:
            out[k] = v
    return out


# ------------------------------------------------------------------------------------ the operator side


class Learning:
    """The operator's learner: observations in, ResourceProfiles out, functions for planning."""

    def __init__(self, custom: client.CustomObjectsApi | None, config: LearnConfig | None = None,
                 clock: Callable[[], float] = time.time, fence: Callable[[], bool] | None = None):
        self.custom = custom
        self.learner = Learner(config)
        self.clock = clock
        self.fence = fence or (lambda: False)
        self.loaded = False
        self.dirty: set[str] = set()  # nodes updated since the last write
        self.functions: dict[str, Choice] = {}  # template PE id -> the function chosen (the best estimate)
        self.probes: dict[str, Probe] = {}  # template PE id -> this macro epoch's exploration probe
        self.macro_epochs = 0
        self.settings = LearningSettings()
        self.held: dict[str, tuple[float, float]] = {}  # PE id -> (allocated mips, since when)
        self.spec_pins: dict[str, tuple[bool, float | None, float | None]] = {}
        self.summary = ""  # the last "planning with" counts logged

    # ---------------------------------------------------------------- storage
    def sync(self) -> None:
        """Read the profiles (load them the first time, apply pins every time), then write the changed ones."""
        if self.custom is None:
            return
        try:
            resp = self.custom.list_cluster_custom_object(crd.GROUP, crd.VERSION, PLURAL, _request_timeout=10)
            items = list((cast(dict[str, Any], resp) or {}).get("items") or [])[:MAX_PROFILES_LOADED]
        except Exception as e:  # noqa: BLE001  (404: the CRD is not installed; anything else: next epoch)
            ERRORS.labels("list").inc()
            log.warning("ResourceProfiles could not be listed: %s", getattr(e, "reason", e))
            items = None
        if items is not None:
            self._read(items)
        self.write()
        PROFILES.set(len(self.learner.models))

    def read_profiles(self, items: Iterable[Mapping[str, Any]]) -> list[tuple[str, str]]:
        """Load ResourceProfile objects (``kubesoda plan`` reads them from files) and apply their
        pins, as a macro epoch does; returns (name, why) for each profile skipped."""
        return self._read(list(items))

    def _read(self, items: list[Any]) -> list[tuple[str, str]]:
        skipped: list[tuple[str, str]] = []
        for obj in items:
            name = (obj.get("metadata") or {}).get("name", "")
            sp = obj.get("spec") or {}
            try:
                if not self.loaded and name not in self.learner.models:
                    self.learner.add_model(model_from_profile(obj))
                pinned = bool(sp.get("pinned", False))
                pin = (pinned, _num(sp.get("a")), _num(sp.get("b")))
                m = self.learner.models.get(name)
                if m is None:
                    continue
                if pinned and (not m.pinned or self.spec_pins.get(name) != pin):
                    self.learner.pin(name, a=pin[1], b=pin[2])
                    self.dirty.add(name)
                    log.info("ResourceProfile %s pinned (a=%s, b=%s)", name, m.a, m.b)
                elif not pinned and m.pinned:
                    self.learner.unpin(name)
                    m.stale = bool(m.samples)
                    self.dirty.add(name)
                    log.info("ResourceProfile %s unpinned: learned again", name)
                self.spec_pins[name] = pin
            except (ValueError, TypeError, KeyError, ValidationError) as e:
                ERRORS.labels("load").inc()
                log.warning("ResourceProfile %s skipped: %s", name, str(e).splitlines()[0])
                skipped.append((name, str(e).splitlines()[0]))
        if not self.loaded:
            log.info("resource function learner: %d profiles loaded", len(self.learner.models))
        self.loaded = True
        return skipped

    def write(self) -> int:
        """Create (if absent) and write the status of every node updated since the last write; returns how many."""
        if self.custom is None or not self.dirty:
            return 0
        now = self.clock()
        done = 0
        for key in sorted(self.dirty):
            if self.fence():
                return done
            model = self.learner.get(key)
            if model is None:
                self.dirty.discard(key)
                continue
            try:
                st = profile_status(model, now)
                body = {"apiVersion": crd.API_VERSION, "kind": KIND,
                        "metadata": {"name": key, "labels": {"kubesoda.io/pe-kind": model.kind.value, "kubesoda.io/signature-level": model.level.value}},
                        "spec": {"pinned": False}}
                try:
                    self.custom.create_cluster_custom_object(crd.GROUP, crd.VERSION, PLURAL, body, _request_timeout=10)
                except client.ApiException as e:
                    if e.status != 409:
                        raise
                self.custom.patch_cluster_custom_object_status(crd.GROUP, crd.VERSION, PLURAL, key, {"status": st}, _request_timeout=10)
                self.dirty.discard(key)
                done += 1
            except Exception as e:  # noqa: BLE001  (a failed write waits for the next macro epoch)
                ERRORS.labels("write").inc()
                log.warning("ResourceProfile %s not written: %s", key, getattr(e, "reason", None) or e)
        return done

    # ---------------------------------------------------------------- planning
    def choose_all(self, scen: Scenario, templates: Iterable[Mapping[str, Any]], policy: Mapping[str, Any] | None) -> dict[str, Choice]:
        """The function of every PE of the Scenario's templates (kept for the micro epochs)."""
        self.settings = settings_from(policy)
        names = {t.name for t in scen.templates}
        out: dict[str, Choice] = {}
        for obj in templates:
            tname = f"{(obj.get('metadata') or {}).get('namespace') or 'default'}/{(obj.get('metadata') or {}).get('name')}"
            if tname not in names:
                continue
            try:
                sigs = template_signatures(obj)
                for p in (obj.get("spec") or {}).get("pes") or []:
                    sig = sigs.get(str(p.get("name")))
                    if sig is None:
                        continue
                    declared = declared_function(p)
                    out[pe_id(tname, str(p.get("name")))] = choose(sig.kind, declared, sig, self.learner, self.settings,
                                                            combine=(p.get("resourceFunction") or {}).get("combine"))
            except Exception as e:  # noqa: BLE001  (the template keeps what the translation gave it)
                ERRORS.labels("choose").inc()
                log.warning("resource functions of StreamTemplate %s: %s", tname, e)
        self.functions = out
        counts: dict[str, int] = {}
        for c in out.values():
            src = c.source.split(":", 1)[0]
            counts[src] = counts.get(src, 0) + 1
        summary = ", ".join(f"{counts.get(k, 0)} {k}" for k in ("pinned", "learned", "declared", "default"))
        if summary != self.summary:
            log.info("planning with resource functions: %s", summary)
            self.summary = summary
        return out

    def macro(self, scen: Scenario, templates: Iterable[Mapping[str, Any]], policy: Mapping[str, Any] | None) -> dict[str, Choice]:
        """The macro epoch's part: profiles synced, functions chosen, exploration probes picked; the
        functions to plan with (``pipeline.run(scen, functions=...)``, the pipeline's first step)."""
        try:
            self.sync()
            self.choose_all(scen, templates, policy)
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
        dec = next((d for d in plan.jobs if d.job == job), None)
        if dec is None or not dec.template:
            return {}
        prefix = f"{dec.template}:"
        return {k[len(prefix):]: {"a": _sig(c.rf.a), "b": _sig(c.rf.b), "source": c.source}
                for k, c in self.functions.items() if k.startswith(prefix)}

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
                self.dirty.update(self.learner.observe(sig, [s], now))
                taken += 1
        SAMPLES.inc(taken)
        return taken
