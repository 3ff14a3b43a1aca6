"""Seeded generators of SODA workloads and node sets (pure: they build Scenario objects; no I/O), for the
tests, the benchmarks and the examples, like :mod:`.flows.fixtures` for the flow router.

- :func:`lsd`: LSD-like (SODA paper, section 7.2.1: "104 jobs and 737 PEs", "generally lightweight"):
  3 ranks, some inter-job glue through exported/imported streams (section 1, Fig. 1), about 1 job
  in 8 with an alternative template (section 1's template selection); ``scale`` multiplies the
  number of jobs (``scale=10`` is the 10x LSD);
- :func:`dac`: DAC-like (section 7.2.1: "six jobs and 51 PEs", "a wide range of processing
  requirements"): saturation from ~50 to ~20,000 mips, log-uniform;
- :func:`nodes`: N nodes (the paper's PNs) in racks and zones (the clusters and link tree of 5.2);
- :func:`scenario`: the two together with a policy.

The real LSD and DAC resource functions are not published; these reproduce their published shape
(sizes, ranks, glue, cost spread), not their numbers.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable

from .model import (
    PE,
    Export,
    Import,
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

NS = "bench"


def _template(rng: random.Random, name: str, n_pe: int, cost: Callable[[], float], rate: float) -> Template:
    n_src = 1 if n_pe < 6 or rng.random() < 0.6 else 2
    pes, streams = [], []
    for i in range(n_pe):
        sat = cost()
        if i < n_src:
            pes.append(PE(name=f"pe{i}", kind="source", rf=ResourceFunction(a=rate / sat)))
        else:
            sel = rng.choice([0.5, 0.8, 1.0])
            pes.append(PE(name=f"pe{i}", kind="sink" if i == n_pe - 1 else "transform", rf=ResourceFunction(a=sel / sat, b=sel)))
            src = rng.randrange(max(0, i - 3), i) if i > n_src else rng.randrange(0, n_src)
            streams.append(Stream(src=f"pe{src}", dst=f"pe{i}", bytes_per_tuple=rng.choice([200.0, 1000.0, 5000.0])))
            if i > 2 and rng.random() < 0.15:
                other = rng.randrange(0, i)
                if other != src:
                    streams.append(Stream(src=f"pe{other}", dst=f"pe{i}", bytes_per_tuple=200.0))
    # every PE without an output stream is a terminal with value (diminishing returns for some)
    outs = {s.src for s in streams}
    sinks = []
    for p in pes:
        if p.name not in outs:
            vf = ValueFunction(kind="linear") if rng.random() < 0.6 else ValueFunction(kind="capped", cap=rate * rng.uniform(0.3, 0.9))
            sinks.append(Sink(pe=p.name, weight=rng.choice([1.0, 2.0, 5.0]), value=vf))
    return Template(
        name=name,
        pes=tuple(pes),
        streams=tuple(streams),
        sinks=tuple(sinks),
        primal_inputs=tuple(PrimalInput(pe=f"pe{i}", rate=rate) for i in range(n_src)),
        exports=(Export(name="out", pe=f"pe{n_pe - 1}"),),
    )


def lsd(seed: int = 0, scale: int = 1) -> tuple[list[Template], list[Job]]:
    rng = random.Random(seed)
    n_jobs = 104 * scale
    sizes = [7] * n_jobs
    for i in rng.sample(range(n_jobs), 9 * scale):
        sizes[i] = 8
    templates: list[Template] = []
    jobs: list[Job] = []
    for j, k in enumerate(sizes):
        def cost() -> float:
            return rng.uniform(100, 600)

        rate = rng.choice([50.0, 100.0, 200.0])
        names = [f"{NS}/lsd-{j}-a"]
        templates.append(_template(rng, names[0], k, cost, rate))
        if rng.random() < 0.125:
            names.append(f"{NS}/lsd-{j}-b")
            templates.append(_template(rng, names[1], k, lambda: rng.uniform(80, 400), rate * 0.7))
        imports: tuple[Import, ...] = ()
        if j >= 8 and rng.random() < 0.1:
            up = rng.randrange(0, j)
            if len(jobs[up].templates) == 1:
                imports = (Import(job=f"{NS}/lsd-{up}", export="out", pe="pe0"),)
                names = names[:1]
        rank = 1 + (j * 3) // n_jobs
        jobs.append(Job(name=f"{NS}/lsd-{j}", rank=rank, templates=tuple(names), imports=imports))
    return templates, jobs


def dac(seed: int = 0) -> tuple[list[Template], list[Job]]:
    rng = random.Random(seed)
    sizes = [9, 9, 9, 8, 8, 8]
    templates, jobs = [], []
    for j, k in enumerate(sizes):
        def cost() -> float:
            return math.exp(rng.uniform(math.log(50), math.log(20000)))

        t = _template(rng, f"{NS}/dac-{j}", k, cost, rng.choice([100.0, 400.0]))
        templates.append(t)
        jobs.append(Job(name=f"{NS}/dac-{j}", rank=1 + j // 3, required=j == 0, templates=(t.name,)))
    return templates, jobs


def nodes(n: int, per_rack: int = 10, racks_per_zone: int = 2, mips: float = 8000.0, mips_per_core: float = 1000.0) -> list[Node]:
    out = []
    for i in range(n):
        r = i // per_rack
        out.append(Node(name=f"node-{i:04d}", mips=mips, mips_per_core=mips_per_core, rack=f"rack-{r}", zone=f"zone-{r // racks_per_zone}"))
    return out


def scenario(workload: tuple[list[Template], list[Job]], node_list: list[Node], policy: Policy | None = None) -> Scenario:
    t, j = workload
    return Scenario(nodes=tuple(node_list), templates=tuple(t), jobs=tuple(j), policy=policy or Policy())
