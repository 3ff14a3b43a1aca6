"""The second phase: raise the average yield once the minimum yield is fixed (sections 3.5 and 5.1).

Placement fixed, every task first gets exactly the minimum yield Y (alpha_i * Y). Sequential jobs (section 3.5):
on each host the spare CPU goes to the tasks in ascending alpha order, each up to a yield of 1 -- the paper's
optimal greedy, vectorised here over all hosts at once (a sort by (host, alpha) and a per-host cumulative sum).

Parallel jobs (section 5.1): the tasks of a job must keep one yield, and the objective is the average *per-job*
yield. A job spans hosts, so the greedy no longer applies; the LP "max sum_i y_i s.t. Y <= y_i <= 1 and
sum_i n_ij alpha_i y_i <= C_j per host" (n_ij = tasks of job i on host j) is solved with GLOP.

Deadlines (issue 47): :func:`finish` takes the caller's stop time; the parallel jobs' LP reads the clock while its
model is built and gets what is left; past it every task keeps Y (sound; the average is then the first phase's).

Departure: Y is the best minimum yield of the placement (min over hosts of capacity / load, capped at 1), which is
at least the value the first phase searched for (a binary search stops short of it); the paper uses the first
phase's value.
"""

from __future__ import annotations

import time

import numpy as np
from ortools.linear_solver import pywraplp

from .model import Allocation, Status, Tasks


def greedy_fill(tasks: Tasks, placement: np.ndarray, y_min: float) -> np.ndarray:
    """Section 3.5's greedy for one-task jobs: the per-task yields maximising the average at minimum ``y_min``."""
    alpha = tasks.alpha
    order = np.lexsort((alpha, placement))  # by host, then alpha ascending
    p_sorted = placement[order]
    need = alpha[order] * (1.0 - y_min)  # CPU each task could still use
    spare = tasks.cpu_cap - np.bincount(placement, weights=alpha * y_min, minlength=tasks.hosts)
    spare = np.maximum(spare, 0.0)
    csum = np.cumsum(need)
    start = np.searchsorted(p_sorted, np.arange(tasks.hosts))  # first sorted index of each host
    before = csum - need  # cumulative need before this task (global)
    host_base = np.where(start < len(csum), before[np.minimum(start, len(csum) - 1)], 0.0)
    before_in_host = before - host_base[p_sorted]
    extra = np.clip(spare[p_sorted] - before_in_host, 0.0, need)
    y = np.empty_like(alpha)
    y[order] = y_min + extra / alpha[order]
    return np.minimum(y, 1.0)


def job_lp(tasks: Tasks, placement: np.ndarray, y_min: float, time_limit_s: float | None = None,
           stop: float | None = None) -> np.ndarray | None:
    """Section 5.1's per-job phase as an LP (GLOP). Per-task yields (one per job), or None if the LP fails or
    ``stop`` (a ``time.monotonic()`` value) passes: the clock is read while the model is built (a row per host)
    and GLOP gets what is left (issue 47: calls returned past their deadline)."""
    if stop is not None:
        left = stop - time.monotonic()
        time_limit_s = left if time_limit_s is None else min(time_limit_s, left)
    if time_limit_s is not None and time_limit_s <= 0:
        return None
    solver = pywraplp.Solver.CreateSolver("GLOP")
    if solver is None:  # pragma: no cover - GLOP ships with OR-Tools
        return None
    y = [solver.NumVar(y_min, 1.0, f"y{i}") for i in range(tasks.n_jobs)]
    n_ij = np.zeros((tasks.n_jobs, tasks.hosts))
    np.add.at(n_ij, (tasks.job, placement), 1.0)
    alpha_job = np.zeros(tasks.n_jobs)
    alpha_job[tasks.job] = tasks.alpha
    for j in range(tasks.hosts):
        if stop is not None and time.monotonic() >= stop:
            return None
        rows = np.flatnonzero(n_ij[:, j])
        if rows.size:
            solver.Add(sum(float(n_ij[i, j] * alpha_job[i]) * y[i] for i in rows) <= float(tasks.cpu_cap[j]))
    solver.Maximize(sum(y))
    if stop is not None:
        left = stop - time.monotonic()
        time_limit_s = left if time_limit_s is None else min(time_limit_s, left)
    if time_limit_s is not None:
        if time_limit_s <= 0:
            return None
        solver.SetTimeLimit(max(1, int(time_limit_s * 1000)))
    if solver.Solve() not in (pywraplp.Solver.OPTIMAL, pywraplp.Solver.FEASIBLE):
        return None
    yj = np.clip(np.array([v.solution_value() for v in y]), y_min, 1.0)
    return yj[tasks.job]


def finish(
    tasks: Tasks,
    placement: np.ndarray | None,
    algorithm: str,
    status: Status,
    t0: float,
    bound: float | None = None,
    average: bool = True,
    stop: float | None = None,
) -> Allocation:
    """Build the :class:`Allocation` of a placement (None: no placement), running the average-yield phase.
    ``runtime_s`` counts the first phase only (as the paper's run times do, section 4). ``stop`` (a
    ``time.monotonic()`` value): the parallel jobs' LP stops there, and every task keeps the minimum yield (sound,
    the best known so far) when it is reached; the one-task greedy is a few vector operations and always runs."""
    runtime = time.monotonic() - t0
    if placement is None:
        return Allocation(algorithm=algorithm, status=status, bound=bound, runtime_s=runtime)
    placement = np.asarray(placement, dtype=np.int64)
    y_min = tasks.max_min_yield(placement)
    y: np.ndarray | None = None
    if average:
        y = job_lp(tasks, placement, y_min, stop=stop) if tasks.parallel else greedy_fill(tasks, placement, y_min)
    if y is None:
        y = np.full(tasks.n, y_min)
    y = np.clip(y, y_min, 1.0)
    job_y = np.zeros(tasks.n_jobs)
    job_y[tasks.job] = y  # all tasks of a job share one yield
    return Allocation(
        algorithm=algorithm,
        status=status,
        placement=tuple(int(h) for h in placement),
        task_yield=tuple(float(v) for v in y),
        job_yield=tuple(float(v) for v in job_y),
        min_yield=float(y.min()),
        avg_yield=float(job_y.mean()),
        bound=bound,
        runtime_s=runtime,
    )
