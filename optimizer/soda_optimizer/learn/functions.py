"""Which resource function each PE is planned with, and the Scenario -> Scenario step that puts them in
(issue 14 item 4). Pure: no Kubernetes, no I/O.

Per PE, in this order (the first that applies wins):

1. a **pinned** model on the PE's signature path (the most specific pinned node): an
   administrator's word. Issue 45: a PE's signature is scoped to its namespace; at each level its
   own namespace's node is looked at first, then the cluster-wide node of the same path
   (:meth:`.signature.Signature.shared`): the only model shared between namespaces, read-only
   (no observation ever reaches it) and used only when pinned;
2. the **declared** ``resourceFunction``, when the policy says declared ones win (``declared_wins``);
3. the **learned** model of the most specific signature node with at least ``min_confidence``
   (:meth:`.learner.Learner.lookup`). A PE that declares a function only gives it up for a node at
   ``override_level`` or deeper (default ``arguments``: the same image *and* arguments, the same
   program): a model pooled over every PE of a kind or an image says little about one declared PE;
   a PE that declares nothing takes any level, down to the kind's root (the paper's "borrow the most
   specific model that exists");
4. the **declared** one;
5. the policy's **default** for the PE's kind (else ``ResourceFunction()``, a = b = 1).

Issue 52: a declared or default choice carries the key of the PE's own model when that model is
not trusted for want of a sample below saturation (``Fit.below_saturation`` False), so that
exploration can probe it.

Issue 52: the PE's own model, not trusted for want of a sample below saturation but seen at one
allocation (``Fit.local``: the planner's, from one macro epoch to the next), is handed over where it
predicts the PE's own samples better than the declared (or default) function: it is right at that
allocation and pessimistic past it (bench_rfl: 7 of 51 PEs stayed on a default function 300-400%
off without it, and tests/test_bench_rfl.py failed). It is never Confident. So is (issue 52 item 2)
a model rebuilding its confidence after its window was dropped on drift, while its held-out error
is within ``max_confident_error``; where the offered rate is measured, a fit that has seen its
CPU-bound branch (the support rule) but whose held-out error or outlier share is the noise's (20%
noise on the readings: fits 3.5-6.4% off the truth were planned with declared functions 22-29% off);
and (issue 52 item 2, h52g), without a measured processed rate, a PE busy on all its mips past a
plateau (``Fit.plateau``, :mod:`.plateau`) and a family fit untrusted for its windows' noise alone
(:func:`_noisy`).

Issue 52 item 3: a learned function whose model located its saturation only as a bound (a PE
seen at one allocation, ``Fit.saturation_identified`` False) is handed over with
``ResourceFunction.saturation_identified`` False, so that the knee (:mod:`..soda.knee`) does not
trim the PE's goal to it; declared, default and pinned functions count as identified.

A learned model is planned with what it learned (issue 38): the family fit's curves
(:meth:`.model.LearnedModel.function`), so the planner's rates follow the input rate; a pinned model
or one fitted in the paper's form gives its ``a`` and ``b``.

With learning disabled, only 4 and 5 apply. ``combine`` is never learned: it stays the declared one.

The choices are keyed by *template* PE (``pe_id(template, pe)``, ``"ns/template:pe"``): the resource
function lives on the template's PE in the Scenario, and a template's PE has one signature whatever
job runs it. :func:`apply_functions` is the step: the first of :func:`..steps.prepare`, which takes
the choices as ``functions`` (``pipeline.run(scenario, functions=...)`` / ``pipeline.rerun``), before
the rank and weight managers, in one order offline and live. Without ``functions`` the Scenario is
planned with its own (declared) functions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from ..model import PEKind, ResourceFunction, Scenario, pe_id
from .learner import Learner
from .model import LearnedModel, Sample
from .plateau import plateau_function
from .signature import LEVELS, Level, Signature
from .trust import silent_misfit

DECLARED = "declared"
PINNED = "pinned"
DEFAULT = "default"


def learned(level: Level) -> str:
    """The source of a learned function: ``learned:<level>``."""
    return f"learned:{level.value}"


class ExplorationSettings(BaseModel):
    """The SchedulingPolicy's ``spec.learning.exploration``: bounded probes of PEs whose learned model
    has a parameter not identified (:mod:`.explore`). Off by default (docs/learn.md, "Exploration")."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    enabled: bool = False
    step: float = Field(default=0.5, gt=0, le=1)  # the saturation point moves by a factor 1 + step (at least 1.3 for a bound, explore.py)
    period: int = Field(default=2, ge=1)  # macro epochs between two probes of one PE
    max_share: float = Field(default=0.2, gt=0, le=1)  # share of the learned PEs probed in one macro epoch
    min_samples: float = Field(default=5.0, ge=0)  # effective samples a model needs before it is probed


