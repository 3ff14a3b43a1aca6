"""The exact VCSCHED MILP (section 2.5; section 5.1 for parallel jobs; section 6.1's migration budget) and the
rational LP relaxation that bounds it (section 3.1), with OR-Tools.

Variables: e[t, j] binary (task t on host j), a[t, j] >= 0 the CPU task t gets on host j, y[i] the yield of job i
and Y the minimum yield. Constraints, per task t of job i and host j:

- a[t, j] <= alpha_t * e[t, j]              (6) and (10) together: the paper writes a <= e and sum_j a <= alpha;
                                              multiplying e by alpha is the same integer program with a tighter
                                              relaxation;
- sum_j e[t, j] = 1                         (7) / (16)
- sum_t a[t, j] <= C_j                      (8) / (17)  (C_j = 1 in the paper)
- sum_t e[t, j] m_t <= M_j                  (9) / (18)
- sum_j a[t, j] = alpha_t * y[i], y[i] <= 1 (10), (19), (20): one yield per job, so tasks of a job get equal CPU
- y[i] >= Y                                 (11) / (21); maximise Y.
- with a previous placement p (section 6.1): sum over old tasks t, hosts j != p[t] of e[t, j] m_t <= B  (31)
  (``by_count``: 1 instead of m_t -- the paper's remark that B then bounds the number of migrations).

Departures: by default the solver gets an equivalent form without the CPU variables, "minimise Z >= 1 with
sum_t alpha_t e[t, j] <= C_j Z", Y = 1 / Z (:func:`_build_makespan`; for a fixed placement, every task at yield
min(1, min_j C_j / load_j) is optimal). Its optimal placements are the paper's; SCIP proves them 10-100x faster
(H = 4, 8-12 tasks: 0.1 s where the paper's form can take 20 s), and ``formulation="paper"`` keeps section 2.5
as written (the tests check both against brute force). In the paper's form: the tighter (6); when the hosts are identical and no previous placement is given, the symmetry
breaking "task t only on hosts 0..t" (valid: number hosts by first use), which the paper does not need with GLPK
but which makes SCIP prove small instances in milliseconds; SCIP instead of GLPK (3.1), solved to a zero gap.

A task restricted to some hosts (:attr:`.model.Tasks.allowed`, issue 47; ours) has no variable on the others
(e[t, j] fixed at 0); the symmetry breaking and the closed-form bound then do not apply (``identical_hosts`` is
False). A task with no host at all, or a ``fixed`` task on a host it may not use, makes the program infeasible.

The LP bound: with identical hosts (capacity C, memory M) and sum m <= H M, section 3.1's closed form
min(H C / sum alpha, 1); else the relaxation solved with GLOP (:func:`relaxation`), which also gives RRND/RRNZ
their fractional e (section 3.2).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from ortools.linear_solver import pywraplp

from .average import finish
from .model import EPS, Allocation, Instance, Status, Tasks
from .pace import Pace


def _hint_values(tasks: Tasks, e: list[list[Any]], hint: Any) -> tuple[list[Any], list[float]]:
    """SCIP's hint for the placement ``hint`` (task -> host): each existing e[t][j] at 1 or 0."""
    hv, vals = [], []
    for t in range(tasks.n):
        for j in range(tasks.hosts):
            if e[t][j] is not None:
                hv.append(e[t][j])
                vals.append(1.0 if int(hint[t]) == j else 0.0)
    return hv, vals


#: work the calling thread does while SCIP runs (:func:`run`): called with the wall-clock stop (a
#: ``time.monotonic()`` value, or None) and ``done()``, true once SCIP has returned; it must return by the stop
Meanwhile = Callable[[float | None, Callable[[], bool]], None]


#: how long SCIP is waited for after the interrupt
GRACE_S = 0.005


