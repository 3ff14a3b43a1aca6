"""Exploration for the resource function learner (issue 14 item 5): bounded probes that make a PE
observed in one regime only show the other one. Pure: no Kubernetes, no I/O.

The SODA paper (section 6.1) fits ``min(A r_i m, B r_i)`` to whatever the PEs were seen doing and
says nothing on how informative samples are obtained; this module is that missing piece, and a
departure only in that sense.

**Why it is needed.** A transform that SODA only ever runs CPU-bound (its allocation below its
saturation point ``m* = B/A``) shows A but not B: the fit sets B to the bound the data imply,
``A x the largest m seen`` (:mod:`.fit`, ``b_identified = False``), so the planner believes the PE
saturates at the largest allocation it ever got and never gives it more. The loop is closed on a
pessimistic guess and cannot leave it by itself. Symmetrically, a PE only seen input-bound and
without a CPU reading has A only bounded (``a_identified = False``), and its saturation point
believed to be the smallest allocation seen.

**The probe** is a Scenario -> Scenario step (like :func:`.functions.apply_functions`): for a chosen
PE it replaces the function the planner sees by an *optimistic* one, still consistent with the
data (the unidentified parameter is only bounded on one side), with the saturation point moved by
a bounded factor ``1 + step``:

- B not identified (transforms and sinks): ``B x (1 + step)``, so the planner may give the PE up
  to ``1 + step`` times the largest allocation seen; if it does, the samples either still grow
  (CPU-bound: the pessimistic B, and so the next plan's allocation, ratchet up by that factor) or
  go idle (input-bound: B is measured);
- A not identified: ``A x (1 + step)``, so the planner believes the PE needs ``1 / (1 + step)`` of
  the smallest allocation seen; it gets less, and runs CPU-bound (A is measured) or shows that its
  saturation point is lower still.

The probe never forces an allocation: the planner (macroQ, macroW, microQ, microW) decides with
the optimistic function like with any other, so node capacity, the candidate-change limit and
microW's churn limits (``micro_max_change``, ``micro_max_change_per_pe``,
``micro_max_touched_nodes``) hold by construction, and a PE whose output is worth less than what
the extra mips would buy elsewhere is not given them.

**The criterion** (:func:`select`): a PE is probed at a macro epoch when

1. its function comes from a learned model (``learned:<level>``; pinned, declared and default
   functions are never probed), or (issue 52) it is planned as declared or default while its own
   model waits for a sample below saturation (:attr:`.model.Fit.below_saturation` False: no
   offered rate, saturated samples only): it is probed with that model's function, its saturation
   moved up by ``1 + step``, so that it runs with CPU to spare or shows its output grow with its mips;
2. that model has a parameter not identified (B first, for transforms and sinks; else A);
3. it has at least ``min_samples`` effective samples (the fit has settled on what it saw);
4. it is its turn: models are spread over ``period`` macro epochs by a hash of their key, so one
   PE is probed at most once every ``period`` macro epochs and the probes of different PEs do not
   pile up in one epoch;
5. at most ``max_share`` of the learned PEs (at least one) are probed in one macro epoch; when more
   are due, a hash of the key and the epoch picks them (a deterministic rotation).

Issue 52: a model whose saturation is only the bound of the allocations it was seen at (waiting,
or a local fit, :attr:`.model.Fit.local`, planned as it is) is probed for it whatever its
parameters' identification says (B for transforms and sinks, A down for sources), its saturation
moved up by at least :data:`.trust.NARROW` (a departure from ``step`` when ``step`` is below
0.3): a probe inside the narrow band of allocations it was seen at would be one more sample at the
same operating point.

A probed PE is planned with the probe for one macro epoch (and its micro epochs), then with its
refitted model again.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from ..model import PEKind, ResourceFunction, Scenario
from .functions import Choice, ExplorationSettings, apply_functions
from .learner import Learner
from .model import LearnedModel
from .trust import NARROW

__all__ = ["ExplorationSettings", "Probe", "apply_probes", "select"]


class Probe(BaseModel):
    """One PE planned with an optimistic function for one macro epoch."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    pe: str  # the template PE id (pe_id(template, pe)), as in the choices
    key: str  # the signature node whose model is probed
    parameter: Literal["a", "b"]
    factor: float  # the parameter is multiplied by this
    choice: Choice  # the function planned with, in place of the PE's choice


