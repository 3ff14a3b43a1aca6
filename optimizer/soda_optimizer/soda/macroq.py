"""macroQ: job admission, template choice and per-PE mips goals (SODA paper section 5.1;
the macroQ admission paper).

The nested process of paper Fig. 10:
- outer loop, resolution granularity: the capacity H is cut into atomic units (the first grid at
  least 100 mips and dividing H); we start coarse and refine (x4) while the time already spent says
  the next resolution fits before the deadline, down to 10 mips, each job also on its own finer
  grid with exact minima; the last pass is the plain grid (every job on the global unit, 100 mips
  when H allows), so the answer is never below it. ``Policy.resolution_units`` or
  ``Policy.unit_mips`` fix the resolution instead (reproducible runs, oracle comparisons);
- central loop, rank-legal job/template lists: revised ranks come from inter-job dependencies
  (an importer depends on its exporter, so the exporter's revised rank is the best rank among the
  jobs depending on it). Rank legality: for a waterline level r, every job of better revised rank
  is admitted, a subset of level-r jobs is, none worse. Required jobs are always in when their
  minima fit, as the paper's "rank 1" jobs; when they do not all fit, :mod:`.required` decides
  which are promised and refuses the others (the admission rule). The enumeration of lists is
  folded, exactly, into one max-plus knapsack per level (:mod:`.admission`), with each job's curve
  at a resolution fine enough for its own PEs;
- inner loop: the PEs and streams of a job (or of jobs glued by imports) split into weak
  components; each component's importance function I_c(u) with the optimal PE allocation at each
  u comes from :mod:`.curves`.

Departures from the paper, on purpose:
- the component curves' departures are in :mod:`.curves`; the knapsack's in :mod:`.admission`;
- anytime: resolutions go coarse to fine while the time spent says the next one fits, and a finer
  answer replaces a coarser one only when it is at least as good (so the answer never gets worse
  with time); within a resolution the highest waterline whose forced minima fit comes first. A
  deadline result says in ``detail`` the resolution and waterline it stopped at. The automatic
  resolution's order: the coarse per-job pass, the first per-job pass, the plain grid, the exact
  step, then finer per-job passes and, when the first exact step's model did not fit each job's
  10-mips grid, the exact step again over the finest pass (measured under load: the exact step
  from the LP rounding gains more than any finer knapsack where its model fits, and the plain
  grid comes early so the answer is never below it whatever the deadline cuts);
- the deadline holds: what runs once an answer is chosen (the give-back and polish of the pass
  under way, the bound's LP, the knee, the decisions) is kept out of it, a *reserve* of at least
  ``FINISH_SHARE`` of the deadline and twice what the first pass's give-back and polish took
  (measured, so it grows with the load and the size of the answer); later passes' knapsacks, the
  exact step and the bound's knapsack/CP-SAT give up at ``deadline - reserve``; only the first
  answer (every level, chosen by importance, and its whole give-back: the jobs that fit, the
  growth on own grids and the polish) runs whatever the clock says (issue 49: a deadline costs a
  refinement, never 20%, and leaves no capacity idle that an admitted PE could use; after the
  knee, what it freed goes to admitted PEs below saturation too). Its cost is bounded by the
  items' points, not points x units: with more than :data:`.admission.FEW_ITEMS` items, every
  level gets the LP rounding (:func:`.refine.lagrange`) and its give-back, and the knapsack too
  only when it would end by the deadline (points x units x the measured speed), the better kept;
  a level without its knapsack leaves it to the next pass (no fixed unit: with one, the knapsack
  always runs, alone);
- once a pass has an answer (its jobs and templates chosen), mips are moved from one admitted PE
  to another while that gains importance (:mod:`.exchange`), on every pass's answer and again
  after the knee: the answer lies on no one grid, and a grid it did not search may hold a better
  split (issue 49: 7.1's answers were up to 0.04% below fixed 100-mips units, a first answer alone
  up to 1.2% below what the transfers make of it);
- an answer that reaches the saturation bound (:mod:`.saturation`) is proven optimal and the
  passes stop there (issue 49: a what-if of one job that fits is proven by its first pass; so are
  hundreds of jobs with alternatives that all fit saturated, e.g. 10x LSD on 2,000 nodes);
- feasibility in exact mips (issue 34): with the automatic resolution the admission rule, "cannot
  fit" and the level check count exact minima, the knapsack charges forced jobs their exact minimum
  (:func:`.admission.item_curve`), and :mod:`.refine` gives back what whole units leave unused (a
  job whose minimum fits what is free is admitted, rank legality kept); every answer carries an
  upper bound and gap (:func:`.refine.upper_bound`), and its status is ``optimal`` only when that
  bound proves it (with a fixed unit: exact on that grid, as the detail names it);
- an importer is admitted only with its exporter (reason "dependency");
- required jobs whose minima do not fit do not make the whole problem infeasible (the paper's
  answer): the admission rule of :mod:`.required` refuses only those that do not fit, and promised
  required jobs do not force every job of better rank in (they rank as 1, as the paper assumes).

About 750 lines: :func:`solve` is the paper's Fig. 10 loop over resolutions with its anytime
bookkeeping (the passes' order, the reserve, the best answer, the bound, the report) in one place,
and its decisions' messages beside it; the pieces it calls live in
:mod:`.admission`, :mod:`.refine`, :mod:`.exact`, :mod:`.exchange`, :mod:`.required`, :mod:`.rap` and
:mod:`.knee`.
"""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import networkx as nx
import numpy as np

from ..importance import Evaluator, value
from ..model import Job, Scenario, floor_mips, floor_units
from ..plan import JobDecision, StageReport, gap_of
from . import admission, exact, exchange, refine, saturation
from .curves import Curve
from .knee import at_the_knee
from .required import Promise, job_minimum, promise
from .stages import ComponentCurve, MacroQResult