def margin(deadline_s: float) -> float:
    """Wall time kept, out of a MILP's deadline, for reading SCIP's answer and building the Allocation after SCIP
    is stopped: 5 ms plus 4% of the deadline (40 ms at the default 1 s). Measured (issue 47) with the process
    let run 1/8 of the time (a load of 16 on 2 cores): SCIP's answer read and finished in under 20 ms for the
    off-grid sizes."""
    return 0.005 + 0.04 * deadline_s


def run(solver: pywraplp.Solver, stop_at: float | None, meanwhile: Meanwhile | None = None, pace: Pace | None = None) -> int:
    """``solver.Solve`` to a zero gap, stopped at ``stop_at`` (a ``time.monotonic()`` value) in wall time.

    SCIP's own time limit is checked between nodes and overran a 1 s deadline by up to 0.24 s under load (0.8 s
    at load 40, issue 47); so SCIP runs in a thread (OR-Tools releases the GIL in ``Solve``) and is stopped by
    ``InterruptSolve`` (its best solution kept, status FEASIBLE) once ``stop_at`` passes; its time limit is set
    too. SCIP sees the interrupt where it checks its limits, which a long LP or presolve round can delay: when it
    has not stopped :data:`GRACE_S` later, the call returns NOT_SOLVED (the caller falls back to its hint) and the
    thread ends on its own at the time limit, its answer never read (the solver is not touched again). ``meanwhile``
    runs in the calling thread in the meantime. With ``pace`` (:mod:`.pace`), SCIP is stopped the worst stall seen
    before ``stop_at``."""
    params = pywraplp.MPSolverParameters()
    params.SetDoubleParam(params.RELATIVE_MIP_GAP, 0.0)
    if stop_at is None and meanwhile is None:
        return int(solver.Solve(params))
    if stop_at is not None:
        solver.SetTimeLimit(max(1, int(1000 * (stop_at - time.monotonic()))))
    out: list[int] = []
    th = threading.Thread(target=lambda: out.append(int(solver.Solve(params))), name="fair-yield-scip", daemon=True)
    th.start()
    try:
        if meanwhile is not None:
            meanwhile(stop_at, lambda: not th.is_alive())
        th.join(None if stop_at is None else pace.left(stop_at) if pace is not None else max(0.0, stop_at - time.monotonic()))
    finally:
        if th.is_alive():
            solver.InterruptSolve()
            th.join(GRACE_S)
    if th.is_alive():  # SCIP did not stop in time: left to end on its own (its time limit), its answer unread
        return int(pywraplp.Solver.NOT_SOLVED)
    return out[0] if out else int(pywraplp.Solver.NOT_SOLVED)


_retired: queue.SimpleQueue[Any] = queue.SimpleQueue()


def _free_retired() -> None:
    while True:
        item = _retired.get()
        del item


def retire(solver: pywraplp.Solver, *refs: Any) -> None:
    """Free ``solver`` (and the variables in ``refs``) in a daemon thread, not in the caller's: SCIP's teardown
    after a search took 3 ms of CPU (25-80 ms of wall time at a load of 16), after the answer was ready
    (issue 47)."""
    global _freer
    with _freer_lock:
        if _freer is None or not _freer.is_alive():
            _freer = threading.Thread(target=_free_retired, name="fair-yield-free", daemon=True)
            _freer.start()
    _retired.put((solver, refs))


_freer: threading.Thread | None = None
_freer_lock = threading.Lock()


class OutOfTime(Exception):
    """A model's building passed its stop time (the builders read the clock once per task row, issue 47)."""


def _check(stop: float | None) -> None:
    if stop is not None and time.monotonic() >= stop:
        raise OutOfTime