class LearningSettings(BaseModel):
    """The SchedulingPolicy's ``spec.learning``."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    # opt-in: a signature is image + arguments + producers, and where many PEs share one (the pause
    # image of KWOK clusters, one generic image with parameters in config files) their pooled model
    # would replace every one's declared function (seen live: the 7.2 benchmark's LSD jobs went
    # Degraded within two macro epochs of learning from the fluid data plane)
    enabled: bool = False
    declared_wins: bool = False
    min_confidence: float = Field(default=0.5, ge=0, le=1)
    override_level: Level = Level.arguments
    defaults: dict[PEKind, ResourceFunction] = Field(default_factory=dict)
    exploration: ExplorationSettings = Field(default_factory=ExplorationSettings)


class Choice(BaseModel):
    """The function a PE is planned with and where it came from (``key``: the signature node)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    rf: ResourceFunction
    source: str
    key: str | None = None


def choose(kind: PEKind, declared: ResourceFunction | None, signature: Signature | None, learner: Learner | None,
           settings: LearningSettings, combine: str | None = None) -> Choice:
    """The precedence of the module docstring for one PE (``declared`` None: the template states none)."""
    comb = combine or (declared.combine if declared is not None else "sum")
    if settings.enabled and learner is not None and signature is not None:
        sig = learner.resolve(signature)
        shared = sig.shared() if sig.namespace is not None else None  # resolved by the namespace's own aliases
        for i, node in enumerate(sig.lineage()):
            for n in (node, None if shared is None else shared.lineage()[i]):
                m = None if n is None else learner.models.get(n.key)
                if n is not None and m is not None and m.pinned:
                    return Choice(rf=ResourceFunction(a=m.a, b=m.b, combine=comb), source=PINNED, key=n.key)  # type: ignore[arg-type]
        declared_first = declared is not None and settings.declared_wins
        if not declared_first:
            hit = learner.lookup(sig, settings.min_confidence)
            deep_enough = hit is not None and LEVELS.index(hit.level) >= LEVELS.index(settings.override_level)
            if hit is not None and (declared is None or deep_enough):
                rf = hit.model.function(comb)
                if hit.model.fit is not None and hit.model.fit.saturation_identified is False:
                    # issue 52 item 3: its saturation only bounded by what was seen: not trimmed to
                    rf = rf.model_copy(update={"saturation_identified": False})
                return Choice(rf=rf, source=learned(hit.level), key=hit.key)
        own = learner.get(sig.key)
        fallback = declared if declared is not None else settings.defaults.get(kind, ResourceFunction()).model_copy(update={"combine": comb})
        mine = [f for f in (_own_function(own, learner, comb), _moved_function(own, learner, comb)) if f is not None] if not declared_first else []
        errs = [_own_error(f, kind, own.samples) for f in mine] if own is not None else []
        if own is not None and own.fit is not None and errs and min(errs) < _own_error(fallback, kind, own.samples):
            # issue 52: a fit seen at one allocation only (not Confident: its saturation is a bound),
            # or rebuilding its confidence after a drift (or the fit before the drift, its need moved
            # to the windows after it), where it predicts the PE's own samples better than the
            # declared function
            ident = own.fit.trusted is True and own.fit.saturation_identified is not False
            best = mine[int(np.argmin(errs))]
            return Choice(rf=best.model_copy(update={"saturation_identified": ident}), source=learned(own.level), key=own.key)
        if own is not None and not own.pinned and own.fit is not None and own.fit.below_saturation is False:
            # issue 52: planned as declared, its own model awaiting a sample below saturation:
            # the key lets exploration probe it (:mod:`.explore`)
            return Choice(rf=fallback, source=DECLARED if declared is not None else DEFAULT, key=own.key)
    if declared is not None:
        return Choice(rf=declared, source=DECLARED)
    d = settings.defaults.get(kind, ResourceFunction())
    return Choice(rf=d.model_copy(update={"combine": comb}), source=DEFAULT)


