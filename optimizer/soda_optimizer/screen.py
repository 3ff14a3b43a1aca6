"""Screen: the jobs whose importance, rates or traffic leave the finite range at their largest
allocation (a Scenario -> problems step before any policy; no paper section: SODA assumes sane
numbers, section 3's importance is a sum that one overflowing term turns into inf for everyone).

Each number is bounded where it enters (:mod:`.bounds`, the model's validation); what the bounds
cannot see is a product: a chain of selectivities, a large ``a`` times a large primal rate, a
weight times a slope times a rate. For each template a job may run, every PE gets its largest
allocation (its ``max_mips``, capped by what one rack holds, :func:`.graph.glue`), rates propagate
(:class:`.importance.Evaluator`, imports included), and the job is named with the first stream or
sink whose rate, traffic or value is not finite or is past its bound (:data:`.bounds.MAX_STREAM_RATE`,
:data:`.bounds.MAX_TRAFFIC`, :data:`.bounds.MAX_JOB_IMPORTANCE` for the job's sum). Every value
function is non-decreasing and every resource function too, so the largest allocation bounds
every allocation a stage may try.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from . import bounds
from .importance import Evaluator, value
from .model import Scenario, split_pe_id


@dataclass(frozen=True)
class Problem:
    job: str
    field: str  # where in the job (or its template) the number comes from, in the CRD's terms
    message: str


def _largest(ev: Evaluator) -> np.ndarray:
    alloc = np.empty(len(ev.pes))
    for i, p in enumerate(ev.pes):
        m = ev.glued.spec(p).max_mips
        alloc[i] = m if math.isfinite(m) else 1.0  # no usable node caps it: nothing will run anyway
    return alloc


def screen(scenario: Scenario) -> list[Problem]:
    """One :class:`Problem` per job whose numbers overflow, in job order (empty for sane input)."""
    problems: dict[str, Problem] = {}
    depth = max((len(j.candidate_templates) for j in scenario.jobs), default=0)
    for k in range(depth):
        # pass k: each job runs its k-th template (its last when it has fewer), imports glued
        choice = {j.name: j.candidate_templates[min(k, len(j.candidate_templates) - 1)] for j in scenario.jobs}
        ev = Evaluator(scenario.glued(choice))
        if not ev.pes:
            continue
        with np.errstate(all="ignore"):
            alloc = _largest(ev)
            rates = ev.outputs(alloc[None, :])[0]
            total: dict[str, float] = {}
            fields = {j.name: f"spec.templates[{j.templates.index(choice[j.name])}]" for j in scenario.jobs}

            def flag(job: str, fld: str, msg: str) -> None:
                problems.setdefault(job, Problem(job, fields[job], msg))

            for (u, v), (s, sel, w, vf, bpt) in zip(ev.edge_keys, ev._edges):
                job, pe = split_pe_id(v)
                r = float(rates[s] * sel)
                where = f"template {choice[job].split('/', 1)[-1]}: stream {split_pe_id(u)[1]}->{pe}"
                if not (math.isfinite(r) and r <= bounds.MAX_STREAM_RATE):
                    flag(job, "spec.templates", f"{where} would carry {r:.3g} tuples/s at its largest allocation "
                                                f"(limit {bounds.MAX_STREAM_RATE:g}): selectivities or resource functions too large")
                    continue
                if not (r * bpt <= bounds.MAX_TRAFFIC):
                    flag(job, "spec.templates", f"{where} would carry {r * bpt:.3g} bytes/s (limit {bounds.MAX_TRAFFIC:g}): bytesPerTuple too large")
                if w > 0 and vf.kind != "zero":
                    total[job] = total.get(job, 0.0) + float(w * value(vf, np.array([r]))[0])
            for i, w, vf in ev._sinks:
                job, pe = split_pe_id(ev.pes[i])
                r = float(rates[i])
                if not math.isfinite(r):
                    flag(job, "spec.templates", f"template {choice[job].split('/', 1)[-1]}: sink {pe} would receive {r} tuples/s")
                    continue
                if w > 0:
                    total[job] = total.get(job, 0.0) + float(w * value(vf, np.array([r]))[0])
        for job, imp in total.items():
            if not (math.isfinite(imp) and imp <= bounds.MAX_JOB_IMPORTANCE):
                problems.setdefault(job, Problem(job, fields[job],
                                                 f"template {choice[job].split('/', 1)[-1]}: importance {imp:.3g} at its largest allocation is over the "
                                                 f"limit {bounds.MAX_JOB_IMPORTANCE:g} (weights, value functions or rates too large)"))
    order = {j.name: i for i, j in enumerate(scenario.jobs)}
    return sorted(problems.values(), key=lambda p: order[p.job])