def _migration_budget(
    solver: pywraplp.Solver,
    e: list[list[Any]],
    mem: np.ndarray,
    previous: np.ndarray | None,
    budget: float | None,
    by_count: bool,
) -> None:
    """Section 6.1's row (31): moving old task t off its previous host costs m_t (1 with ``by_count``); the total
    stays within ``budget``. Nothing without a previous placement."""
    if previous is None or budget is None:
        return
    cost = [
        (1.0 if by_count else float(mem[t])) * v
        for t, row in enumerate(e)
        if previous[t] >= 0
        for j, v in enumerate(row)
        if j != previous[t] and v is not None
    ]
    if cost:
        solver.Add(sum(cost) <= float(budget))


def _pin(solver: pywraplp.Solver, e: list[list[Any]], previous: np.ndarray | None, fixed: np.ndarray | None) -> None:
    """Tasks that cannot move (``fixed[t]``, with a previous host) stay on it (ours: pods without a controller)."""
    if previous is None or fixed is None:
        return
    for t in np.flatnonzero(np.asarray(fixed, dtype=bool) & (previous >= 0)):
        v = e[int(t)][int(previous[t])]
        if v is not None:
            solver.Add(v == 1)


def _build(
    solver: pywraplp.Solver,
    tasks: Tasks,
    integer: bool,
    previous: np.ndarray | None = None,
    budget: float | None = None,
    by_count: bool = False,
    fixed: np.ndarray | None = None,
    stop: float | None = None,
) -> tuple[list[list[Any]], Any, list[Any]]:
    """Section 2.5's program (5.1's per-job yields, 6.1's budget): the e variables (None where a task may not go),
    Y and the per-job yields y; the objective is max Y. :class:`OutOfTime` once ``stop`` passes."""
    n, h = tasks.n, tasks.hosts
    mem = np.where(tasks.mem < 1e-12, 0.0, tasks.mem)  # GLOP reports ABNORMAL on coefficients like 1e-19
    symmetric = integer and previous is None and tasks.identical_hosts
    may = tasks.may()
    e: list[list[Any]] = [
        [
            (solver.BoolVar(f"e{t}_{j}") if integer else solver.NumVar(0.0, 1.0, f"e{t}_{j}"))
            if not (symmetric and j > t) and may[t, j]
            else None
            for j in range(h)
        ]
        for t in range(n)
    ]
    a: list[list[Any]] = [
        [solver.NumVar(0.0, float(tasks.alpha[t]), f"a{t}_{j}") if e[t][j] is not None else None for j in range(h)]
        for t in range(n)
    ]
    y = [solver.NumVar(0.0, 1.0, f"y{i}") for i in range(tasks.n_jobs)]
    big_y = solver.NumVar(0.0, 1.0, "Y")
    for t in range(n):
        _check(stop)
        row = [j for j in range(h) if e[t][j] is not None]
        for j in row:
            solver.Add(a[t][j] <= float(tasks.alpha[t]) * e[t][j])
        solver.Add(sum(e[t][j] for j in row) == 1)
        solver.Add(sum(a[t][j] for j in row) == float(tasks.alpha[t]) * y[int(tasks.job[t])])
    for j in range(h):
        _check(stop)
        col = [t for t in range(n) if e[t][j] is not None]
        if col:
            solver.Add(sum(a[t][j] for t in col) <= float(tasks.cpu_cap[j]))
            solver.Add(sum(float(mem[t]) * e[t][j] for t in col) <= float(tasks.mem_cap[j]))
    for i in range(tasks.n_jobs):
        solver.Add(y[i] >= big_y)
    _migration_budget(solver, e, mem, previous, budget, by_count)
    _pin(solver, e, previous, fixed)
    solver.Maximize(big_y)
    return e, big_y, y


