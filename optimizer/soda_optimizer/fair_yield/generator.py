"""Synthetic instances of section 4.1 (and the parallel-job sizes of section 5.2).

Per task, CPU need alpha and memory m are drawn from normal distributions truncated to (0, 1] and [0, 1]: alpha
has mean 0.5, m has mean H (1 - slack) / T (T tasks), each with a coefficient of variation (std / mean) of 0.25 or
0.75. The paper's grids: small -- H = 4, T in {6, 8, 10, 12}; large -- H = 64, T in {100, 250, 500}; slack 0.1 to
0.9 by 0.1; the two coefficients of variation independently in {0.25, 0.75}. Instances are not guaranteed
feasible (neither are the paper's).

Parallel jobs (section 5.2): the number of tasks of a job follows Lublin & Feitelson's model, a two-stage
log-uniform distribution biased to powers of two, between 1 and 64 tasks; jobs are drawn until the task count is
reached (the last job is cut to fit).

Off the grid (:func:`off_grid`, ours, not the paper's): 4-8 hosts, some identical and some not, 8-18 tasks, in
three regimes -- ``memory``-tight (the tasks' memory fills 80-95% of the hosts'), ``middle`` (45-70%) and
``cpu``-tight (15-35% of memory, the CPU need 2-3.5 times the capacity) -- the sizes at which the exact optimum
can still be proven, used to measure how far a heuristic is from it (benchmarks/bench_yield.py, the tests); with
``restricted``, some tasks limited to some of the hosts (ours, issue 47).

Departures: truncation is by rejection (redraw the values outside the interval), the paper does not say how;
alpha excludes 0 (a yield divides by it); the Lublin-Feitelson parameters are the published ones (serial
probability 0.24, power-of-two probability 0.75, stages [0.8, uhi - 2.5] and [uhi - 2.5, uhi] with probability
0.86 for the first, uhi = log2 64) -- an approximation of [30], not a reimplementation of its code.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from .model import Instance, Job

SLACKS = tuple(round(0.1 * k, 1) for k in range(1, 10))
COVS = (0.25, 0.75)
SMALL_HOSTS, SMALL_TASKS = 4, (6, 8, 10, 12)
LARGE_HOSTS, LARGE_TASKS = 64, (100, 250, 500)


@dataclass(frozen=True)
class Spec:
    """One problem specification of section 4.1."""

    hosts: int
    tasks: int
    slack: float
    cov_cpu: float
    cov_mem: float


def truncated_normal(
    rng: np.random.Generator, mean: float, cov: float, size: int, low: float, high: float, open_low: bool
) -> np.ndarray:
    """Normal(mean, (cov*mean)^2) restricted to (low, high] (``open_low``) or [low, high], by rejection."""
    out = np.empty(size)
    todo = np.arange(size)
    sd = cov * mean
    for _ in range(1000):
        if not todo.size:
            return out
        x = rng.normal(mean, sd, todo.size)
        ok = ((x > low) if open_low else (x >= low)) & (x <= high)
        out[todo[ok]] = x[ok]
        todo = todo[~ok]
    out[todo] = np.clip(mean, low + 1e-6, high)  # pragma: no cover - only for absurd parameters
    return out


def generate(spec: Spec, rng: np.random.Generator, parallel: bool = False) -> Instance:
    """One instance of ``spec``; with ``parallel``, the tasks are grouped into parallel jobs (section 5.2)."""
    t = spec.tasks
    alpha = truncated_normal(rng, 0.5, spec.cov_cpu, t, 0.0, 1.0, open_low=True)
    mem_mean = spec.hosts * (1.0 - spec.slack) / t
    mem = truncated_normal(rng, mem_mean, spec.cov_mem, t, 0.0, 1.0, open_low=False)
    if not parallel:
        return Instance.sequential(alpha, mem, spec.hosts)
    jobs: list[Job] = []
    k = 0
    while k < t:
        size = min(job_size(rng), t - k)
        jobs.append(Job(alpha=float(alpha[k]), mem=float(mem[k]), tasks=size))  # uniform tasks: the first draw
        k += size
    return Instance(jobs=tuple(jobs), hosts=spec.hosts)


REGIMES = ("memory", "middle", "cpu")


def off_grid(rng: np.random.Generator, regime: str, hosts: tuple[int, int] = (4, 8), tasks: tuple[int, int] = (8, 18),
             restricted: float = 0.0) -> Instance:
    """One off-grid instance of ``regime`` (one of :data:`REGIMES`): H hosts in ``hosts``, T tasks in ``tasks``
    (inclusive); half the instances have unequal hosts (CPU and memory each in [0.5, 1]). With ``restricted`` > 0,
    that share of the tasks may only use a random half of the hosts or more (a pod's nodeSelector, affinity or
    taints, issue 47). Not guaranteed feasible."""
    if regime not in REGIMES:
        raise ValueError(f"off_grid: regime {regime!r} is not one of {', '.join(REGIMES)}")
    h = int(rng.integers(hosts[0], hosts[1] + 1))
    t = int(rng.integers(tasks[0], tasks[1] + 1))
    if rng.random() < 0.5:
        cpu, mem_cap = np.ones(h), np.ones(h)
    else:
        cpu, mem_cap = rng.uniform(0.5, 1.0, h), rng.uniform(0.5, 1.0, h)
    fill = {"memory": (0.80, 0.95), "middle": (0.45, 0.70), "cpu": (0.15, 0.35)}[regime]
    share = rng.dirichlet(np.full(t, 2.0))
    mem = np.clip(share * rng.uniform(*fill) * mem_cap.sum(), 0.0, float(mem_cap.max()))
    alpha = rng.uniform(0.1, 1.0, t)
    if regime == "cpu":  # CPU need 2-3.5 times the capacity
        alpha = np.clip(alpha * rng.uniform(2.0, 3.5) * cpu.sum() / alpha.sum(), 0.01, 1.0)
    same = bool(np.all(cpu == 1.0))
    allowed: list[tuple[int, ...] | None] = [None] * t
    if restricted > 0:
        for k in range(t):
            if rng.random() < restricted:
                size = int(rng.integers((h + 1) // 2, h + 1))
                allowed[k] = tuple(sorted(int(x) for x in rng.choice(h, size=size, replace=False)))
    return Instance(jobs=tuple(Job(alpha=float(a), mem=float(m), hosts=w) for a, m, w in zip(alpha, mem, allowed)), hosts=h,
                    cpu=None if same else tuple(float(c) for c in cpu), mem=None if same else tuple(float(m) for m in mem_cap))


def job_size(rng: np.random.Generator, max_tasks: int = 64) -> int:
    """Tasks of a parallel job: Lublin & Feitelson's two-stage log-uniform, biased to powers of two."""
    if rng.random() < 0.24:
        return 1
    uhi = float(np.log2(max_tasks))
    umed = uhi - 2.5
    u = rng.uniform(0.8, umed) if rng.random() < 0.86 else rng.uniform(umed, uhi)
    size = 2 ** round(u) if rng.random() < 0.75 else round(2**u)
    return int(min(max(size, 1), max_tasks))


def grid(hosts: int, task_counts: tuple[int, ...], slacks: tuple[float, ...] = SLACKS) -> list[Spec]:
    """The specifications of section 4.1 for ``hosts`` and ``task_counts`` (x slack x CoV cpu x CoV memory)."""
    return [Spec(hosts, t, s, cc, cm) for t, s, cc, cm in itertools.product(task_counts, slacks, COVS, COVS)]
