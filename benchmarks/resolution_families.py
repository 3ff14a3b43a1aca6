"""Instance families on which macroQ's automatic resolution has hurt (issue 34), for
bench_resolution.py and the oracle tests (tests/test_macroq_resolution.py).

Every job is a pipeline of PEs with ``r_o = min(a r_i m, b r_i)`` (sources ``min(a m, rate)``), so a
PE saturates at a known number of mips (its *need*); the last PE is a sink with a value function.
Each function takes its sizes and a seed; the default sizes are the issue's.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

from soda_optimizer.model import (
    PE,
    Job,
    Node,
    Policy,
    PrimalInput,
    ResourceFunction,
    Scenario,
    Sink,
    Stream,
    Template,
    ValueFunction,
)

RATE = 100.0


def pipeline(name: str, needs: list[float], mins: list[float], weight: float, value: ValueFunction | None = None) -> Template:
    """A chain of PEs; PE i saturates at ``needs[i]`` mips and must get ``mins[i]``."""
    pes = []
    for i, (need, m) in enumerate(zip(needs, mins)):
        kind = "source" if i == 0 else ("sink" if i == len(needs) - 1 else "transform")
        rf = ResourceFunction(a=RATE / need) if i == 0 else ResourceFunction(a=1.0 / need, b=1.0)
        pes.append(PE(name=f"p{i}", kind=kind, rf=rf, min_mips=m))
    return Template(name=name, pes=tuple(pes),
                    streams=tuple(Stream(src=f"p{i}", dst=f"p{i + 1}") for i in range(len(pes) - 1)),
                    sinks=(Sink(pe=pes[-1].name, weight=weight, value=value or ValueFunction(kind="linear")),),
                    primal_inputs=(PrimalInput(pe="p0", rate=RATE),))


def _scenario(templates: list[Template], jobs: list[Job], capacity: float, node_mips: float = 0.0, policy: Policy | None = None) -> Scenario:
    node_mips = node_mips or capacity
    n = max(1, math.ceil(capacity / node_mips - 1e-9))
    nodes = [Node(name=f"n{i}", mips=node_mips) for i in range(n - 1)]
    nodes.append(Node(name=f"n{n - 1}", mips=capacity - node_mips * (n - 1)))
    return Scenario(nodes=tuple(nodes), templates=tuple(templates), jobs=tuple(jobs), policy=policy or Policy())


def span(n_jobs: int = 211, capacity: float = 60000.0, n_tiny: int = 72, seed: int = 0) -> Scenario:
    """PE needs spanning four orders of magnitude (5 to 50,000 mips), ``n_tiny`` jobs needing about
    10 mips, minima of 0-60% of the need, values per mips spread over a factor of 10."""
    rng = np.random.default_rng(seed)
    ts, js = [], []
    for k in range(n_jobs):
        tiny = k < n_tiny
        n_pe = 1 if tiny else int(rng.integers(1, 3))
        needs = [float(rng.uniform(8, 12)) if tiny else float(np.exp(rng.uniform(math.log(5), math.log(50000)))) for _ in range(n_pe)]
        mins = [round(x * float(rng.choice([0.0, 0.3, 0.6])), 1) for x in needs]
        w = float(np.exp(rng.uniform(0, math.log(10)))) * sum(needs) / RATE
        ts.append(pipeline(f"t{k}", needs, mins, round(w, 4)))
        js.append(Job(name=f"j{k:03d}", rank=int(rng.integers(1, 4)), templates=(f"t{k}",)))
    return _scenario(ts, js, capacity, node_mips=8000.0)


def step(n_small: int = 80, at: float = 29950.0, capacity: float = 40000.0, seed: int = 0) -> Scenario:
    """One job whose importance jumps from 0 to 100,000 at ``at`` mips, beside small concave jobs."""
    rng = np.random.default_rng(seed)
    big = pipeline("big", [at * 1.2], [0.0], 1.0,
                   ValueFunction(kind="piecewise", points=((0.0, 0.0), (RATE / 1.2 - 0.01, 0.0), (RATE / 1.2, 100000.0))))
    ts, js = [big], [Job(name="big", rank=1, templates=("big",))]
    for k in range(n_small):
        need = float(rng.uniform(100, 400))
        ts.append(pipeline(f"t{k}", [need], [round(need * 0.2, 1)], round(float(rng.uniform(5, 15)) * need / 100, 4),
                           ValueFunction(kind="capped", cap=RATE * 0.8)))
        js.append(Job(name=f"s{k:03d}", rank=1, templates=(f"t{k}",)))
    return _scenario(ts, js, capacity, node_mips=8000.0)


def two_pe_step(capacity: float = 20000.0) -> Scenario:
    """Issue 49's step: a two-PE job (source -> sink) whose value jumps from 0 to 100,000 at 9,001
    tuples/s (its source saturates at 10,000 mips, its sink at 3,000), beside a one-PE job worth 0.1
    per mips up to 1,500: the step needs both PEs high together, which no single-PE move of a
    greedy curve ever gains (the 10-mips optimum is 100,799; main planned 1,500)."""
    src = PE(name="src", kind="source", rf=ResourceFunction(a=1.0, b=1.0))
    snk = PE(name="snk", kind="sink", rf=ResourceFunction(a=1 / 3000.0, b=1.0))
    step_v = ValueFunction(kind="piecewise", points=((0, 0), (9000, 0), (9001, 100000)))
    t = Template(name="d/step", pes=(src, snk), streams=(Stream(src="src", dst="snk"),), sinks=(Sink(pe="snk", value=step_v),),
                 primal_inputs=(PrimalInput(pe="src", rate=10000),))
    lin = Template(name="d/lin", pes=(PE(name="s", kind="source", rf=ResourceFunction(a=0.1, b=1.0)),),
                   sinks=(Sink(pe="s", value=ValueFunction(kind="capped", slope=1.0, cap=1500)),),
                   primal_inputs=(PrimalInput(pe="s", rate=1e6),))
    return _scenario([t, lin], [Job(name="d/step", templates=("d/step",)), Job(name="d/lin", templates=("d/lin",))], capacity,
                     node_mips=capacity / max(1, int(capacity // 4000)))


def one_pe(n_jobs: int = 500, n_required: int = 6, capacity: float = 100000.0, seed: int = 0) -> Scenario:
    """Hundreds of one-PE jobs of three ranks, a few required."""
    rng = np.random.default_rng(seed)
    ts, js = [], []
    for k in range(n_jobs):
        need = float(rng.uniform(50, 1000))
        ts.append(pipeline(f"t{k}", [need], [round(need * float(rng.choice([0.0, 0.25, 0.5])), 1)],
                           round(float(rng.uniform(1, 5)) * need / 100, 4)))
        js.append(Job(name=f"j{k:03d}", rank=int(rng.integers(1, 4)), required=k < n_required, templates=(f"t{k}",)))
    return _scenario(ts, js, capacity, node_mips=8000.0)


def exact_fit(n_jobs: int = 7, delta: float = 0.0, optional: int = 3, seed: int = 0) -> Scenario:
    """``n_jobs`` required two-PE jobs whose minima (multiples of 10 mips, not of 100) add up to the
    capacity plus ``delta`` mips (0: exact fit; -1: one mips to spare; +1: one mips short), beside
    ``optional`` rank-2 jobs."""
    rng = np.random.default_rng(seed)
    ts, js = [], []
    total = 0.0
    for k in range(n_jobs + optional):
        mins = [10.0 * round(float(rng.uniform(100, 2000))) + 10.0 * (k % 2) for _ in range(2)]
        needs = [m * 1.5 for m in mins]
        ts.append(pipeline(f"t{k}", needs, mins, round(float(rng.uniform(1, 3)) * sum(needs) / RATE, 4)))
        js.append(Job(name=f"j{k}", rank=1 if k < n_jobs else 2, required=k < n_jobs, templates=(f"t{k}",)))
        if k < n_jobs:
            total += sum(mins)
    return _scenario(ts, js, total - delta, node_mips=11000.0)


def lone(required: bool = False, mins: tuple[float, float] = (1449.0, 1549.0), capacity: float = 3000.0) -> Scenario:
    """A single job with two PEs whose minima fit one node (issue 34's example)."""
    t = pipeline("t", [m * 1.5 for m in mins], list(mins), 1.0)
    return _scenario([t], [Job(name="lone", required=required, templates=("t",))], capacity)


def sec71(nodes: int) -> Scenario:
    """The SODA paper's section 7.1 jobs (bench_admission.py) on ``nodes`` nodes of 11,000 mips."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks.bench_admission import NODE_MIPS, jobs

    ts, js = jobs()
    return Scenario(nodes=tuple(Node(name=f"n{i}", mips=NODE_MIPS) for i in range(nodes)), templates=tuple(ts), jobs=tuple(js))


def with_unit(s: Scenario, unit: float | None) -> Scenario:
    return s.model_copy(update={"policy": s.policy.model_copy(update={"unit_mips": unit})})


def minimum(s: Scenario, job: Job) -> float:
    """A job's exact minimum (cheapest template), from the model alone."""
    from soda_optimizer.model import floor_mips

    return min(sum(floor_mips(p, s.policy.pe_floor_mips) for p in s.template(t).pes) for t in job.candidate_templates)


def refused_but_fitting(s: Scenario, decisions) -> list[str]:  # type: ignore[no-untyped-def]
    """Jobs refused for capacity (``capacity``, ``infeasible-required``) although they fit: a required
    job when the exact minima of the required jobs up to it in the rule's order (with its imports)
    fit the capacity; any job when its exact minimum fits what the answer leaves free."""
    from soda_optimizer.soda.required import rule_key

    H = s.capacity_mips
    used = sum(d.mips for d in decisions if d.admitted)
    out = []
    req = sorted((j for j in s.jobs if j.required), key=rule_key)
    dec = {d.job: d for d in decisions}
    held = 0.0
    for j in req:
        need = minimum(s, j)
        if held + need <= H + 1e-6:
            held += need
            if not dec[j.name].admitted:
                out.append(j.name)
    for j in s.jobs:
        d = dec[j.name]
        if not d.admitted and d.reason in ("capacity", "infeasible-required") and j.name not in out and not j.imports \
                and minimum(s, j) <= H - used + 1e-6:
            out.append(j.name)
    return out