def _build_makespan(
    solver: pywraplp.Solver,
    tasks: Tasks,
    previous: np.ndarray | None = None,
    budget: float | None = None,
    by_count: bool = False,
    fixed: np.ndarray | None = None,
    stop: float | None = None,
) -> tuple[list[list[Any]], Any]:
    """The equivalent MILP without CPU variables: minimise Z >= 1 s.t. sum_t alpha_t e[t, j] <= C_j Z per host;
    then Y = 1 / Z. Equivalent because, for a fixed placement, giving every task the yield min(1, min_j C_j / load_j)
    is optimal for the minimum yield and keeps the tasks of a parallel job equal (eq. 20). :class:`OutOfTime` once
    ``stop`` passes."""
    n, h = tasks.n, tasks.hosts
    mem = np.where(tasks.mem < 1e-12, 0.0, tasks.mem)
    symmetric = previous is None and tasks.identical_hosts
    may = tasks.may()
    e: list[list[Any]] = [
        [solver.BoolVar(f"e{t}_{j}") if not (symmetric and j > t) and may[t, j] else None for j in range(h)]
        for t in range(n)
    ]
    z = solver.NumVar(1.0, solver.infinity(), "Z")
    for t in range(n):
        _check(stop)
        solver.Add(sum(v for v in e[t] if v is not None) == 1)
    for j in range(h):
        _check(stop)
        col = [t for t in range(n) if e[t][j] is not None]
        if col:
            solver.Add(sum(float(tasks.alpha[t]) * e[t][j] for t in col) <= float(tasks.cpu_cap[j]) * z)
            solver.Add(sum(float(mem[t]) * e[t][j] for t in col) <= float(tasks.mem_cap[j]))
    _migration_budget(solver, e, mem, previous, budget, by_count)
    _pin(solver, e, previous, fixed)
    solver.Minimize(z)
    return e, z


def hopeless(tasks: Tasks, previous: np.ndarray | None = None, fixed: np.ndarray | None = None) -> bool:
    """No placement can exist: a task with no host it may use, or a ``fixed`` task on a host it may not use."""
    if tasks.allowed is None:
        return False
    if not tasks.allowed.any(axis=1).all():
        return True
    if previous is None or fixed is None:
        return False
    pin = np.flatnonzero(np.asarray(fixed, dtype=bool) & (previous >= 0))
    return bool(pin.size) and not bool(tasks.allowed[pin, previous[pin]].all())


def lp_bound(inst: Instance | Tasks, time_limit_s: float | None = None) -> float:
    """Upper bound on the optimal minimum yield: the value of the rational relaxation (section 3.1). 0 when even
    the relaxation is infeasible (total memory above total capacity). Past ``time_limit_s`` (unequal hosts: GLOP)
    the trivial bound min(1, total capacity / total alpha), still an upper bound."""
    tasks = inst.tasks() if isinstance(inst, Instance) else inst
    if tasks.identical_hosts:
        if tasks.mem.sum() > tasks.mem_cap.sum() + EPS:
            return 0.0
        return float(min(tasks.cpu_cap.sum() / tasks.alpha.sum(), 1.0))
    value, _ = relaxation(tasks, time_limit_s=time_limit_s)
    return value


def relaxation(tasks: Tasks, time_limit_s: float | None = None) -> tuple[float, np.ndarray | None]:
    """Solve the rational LP with GLOP: (optimal Y, fractional e of shape (T, H)); (0, None) if infeasible;
    (min(1, total capacity / total alpha), None) if GLOP stops without an optimum."""
    if hopeless(tasks):
        return 0.0, None
    trivial = float(min(1.0, tasks.cpu_cap.sum() / tasks.alpha.sum()))
    stop = None if time_limit_s is None else time.monotonic() + time_limit_s
    solver = pywraplp.Solver.CreateSolver("GLOP")
    try:
        e, big_y, _ = _build(solver, tasks, integer=False, stop=stop)
    except OutOfTime:
        return trivial, None
    if stop is not None:
        solver.SetTimeLimit(max(1, int((stop - time.monotonic()) * 1000)))
    code = solver.Solve()
    if code == pywraplp.Solver.INFEASIBLE:
        return 0.0, None
    if code != pywraplp.Solver.OPTIMAL:  # numerical trouble or time limit: the trivial bound is still an upper bound
        return trivial, None
    frac = np.array([[v.solution_value() if v is not None else 0.0 for v in row] for row in e])
    return float(big_y.solution_value()), np.clip(frac, 0.0, 1.0)


