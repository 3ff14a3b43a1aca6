"""Screen: the jobs whose importance, rates or traffic can leave the finite range (a check before
any policy; no paper section: SODA assumes sane numbers, and section 3's importance is a sum that
one overflowing term turns into inf or NaN for every job planned with it).

Each number is bounded where it enters (:mod:`.bounds`, the model's validation); what the bounds
cannot see is a product: a chain of selectivities, a large ``b`` times a large primal rate, a
weight times a slope times a rate. The screen bounds every rate for *every* allocation at once,
from the resource functions of section 3: a source emits ``min(a m, primal) <= primal``, any other
PE ``min(a r_i m, b r_i) <= b r_i``, whatever its mips ``m`` (a function with curves, issue 38: at
most its ``output`` at ``r_i``, :meth:`.model.ResourceFunction.max_output`); value functions are non-decreasing, so
``weight x value(bound)`` bounds each term of the importance. Rates propagate in topological order
through each template a job may run (imports included: an importer receives at most its
exporter's bound x the export's selectivity; templates with cycles by the same 200 rounds of fixed
point the evaluator makes). A job is named with the first stream or sink whose bound is not finite
or passes :data:`.bounds.MAX_STREAM_RATE` / :data:`.bounds.MAX_TRAFFIC`, or whose importance bound
passes :data:`.bounds.MAX_JOB_IMPORTANCE`. Linear in the size of the workload (no glued graph, no
evaluator): 0.07-0.16 s for the 10x LSD workload's 1,040 jobs here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import networkx as nx
import numpy as np

from . import bounds
from .importance import value
from .model import Job, Template, ValueFunction

FIXED_POINT_ROUNDS = 200  # as importance.Evaluator


@dataclass(frozen=True)
class Problem:
    job: str
    field: str  # where in the job the number comes from, in the CRD's terms
    message: str


def _value(vf: ValueFunction, rate: float) -> float:
    return 0.0 if vf.kind == "zero" else float(value(vf, np.array([rate]))[0])


def _rates(t: Template, imported: dict[str, float]) -> dict[str, float]:
    """An upper bound of every PE's output rate in ``t`` for every allocation."""
    ins: dict[str, list[tuple[str, float]]] = {p.name: [] for p in t.pes}
    for s in t.streams:
        ins[s.dst].append((s.src, s.selectivity))
    primal: dict[str, float] = {}
    for pi in t.primal_inputs:
        primal[pi.pe] = primal.get(pi.pe, 0.0) + pi.rate
    spec = {p.name: p for p in t.pes}
    if t.allow_cycles:
        order, rounds = [p.name for p in t.pes], FIXED_POINT_ROUNDS
    else:
        g = nx.DiGraph()
        g.add_nodes_from(ins)
        g.add_edges_from((s.src, s.dst) for s in t.streams)
        order, rounds = list(nx.topological_sort(g)), 1
    out = dict.fromkeys(ins, 0.0)
    for _ in range(rounds):
        before = dict(out)
        for p in order:
            feeds = [out[src] * sel for src, sel in ins[p]]
            if p in imported:
                feeds.append(imported[p])
            rf = spec[p].rf
            if not feeds:  # a source: min(a m, primal) (with curves, its output at its primal rate)
                out[p] = float(rf.max_output(primal.get(p, 0.0), source=True))
                continue
            c = rf.combine
            r_i = (sum(feeds) if c == "sum" else min(feeds) if c == "min" else max(feeds)) + primal.get(p, 0.0)
            out[p] = float(rf.max_output(r_i))  # b r_i (with curves, output(r_i))
        if rounds > 1 and all(abs(out[p] - before[p]) <= 1e-9 for p in out):
            break
    return out


def screen(jobs: Sequence[Job], templates: Mapping[str, Template]) -> list[Problem]:
    """One :class:`Problem` per job whose numbers can overflow, in job order (empty for sane
    input). ``templates`` by name holds every template the jobs list; imports name jobs among
    ``jobs`` (a Scenario's, or what translation has before it builds one)."""
    by_name = {j.name: j for j in jobs}
    g = nx.DiGraph()
    g.add_nodes_from(by_name)
    g.add_edges_from((i.job, j.name) for j in jobs for i in j.imports if i.job in by_name)
    exported: dict[tuple[str, str], float] = {}  # (job, export) -> bound of its rate over the job's templates
    problems: dict[str, Problem] = {}
    for name in nx.topological_sort(g):
        job = by_name[name]
        for t_name in job.candidate_templates:
            why = _check(job, templates[t_name], exported)
            if why is not None and name not in problems:
                problems[name] = Problem(name, f"spec.templates[{job.templates.index(t_name)}]", f"template {t_name.split('/', 1)[-1]}: {why}")
    order = {j.name: i for i, j in enumerate(jobs)}
    return sorted(problems.values(), key=lambda p: order[p.job])


def _check(job: Job, t: Template, exported: dict[tuple[str, str], float]) -> str | None:
    """Why ``job`` running ``t`` can overflow, or None; records the bounds of its exports."""
    imported: dict[str, float] = {}
    extra = 0.0  # the imports' own terms of the importance
    for imp in job.imports:
        r = exported.get((imp.job, imp.export), 0.0)
        imported[imp.pe] = imported.get(imp.pe, 0.0) + r
        if imp.weight > 0:
            extra += imp.weight * _value(imp.value, r)
    with np.errstate(all="ignore"):
        out = _rates(t, imported)
        total = extra
        for s in t.streams:
            r = out[s.src] * s.selectivity
            if not r <= bounds.MAX_STREAM_RATE:
                return (f"stream {s.src}->{s.dst} may carry {r:.3g} tuples/s (limit {bounds.MAX_STREAM_RATE:g}): "
                        "primal rates, selectivities or resource functions too large")
            if not r * s.bytes_per_tuple <= bounds.MAX_TRAFFIC:
                return f"stream {s.src}->{s.dst} may carry {r * s.bytes_per_tuple:.3g} bytes/s (limit {bounds.MAX_TRAFFIC:g}): bytesPerTuple too large"
            w = job.weight_overrides.get(s.id, s.weight)
            if w > 0:
                total += w * _value(s.value, r)
        for sk in t.sinks:
            r = out[sk.pe]
            if not r <= bounds.MAX_STREAM_RATE:
                return f"sink {sk.pe} may receive {r:.3g} tuples/s (limit {bounds.MAX_STREAM_RATE:g})"
            w = job.weight_overrides.get(f"sink:{sk.pe}", sk.weight)
            if w > 0:
                total += w * _value(sk.value, r)
        for e in t.exports:
            k = (job.name, e.name)
            exported[k] = max(exported.get(k, 0.0), out[e.pe] * e.selectivity)
    if not (math.isfinite(total) and total <= bounds.MAX_JOB_IMPORTANCE):
        return (f"importance may reach {total:.3g}, over the limit {bounds.MAX_JOB_IMPORTANCE:g} "
                "(weights, value functions or rates too large)")
    return None