MIN_UNIT_MIPS = 100.0  # the first global grid's floor, and the plain grid's
FINE_UNIT_MIPS = 10.0  # the floor of the refinements (each job also on its own grid), while time allows
AUTO_UNITS = 8192  # the finest global grid the automatic refinement goes to
# the first answer must be complete whatever the clock says, so its curves stop improving at this
# share of the deadline: what is left pays for the curves not yet started (their floors) and the
# knapsacks, and keeps the overrun small
FIRST_CURVES_SHARE = 0.6
# curves past EXACT_LIMIT vectors (:data:`.curves.BIG_EXACT_LIMIT`) only in this share of the
# deadline (issue 49: on 7.1 at 65 nodes they took every pass's time, -0.7% at 5 s)
BIG_CURVES_SHARE = 0.25
EXCHANGE_SHARE = 0.05  # the transfers between PEs (:mod:`.exchange`) get at least this share of the deadline,
EXCHANGE_PAST = 0.05  # this share of the time spent when the answer came past the deadline,
EXCHANGE_MIN_S = 0.02  # and these seconds (7.1's 21 PEs take 0.002 s of CPU to the end; 10x LSD's 7,370 PEs 0.2-0.3 s)
FINISH_SHARE = 0.1  # a later pass gives up this share of the deadline before it ends (goals, streams, report)
# the first grid's knapsack work (jobs x units^2) when jobs are few (issue 49: 7.1 at 85 nodes,
# 17 jobs on 152 units of 6,151 mips, was 3% below the fine optimum; at 5e8, 5,129 units of 182 mips)
FIRST_WORK = 5e8
MAX_UNITS = 16384  # the finest resolution a policy may ask for (unitMips / resolutionUnits are clamped to it)


# ---------------------------------------------------------------------------------------- units


class _Units:
    """Minima in the global units of one resolution (ceil per PE, as the admission rule counts), or
    in exact mips (``unit`` None: the automatic resolution's per-job grids)."""

    def __init__(self, scenario: Scenario, unit: float | None):
        floor = scenario.policy.pe_floor_mips
        self.unit = unit or 1.0
        self.U: float = int(math.floor(scenario.capacity_mips / unit + 1e-9)) if unit else scenario.capacity_mips
        self.min_u: dict[str, float] = {
            t.name: sum(floor_units(p, unit, floor) if unit else floor_mips(p, floor) for p in t.pes) for t in scenario.templates}
        self.cheap = {j.name: min(j.candidate_templates, key=lambda t: self.min_u[t]) for j in scenario.jobs}

    def min_units(self, choice: dict[str, str]) -> float:
        return sum(self.min_u[t] for t in choice.values())


def revised_ranks(scenario: Scenario, exclude: Iterable[str] = ()) -> dict[str, int]:
    """Pi_{J,T,j}: the best rank among j and the jobs that depend on j (paper 5.1.1). Jobs in
    ``exclude`` (refused required jobs) lend their rank to nobody."""
    out = set(exclude)
    g = nx.subgraph_view(scenario.job_graph(), filter_edge=lambda _, v: v not in out) if out else scenario.job_graph()
    rank = {j.name: j.rank for j in scenario.jobs}
    return {j: min([rank[j]] + [rank[d] for d in nx.descendants(g, j)]) for j in rank}


def _deps(scenario: Scenario) -> dict[str, set[str]]:
    g = scenario.job_graph()
    return {j: set(g.predecessors(j)) for j in g}


def _hopeless(sv: _Units, scenario: Scenario, pr: Promise) -> dict[str, str]:
    """Jobs that fit in no list: their minimum (cheapest template, with the jobs they import from)
    exceeds what the promised jobs leave. They are rejected for capacity and, on purpose, do not
    hold worse ranks back (rank legality among the jobs that can run at all): one job asking for
    more than the cluster holds never costs the others their place."""
    deps = _deps(scenario)
    held = sv.min_units({j: sv.cheap[j] for j in pr.promised})
    out: dict[str, str] = {}
    for j in scenario.jobs:
        if j.name in pr.promised or j.name in pr.refused:
            continue
        group, todo = set(), [j.name]
        while todo:
            x = todo.pop()
            if x not in group and x not in pr.promised:
                group.add(x)
                todo.extend(deps[x])
        if group & set(pr.refused):
            continue  # rejected for its dependency on a refused job
        need = sv.min_units({x: sv.cheap[x] for x in group})
        if held + need > sv.U + 1e-6:
            out[j.name] = (f"its minimum of {need * sv.unit:.0f} mips{' with the jobs it imports from' if len(group) > 1 else ''} "
                           f"does not fit: the usable nodes offer {sv.U * sv.unit:.0f} mips, {held * sv.unit:.0f} of them "
                           f"promised to required jobs; short by {(held + need - sv.U) * sv.unit:.0f} mips")
    return out


def solve(scenario: Scenario, deadline_s: float | None = None) -> MacroQResult:
    """macroQ (module docstring), with Python's cyclic garbage collector paused while it runs
    (:func:`gc_paused`)."""
    with gc_paused():
        return _solve(scenario, deadline_s)