def solve_milp(
    inst: Instance | Tasks,
    deadline_s: float | None = 10.0,
    hint: np.ndarray | None = None,
    previous: np.ndarray | None = None,
    budget: float | None = None,
    by_count: bool = False,
    solver_name: str = "SCIP",
    algorithm: str = "milp",
    formulation: str = "makespan",
    fixed: np.ndarray | None = None,
    meanwhile: Meanwhile | None = None,
    pace: Pace | None = None,
) -> Allocation:
    """Solve VCSCHED exactly (status ``optimal``), or return the incumbent when ``deadline_s`` passes (status
    ``deadline``). ``formulation``: ``makespan`` (default, see :func:`_build_makespan`) or ``paper`` (section 2.5
    as written, with the CPU variables). ``fixed``: tasks that stay on their ``previous`` host. ``hint``: a placement to start from (e.g. MCB8's), also returned if the deadline passes before
    the solver beats it. ``previous``/``budget``: section 6.1 (the hint must then respect the budget).
    ``meanwhile``: work for the calling thread while SCIP runs in another (see :func:`run`). The call returns
    within ``deadline_s`` of wall time, model building included, save for reading the answer (:func:`margin`)."""
    t0 = time.monotonic()
    tasks = inst.tasks() if isinstance(inst, Instance) else inst
    if hopeless(tasks, previous, fixed):
        return finish(tasks, None, algorithm, "infeasible", t0, bound=0.0)
    end = None if deadline_s is None else t0 + deadline_s
    stop_at = None if end is None or deadline_s is None else end - margin(deadline_s)
    # the hint is a valid answer too: when the deadline stops the solver below it, return it (best so far)
    fallback = np.asarray(hint, dtype=np.int64) if hint is not None and tasks.memory_fits(np.asarray(hint)) and (
        tasks.allowed is None or bool(tasks.allowed[np.arange(tasks.n), np.asarray(hint)].all())) else None
    solver = pywraplp.Solver.CreateSolver(solver_name)
    if solver is None:  # pragma: no cover
        raise RuntimeError(f"OR-Tools has no {solver_name} solver")
    makespan = formulation == "makespan"
    try:
        if makespan:
            e, obj = _build_makespan(solver, tasks, previous=previous, budget=budget, by_count=by_count, fixed=fixed, stop=stop_at)
        else:
            e, obj, _ = _build(solver, tasks, integer=True, previous=previous, budget=budget, by_count=by_count, fixed=fixed,
                               stop=stop_at)
    except OutOfTime:  # the model alone took the time: the hint (best so far), unproven
        retire(solver)
        return finish(tasks, fallback, algorithm, "deadline", t0, bound=None, stop=end)
    if hint is not None:
        hv, vals = _hint_values(tasks, e, hint)
        if makespan:  # a complete solution (Z too), so SCIP need not complete a partial one
            load = tasks.cpu_load(np.asarray(hint, dtype=np.int64)) / tasks.cpu_cap
            hv.append(obj)
            vals.append(max(1.0, float(load.max())))
        solver.SetHint(hv, vals)
    code = run(solver, stop_at, meanwhile, pace)
    if code == pywraplp.Solver.INFEASIBLE:
        return finish(tasks, None, algorithm, "infeasible", t0, bound=0.0)
    if code not in (pywraplp.Solver.OPTIMAL, pywraplp.Solver.FEASIBLE):
        retire(solver, e, obj)
        return finish(tasks, fallback, algorithm, "deadline", t0, bound=None, stop=end)
    placement = np.array(
        [
            max((j for j in range(tasks.hosts) if e[t][j] is not None), key=lambda j: e[t][j].solution_value())
            for t in range(tasks.n)
        ],
        dtype=np.int64,
    )
    status: Status = "optimal" if code == pywraplp.Solver.OPTIMAL else "deadline"
    if status == "deadline" and fallback is not None:
        if tasks.max_min_yield(fallback) > tasks.max_min_yield(placement):
            placement = fallback
    if makespan:  # Z is >= 1; its best lower bound gives the upper bound on Y
        z_bound = float(obj.solution_value()) if status == "optimal" else float(solver.Objective().BestBound())
        bound = 1.0 / z_bound if z_bound > 0 else 1.0
    else:
        bound = float(obj.solution_value()) if status == "optimal" else float(solver.Objective().BestBound())
    retire(solver, e, obj)
    return finish(tasks, placement, algorithm, status, t0, bound=min(bound, 1.0), stop=end)