def _recovering(model: LearnedModel, learner: Learner) -> bool:
    """Issue 52 item 2: a model whose window was dropped on drift, refitted on what came after
    with a held-out error within ``max_confident_error``: its confidence is rebuilt from
    ``n_full`` samples (and, with the processed rate measured, its support from its CPU-bound
    branch), while the declared function is as far from the new behaviour as from the old."""
    cfg = learner.config
    f = model.fit
    return (model.drifts > 0 and model.family is not None and f is not None and f.held_out_error is not None
            and f.held_out_error <= cfg.max_confident_error and f.n_eff >= cfg.min_branch_n_eff)


def _seen_below(model: LearnedModel, learner: Learner) -> bool:
    """Issue 52 item 1, the offered rate measured: a family fit that has seen its CPU-bound branch
    (the support rule, :func:`.trust.below_saturation`) and predicts held-out windows within
    ``max_rel_residual`` (not NoFit), untrusted for its held-out error or its outlier share alone:
    with 20% noise on the output and the CPU reading, each window is off by 13-16% and a quarter to a
    third of them past ``outlier_threshold`` whatever the fit (bench_rfl_shapes' ``noise20``: fits
    3.5-6.4% off the truth planned with their declared functions, 22-29% off). Never Confident; the
    caller hands it over only where it predicts the PE's own windows better than the declared function,
    and not where windows that emitted nothing refute it (:func:`.trust.silent_misfit`)."""
    ff, f = model.family, model.fit
    if ff is None or f is None or ff.support is None or f.below_saturation is not True or f.no_fit:
        return False
    return not silent_misfit(model.samples, lambda r, m: ff.predict(r, m)[0], lambda r: ff.sel_at(r) * r)


def _noisy(model: LearnedModel, learner: Learner) -> bool:
    """Issue 52 item 2 (h52g): a family fit without a measured processed rate that saw the PE below
    its saturation (at least ``min_branch_n_eff`` windows with CPU to spare or behind their input,
    :attr:`.family.FamilyFit.n_evidence`) but is not trusted for their error alone: within
    ``max_rel_residual``, most of its windows not outliers (on the fluid data plane 20% noise on
    both made 0.43-0.49 of them outliers at ``outlier_threshold``), and not the paper's need
    judged only by what its saturated windows bound (``n_level``). With 20% noise on the output and
    the CPU readings a window's error is about 0.15 whatever the fit (bench_rfl_shapes ``--pes 6``,
    noise20, varying input: fits 1-6% off the truth, evidence error 0.15-0.2, and the planner kept
    the declared function, 17-36% off). Only with the ``n_full`` effective windows a Confident fit
    has (a younger one waits for ``min_confidence``, as tests/test_learning.py's precedence test
    says). Handed over where it beats the declared function on the PE's own windows; never
    Confident."""
    cfg = learner.config
    ff, f = model.family, model.fit
    return bool(ff is not None and f is not None and f.trusted is False and f.n_eff >= cfg.n_full
                and ff.support is None and ff.n_evidence is not None
                and ff.n_evidence >= cfg.min_branch_n_eff and ff.evidence_error is not None
                and ff.evidence_error <= cfg.max_rel_residual and ff.cv_error <= cfg.max_rel_residual
                and ff.outlier_fraction < 0.5 and not (ff.need == "paper" and (ff.n_level or 0) > 0))


