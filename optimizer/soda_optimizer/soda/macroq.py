"""macroQ: job admission, template choice and per-PE mips goals (SODA paper section 5.1;
the macroQ admission paper).

The nested process of paper Fig. 10:
- outer loop, resolution granularity: the capacity H is cut into atomic units; we start coarse and
  refine (x4) while the time already spent says the next resolution fits before the deadline, down
  to a 100-mips floor. ``Policy.resolution_units`` or ``Policy.unit_mips`` fix the resolution
  instead (reproducible runs, oracle comparisons);
- central loop, rank-legal job/template lists: revised ranks come from inter-job dependencies
  (an importer depends on its exporter, so the exporter's revised rank is the best rank among the
  jobs depending on it). Rank legality: for a waterline level r, every job of better revised rank
  is admitted, a subset of level-r jobs is, none worse. Required jobs are always in when their
  minima fit, as the paper's "rank 1" jobs; when they do not all fit, :mod:`.required` decides
  which are promised and refuses the others (the admission rule). Per level we enumerate subsets exhaustively when
  2^n x template combinations fits the evaluation budget, else admit level-r jobs greedily in
  order of importance per mips (the paper's shortcut when pressed for time);
- inner loop: the PEs and streams of the list split into weak components; each component's
  importance function I_c(u) over u units (with the optimal PE allocation at each u) comes from
  :func:`component_curve`, and :mod:`.rap` allocates units across components (Galil-Megiddo /
  DP / Fox + DP after a concavity test).

Departures from the paper, on purpose:
- per-component optimisation (the paper's NSDP of Ibaraki and Katoh): exact, by enumerating every
  discrete allocation vector, when that fits ``EXACT_LIMIT`` vectors; otherwise a greedy marginal
  scheme over unit bundles (single PEs, doubling bundles, and a bundle for the whole component so
  that serial bottlenecks with zero single-unit gain still progress). The greedy curve is a lower
  bound of the true one; this is the paper's "partially greedy scheme" used always for large
  components rather than only under time pressure;
- discrete bounds use ceil for minima and floor for maxima (the paper floors minima and ceils
  maxima), so the discrete solution always honours the continuous m_p <= g_p <= M_p;
- a PE never gets more than its saturation mips (b/a, or primal/a for sources): its output cannot
  grow past it, so the extra is left for others;
- an importer is admitted only with its exporter (reason "dependency");
- required jobs whose minima do not fit do not make the whole problem infeasible (the paper's
  answer): the admission rule of :mod:`.required` refuses only those that do not fit, and promised
  required jobs do not force every job of better rank in (they rank as 1, as the paper assumes).
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Iterable
from dataclasses import dataclass

import networkx as nx
import numpy as np

from ..graph import GluedGraph
from ..importance import Evaluator, value
from ..model import Scenario
from ..plan import JobDecision, StageReport
from . import rap
from .required import Promise, job_minimum, promise
from .stages import ComponentCurve, MacroQResult

EXACT_LIMIT = 20000  # allocation vectors enumerated exactly per component
EVAL_BUDGET = 4096  # job/template lists enumerated exhaustively per waterline level
COMBO_LIMIT = 16  # template combinations enumerated per list; beyond, each job's best standalone
MIN_UNIT_MIPS = 100.0
MAX_UNITS = 16384  # the finest resolution a policy may ask for (unitMips / resolutionUnits are clamped to it)


# ---------------------------------------------------------------------------------------- curves


@dataclass
class _Curve:
    pes: tuple[str, ...]
    lo: np.ndarray  # per PE minimum units
    values: np.ndarray  # I_c(lo_sum + k), k = 0..len-1, nondecreasing
    allocs: np.ndarray  # (len x P) units

    def __post_init__(self) -> None:
        self.concave = rap.is_concave(self.values)


def _bounds(ev: Evaluator, unit: float) -> tuple[np.ndarray, np.ndarray]:
    specs = [ev.glued.spec(p) for p in ev.pes]
    lo = np.array([math.ceil(s.min_mips / unit - 1e-9) for s in specs], dtype=int)
    mx = np.array([math.floor(s.max_mips / unit + 1e-9) if math.isfinite(s.max_mips) else 1 << 30 for s in specs])
    sat = np.ceil(ev.saturation() / unit - 1e-9).astype(int)
    hi = np.maximum(lo, np.minimum(mx, sat))
    return lo, hi


def component_curve(ev: Evaluator, unit: float, max_units: int, deadline: float | None = None) -> _Curve:
    """Best importance of the component for each number of units (paper's I_c), with allocations."""
    lo, hi = _bounds(ev, unit)
    span = np.minimum(hi - lo, max(0, max_units - int(lo.sum())))
    total = int(min(span.sum(), max(0, max_units - int(lo.sum()))))
    n_vec = float(np.prod((span + 1).astype(float)))
    if n_vec <= EXACT_LIMIT:
        grids = np.array(list(itertools.product(*[range(int(s) + 1) for s in span])), dtype=int).reshape(-1, len(span))
        grids = grids[grids.sum(axis=1) <= total]
        vals = ev.importance((grids + lo) * unit)
        sums = grids.sum(axis=1)
        values = np.full(total + 1, -np.inf)
        allocs = np.zeros((total + 1, len(span)), dtype=int)
        for k in range(total + 1):
            mask = sums == k
            if mask.any():
                j = int(np.argmax(np.where(mask, vals, -np.inf)))
                values[k], allocs[k] = vals[j], grids[j]
        for k in range(1, total + 1):  # nondecreasing: with more units you may leave some idle
            if values[k - 1] >= values[k]:
                values[k], allocs[k] = values[k - 1], allocs[k - 1]
        return _Curve(tuple(ev.pes), lo, values, allocs + lo)
    # greedy marginal over bundles
    x = np.zeros(len(span), dtype=int)
    cur = float(ev.importance((x + lo) * unit)[0])
    vals_l: list[float] = [cur]
    allocs_l: list[np.ndarray] = [x.copy()]
    used = 0
    while used < total:
        if deadline is not None and time.monotonic() > deadline:
            break
        room = np.minimum(span - x, total - used)
        moves = []
        for p in np.nonzero(room > 0)[0]:
            k = 1
            while k <= room[p]:
                mv = np.zeros_like(x)
                mv[p] = k
                moves.append(mv)
                k *= 2
        free = span - x > 0
        if free.sum() > 1:
            mv = free.astype(int)
            if mv.sum() <= total - used:
                moves.append(mv)
        if not moves:
            break
        mv_arr = np.array(moves)
        vals = ev.importance((x + mv_arr + lo) * unit)
        gain = (vals - cur) / mv_arr.sum(axis=1)
        j = int(np.argmax(gain))
        if gain[j] <= 1e-12:
            break
        x = x + mv_arr[j]
        step = int(mv_arr[j].sum())
        for _ in range(step - 1):  # intermediate totals keep the previous solution
            vals_l.append(cur)
            allocs_l.append(allocs_l[-1].copy())
        cur = float(vals[j])
        vals_l.append(cur)
        allocs_l.append(x.copy())
        used += step
    return _Curve(tuple(ev.pes), lo, np.array(vals_l), np.array(allocs_l) + lo)


# ---------------------------------------------------------------------------------------- solver


@dataclass
class _Eval:
    importance: float
    choice: dict[str, str]
    alloc: dict[str, int]  # pe -> units
    curves: list[_Curve]
    method: str


class _Solver:
    def __init__(self, scenario: Scenario, unit: float, deadline: float):
        self.s = scenario
        self.unit = unit
        self.U = int(math.floor(scenario.capacity_mips / unit + 1e-9))
        self.deadline = deadline
        self.cache: dict[tuple[tuple[str, str], ...], _Curve] = {}  # (pe, template) pairs -> curve
        self.evals = 0
        self.jobs = {j.name: j for j in scenario.jobs}
        self.job_cache: dict[tuple[str, str, str], list[_Curve]] = {}
        tm = {t.name: t for t in scenario.templates}
        self.min_u = {
            t: sum(math.ceil(p.min_mips / unit - 1e-9) for p in tm[t].pes) for t in tm
        }
        self.cheap = {j.name: min(j.candidate_templates, key=lambda t: self.min_u[t]) for j in scenario.jobs}

    def curve(self, glued: GluedGraph, comp: frozenset[str]) -> _Curve:
        key = tuple(sorted({(p, glued.choice[glued.graph.nodes[p]["job"]]) for p in comp}))
        c = self.cache.get(key)
        if c is None:
            ev = Evaluator(glued, sorted(comp))
            c = component_curve(ev, self.unit, self.U, self.deadline)
            self.cache[key] = c
        return c

    def min_units(self, choice: dict[str, str]) -> int:
        return sum(self.min_u[t] for t in choice.values())

    def job_components(self, job: str, template: str) -> list[_Curve]:
        """Curves of one job's own components (jobs glued to no other job in the list)."""
        k = ("job", job, template)
        got = self.job_cache.get(k)
        if got is None:
            glued = self.s.glued({job: template})
            got = [self.curve(glued, c) for c in glued.components()]
            self.job_cache[k] = got
        return got

    def evaluate(self, choice: dict[str, str]) -> _Eval | None:
        self.evals += 1
        if self.min_units(choice) > self.U:
            return None
        # group jobs glued by imports; a lone job's components come from the per-job cache
        groups = nx.Graph()
        groups.add_nodes_from(choice)
        groups.add_edges_from((imp.job, j) for j in choice for imp in self.jobs[j].imports if imp.job in choice)
        curves: list[_Curve] = []
        for grp in nx.connected_components(groups):
            if len(grp) == 1:
                (j,) = grp
                curves.extend(self.job_components(j, choice[j]))
            else:
                glued = self.s.glued({j: choice[j] for j in grp})
                curves.extend(self.curve(glued, c) for c in glued.components())
        budget = self.U - sum(int(c.lo.sum()) for c in curves)
        x, method = rap.allocate([c.values for c in curves], budget, [c.concave for c in curves])
        alloc: dict[str, int] = {}
        total = 0.0
        for c, xi in zip(curves, x):
            total += float(c.values[xi])
            alloc.update({p: int(u) for p, u in zip(c.pes, c.allocs[xi])})
        return _Eval(total, dict(choice), alloc, curves, method)


def revised_ranks(scenario: Scenario, exclude: Iterable[str] = ()) -> dict[str, int]:
    """Pi_{J,T,j}: the best rank among j and the jobs that depend on j (paper 5.1.1). Jobs in
    ``exclude`` (refused required jobs) lend their rank to nobody."""
    out = set(exclude)
    g = nx.DiGraph()
    g.add_nodes_from(j.name for j in scenario.jobs)
    g.add_edges_from((imp.job, j.name) for j in scenario.jobs for imp in j.imports if j.name not in out)
    rank = {j.name: j.rank for j in scenario.jobs}
    return {j: min([rank[j]] + [rank[d] for d in nx.descendants(g, j)]) for j in rank}


def _deps(scenario: Scenario) -> dict[str, set[str]]:
    return {j.name: {imp.job for imp in j.imports} for j in scenario.jobs}


def _closed(jobs: Iterable[str], deps: dict[str, set[str]]) -> bool:
    js = set(jobs)
    return all(deps[j] <= js for j in js)


def _hopeless(sv: _Solver, scenario: Scenario, pr: Promise) -> dict[str, str]:
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
        if held + need > sv.U:
            out[j.name] = (f"its minimum of {need * sv.unit:.0f} mips{' with the jobs it imports from' if len(group) > 1 else ''} "
                           f"does not fit: the usable nodes offer {sv.U * sv.unit:.0f} mips, {held * sv.unit:.0f} of them "
                           f"promised to required jobs; short by {(held + need - sv.U) * sv.unit:.0f} mips")
    return out


def _search(sv: _Solver, scenario: Scenario, rev: dict[str, int], pr: Promise,
            hopeless: dict[str, str]) -> tuple[_Eval | None, int | None, set[str], str]:
    """Best rank-legal job/template list containing the promised jobs. Returns (best, waterline
    rank, considered-at-level, status)."""
    deps = _deps(scenario)
    jobs = {j.name: j for j in scenario.jobs}
    required = set(pr.promised)
    free = {j: r for j, r in rev.items() if j not in required and j not in pr.refused and j not in hopeless}
    levels = sorted(set(free.values())) or [1]
    best: _Eval | None = None
    best_level: int | None = None
    best_set: set[str] = set()
    status = "optimal"
    # template for jobs not enumerated: their own best template standalone
    pref: dict[str, str] = {}
    ratio: dict[str, float] = {}
    for name, j in jobs.items():
        bestv, bestt = -1.0, j.candidate_templates[0]
        for t in j.candidate_templates:
            e = sv.evaluate({name: t}) if not deps[name] else None
            v = e.importance / max(1, sum(e.alloc.values())) if e else 0.0
            if v > bestv + 1e-12:
                bestv, bestt = v, t
        pref[name], ratio[name] = bestt, bestv

    def consider(js: set[str], level: int) -> None:
        nonlocal best, best_level, best_set, status
        if not _closed(js, deps) or not required <= js:
            return
        combos = [jobs[j].candidate_templates for j in sorted(js)]
        n_combo = math.prod(len(c) for c in combos)
        choices = (
            [dict(zip(sorted(js), c)) for c in itertools.product(*combos)]
            if n_combo <= COMBO_LIMIT
            else [{j: pref[j] for j in js}]
        )
        for ch in choices:
            e = sv.evaluate(ch)
            better = best is None or e is not None and (
                e.importance > best.importance + 1e-9
                or (e.importance >= best.importance - 1e-9 and len(js) > len(best_set))
            )
            if e is not None and better:
                best, best_level, best_set = e, level, set(js)

    for lv in levels:
        if time.monotonic() > sv.deadline and best is not None:
            status = "deadline"
            break
        base = required | {j for j, r in free.items() if r < lv}
        if sv.min_units({j: sv.cheap[j] for j in base}) > sv.U:
            break  # worse levels are infeasible too
        at = sorted(j for j, r in free.items() if r == lv)
        n_sub = 2 ** len(at) * math.prod(len(jobs[j].candidate_templates) for j in at)
        if n_sub <= EVAL_BUDGET:
            for k in range(len(at), -1, -1):
                for sub in itertools.combinations(at, k):
                    consider(base | set(sub), lv)
                    if time.monotonic() > sv.deadline and best is not None:
                        status = "deadline"
                        break
        else:
            status = "feasible" if status == "optimal" else status
            order = sorted(at, key=lambda j: (-ratio[j], j))
            fixed = {j for j in at if j in required}
            rest = [j for j in order if j not in fixed]
            # a job without minimum mips never lowers the optimum (it may get nothing), so only
            # prefixes that end just before a job with a minimum can beat the longer ones
            ks = [k for k in range(len(rest)) if sv.min_u[pref[rest[k]]] > 0] + [len(rest)]
            for k in ks:
                if sv.min_units({j: pref[j] for j in base | fixed | set(rest[:k])}) > sv.U:
                    break
                consider(base | fixed | set(rest[:k]), lv)
                if time.monotonic() > sv.deadline and best is not None:
                    status = "deadline"
                    break
    return best, best_level, best_set, status


def solve(scenario: Scenario, deadline_s: float | None = None) -> MacroQResult:
    t0 = time.monotonic()
    pol = scenario.policy
    deadline = t0 + (deadline_s if deadline_s is not None else pol.macroq_deadline_s)
    H = scenario.capacity_mips

    def report(status: str, objective: float | None, detail: str) -> StageReport:
        return StageReport(stage="macroq", seconds=time.monotonic() - t0, status=status, objective=objective, detail=detail)  # type: ignore

    if not scenario.jobs:
        return MacroQResult((), {}, {}, {}, (), 0.0, report("optimal", 0.0, "no jobs"), 0.0)
    fixed_unit = pol.unit_mips or (H / pol.resolution_units if pol.resolution_units else None)
    if fixed_unit and H > 0:
        fixed_unit = max(fixed_unit, H / MAX_UNITS)  # a policy's tiny unit never exhausts time or memory
    if H <= 0:
        units: list[float] = []
    elif fixed_unit:
        units = [fixed_unit]
    else:
        units = [max(H / 128, MIN_UNIT_MIPS)]
        while units[-1] / 4 >= MIN_UNIT_MIPS and H / (units[-1] / 4) <= 8192:
            units.append(units[-1] / 4)
    best = None
    best_meta: tuple[int | None, set[str], str, float, int] = (None, set(), "infeasible", 0.0, 0)
    best_key: tuple[tuple[bool, ...], float] | None = None
    pr = promise(scenario, units[-1] if units else None)
    hopeless: dict[str, str] = {}
    for unit in units:
        t1 = time.monotonic()
        if best is not None and unit != units[0]:
            spent = t1 - t0
            if t1 + 4 * max(spent, 1e-3) > deadline:  # the next resolution would not fit
                break
        sv = _Solver(scenario, unit, deadline)
        pr_u = promise(scenario, unit)  # minima rounded up to this resolution's units
        hl_u = _hopeless(sv, scenario, pr_u)
        e, level, chosen, status = _search(sv, scenario, revised_ranks(scenario, pr_u.refused), pr_u, hl_u)
        if e is not None:
            # more of the rule's required jobs first, then importance (of the mips allocation)
            k = (tuple(x in pr_u.promised for x in pr_u.order), e.importance)
            if best_key is None or k[0] > best_key[0] or (k[0] == best_key[0] and k[1] >= best_key[1] - 1e-9):
                best, best_meta, best_key, pr, hopeless = e, (level, chosen, status, unit, sv.U), k, pr_u, hl_u
        if time.monotonic() > deadline:
            break
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
    level, chosen, status, unit, U = best_meta
    goals = {p: u * unit for p, u in best.alloc.items()}
    glued = scenario.glued(best.choice)
    ev = Evaluator(glued)
    vec = np.array([[goals[p] for p in ev.pes]])
    traffic = ev.traffic(vec[0])
    imp_by_job = _importance_by_job(ev, vec[0])
    deps = _deps(scenario)
    out_dec: list[JobDecision] = []
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
            if level is not None and rev[j.name] > level:
                reason, msg = "rank-waterline", f"revised rank {rev[j.name]} is worse than the waterline {level}"
            elif not deps[j.name] <= set(best.choice):
                reason, msg = "dependency", f"imports from jobs not admitted: {sorted(deps[j.name] - set(best.choice))}"
            else:
                reason, msg = "capacity", "not enough capacity at its rank for more importance"
            out_dec.append(
                JobDecision(job=j.name, admitted=False, reason=reason, message=msg, rank=j.rank, revised_rank=rev[j.name])  # type: ignore
            )
    comps = tuple(
        ComponentCurve(
            pes=c.pes,
            mips=(np.arange(len(c.values)) + int(c.lo.sum())) * unit,
            importance=c.values.copy(),
            allocation=c.allocs.astype(float) * unit,
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
            f"unit {unit:.1f} mips ({U} units), waterline rank {level}, {best.method}, {len(comps)} components"
            + (f"; {len(pr.refused)} required job(s) refused: {', '.join(sorted(pr.refused))}" if pr.refused else ""),
        ),
        resolution_mips=unit,
    )


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