def _turn(key: str, epoch: int, period: int) -> bool:
    offset = int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) % period
    return (epoch + offset) % period == 0


def select(choices: Mapping[str, Choice], learner: Learner, settings: ExplorationSettings, epoch: int) -> dict[str, Probe]:
    """The probes of macro epoch ``epoch`` (the module docstring's criterion), by template PE id."""
    if not settings.enabled:
        return {}
    learned = {pe: c for pe, c in choices.items() if c.key is not None}
    due: list[Probe] = []
    for pe in sorted(learned):
        c = learned[pe]
        assert c.key is not None
        model = learner.get(c.key)
        if model is None or model.pinned or model.fit is None or model.fit.n_eff < settings.min_samples:
            continue
        f = model.fit
        waiting = not c.source.startswith("learned")  # issue 52: awaiting a sample below saturation
        if waiting and f.below_saturation is not False:
            continue
        # issue 52: its saturation only the bound of the allocations seen (waiting, or a local fit
        # planned as it is): probed past them, whatever its parameters' identification says
        bound = waiting or f.local
        param: Literal["a", "b"] | None
        if model.kind is not PEKind.source and (bound or not f.b_identified):
            param = "b"
        elif bound or not f.a_identified:
            param = "a"
        else:
            param = None
        if param is None or not _turn(c.key, epoch, settings.period):
            continue
        base = model.function(c.rf.combine) if waiting else c.rf
        # past the narrow band of allocations the model was seen at, never inside it (a probe there
        # would be one more sample at the same operating point)
        up = _past_seen(model, base, max(1.0 + settings.step, NARROW)) if bound else 1.0 + settings.step
        # a source's saturation is primal / a: it moves up with a smaller a
        factor = 1.0 / up if bound and param == "a" else up
        rf = base.scaled(param, factor)  # the curves, when it has them, move with the parameter
        due.append(Probe(pe=pe, key=c.key, parameter=param, factor=factor,
                         choice=Choice(rf=rf, source=f"{c.source}+probe", key=c.key)))
    cap = max(1, math.floor(settings.max_share * len(learned)))
    due.sort(key=lambda p: hashlib.sha256(f"{p.key}/{epoch}".encode()).hexdigest())  # a rotation, when more are due than allowed
    return {p.pe: p for p in due[:cap]}


def _past_seen(model: LearnedModel, rf: ResourceFunction, up: float) -> float:
    """The factor that moves the saturation of ``rf`` (at the median input rate ``model`` saw) to
    ``up`` times the largest allocation ``model`` was seen at, and at least ``up`` (issue 52: a
    local fit's saturation may sit inside the band of allocations seen, e.g. at their median)."""
    ms = [s.m for s in model.samples if s.m > 0]
    rs = [s.r_i for s in model.samples if s.r_i > 0]
    if not ms or not rs:
        return up
    sat = float(rf.mips_used(float(np.median(rs)), 1e18, model.kind is PEKind.source))
    if not (math.isfinite(sat) and sat > 0):
        return up
    return up * max(1.0, max(ms) / sat)


def apply_probes(scenario: Scenario, choices: Mapping[str, Choice], probes: Mapping[str, Probe]) -> Scenario:
    """``scenario`` planned with ``choices``, the probed PEs with their probe's function instead."""
    merged = {**choices, **{pe: p.choice for pe, p in probes.items()}}
    return apply_functions(scenario, merged)