def _own_function(model: LearnedModel | None, learner: Learner, comb: str) -> ResourceFunction | None:
    """The own model's function when it is local, recovering, busy past a plateau or untrusted
    for its noise alone (issue 52), else None; None too
    when its parameters are out of a ResourceFunction's range (a fallback fit of a PE that emitted
    next to nothing: b = 4e21 seen in bench_rfl)."""
    if model is None or model.pinned or model.fit is None:
        return None
    busy = model.fit.plateau is not None and model.fit.n_eff >= learner.config.n_full  # issue 52 item 2 (:mod:`.plateau`)
    if not (busy or model.fit.local or _recovering(model, learner) or _seen_below(model, learner) or _noisy(model, learner)):
        return None
    try:
        return plateau_function(model.fit.plateau, comb) if busy and model.fit.plateau is not None else model.function(comb)
    except ValueError:
        return None


def _moved_function(model: LearnedModel | None, learner: Learner, comb: str) -> ResourceFunction | None:
    """Issue 52 item 2: after a drift, while the model's fit is not trusted, its anchor
    (:attr:`.model.LearnedModel.anchor`): the fit before the drift with its need moved to the windows
    that showed it (:func:`.trend.rescaled`), until a fit of the new window is trusted (then the
    last trusted fit); None otherwise. Traced on bench_rfl_shapes' drift PEs (the
    fluid data plane, varying input): the refit on the 3-8 windows after the change was the
    :mod:`.fit` fallback (fewer than 2 windows with CPU to spare) or not yet trusted, 15-68% off,
    and the planner kept the declared function (25-128% off) for 8-13 windows."""
    if (model is None or model.pinned or model.drifts == 0 or model.anchor is None or model.fit is None
            or model.fit.trusted is True):
        return None
    if len(model.samples) >= learner.config.n_full / 2 and (model.fit.local or _recovering(model, learner) or _seen_below(model, learner)):
        # the moved fit is a guess from the three windows that showed the drift: a refit of half
        # ``n_full`` windows or more that may be handed over is preferred (compared on the PE's own
        # noisy windows, a 20%-noise PE's moved fit, 9.2% off the truth, beat its refit of 24 windows,
        # 4.3%, after a drift the noise made: bench_rfl_shapes backpressure, 30 samples)
        return None
    try:
        return model.anchor.function(model.kind, comb)
    except ValueError:
        return None


def _own_error(rf: ResourceFunction, kind: PEKind, samples: Sequence[Sample]) -> float:
    """The median over the newest 32 of ``samples`` of the mean relative error of ``rf``'s output
    rate and mips used (each at the sample's input rate and allocation; inf without samples)."""
    src = kind is PEKind.source
    errs = []
    for s in samples[-32:]:
        if s.r_o <= 0 or s.m <= 0:
            continue
        e = abs(float(rf.rate_out(s.r_i, s.m, src)) / s.r_o - 1.0)
        if s.m_used:
            e = 0.5 * (e + abs(float(rf.mips_used(s.r_i, s.m, src)) / s.m_used - 1.0))
        errs.append(e)
    return float(np.median(errs)) if errs else float("inf")


def apply_functions(scenario: Scenario, functions: Mapping[str, Choice]) -> Scenario:
    """``scenario`` with each template PE named in ``functions`` (by ``pe_id(template, pe)``) given
    that function; the Scenario itself when nothing changes."""
    if not functions:
        return scenario
    templates = []
    for t in scenario.templates:
        pes = []
        for p in t.pes:
            c = functions.get(pe_id(t.name, p.name))
            pes.append(p.model_copy(update={"rf": c.rf}) if c is not None and c.rf != p.rf else p)
        templates.append(t if all(x is y for x, y in zip(pes, t.pes)) else t.model_copy(update={"pes": tuple(pes)}))
    if all(x is y for x, y in zip(templates, scenario.templates)):
        return scenario
    return scenario.model_copy(update={"templates": tuple(templates)})
