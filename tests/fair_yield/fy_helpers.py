"""Shared strategies and the brute-force oracle for the fair-yield tests."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import strategies as st

from soda_optimizer.fair_yield.model import Instance, Job, Tasks


@st.composite
def instances(
    draw: st.DrawFn,
    hosts: tuple[int, int] = (2, 4),
    jobs: tuple[int, int] = (1, 8),
    max_tasks: int = 1,
    max_mem: float = 0.8,
    unequal: bool = False,
    restrict: bool = False,
) -> Instance:
    """Random instances; with ``restrict``, each job limited to a random subset of the hosts (possibly all, possibly
    none: a pod whose constraints no node meets)."""
    h = draw(st.integers(*hosts))
    n = draw(st.integers(*jobs))
    js = []
    for _ in range(n):
        a = draw(st.floats(0.02, 1.0))
        m = draw(st.floats(0.0, max_mem))
        k = draw(st.integers(1, max_tasks))
        allowed = None
        if restrict and draw(st.integers(0, 3)):  # a quarter of the jobs unrestricted
            allowed = tuple(sorted(draw(st.sets(st.integers(0, h - 1), min_size=0 if draw(st.integers(0, 9)) == 0 else 1))))
        js.append(Job(alpha=a, mem=m, tasks=k, hosts=allowed))
    if unequal:
        cpu = tuple(draw(st.floats(0.5, 2.0)) for _ in range(h))
        mem = tuple(draw(st.floats(0.5, 2.0)) for _ in range(h))
        return Instance(jobs=tuple(js), hosts=h, cpu=cpu, mem=mem)
    return Instance(jobs=tuple(js), hosts=h)


def brute_force(
    inst: Instance, previous: np.ndarray | None = None, budget: float | None = None, fixed: np.ndarray | None = None
) -> float | None:
    """The optimal minimum yield by enumerating every placement (None: no placement fits), optionally within a
    migration budget (memory moved) from ``previous``, ``fixed`` tasks kept on their previous host. Independent of the MILP: for a fixed placement the best
    minimum yield is min(1, capacity / load) on every host."""
    t: Tasks = inst.tasks()
    all_p = np.array(list(itertools.product(range(t.hosts), repeat=t.n)), dtype=np.int64)  # (P, T)
    onehot = all_p[:, :, None] == np.arange(t.hosts)[None, None, :]  # (P, T, H)
    mem = np.einsum("pth,t->ph", onehot, t.mem)
    load = np.einsum("pth,t->ph", onehot, t.alpha)
    ok = np.all(mem <= t.mem_cap[None, :] + 1e-9, axis=1)
    if t.allowed is not None:  # every task on a host it may use
        ok &= t.allowed[np.arange(t.n)[None, :], all_p].all(axis=1)
    if previous is not None and budget is not None:
        moved = (previous[None, :] >= 0) & (all_p != previous[None, :])
        ok &= (moved * t.mem[None, :]).sum(axis=1) <= budget + 1e-9
    if previous is not None and fixed is not None:  # fixed tasks stay on their previous host
        pin = np.asarray(fixed, dtype=bool) & (previous >= 0)
        ok &= np.all(~pin[None, :] | (all_p == previous[None, :]), axis=1)
    if not ok.any():
        return None
    with np.errstate(divide="ignore"):
        y = np.where(load > 0, t.cpu_cap[None, :] / np.where(load > 0, load, 1.0), np.inf)
    best = np.minimum(y.min(axis=1), 1.0)
    return float(best[ok].max())


def lexicographic(
    inst: Instance, previous: np.ndarray | None = None, budget: float | None = None, fixed: np.ndarray | None = None
) -> tuple[float, float] | None:
    """The lexicographic optimum (minimum yield, then average per-job yield) over every placement (None: no
    placement fits), issue 47 item 4. The minimum from :func:`brute_force`; then, for each placement that reaches
    it, the best average with every job at that minimum or more -- the LP "max sum_i y_i, y_min <= y_i <= 1,
    sum_i n_ij alpha_i y_i <= C_j per host" solved by SciPy's HiGHS (independent of OR-Tools and of the paper's
    greedy)."""
    from scipy.optimize import linprog

    best_min = brute_force(inst, previous, budget, fixed)
    if best_min is None:
        return None
    t: Tasks = inst.tasks()
    alpha_job = np.zeros(t.n_jobs)
    alpha_job[t.job] = t.alpha
    best_avg = -1.0
    for p in itertools.product(range(t.hosts), repeat=t.n):
        pl = np.array(p, dtype=np.int64)
        if not t.memory_fits(pl) or t.max_min_yield(pl) < best_min - 1e-9:
            continue
        if t.allowed is not None and not t.allowed[np.arange(t.n), pl].all():
            continue
        if previous is not None and budget is not None:
            moved = (previous >= 0) & (pl != previous)
            if float((moved * t.mem).sum()) > budget + 1e-9:
                continue
        if previous is not None and fixed is not None:
            pin = np.asarray(fixed, dtype=bool) & (previous >= 0)
            if (pin & (pl != previous)).any():
                continue
        n_ij = np.zeros((t.n_jobs, t.hosts))
        np.add.at(n_ij, (t.job, pl), 1.0)
        a_ub = (n_ij * alpha_job[:, None]).T  # (H, jobs)
        res = linprog(-np.ones(t.n_jobs), A_ub=a_ub, b_ub=t.cpu_cap, bounds=[(min(best_min, 1.0) * (1 - 1e-9), 1.0)] * t.n_jobs,
                      method="highs")
        if res.status == 0:
            best_avg = max(best_avg, float(-res.fun) / t.n_jobs)
    return best_min, best_avg