def solve_average(
    tasks: Tasks,
    y_min: float,
    deadline_s: float | None,
    hint: np.ndarray | None = None,
    previous: np.ndarray | None = None,
    budget: float | None = None,
    by_count: bool = False,
    fixed: np.ndarray | None = None,
    pace: Pace | None = None,
) -> tuple[np.ndarray | None, bool]:
    """The lexicographic second step (issue 47, ours): among the placements whose minimum yield is at least
    ``y_min`` (the proven optimum of the first step), one with the highest average per-job yield. Section 2.5's
    program with Y >= ``y_min`` and, per host, the load row sum_t alpha_t e[t, j] <= C_j / ``y_min`` (the same
    condition on the placement, stated without the CPU variables: a tighter relaxation), maximising sum_i y_i.
    The paper's two phases (3.5, 5.1) instead raise the average of the one placement the first phase returned.

    Returns (placement, proven): SCIP's best placement when the deadline passes (None if it found none, e.g. it
    could not even use ``hint``, the first step's placement) and whether it is proven to have the highest
    average. The caller checks the placement's minimum yield (SCIP's tolerances are 1e-6)."""
    t0 = time.monotonic()
    stop_at = None if deadline_s is None else t0 + deadline_s - margin(deadline_s)
    solver = pywraplp.Solver.CreateSolver("SCIP")
    if solver is None:  # pragma: no cover
        raise RuntimeError("OR-Tools has no SCIP solver")
    try:
        e, big_y, y = _build(solver, tasks, integer=True, previous=previous, budget=budget, by_count=by_count, fixed=fixed,
                             stop=stop_at)
    except OutOfTime:  # the model alone took the time: nothing better than the caller's placement
        retire(solver)
        return None, False
    big_y.SetLb(float(y_min))
    if y_min > 0:
        for j in range(tasks.hosts):
            if stop_at is not None and time.monotonic() >= stop_at:
                retire(solver, e, big_y, y)
                return None, False
            col = [(t, e[t][j]) for t in range(tasks.n) if e[t][j] is not None]
            if col:
                solver.Add(sum(float(tasks.alpha[t]) * v for t, v in col) <= float(tasks.cpu_cap[j]) / float(y_min) * (1 + 1e-12))
    solver.Maximize(sum(y))
    if hint is not None:
        hv, vals = _hint_values(tasks, e, hint)
        solver.SetHint(hv, vals)
    if stop_at is not None and stop_at - time.monotonic() <= 0.005:
        retire(solver, e, big_y, y)
        return None, False
    code = run(solver, stop_at, pace=pace)
    if code not in (pywraplp.Solver.OPTIMAL, pywraplp.Solver.FEASIBLE):
        retire(solver, e, big_y, y)
        return None, False
    placement = np.array(
        [max((j for j in range(tasks.hosts) if e[t][j] is not None), key=lambda j: e[t][j].solution_value())
         for t in range(tasks.n)],
        dtype=np.int64,
    )
    retire(solver, e, big_y, y)
    return placement, code == pywraplp.Solver.OPTIMAL
