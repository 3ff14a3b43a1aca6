"""The anytime exact allocator, the default: a sound answer in milliseconds, then the proven optimum where the
deadline allows it (sections 2.5, 3.4 and 6.1 combined; the combination is ours, the paper runs them apart).

1. a heuristic first: a complete MCB8 (section 3.4, the paper's algorithm of choice; it takes milliseconds, so it
   runs to its end whatever the deadline: the first answer is never below MCB8's, issue 47) for a fresh
   allocation, SG (3.3) when MCB8 finds no packing; with a previous placement, the re-placement heuristic within
   the migration budget (:mod:`.dynamic`), given a fifth of the deadline (at least 5 ms) for its improvements.
   A fresh allocation's answer is then improved by the local search of :mod:`.improve` (moves, swaps and
   ejection chains off the most loaded host; milliseconds) and is the MILP's hint;
2. then the exact MILP (:mod:`.milp`, SCIP) warm-started from that answer and bounded by what is left of the
   deadline, in a thread of its own; beside it, in this thread, the iterated local search of :mod:`.improve`
   from that answer and from SG, GR and the other MCB variants (within :data:`EXTRA_SHARE` of the time left),
   until SCIP ends or the deadline (issue 47: under load SCIP got little CPU and the memory-tight instances were
   missed; two threads also get twice the CPU share of a loaded machine). Measured with the process let run 1/8
   of the time (a load of 16 on 2 cores), the off-grid instances of yield_exact.json within 1% of the optimum:
   114 of 126 before, 118 after. SCIP measured better than CP-SAT: through OR-Tools' linear-solver wrapper CP-SAT rounds the
   continuous makespan variable and reported "optimal" on 29 of 29 off-grid instances of which only 12 were
   within 1% of the optimum (SCIP at 1 s: 29 of 29 within 1%, 26 proven; measured for issue 37);
3. the answer is the better of the two -- never below the heuristic's -- with the best proven upper bound on the
   minimum yield (the MILP's, else the LP bound of section 3.1 or MCB's Y_max) in ``bound`` and status
   ``optimal`` when the MILP proved it (or the heuristic reached the bound), ``deadline`` otherwise.

The MILP only gets what is left of the deadline after the heuristic, less a reserve for reading its answer (the
larger of 3% of the deadline and 4 ms of CPU times the machine's slowness so far, at most a fifth of what is
left), and is stopped in wall time (:func:`.milp.run`: interrupted, or abandoned when it does not stop at once);
the average step (4.) only starts with a tenth of the deadline left. On a loaded machine the process is not run
for tens of milliseconds at a time: the search beside SCIP, its extra starts, SCIP's stop and the average step read
the clock through one :class:`.pace.Pace` and stop the longest stall it has seen before their stop times (issue 47
item 3: 5 of 194 calls at 1 s were late, the worst 1.177 s at load 7-12). When the heuristic alone took it all, the
answer is the heuristic's (status ``deadline`` unless it reached the bound): the wall time can pass a very short
deadline by MCB8's own time (milliseconds), never by the MILP's. Measured in bench_yield.py --exact (the worst
wall time beside the 1 s deadline). A heuristic failure is only ``infeasible`` when
proven (the MILP or the relaxation says so); otherwise ``deadline``.

4. once the minimum yield is proven optimal and time is left, the placement of the highest average yield
   among those keeping it (:func:`.milp.solve_average`, issue 47 item 4): the lexicographic optimum, where the
   paper's second phase (3.5, 5.1) only raises the average of one fixed placement. Never a lower minimum.

``Allocation.gap`` is then (bound - minimum yield) / bound, the distance to the optimum the answer can prove.

Departures: the paper has no anytime mode; the MILP's hint is MCB8's placement with the hosts renumbered by
first use when they are identical (the MILP's symmetry breaking "task t only on hosts 0..t" holds for that
numbering, so the hint is feasible for it); ``fixed`` tasks (pods that cannot move, a departure of the
Kubernetes side) stay where ``previous`` puts them.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import numpy as np

from .average import finish
from .dynamic import reallocate
from .greedy import solve_greedy
from .improve import improve, search
from .mcb import solve_mcb
from .milp import hopeless, lp_bound, solve_average, solve_milp
from .model import Allocation, Instance, Tasks
from .pace import Pace

#: a deadline this short goes to the heuristic alone (the MILP would not even be built in time)
MIN_MILP_S = 0.02
#: CPU time kept for reading SCIP's answer and building the Allocation, times the machine's slowness (wall time
#: over this thread's CPU time so far), at most :data:`MAX_RESERVE_SHARE` of what is left (issue 47: under load the
#: answer was read 20-40 ms past SCIP's stop with the process let run 1/8 of the time)
RESERVE_CPU_S = 0.004
#: and at least this share of the deadline (the slowness is measured over milliseconds, so it misses a stall). At 3%:
#: 6 of 138 off-grid calls past their 1 s deadline, the worst at 1.106 s (load 8-12, bench_yield --exact); at 8%, the
#: same instances at load 7-9: 1 past it (1.003 s), 135 of 138 within 1% of the optimum as at 3%
RESERVE_SHARE = 0.08
MAX_RESERVE_SHARE = 0.2
#: the share of the deadline that must be left for the average step (4.): its model is built before SCIP's limit
AVERAGE_MIN_SHARE = 0.1
#: the share of the time left the other starts of the iterated search (SG, GR, MCB variants) may take beside SCIP
EXTRA_SHARE = 0.25
#: the other starts tried in that share: SG and GR (section 3.3, a fraction of a millisecond each), then the other
#: MCB variants in the order of section 4.2's Table 1 (MCB5, 6, 7 next best). Measured on the 117 proven off-grid
#: instances of yield_exact.json, each start improved by the local search, without the MILP: MCB8 alone within 1%
#: of the optimum on 61.5%, with SG and GR 73.5%, with MCB5-7 too 82.1%
EXTRA_STARTS: tuple[int | str, ...] = ("sg", "gr", 5, 6, 7, 1, 3, 2, 4)


def _better(a: Allocation, b: Allocation) -> bool:
    """``a`` strictly better than ``b``: placed where b is not, or a higher minimum yield, then average yield."""
    if a.ok != b.ok:
        return a.ok
    return (a.min_yield, a.avg_yield) > (b.min_yield + 1e-9, b.avg_yield + 1e-9) if a.ok else False


def solve_anytime(
    inst: Instance | Tasks,
    deadline_s: float | None = 1.0,
    previous: np.ndarray | None = None,
    budget: float | None = None,
    fixed: np.ndarray | None = None,
    by_count: bool = False,
) -> Allocation:
    """The heuristic, then the MILP warm-started from it within the rest of ``deadline_s`` with the heuristic
    search beside it: the best of both, with the proven bound. ``previous``/``budget``/``fixed``: a re-placement
    (section 6.1)."""
    t0, cpu0 = time.monotonic(), time.thread_time()
    tasks = inst.tasks() if isinstance(inst, Instance) else inst
    end = t0 + deadline_s if deadline_s is not None else None
    share = None if deadline_s is None else max(0.005, 0.2 * deadline_s)  # the heuristic's part of the deadline
    avg_left = 0.0 if deadline_s is None else max(MIN_MILP_S, AVERAGE_MIN_SHARE * deadline_s)
    if previous is None:
        first = solve_mcb(tasks, 8, deadline_s=None)  # complete: the first answer is sound and never below MCB8
        if not first.ok:
            sg = solve_greedy(tasks, sort=True, backtrack=False, deadline_s=None)
            first = sg.model_copy(update={"bound": first.bound}) if sg.ok else first
        if first.ok:  # MCB8's placement improved by the local search (milliseconds): the MILP's hint
            p = improve(tasks, np.asarray(first.placement, dtype=np.int64), deadline=None if share is None else t0 + share)
            if tasks.max_min_yield(p) > first.min_yield + 1e-12:
                first = finish(tasks, p, first.algorithm, first.status, t0, bound=first.bound, stop=end)
    else:
        first = reallocate(tasks, previous, float(budget or 0.0), by_count=by_count, deadline_s=share, fixed=fixed)
    bound = first.bound if first.bound is not None else lp_bound(tasks, time_limit_s=share)
    if end is not None and deadline_s is not None:  # kept for what follows SCIP (wall / CPU: the machine's slowness)
        slow = (time.monotonic() - t0) / max(time.thread_time() - cpu0, 1e-4)
        end -= min(MAX_RESERVE_SHARE * max(0.0, end - time.monotonic()),
                   max(RESERVE_SHARE * deadline_s, RESERVE_CPU_S * slow))
    if first.ok and first.min_yield >= bound - 1e-9:  # the heuristic reached the bound: proven optimal
        return _named(_average(tasks, first, end, previous, budget, fixed, by_count, avg_left), "optimal", bound, t0)
    left = None if end is None else end - time.monotonic()
    if left is not None and left < MIN_MILP_S:
        proven = not first.ok and hopeless(tasks, previous, fixed)
        return _named(first, "infeasible" if proven else "deadline", bound, t0)
    hint = _hint(tasks, np.asarray(first.placement, dtype=np.int64)) if first.ok and previous is None else (
        np.asarray(first.placement, dtype=np.int64) if first.ok else None)
    found: list[np.ndarray] = []
    meanwhile = None
    pace = Pace()  # the stalls seen while SCIP runs: SCIP and what follows stop that much earlier (:mod:`.pace`)
    if first.ok and previous is None:
        start = np.asarray(first.placement, dtype=np.int64)

        def meanwhile(stop_at: float | None, done: Callable[[], bool]) -> None:
            pace.mark()
            found.append(search(tasks, _starts(tasks, start, stop_at, done, pace), math.inf if stop_at is None else stop_at,
                                stop=done, pace=pace))

    exact = solve_milp(tasks, deadline_s=left, hint=hint, previous=previous, budget=budget if previous is not None else None,
                       fixed=fixed, by_count=by_count, algorithm="anytime", meanwhile=meanwhile, pace=pace)
    if exact.status == "infeasible":  # proven: nothing fits (the heuristic cannot have placed it either)
        return _named(exact, "infeasible", 0.0, t0)
    if found and tasks.max_min_yield(found[0]) > first.min_yield + 1e-12:
        first = finish(tasks, found[0], first.algorithm, first.status, t0, bound=first.bound, stop=end)
    if exact.bound is not None:
        bound = min(bound, exact.bound)
    best = exact if _better(exact, first) or not first.ok else first
    status = "optimal" if exact.status == "optimal" or (best.ok and best.min_yield >= bound - 1e-9) else "deadline"
    if status == "optimal":
        best = _average(tasks, best, end, previous, budget, fixed, by_count, avg_left, pace)
    return _named(best, status, bound, t0)


def _starts(tasks: Tasks, first: np.ndarray, until: float | None, done: Callable[[], bool],
            pace: Pace | None = None) -> list[np.ndarray]:
    """The search's starts: ``first`` (MCB8's, improved), then SG, GR and the other MCB variants of
    :data:`EXTRA_STARTS` while ``until`` (a ``time.monotonic()`` value, None: no limit) has not passed, within
    :data:`EXTRA_SHARE` of what is left, and the MILP is not done."""
    starts = [first]
    limit = None if until is None else time.monotonic() + EXTRA_SHARE * max(0.0, until - time.monotonic())
    for variant in EXTRA_STARTS:
        if (pace.passed(limit) if pace is not None else limit is not None and time.monotonic() >= limit) or done():
            break
        left = None if limit is None else max(0.0, limit - time.monotonic())
        other = (solve_greedy(tasks, sort=variant == "sg", backtrack=False, deadline_s=left) if isinstance(variant, str)
                 else solve_mcb(tasks, variant, deadline_s=left))
        if other.ok:
            starts.append(np.asarray(other.placement, dtype=np.int64))
    return starts


def _average(tasks: Tasks, a: Allocation, end: float | None, previous: np.ndarray | None, budget: float | None,
             fixed: np.ndarray | None, by_count: bool, min_left: float = 0.0, pace: Pace | None = None) -> Allocation:
    """Step 4: with the optimal minimum yield proven and time left, the placement of the highest average yield
    among those keeping it (:func:`.milp.solve_average`); ``a`` when there is no time, nothing to gain (every job
    at yield 1) or SCIP finds nothing better. Skipped when less than ``min_left`` seconds are left (less the worst
    stall ``pace`` has seen); its model's building reads the clock (:class:`.milp.OutOfTime`)."""
    if not a.ok or min(a.job_yield) >= 1.0 - 1e-9:
        return a
    left = None if end is None else end - time.monotonic() - (pace.worst if pace is not None else 0.0)
    if left is not None and left < min_left:
        return a
    p = np.asarray(a.placement, dtype=np.int64)
    placement, _ = solve_average(tasks, a.min_yield, left, hint=_hint(tasks, p) if previous is None else p,
                                 previous=previous, budget=budget if previous is not None else None,
                                 by_count=by_count, fixed=fixed, pace=pace)
    if placement is None:
        return a
    cand = finish(tasks, placement, a.algorithm, a.status, time.monotonic(), bound=a.bound, stop=end)
    if cand.min_yield >= a.min_yield - 1e-9 and cand.avg_yield > a.avg_yield + 1e-9:
        return cand
    return a


def _hint(tasks: Tasks, placement: np.ndarray) -> np.ndarray:
    """``placement`` with identical hosts renumbered by first use (task t then lies on a host <= t, as the MILP's
    symmetry breaking requires); unchanged when the hosts differ."""
    if not tasks.identical_hosts:
        return placement
    order: dict[int, int] = {}
    for h in placement.tolist():
        order.setdefault(int(h), len(order))
    return np.array([order[int(h)] for h in placement], dtype=np.int64)


def _named(a: Allocation, status: str, bound: float | None, t0: float) -> Allocation:
    return a.model_copy(update={"algorithm": "anytime", "status": status, "bound": bound, "runtime_s": time.monotonic() - t0})