@contextmanager
def gc_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused, and restored as it was (issue 49: macroQ allocates
    many small objects, graphs, dicts and arrays, beside a Scenario of thousands; the collections
    they trigger rescan the young ones again and again: 35% of the first answer's CPU on 10x LSD,
    2.4 -> 1.5 s). Reference counting still frees what it allocates; a cycle it leaves waits for the
    next collection after it returns. Process-wide, like the collector: a concurrent caller may
    see it paused, and whoever paused it resumes it."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _solve(scenario: Scenario, deadline_s: float | None = None) -> MacroQResult:
    t0 = time.monotonic()
    pol = scenario.policy
    deadline = t0 + (deadline_s if deadline_s is not None else pol.macroq_deadline_s)
    H = scenario.capacity_mips

    def report(status: str, objective: float | None, detail: str, bound: float | None = None, proven: bool = True) -> StageReport:
        gap = None if objective is None else gap_of(bound, objective, proven)
        return StageReport(stage="macroq", seconds=time.monotonic() - t0, status=status, objective=objective, detail=detail,  # type: ignore
                           bound=bound, gap=gap, bound_proven=proven and bound is not None)

    if not scenario.jobs:
        return MacroQResult((), {}, {}, {}, (), 0.0, report("optimal", 0.0, "no jobs", 0.0), 0.0, 0.0, 0.0, True)
    fixed_unit = pol.unit_mips or (H / pol.resolution_units if pol.resolution_units else None)
    if fixed_unit and H > 0:
        fixed_unit = max(fixed_unit, H / MAX_UNITS)  # a policy's tiny unit never exhausts time or memory
    if H <= 0:
        units: list[float] = []
    elif fixed_unit:
        units = [fixed_unit]
    else:
        # the first grid has room for every job (8 units a job, 128 at least, 8192 at most), and
        # divides H (so a job whose minimum fits H fits the grid); never finer than 100 mips
        # (issue 49: few jobs get a finer first grid, its knapsack costing about jobs x units^2,
        # FIRST_WORK at most: 7.1's 17 jobs on 152 units of 6,151 mips were 3% below the fine optimum)
        n_jobs = len(scenario.jobs)
        n0 = min(AUTO_UNITS, max(128, 8 * n_jobs, int(math.sqrt(FIRST_WORK / n_jobs))), max(1, int(H // MIN_UNIT_MIPS)))
        units = [H / n0]
        while units[-1] / 4 >= FINE_UNIT_MIPS and H / (units[-1] / 4) <= AUTO_UNITS:
            units.append(units[-1] / 4)
    best: _Answer | None = None
    # the admission rule and "cannot fit": in exact mips with the automatic resolution (never
    # rounded to a global unit), in the fixed unit's units otherwise
    exact_mips = not fixed_unit
    pr = promise(scenario, None if exact_mips else (units[-1] if units else None))
    hopeless: dict[str, str] = {}
    expired = admission.timer(deadline)
    curve_cache: dict = {}  # component curves on their own grids, shared by the resolutions
    knapsack_s, knapsack_unit = 0.0, 0.0  # the last per-job pass's knapsack seconds, and its global unit
    # passes: (global unit, per-job grids, coarse growth). Without a fixed unit every job is on its
    # own finer grid with exact minima (no job that fits is left out); the first pass lets PEs grow
    # only in steps of about the global unit (cheap curves: a good answer well inside a tight
    # deadline), the next ones in single units of their own grid; the last is the plain grid
    # (every job on the global unit, as a fixed unitMips, 100 mips when the capacity allows), so
    # the answer is never below it. A pass replaces the answer only when it keeps every promised
    # job and is at least as good.
    plain = max(MIN_UNIT_MIPS, H / AUTO_UNITS) if H > 0 else 0.0
    # the order (issue 34, measured under load): the coarse pass (an answer inside a tight
    # deadline), the first per-job pass, the plain grid (so the answer is never below it, whatever
    # the deadline cuts later), then the exact step (CP-SAT over each job's 10-mips grid, from the
    # best answer: it dominates the finer knapsacks wherever its model fits), then the finer
    # per-job passes while time is left
    passes: list[tuple[float, bool, bool] | None] = (
        [(units[0], True, True), (units[0], True, False), (plain, False, False), None] + [(u, True, False) for u in units[1:]]
        + ([None] if units[1:] else [])
        if not fixed_unit and units else [(u, False, False) for u in units])
    cut = False  # a pass was stopped by the deadline
    prev_unit: float | None = None
    grids: list[str] = []  # what each pass found, for the detail
    last_items: admission.Items | None = None
    first_items: tuple[admission.Items, tuple] | None = None
    last_ctx: tuple | None = None
    exact_items: admission.Items | None = None  # the CP-SAT step's curves (finer than the passes')
    evs: dict[tuple, Evaluator] = {}  # one Evaluator per admitted set (polish's is the final one's)
    # what runs once an answer is chosen (give-back, polish, the bound's LP, knee, decisions) is
    # kept out of the deadline: ``reserve`` seconds, at least FINISH_SHARE of it and twice what
    # the first pass's give-back and polish took (measured, so it grows with the load and the size)
    reserve = FINISH_SHARE * (deadline - t0)
    sat: list[float | None] = []  # the saturation bound, once an answer admits every job (:mod:`.saturation`)

    def saturated(ans: _Answer) -> bool:
        """Whether ``ans`` reaches the saturation bound (proven optimal: no later pass can do better)."""
        if len(ans.choice) < len(scenario.jobs):
            return False
        if not sat:
            sat.append(saturation.bound(scenario, ans.choice, _evaluator(scenario, ans.choice, evs)))
        b = sat[0]
        return b is not None and ans.importance >= b - 1e-9 * (1.0 + abs(b))

    done = False  # the answer is proven optimal by the saturation bound
    skip_same: float | None = None  # the per-job pass on this grid repeats the coarse one (one-PE components only)
    give_back_s = [0.0]  # the longest give-back of one level (:func:`.refine.fill`), for the reserve
    for i_step, step in enumerate(passes):
        if best is not None and saturated(best):
            done = True
            break
        last_step = i_step == len(passes) - 1
        if step is None:  # the exact step; again after the finer passes when it did not reach the 10-mips grids
            fine_done = exact_items is not None and exact_items.g <= FINE_UNIT_MIPS + 1e-9
            if best is not None and last_items is not None and last_ctx is not None and last_items.per_job and not fine_done:
                ans_x = _exact_step(scenario, last_items, last_ctx, best, H, deadline - reserve, curve_cache, evs)
                if ans_x is not None:
                    exact_items = ans_x.items_used
                    grids.append(f"CP-SAT per-job {ans_x.unit:.1f}{' (proven on those grids)' if ans_x.status == 'optimal' else ''}: "
                                 f"{ans_x.importance:,.6g}")
                    if ans_x.key[0] > best.key[0] or (ans_x.key[0] == best.key[0] and ans_x.importance > best.importance * (1 + 1e-9) + 1e-9):
                        best = ans_x
            if time.monotonic() > deadline - reserve:
                cut = cut or not last_step
                break
            continue
        unit, per_job, coarse = step
        if per_job and not coarse and unit == skip_same:
            continue
        t1 = time.monotonic()
        same_grid, prev_unit = unit == prev_unit, unit
        if best is not None and not same_grid:
            # the job curves are built once (on their own grids); a k x finer global grid costs
            # about k^2 the last knapsacks (k x the units, k x the item points; 16 x for the next
            # per-job grid); the plain grid builds its own curves (issue 49: priced at 16 x after
            # a first grid twice as fine, it never ran on 7.1 at a 1 s deadline)
            grow = (knapsack_unit / unit) ** 2 if knapsack_unit else 16.0
            if t1 + grow * max(knapsack_s, 1e-3) > deadline:  # the next resolution would not fit
                cut = True
                break
        sv = _Units(scenario, None if per_job else unit)
        pr_u = promise(scenario, None if per_job else unit)
        hl_u = _hopeless(sv, scenario, pr_u)
        rev_u = revised_ranks(scenario, pr_u.refused)
        blocked = _blocked(scenario, set(pr_u.refused))
        candidates = [j.name for j in scenario.jobs if j.name not in pr_u.refused and j.name not in hl_u and j.name not in blocked]
        free = {j: rev_u[j] for j in candidates if j not in pr_u.promised}
        answered = best is not None
        curves_until = deadline if answered else t0 + FIRST_CURVES_SHARE * (deadline - t0)
        items = admission.Items(scenario, unit, per_job=per_job, deadline=curves_until, jobs=candidates, cache=curve_cache,
                                coarse=coarse)
        items.big_until = t0 + BIG_CURVES_SHARE * (deadline - t0)
        if answered:  # a later pass leaves time to turn the answer into goals and streams
            items.abandon_at = deadline - reserve

        def have_answer(answered: bool = answered) -> bool:
            return answered

        U = int(math.floor(H / unit + 1e-9))

        def give_back(got: admission.LevelResult, items: admission.Items = items, answered: bool = answered,
                      free: dict[str, int] = free, reserve: float = reserve) -> admission.LevelResult:
            """What whole global units left unused, given back in exact mips (never lowers the answer);
            the first answer's always completes (issue 49: cut by the deadline, it left capacity idle
            that admitted PEs could use), a later pass's stops at the reserve."""
            if fixed_unit:
                return got
            tg = time.monotonic()
            until = (lambda: False) if not answered else admission.timer(max(deadline - reserve, time.monotonic() + 0.05))
            picks = refine.fill(items, got.picks, free, H, until, admit_all=not answered)
            give_back_s[0] = max(give_back_s[0], time.monotonic() - tg)
            return admission.LevelResult(refine.importance(picks), sum(len(o.jobs) for o, _ in picks), got.level, picks)

        def lp_rounding(forced: set[str], allowed: set[str],
                        items: admission.Items = items) -> tuple[list[tuple[admission.Option, int]], float] | None:
            """The first answer's LP rounding at a level, and its Lagrangian bound (issue 49)."""
            dual: list[float] = []
            picks = refine.lagrange(items, forced, allowed, H, lambda: False, dual)
            return None if picks is None else (picks, dual[0] if dual else math.inf)

        # a later pass's knapsack gives up at the reserve (the first runs to its answer, by the LP
        # rounding at a level whose knapsack would not end by the deadline; a fixed unit has no
        # later pass to refine it, so its knapsack always runs)
        got, status = admission.solve_levels(items, U, set(pr_u.promised), free,
                                             admission.timer(deadline - reserve) if answered else expired, have_answer, give_back,
                                             None if answered or fixed_unit else lp_rounding, deadline)
        if status == "optimal" and any(not c.complete for c in items.used_curves()):
            status = "deadline"  # exact over the curves, but some curves stopped improving early
        cut = cut or status == "deadline"
        if per_job or fixed_unit:  # the next per-job resolution's estimate (the plain grid's knapsack is another size)
            knapsack_s, knapsack_unit = items.knapsack_s, unit
        tf = time.monotonic()
        until = (lambda: False) if not answered else admission.timer(max(deadline - reserve, time.monotonic() + 0.05))
        if got is not None:
            ans = _answer(got, unit, U, status, pr_u, hl_u, free, per_job)
            ans.items_used = items
            if not fixed_unit:
                # as the final answer gets them (the knee, the jobs that fit what it frees, the transfers
                # within the deadline less the reserve, the give-back), so the passes compare what they give
                _knee_and_freed(scenario, ans, H, evs)
                _exchanged(scenario, ans, H, admission.timer(deadline - reserve), evs)
                goals_p, imp_p = refine.polish(scenario, ans.choice, ans.goals, H, until, ev=_evaluator(scenario, ans.choice, evs))
                if imp_p is not None and imp_p > ans.importance:
                    ans.goals, ans.importance, ans.key = goals_p, imp_p, (ans.key[0], imp_p)
                    _exchanged(scenario, ans, H, admission.timer(deadline - reserve), evs)  # from what the give-back made
            if not answered:
                reserve = max(reserve, 2.0 * (time.monotonic() - tf + give_back_s[0]))
            grids.append(f"{'plain' if not per_job else 'per-job' if not coarse else 'coarse per-job'} {unit:.1f}: {ans.importance:,.6g}")
            # more of the rule's required jobs first, then importance: a finer resolution replaces a
            # coarser answer only when it is at least as good
            # coarser than the per-job grids, the plain grid must do strictly better (its PEs get whole units)
            tol = -1e-9 if per_job or fixed_unit else 1e-9 * (1.0 + abs(best.importance) if best is not None else 1.0)
            if best is None or ans.key[0] > best.key[0] or (ans.key[0] == best.key[0] and ans.importance >= best.importance + tol):
                best = ans
            if last_items is None:
                first_items = (items, (unit, U, pr_u, hl_u, free))  # the first answer's: its bound always completes
            if coarse and not items.any_coarse and not items.cheap_levels and all(c.complete for c in items.used_curves()):
                # every component has one PE (its curve exact, step 1): the coarse pass was the
                # per-job one; the next pass on the same grid would repeat it (issue 49)
                items.coarse, coarse, skip_same = False, False, unit
            if last_items is None or (per_job == (not fixed_unit) and not coarse):
                last_items = items  # the bound comes from the finest per-job curves (continuous: any pass's answer)
                last_ctx = (unit, U, pr_u, hl_u, free)
        if time.monotonic() > deadline - reserve:
            cut = cut or not last_step
            break
    if best is not None and not done and saturated(best):
        done = True
    cut = cut and not done  # proven optimal: nothing left for the deadline to cut
    bound, proven = None, False
    if done and best is not None and sat and sat[0] is not None:
        bound, proven = max(sat[0], best.importance), True
        last_items = last_ctx = exact_items = None  # no other bound to compute
    bound_items, bctx = last_items, last_ctx  # the bound over the finest per-job curves built
    if exact_items is not None and last_ctx is not None and (last_items is None or exact_items.g <= last_items.g):
        bound_items = exact_items  # the finest curves built: the exact step's, or a later pass's
    if best is not None and bound_items is not None and bctx is not None:
        last_items = bound_items
        # over a later pass's curves, its LP per level and the options it builds stop at the
        # deadline less half the reserve, or after FINISH_SHARE of it when the first answer
        # already ran past; then the bound is the LP over the first answer's curves, which always
        # completes like its give-back (issue 49: the LP over 500 finer curves ran 1.8 s past a
        # 5 s deadline under load)
        later = first_items is None or bound_items is not first_items[0]
        stop_at = max(deadline - 0.5 * reserve, time.monotonic() + FINISH_SHARE * (deadline - t0)) if later else math.inf
        last_items.abandon_at = stop_at
        try:
            # the rounded-down knapsack costs about one pass's knapsacks: only when that fits
            room = deadline - time.monotonic() - reserve
            skip = (lambda: True) if room < 2 * last_items.knapsack_s else admission.timer(time.monotonic() + room)
            bound, proven = refine.upper_bound(bound_items, set(bctx[2].promised), bctx[4], H, skip,
                                               None if room < 2 * last_items.knapsack_s else time.monotonic() + room,
                                               max_units=AUTO_UNITS, stop=admission.timer(stop_at))
        except admission.Expired:
            bound = None
            if first_items is not None:  # the LP alone (no knapsack, no CP-SAT) over the first answer's curves
                items0, ctx0 = first_items
                bound, proven = refine.upper_bound(items0, set(ctx0[2].promised), ctx0[4], H, lambda: True)
        finally:
            last_items.abandon_at = math.inf  # what follows (the knee's admissions) may build the rest
        if bound is not None and proven:
            bound = max(bound, best.importance)  # proven: at least any answer, rounding aside (an estimate stays as computed)
    if best is not None:
        pr, hopeless = best.promise, best.hopeless
    rev = revised_ranks(scenario, pr.refused)
    if best is None:
        msg = "no usable node" if H <= 0 else "no job fits the usable capacity"
        decisions = tuple(
            JobDecision(
                job=j.name,
                admitted=False,
                reason="infeasible-required" if j.required else "capacity",
                message=pr.refused.get(j.name, f"{msg} ({H:.0f} mips usable, {job_minimum(scenario, j):.0f} needed)"),
                rank=j.rank,
                revised_rank=rev[j.name],
            )
            for j in scenario.jobs
        )
        # with no usable node the epoch decides nothing (the operator keeps what runs); otherwise
        # no job fitting is a valid answer
        status = "infeasible" if H <= 0 else "optimal"
        return MacroQResult(decisions, {}, {}, {}, (), 0.0, report(status, None, msg), 0.0)
    level, unit, U = best.level, best.unit, best.U
    gap = gap_of(bound, best.importance, proven)
    if cut:
        status = "deadline"
    elif done:
        status = "optimal"  # the saturation bound: no admission, grid or not, does better
    elif fixed_unit:
        status = best.status  # the knapsack is exact on the fixed grid
    else:  # automatic: optimal only when the bound proves it
        status = "optimal" if proven and gap is not None and gap <= 1e-9 else "feasible"
    incomplete = sum(not c.complete for c in curve_cache.values())
    ev = _evaluator(scenario, best.choice, evs)
    glued = ev.glued
    goals = at_the_knee(ev, best.goals, pol.pe_floor_mips)
    if not fixed_unit and best.per_job and best.items_used is not None:
        # the knee frees what grid points held past saturation: a job whose exact minimum fits
        # that is admitted (rank legality kept), so none that fits is refused (issue 34)
        more = refine.admit_freed(best.items_used, best.picks, best.free, H, H - sum(goals.values()))
        if more:
            best.choice = {**best.choice, **{j: t for o in more for j, t in o.choice.items()}}
            best.picks = best.picks + [(o, 0) for o in more]
            best.importance += sum(float(o.values[0]) for o in more)
            best.curves = best.curves + [c for o in more for c in o.curves]
            goals = {**goals, **{p: m for o in more for p, m in o.split(0).items()}}
            ev = _evaluator(scenario, best.choice, evs)
            glued = ev.glued
    if not fixed_unit and not done and len(ev.pes) > 1:
        # mips moved between admitted PEs while that gains (issue 49: 7.1's answers were up to 0.04%
        # below fixed 100-mips units; a first answer alone gains up to 1.2%), again after the knee;
        # every move gains, so it stops at the deadline (:func:`_exchange_clock`); what it leaves
        # free goes to the give-back below
        floors = {p: floor_mips(glued.spec(p), pol.pe_floor_mips) for p in ev.pes}
        goals_x, imp_x = exchange.exchange(ev, goals, floors, H, _exchange_clock(t0, deadline, deadline))
        if imp_x > best.importance + 1e-9 * (1.0 + abs(best.importance)):
            goals, best.importance = goals_x, imp_x
            if bound is not None and proven:
                bound = max(bound, best.importance)
            gap = gap_of(bound, best.importance, proven)
    if not fixed_unit and H - sum(goals.values()) > 1e-6:
        # what the knee freed and no job took, what a pass's polish left (the plain grid's
        # answer, a polish cut by time) and what the transfers left, goes to admitted PEs below
        # their saturation (issue 49: no capacity idle that an admitted PE could use; 7.1 at 85 nodes left 1,100 mips), every
        # answer and as many moves as it takes (a lazy greedy: 1,000 PEs at most and 64 moves left
        # 99,716 mips that admitted PEs could use idle on 10x LSD at 300 nodes, 0.3% of importance)
        goals, imp_p = refine.polish(scenario, best.choice, goals, H, lambda: False, ev=ev, rounds=len(ev.pes), max_pes=len(ev.pes))
        best.importance = max(best.importance, imp_p if imp_p is not None else -math.inf)
        if bound is not None and proven:  # an estimate is never raised to the answer (issue 49)
            bound = max(bound, best.importance)
        gap = gap_of(bound, best.importance, proven)
    vec = np.array([[goals[p] for p in ev.pes]])
    traffic = ev.traffic(vec[0])
    imp_by_job = _importance_by_job(ev, vec[0])
    deps = _deps(scenario)
    job_mips = {x: sum(goals[p] for p in glued.pes_of(x)) for x in best.choice}
    out_dec: list[JobDecision] = []
    why_cache: dict = {}
    for j in scenario.jobs:
        if j.name in best.choice:
            mips = sum(goals[p] for p in glued.pes_of(j.name))
            out_dec.append(
                JobDecision(
                    job=j.name,
                    admitted=True,
                    template=best.choice[j.name],
                    rank=j.rank,
                    revised_rank=rev[j.name],
                    importance=imp_by_job.get(j.name, 0.0),
                    mips=mips,
                )
            )
        elif j.name in pr.refused:
            out_dec.append(JobDecision(job=j.name, admitted=False, reason="infeasible-required", message=pr.refused[j.name],
                                       rank=j.rank, revised_rank=rev[j.name]))
        elif j.name in hopeless:
            out_dec.append(JobDecision(job=j.name, admitted=False, reason="capacity", message=hopeless[j.name],
                                       rank=j.rank, revised_rank=rev[j.name]))
        else:
            if not deps[j.name] <= set(best.choice):
                reason, msg = "dependency", f"imports from jobs not admitted: {sorted(deps[j.name] - set(best.choice))}"
            else:
                reason = "rank-waterline" if level is not None and rev[j.name] > level else "capacity"
                msg = _why(scenario, j, rev, level, best, job_mips, why_cache)
            out_dec.append(
                JobDecision(job=j.name, admitted=False, reason=reason, message=msg, rank=j.rank, revised_rank=rev[j.name])  # type: ignore
            )
    comps = tuple(
        ComponentCurve(
            pes=c.pes,
            mips=(np.arange(len(c.values)) + int(c.lo.sum())) * c.unit + float(c.offset.sum() if c.offset is not None else 0.0),
            importance=c.values.copy(),
            allocation=c.allocs.astype(float) * c.unit + (c.offset if c.offset is not None else 0.0),
            concave=c.concave,
        )
        for c in best.curves
    )
    return MacroQResult(
        decisions=tuple(out_dec),
        choice=best.choice,
        goals=goals,
        stream_rates=traffic,
        components=comps,
        importance=best.importance,
        report=report(
            status,
            best.importance,
            ("" if fixed_unit else
             f"{'optimal' if status == 'optimal' else 'best found'} on {'each job own grid, exact minima' if best.per_job else 'the plain grid'}; "
             f"passes {'; '.join(grids)}; ")
            + (f"upper bound {bound:,.6g} ({'proven' if proven else 'estimated: some curves are greedy'}), "
               f"gap {'unknown (the answer passes the estimate)' if gap is None else f'{100 * gap:.3g}%'}; "
               if bound is not None else "no upper bound (deadline); ")
            + f"unit {unit:.1f} mips ({U} units{', each job on its own finer grid' if best.per_job else ''}), waterline rank {level}, "
            f"knapsack over {best.items} items, {len(comps)} components" + (" (stopped at the deadline: coarser resolutions or "
            "lower levels only; a finer grid may add up to one unit per admitted job"
            + (f"; {incomplete} of {len(curve_cache)} job curves stopped improving early" if incomplete else "") + ")"
            if status == "deadline" else "")
            + (f"; {len(pr.refused)} required job(s) refused: {', '.join(sorted(pr.refused))}" if pr.refused else ""),
            bound,
            proven,
        ),
        resolution_mips=unit,
        bound=bound,
        gap=gap,
        bound_proven=proven and bound is not None,
    )


def _why(scenario: Scenario, job: Job, rev: dict[str, int], level: int | None, best: _Answer, job_mips: dict[str, float],
         cache: dict | None = None) -> str:
    """Why an admissible job is out, in numbers a user can act on: its minimum, what is free, and
    what the admitted jobs of better and equal revised rank hold (the largest named). ``cache``:
    those figures per revised rank, shared by the calls of one answer (issue 49: recomputed per
    refused job, they took seconds on 3,000 jobs)."""
    need = job_minimum(scenario, job)
    H = scenario.capacity_mips
    r = rev[job.name]
    cache = {} if cache is None else cache
    if "free" not in cache:
        cache["free"] = max(0.0, H - sum(best.goals.values()))
    if r not in cache:
        better = sorted(((m, x) for x, m in job_mips.items() if rev[x] < r), reverse=True)
        equal = [m for x, m in job_mips.items() if rev[x] == r]
        cache[r] = (len(better), sum(m for m, _ in better), better[:3], sum(equal), len(equal))
    free = cache["free"]
    n_better, held, top3, equal_mips, n_equal = cache[r]
    top = ", ".join(f"{x} {m:.0f}" for m, x in top3)
    head = (f"revised rank {rev[job.name]} is worse than the waterline {level}: " if level is not None and rev[job.name] > level
            else "not admitted at its rank (more importance elsewhere): ")
    text = (f"{head}it needs at least {need:.0f} mips ({best.unit:.0f}-mips units); {free:.0f} of {H:.0f} are free, {held:.0f} are held by "
            f"{n_better} job(s) of better revised rank" + (f" ({top}{', ...' if n_better > 3 else ''})" if n_better else "")
            + (f" and {equal_mips:.0f} by {n_equal} of equal rank" if n_equal else ""))
    if need > H - held:
        text += f"; even alone beside the better ranks it is short by {need - (H - held):.0f} mips"
    return text


@dataclass
class _Answer:
    importance: float
    choice: dict[str, str]
    goals: dict[str, float]  # pe -> mips
    curves: list[Curve]
    level: int | None  # the waterline: the worst revised rank admitted among the jobs that compete
    status: str
    unit: float
    U: int
    items: int
    promise: Promise
    hopeless: dict[str, str]
    key: tuple[tuple[bool, ...], float]
    per_job: bool = False
    free: dict[str, int] = field(default_factory=dict)  # revised ranks of the candidates not promised
    klevel: int | None = None  # the knapsack's waterline level
    picks: list[tuple[admission.Option, int]] = field(default_factory=list)  # (option, own point) per admitted item
    items_used: admission.Items | None = None  # the curves the answer was found over (the CP-SAT step's)


def _answer(got: admission.LevelResult, unit: float, U: int, status: str, pr: Promise, hopeless: dict[str, str],
            free: dict[str, int], per_job: bool = False) -> _Answer:
    choice: dict[str, str] = {}
    goals: dict[str, float] = {}
    curves: list[Curve] = []
    for opt, x in got.picks:
        choice.update(opt.choice)
        goals.update(opt.split(x))
        curves.extend(opt.curves)
    admitted_free = [free[j] for j in choice if j in free]
    level = max(admitted_free) if admitted_free else (min(free.values()) if free else None)
    return _Answer(got.importance, choice, goals, curves, level, status, unit, U, len(got.picks), pr, hopeless,
                   (tuple(x in pr.promised for x in pr.order), got.importance), per_job, dict(free), got.level, list(got.picks))


def _evaluator(scenario: Scenario, choice: dict[str, str], evs: dict[tuple, Evaluator]) -> Evaluator:
    """The Evaluator of the admitted set ``choice`` (built once: on 10x LSD it costs 0.3 s)."""
    key = tuple(sorted(choice.items()))
    if key not in evs:
        evs.clear()  # one at a time: they are large
        evs[key] = Evaluator(scenario.glued(choice))
    return evs[key]


def _exact_step(scenario: Scenario, items: admission.Items, ctx: tuple, best: _Answer, H: float, until: float,
                cache: dict, evs: dict[tuple, Evaluator]) -> _Answer | None:
    """CP-SAT (:mod:`.exact`) at the best answer's waterline level, then the same give-back as a pass
    (:func:`.refine.fill`, :func:`.refine.polish`). Over each job's grid at ``FINE_UNIT_MIPS`` when
    its points (estimated from ``items``, the finest pass's) fit :data:`.exact.MAX_POINTS` and its
    curves are built in time, else over ``items``."""
    unit, U, pr_u, hl_u, free = ctx
    if time.monotonic() > until or best.klevel is None:
        return None
    r = best.klevel
    forced = set(pr_u.promised) | {j for j, x in free.items() if x < r}
    allowed = forced | {j for j, x in free.items() if x == r}
    hint = [(o.choice, o.mips(x)) for o, x in best.picks]
    n = exact.points(items, allowed)
    if n > exact.MAX_POINTS:
        return None
    use: admission.Items | None = None if items.coarse else items
    if items.g > FINE_UNIT_MIPS and n * items.g / FINE_UNIT_MIPS <= exact.MAX_POINTS:
        fine = admission.Items(scenario, FINE_UNIT_MIPS, per_job=True, deadline=until, jobs=[j for g in items.groups for j in g],
                               cache=cache)
        fine.big_until = items.big_until
        fine.abandon_at = time.monotonic() + 0.3 * (until - time.monotonic())
        try:
            for gi, grp in enumerate(fine.groups):
                if grp & allowed:
                    fine.build(gi)
            if all(c.complete for c in fine.used_curves()):
                use, unit, U = fine, FINE_UNIT_MIPS, int(math.floor(H / FINE_UNIT_MIPS + 1e-9))
        except admission.Expired:
            pass
    if use is None:
        return None
    # the LP rounding first (a few numpy passes): the better of it and the best answer is CP-SAT's hint
    lag = refine.lagrange(use, forced, allowed, H, admission.timer(until))
    if lag is not None:
        lag = refine.fill(use, lag, free, H, admission.timer(until))
        if refine.importance(lag) > best.importance:
            hint = [(o.choice, o.mips(x)) for o, x in lag]
    try:
        picks, proven = exact.improve(use, forced, allowed, H, hint, until)
    except admission.Expired:
        return None
    if picks is None:
        return None
    expired = admission.timer(max(until, time.monotonic() + 0.05))
    picks = refine.fill(use, picks, free, H, expired)
    got = admission.LevelResult(refine.importance(picks), sum(len(o.jobs) for o, _ in picks), r, picks)
    ans = _answer(got, unit, U, "optimal" if proven else "feasible", pr_u, hl_u, free, True)
    ans.items_used = use
    _knee_and_freed(scenario, ans, H, evs)
    _exchanged(scenario, ans, H, admission.timer(until), evs)
    goals_p, imp_p = refine.polish(scenario, ans.choice, ans.goals, H, expired, ev=_evaluator(scenario, ans.choice, evs))
    if imp_p is not None and imp_p > ans.importance:
        ans.goals, ans.importance, ans.key = goals_p, imp_p, (ans.key[0], imp_p)
    return ans


def _knee_and_freed(scenario: Scenario, ans: _Answer, H: float, evs: dict[tuple, Evaluator]) -> None:
    """``ans`` at the knee (:func:`.knee.at_the_knee`) and, with what that frees, the jobs whose minimum
    fits it admitted (:func:`.refine.admit_freed`), in place: what the final answer gets, done on
    every pass's answer before the passes are compared (the anytime contract, issue 49: a first
    answer that only gained this at the end, 43.0, beat the answer of a later pass, 42.6 -> 42.9,
    that had replaced it for being better before it: more time gave a lower answer)."""
    ev = _evaluator(scenario, ans.choice, evs)
    ans.goals = at_the_knee(ev, ans.goals, scenario.policy.pe_floor_mips)
    if not ans.per_job or ans.items_used is None:
        return
    more = refine.admit_freed(ans.items_used, ans.picks, ans.free, H, H - sum(ans.goals.values()))
    if more:
        ans.choice = {**ans.choice, **{j: t for o in more for j, t in o.choice.items()}}
        ans.picks = ans.picks + [(o, 0) for o in more]
        ans.importance += sum(float(o.values[0]) for o in more)
        ans.curves = ans.curves + [c for o in more for c in o.curves]
        ans.goals = {**ans.goals, **{p: m for o in more for p, m in o.split(0).items()}}
        ans.key = (ans.key[0], ans.importance)


def _exchange_clock(t0: float, deadline: float, stop: float) -> Callable[[], bool]:
    """The transfers' clock (:mod:`.exchange`): until ``stop``, or, when that has passed, for the
    largest of EXCHANGE_SHARE of the deadline, EXCHANGE_PAST of the time spent and EXCHANGE_MIN_S."""
    now = time.monotonic()
    return admission.timer(max(stop, now + max(EXCHANGE_SHARE * (deadline - t0), EXCHANGE_PAST * (now - t0), EXCHANGE_MIN_S)))


def _exchanged(scenario: Scenario, ans: _Answer, H: float, until: Callable[[], bool], evs: dict[tuple, Evaluator]) -> None:
    """``ans`` with mips moved between its PEs while that gains (:mod:`.exchange`), in place. On
    each pass's answer, not only the last: the local optimum depends on where it starts (step 80
    jobs: from the first answer 223,227, from a later pass's 223,053)."""
    ev = _evaluator(scenario, ans.choice, evs)
    if len(ev.pes) < 2 or until():
        return
    floors = {p: floor_mips(ev.glued.spec(p), scenario.policy.pe_floor_mips) for p in ev.pes}
    goals_x, imp_x = exchange.exchange(ev, ans.goals, floors, H, until)
    if imp_x > ans.importance + 1e-9 * (1.0 + abs(ans.importance)):
        ans.goals, ans.importance, ans.key = goals_x, imp_x, (ans.key[0], imp_x)


def _blocked(scenario: Scenario, refused: set[str]) -> set[str]:
    """Jobs that import, directly or not, from a refused job (reason: dependency)."""
    g = scenario.job_graph()
    return {d for r in refused for d in nx.descendants(g, r)}


def _importance_by_job(ev: Evaluator, alloc: np.ndarray) -> dict[str, float]:
    """Split importance among jobs: a stream's to its consumer's job, a sink's to its PE's job."""
    out: dict[str, float] = {}
    rates = ev.outputs(alloc)[0]
    for (u, v), (s, sel, w, vf, _) in zip(ev.edge_keys, ev._edges):
        if w > 0:
            job = ev.graph.nodes[v]["job"]
            out[job] = out.get(job, 0.0) + float(w * value(vf, np.array([rates[s] * sel]))[0])
    for i, w, vf in ev._sinks:
        if w > 0:
            job = ev.graph.nodes[ev.pes[i]]["job"]
            out[job] = out.get(job, 0.0) + float(w * value(vf, np.array([rates[i]]))[0])
    return out
