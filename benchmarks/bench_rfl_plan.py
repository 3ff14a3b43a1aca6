"""The learner in the closed loop on behaviours outside its family, with varying input (issue 38
item 5): plan, run, learn, side by side with the paper-form learner.

    .venv/bin/python benchmarks/bench_rfl_plan.py [--epochs 36] [--macro-every 3] [--seeds 0] [--nodes 9]

The workload is the DAC-like one of soda_optimizer/workloads.py (6 jobs, 51 PEs) on 9 nodes of 8 x
1000 mips, as benchmarks/bench_rfl.py; but the PEs' true behaviours are not the paper's form. They
are written here, independently of the model code: a PE needs ``need(p)`` mips to process ``p``
tuples/s and emits ``out(p)``; with ``m`` mips and an offered rate ``r`` it processes
``p = min(r, need^-1(m))`` (bisection) and uses ``need(p)`` mips. Each PE gets one of five shapes
in turn, matched to the workload's generated function at its nominal input rate ``r0`` (same
selectivity ``s`` and same mips ``K`` to process ``r0``):

- ``knee``: ``need = K p / r0``, ``out = s p``;
- ``concave``: ``need = K (p / r0)^2`` (``p = r0 sqrt(m / K)``);
- ``selectivity``: ``need = K p / r0``, ``out = s r0 sqrt(p / r0)``;
- ``background``: ``need = K / 2 + K p / (2 r0)``;
- ``piecewise``: ``need = c p + 2 c max(0, p - 0.8 r0)``, ``c = K / (1.4 r0)``.

The input varies: every epoch each job's primal rates are its nominal ones times a factor
log-uniform in [1/2, 2] (the planner is told the epoch's rates). Each epoch: plan
(``pipeline.run`` at a macro epoch, ``pipeline.rerun`` otherwise), run the plan's mips (the
fractions floored to millicores) through the true behaviours in topological order (what a PE
does not process is lost: no backpressure), observe each PE as the operator does
(:class:`PEObservation` with the offered rates, 5% noise on the output and the CPU reading,
:func:`sample_from_observation`, :meth:`Learner.observe`).

Arms, side by side on the same seeds and input factors:

- ``declared``: every PE declares the paper's form at ``r0``, ``a`` and ``b`` each times a factor
  log-uniform in [1/2.5, 2.5] (a user's guess); no learning;
- ``learned``: learning on (the operator's precedence, :func:`choose`), the learner's family, the
  optimizer handed the learned curves (:meth:`LearnedModel.function`);
- ``learned/paper-form``: the same learner, its choices handed over in the paper's form matched at
  the operating rate (``a``, ``b``: what the optimizer was handed before the curves);
- ``paper learner``: the learner before issue 38 (``LearnConfig(family=False)``, the paper's form);
- ``oracle``: the true behaviours as curves (the best the planner can be told).

Per epoch and arm: the **error** of the function the optimizer planned with, at the input rate
each PE was offered and the mips it had, against its true (noiseless) output rate and mips used
(mean of the two relative errors, the output's relative to ``max(true, 10%`` of its output at that
input with CPU to spare), averaged over PEs); and the **importance** of the plan as it ran (true
behaviours), over the oracle's.

Writes docs/benchmarks/rfl_plan.json and rfl_plan.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import networkx as nx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.bench_rfl import effective_kind, signatures  # noqa: E402
from soda_optimizer import pipeline, workloads  # noqa: E402
from soda_optimizer.importance import value  # noqa: E402
from soda_optimizer.learn import LearnConfig, Learner, sample_from_observation  # noqa: E402
from soda_optimizer.learn.functions import Choice, LearningSettings, apply_functions, choose  # noqa: E402
from soda_optimizer.model import PEKind, Policy, PreviousState, ResourceFunction, Scenario, pe_id  # noqa: E402
from soda_optimizer.observed import PRIMAL, SINK, PEObservation, stream_label  # noqa: E402
from soda_optimizer.plan import Plan  # noqa: E402

SHAPES = ("knee", "concave", "selectivity", "background", "piecewise")
ARMS = ("declared", "learned", "learned/paper-form", "paper learner", "oracle")
NOISE, GUESS, EPOCH_S, FLOOR = 0.05, float(np.log(2.5)), 10.0, 0.1


@dataclass
class Truth:
    shape: str
    need: Callable[[float], float]
    out: Callable[[float], float]
    r0: float
    a: float  # the paper's form at r0
    b: float

    def run(self, r: float, m: float) -> tuple[float, float, float]:
        """(processed, output, mips used) at offered rate r and m mips."""
        if self.need(r) <= m:
            p = r
        elif self.need(0.0) > m:
            p = 0.0
        else:
            lo, hi = 0.0, r
            for _ in range(60):
                mid = 0.5 * (lo + hi)
                lo, hi = (mid, hi) if self.need(mid) <= m else (lo, mid)
            p = lo
        return p, self.out(p), min(m, self.need(p))

    def curves(self, combine: str) -> ResourceFunction:
        """The truth as a function with curves (the oracle's): a dense grid, 1/256 to 16 x r0."""
        xs = np.concatenate([[0.0], 16 * self.r0 * 2.0 ** (np.arange(-48, 1) / 4.0)])
        ys = np.array([self.need(x) for x in xs]) + 1e-9 * xs
        return ResourceFunction(a=self.a, b=self.b, combine=combine, need=tuple(zip(xs.tolist(), ys.tolist())),  # type: ignore[arg-type]
                                output=tuple(zip(xs.tolist(), [self.out(x) for x in xs])))


def truth(shape: str, kind: PEKind, rf: ResourceFunction, r0: float) -> Truth:
    src = kind is PEKind.source
    s = 1.0 if src else rf.b
    k = r0 / rf.a if src else rf.b / rf.a  # mips to process r0
    a, b = (s * r0 / k, 1.0) if src else (s / k, s)

    def lin(p: float) -> float:
        return s * p

    if shape == "concave":
        return Truth(shape, lambda p: k * (p / r0) ** 2, lin, r0, a, b)
    if shape == "selectivity":
        return Truth(shape, lambda p: k * p / r0, lambda p: s * r0 * float(np.sqrt(max(p, 0.0) / r0)), r0, a, b)
    if shape == "background":
        return Truth(shape, lambda p: 0.5 * k + 0.5 * k * p / r0, lin, r0, a, b)
    if shape == "piecewise":
        c = k / (1.4 * r0)
        return Truth(shape, lambda p: c * p + 2 * c * max(0.0, p - 0.8 * r0), lin, r0, a, b)
    return Truth(shape, lambda p: k * p / r0, lin, r0, a, b)


@dataclass
class Setup:
    scen: Scenario
    truths: dict[str, Truth]  # template PE id -> truth
    declared: dict[str, ResourceFunction]
    kinds: dict[str, PEKind]
    sigs: dict[str, Any]
    combine: dict[str, str]


def nominal_inputs(scen: Scenario) -> dict[str, float]:
    """Each template PE's input rate with every PE unbounded (the generated paper-form functions)."""
    out: dict[str, float] = {}
    for t in scen.templates:
        g = nx.DiGraph()
        g.add_nodes_from(p.name for p in t.pes)
        g.add_edges_from((x.src, x.dst) for x in t.streams)
        rate: dict[str, float] = {}
        for p in nx.topological_sort(g):
            spec = t.pe(p)
            ins = [rate[x.src] * x.selectivity for x in t.streams if x.dst == p]
            c = spec.rf.combine
            r = (sum(ins) if c == "sum" else min(ins) if c == "min" else max(ins)) if ins else 0.0
            r += sum(x.rate for x in t.primal_inputs if x.pe == p)
            out[pe_id(t.name, p)] = r
            rate[p] = r if not ins else spec.rf.b * r
    return out


def setup(seed: int, n_nodes: int) -> Setup:
    rng = np.random.default_rng(2000 + seed)
    templates, jobs = workloads.dac(seed)
    scen = workloads.scenario((templates, jobs), workloads.nodes(n_nodes), Policy(resolution_units=400))
    r0 = nominal_inputs(scen)
    truths, declared, kinds, sigs, comb = {}, {}, {}, {}, {}
    k = 0
    for t in scen.templates:
        sigs.update(signatures(t))
        for p in t.pes:
            pid = pe_id(t.name, p.name)
            kinds[pid] = effective_kind(t, p.name)
            comb[pid] = p.rf.combine
            truths[pid] = truth(SHAPES[k % len(SHAPES)], kinds[pid], p.rf, max(r0[pid], 1e-6))
            k += 1
            fa, fb = (float(np.exp(rng.uniform(-GUESS, GUESS))) for _ in range(2))
            declared[pid] = ResourceFunction(a=truths[pid].a * fa, b=truths[pid].b * fb, combine=p.rf.combine)
    return Setup(scen, truths, declared, kinds, sigs, comb)


def with_rates(scen: Scenario, factors: dict[str, float]) -> Scenario:
    """The Scenario with each job's templates' primal rates times the job's factor (one template per job)."""
    by_t = {t: factors[j.name] for j in scen.jobs for t in j.templates}
    ts = tuple(t.model_copy(update={"primal_inputs": tuple(x.model_copy(update={"rate": x.rate * by_t.get(t.name, 1.0)}) for x in t.primal_inputs)})
               for t in scen.templates)
    return scen.model_copy(update={"templates": ts})


@dataclass
class Arm:
    name: str
    learner: Learner | None = None
    plan: Plan | None = None
    choices: dict[str, Choice] = field(default_factory=dict)


def choices(arm: Arm, s: Setup) -> dict[str, Choice]:
    if arm.name == "oracle":
        return {pid: Choice(rf=tr.curves(s.combine[pid]), source="true") for pid, tr in s.truths.items()}
    on = LearningSettings(enabled=arm.learner is not None)
    out = {pid: choose(s.kinds[pid], s.declared[pid], s.sigs[pid], arm.learner, on, combine=s.combine[pid]) for pid in s.truths}
    if arm.name == "learned/paper-form":
        out = {pid: c.model_copy(update={"rf": ResourceFunction(a=c.rf.a, b=c.rf.b, combine=c.rf.combine)}) for pid, c in out.items()}
    return out


def step(arm: Arm, s: Setup, scen: Scenario, epoch: int, macro: bool, rng: np.random.Generator) -> dict[str, Any]:
    if arm.plan is None or (macro and arm.name != "oracle"):
        arm.choices = choices(arm, s)
    base = scen if arm.plan is None else scen.model_copy(update={"previous": PreviousState(
        candidates={p.pe: p.candidates for p in arm.plan.pes}, fractions={p.pe: dict(p.fractions) for p in arm.plan.pes})})
    planned = apply_functions(base, arm.choices)
    plan = pipeline.run(planned) if arm.plan is None or macro else pipeline.rerun(planned, arm.plan)
    if plan.feasible or arm.plan is None:
        arm.plan = plan
    plan = arm.plan
    nodes = {n.name: n for n in scen.nodes}
    mips: dict[str, float] = {}
    for p in plan.pes:
        mips[p.pe] = sum(max(1, int(f * nodes[n].cores * 1000 + 1e-6)) / 1000 * nodes[n].mips_per_core
                         for n, f in p.fractions.items() if f > 0 and n in nodes)
    choice = {d.job: d.template for d in plan.jobs if d.admitted and d.template}
    g = scen.glued(choice)
    errs: list[float] = []
    total = 0.0
    out: dict[str, float] = {}
    for q in nx.topological_sort(g.graph):
        t = pe_id(choice[g.graph.nodes[q]["job"]], g.graph.nodes[q]["name"])
        tr, kind = s.truths[t], s.kinds[t]
        ins = {stream_label(g, u, q): out[u] * g.graph.edges[u, q]["selectivity"] for u in g.graph.predecessors(q)}
        c = s.combine[t]
        vals = list(ins.values())
        r = (sum(vals) if c == "sum" else min(vals) if c == "min" else max(vals)) if vals else 0.0
        primal = g.graph.nodes[q]["primal_rate"]
        r += primal
        m = mips.get(q, 0.0)
        p, o, used = tr.run(r, m)
        out[q] = o
        rf = arm.choices[t].rf
        src = not vals
        if o > 1e-9 and used > 1e-9:
            fl = max(o, FLOOR * tr.out(r))
            errs.append(0.5 * (abs(float(rf.rate_out(r, m, src)) - o) / fl + abs(float(rf.mips_used(r, m, src)) - used) / used))
        # what the operator sees: offered and received per label, emitted per label, the CPU reading
        share = p / r if r > 0 else 0.0
        offered = {**ins, **({PRIMAL: primal} if primal > 0 else {})}
        received = {k: v * share for k, v in offered.items()}
        noisy = o * float(np.exp(rng.normal(0, NOISE)))
        emitted = {stream_label(g, q, v): noisy * g.graph.edges[q, v]["selectivity"] for v in g.graph.successors(q)}
        if g.graph.nodes[q]["sinks"]:
            emitted[SINK] = noisy
        sel = {stream_label(g, q, v): g.graph.edges[q, v]["selectivity"] for v in g.graph.successors(q)}
        obs = PEObservation(received=received, emitted=emitted, offered=offered, mips=used * float(np.exp(rng.normal(0, NOISE))))
        if arm.learner is not None and m > 0:
            smp = sample_from_observation(obs, kind, m, epoch * EPOCH_S, selectivity=sel, combine=c)  # type: ignore[arg-type]
            if smp is not None:
                arm.learner.observe(s.sigs[t], [smp], epoch * EPOCH_S)
    for u, v, d in g.graph.edges(data=True):
        if d["weight"] > 0:
            total += d["weight"] * float(value(d["value"], np.array([out[u] * d["selectivity"]]))[0])
    for q, d in g.graph.nodes(data=True):
        for w, vf in d["sinks"]:
            total += w * float(value(vf, np.array([out[q]]))[0])
    learned = sum(1 for c in arm.choices.values() if c.source.startswith("learned"))
    return {"epoch": epoch, "error": float(np.mean(errs)) if errs else None, "error_median": float(np.median(errs)) if errs else None,
            "importance": total, "learned": learned,
            "curved": sum(1 for c in arm.choices.values() if c.rf.curved)}


def run(seed: int, epochs: int, macro_every: int, n_nodes: int) -> dict[str, list[dict[str, Any]]]:
    s = setup(seed, n_nodes)
    arms = {a: Arm(a, learner=Learner(LearnConfig(family=a != "paper learner")) if a in ("learned", "learned/paper-form", "paper learner") else None)
            for a in ARMS}
    frng = np.random.default_rng(seed)
    rngs = {a: np.random.default_rng([seed, k]) for k, a in enumerate(ARMS)}
    rows: dict[str, list[dict[str, Any]]] = {a: [] for a in ARMS}
    for e in range(epochs):
        factors = {j.name: float(np.exp(frng.uniform(np.log(0.5), np.log(2.0)))) for j in s.scen.jobs}
        scen = with_rates(s.scen, factors)
        for a in ARMS:
            rows[a].append(step(arms[a], s, scen, e, e % macro_every == 0, rngs[a]))
        o = rows["oracle"][-1]["importance"]
        for a in ARMS:
            rows[a][-1]["importance_ratio"] = rows[a][-1]["importance"] / o if o > 0 else None
    return rows


def pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=36)
    ap.add_argument("--macro-every", type=int, default=3)
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--nodes", type=int, default=9)
    ap.add_argument("--out", default=str(ROOT / "docs" / "benchmarks"))
    args = ap.parse_args(argv)
    seeds = [int(x) for x in args.seeds.split(",")]
    t0 = time.perf_counter()
    runs = {sd: run(sd, args.epochs, args.macro_every, args.nodes) for sd in seeds}
    secs = time.perf_counter() - t0

    def mean_of(a: str, key: str, es: range) -> float | None:
        v = [runs[sd][a][e][key] for sd in seeds for e in es if runs[sd][a][e][key] is not None]
        return float(statistics.mean(v)) if v else None

    cmd = ".venv/bin/python benchmarks/bench_rfl_plan.py" + "".join(
        f" --{k.replace('_', '-')} {v}" for k, v in (("epochs", args.epochs), ("macro_every", args.macro_every), ("seeds", args.seeds),
                                                     ("nodes", args.nodes)) if str(v) != str(ap.get_default(k)))
    tail = range(max(0, args.epochs - 2 * args.macro_every), args.epochs)
    lines = ["# The learner in the closed loop on behaviours outside its family, varying input (issue 38)", "",
             f"`{cmd}`: DAC-like workload (6 jobs, 51 PEs) on {args.nodes} nodes, 5 true shapes in turn, primal rates x0.5-2 per job "
             f"and epoch, {args.epochs} epochs, a macro epoch every {args.macro_every}, seeds {seeds}; {secs:.0f} s on a 2-core machine "
             "shared with other work (macroW stops on a wall-clock limit: plans vary a little from run to run). How it is measured: the "
             "docstring of benchmarks/bench_rfl_plan.py. Error: of the function the optimizer planned with, at each PE's offered "
             "input rate and mips, against the true output rate and mips used, median over the PEs (mean in brackets: a PE given a few "
             "mips by a plan made with a wrong function has errors of several 100%); importance: of the plan as it ran, over the oracle's.", "",
             "| epoch | " + " | ".join(f"error {a}" for a in ARMS if a != "oracle") + " | " + " | ".join(f"importance {a}" for a in ARMS if a != "oracle") + " |",
             "|---|" + "---|" * (2 * len(ARMS) - 2)]
    for e in sorted({0, 3, 6, 9, 12, 18, 24, 30, args.epochs - 1} & set(range(args.epochs))):
        r = range(e, e + 1)
        lines.append(f"| {e} | " + " | ".join(f"{pct(mean_of(a, 'error_median', r))} ({pct(mean_of(a, 'error', r))})" for a in ARMS if a != "oracle") + " | "
                     + " | ".join(pct(mean_of(a, "importance_ratio", r)) for a in ARMS if a != "oracle") + " |")
    lines += ["", f"Last {len(tail)} epochs ({tail.start}-{tail.stop - 1}), means:", "",
              "| arm | error of what the optimizer planned with: median over PEs (mean) | importance / oracle's | PEs planned with learned functions | with curves |",
              "|---|---|---|---|---|"]
    final: dict[str, Any] = {}
    for a in ARMS:
        final[a] = {k: mean_of(a, k, tail) for k in ("error", "error_median", "importance_ratio", "learned", "curved")}
        f = final[a]
        lines.append(f"| {a} | {pct(f['error_median'])} ({pct(f['error'])}) | {pct(f['importance_ratio'])} | {f['learned']:.1f} | {f['curved']:.1f} |")
    lines += ["", "Paper (section 6.1, Fig. 21): 27% error with default functions, 7% learned (its own form, constant input)."]
    out = Path(args.out)
    (out / "rfl_plan.md").write_text("\n".join(lines) + "\n")
    (out / "rfl_plan.json").write_text(json.dumps({"command": cmd, "seconds": secs, "final": final,
                                                    "runs": {str(k): v for k, v in runs.items()}}, indent=1) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
