"""Admission, template choice and the allocation across jobs, as one knapsack per waterline level
(SODA paper 5.1.2-5.1.3; the macroQ admission paper).

The paper's central loop enumerates rank-legal job/template lists and, for each, allocates the
units across the list's weak components. We fold the enumeration into the allocation, exactly:

- an **item** is a job, or a group of jobs tied by imports (an importer only with its exporter);
  its **options** are the job sets it may admit (closed under imports) with a template per job;
  an option's curve is the max-plus convolution of its components' curves I_c;
- at waterline level r, the promised required jobs and every other job of better revised rank are
  *forced* (their item must take an option containing them), jobs of rank r are *optional* (their
  item may also take nothing: 0 units, importance 0), worse jobs are absent. The item curve is
  the elementwise best over its allowed options (the template alternatives become a max inside
  the item, not a product of combinations);
- one max-plus knapsack over the items per level (vectorised with numpy: one shifted
  ``np.maximum`` per allocation size of an item) gives the best importance for every number of
  units, with the tie rule of the enumeration (equal importance: more jobs admitted) carried as a
  second key; the level with the best (importance, jobs) wins. This is exact for the discrete
  problem, with no subset enumeration and no greedy prefix fallback.

**Resolution per job.** Each option's curve is computed at its own unit, fine enough for its own
PEs (``own_unit``: a quarter of its smallest useful PE need, no finer than its saturation /
``MAX_JOB_UNITS``), and resampled onto the global grid of the knapsack (the mips of k global units
buy the option's best curve point at or below them). So a coarse global grid (a 2000-node cluster)
never rounds a small PE to 0: a job's allocation is a multiple of the global unit, its PEs' split
inside it is fine. With a fixed resolution (``Policy.unit_mips``/``resolution_units``, reproducible
runs and the oracle tests) every option uses the global unit.

**Anytime.** Levels run from the highest one whose forced minima fit downwards, so the first
answer already admits every rank that fits; a level that the deadline interrupts is dropped (the
caller keeps the best answer of the levels done, or of a coarser resolution). The first answer
solves every level (up to ``FIRST_LEVELS``) whatever the clock, by importance like any other
(issue 49: the top level alone, or job count first, cost 3% and 20% at a 1 s deadline); a level
whose knapsack would not end by the deadline (``KNAPSACK_RATE``, ``FEW_ITEMS``) is answered by the
caller's LP rounding alone (which, with many items, runs at every level of the first answer, the
better of the two kept), so the first answer's cost grows with the items' points, not with points
x units. The knapsack takes an item's points a block at a time (one array per block), not
one numpy call per point.

Just over 400 lines: the items, their curves and the knapsack per level share one state (the
curve cache, the deadline, what is forced at each level); the exact step is :mod:`.exact`, the
refinements :mod:`.refine`.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import networkx as nx
import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ..graph import GluedGraph
from ..importance import Evaluator
from ..model import Scenario, pe_id
from .curves import Curve, _head, component_curve

NEG = -np.inf
MAX_JOB_UNITS = 2048  # the finest an option's own grid gets: its saturation in at most this many units
COMBO_LIMIT = 16  # template combinations enumerated per job group option; beyond, each job's first template
GROUP_LIMIT = 10  # job subsets enumerated per import group (2^n); beyond, only prefixes by rank
# the first answer solves this many waterline levels whatever the clock (issue 49: the top level
# alone, where every job of better rank is forced in at its minimum, was 3% below the best level)
FIRST_LEVELS = 8
# issue 49: with more than FEW_ITEMS items, each level of the first answer gets the LP rounding
# (``cheap``: a few numpy passes, the LP optimum less one item's share, then the same give-back),
# and the knapsack too when its estimated seconds (points x units x the measured seconds per
# element, at least KNAPSACK_RATE, a quiet core's) end before ``until``; the better answer wins
# (the rounding is in exact mips, the knapsack in whole global units: either may). A level without
# its knapsack leaves it to a later pass. With few items the knapsack always runs, alone
KNAPSACK_RATE = 2e-9
FEW_ITEMS = 64
CHEAP_GAP = 0.01  # the LP rounding (given back) stands alone only within this share of its Lagrangian bound
_KRATE = [KNAPSACK_RATE]  # seconds per element of the last large knapsack (a speed, not a result)


@dataclass
class Option:
    """One way an item can be in: a set of jobs, a template each, its curve on the global grid."""

    jobs: frozenset[str]
    choice: dict[str, str]
    curves: list[Curve]
    unit: float  # mips per own unit
    base: float  # mips of the components' minima (exact with per-job grids, whole units otherwise)
    values: np.ndarray  # own grid: best importance with base + k own units
    steps: list[np.ndarray]  # convolution arguments, to split an own-grid point over the components
    g_values: np.ndarray = field(default_factory=lambda: np.zeros(0))  # global grid
    g_index: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=int))  # own-grid point per global point
    exact_min: bool = False  # minima in exact mips (per-job grids), not whole units
    _shifted: dict[tuple[float, bool], tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)

    def resample(self, g: float) -> None:
        self.g_values, self.g_index = self.on_grid(g, 0.0)

    def on_grid(self, g: float, shift: float, optimistic: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """(values, own point) at ``shift + K g`` mips for K = 0, 1, ...: the option's best point at
        or below that many mips (-inf / -1 below its minimum). ``optimistic``: the best point below
        ``shift + (K + 1) g`` (costs rounded down: a knapsack over these bounds the true one; with
        exact minima, the continuous one)."""
        got = self._shifted.get((shift, optimistic))
        if got is None:
            top = self.base + (len(self.values) - 1) * self.unit - shift
            K = max(1, math.ceil(top / g - 1e-9) + 1)
            if optimistic:
                # with exact minima, also one own unit per PE: a continuous allocation rounded up
                # to the own grid exceeds itself by less than that (so the bound holds off the grid)
                own = np.ceil(((np.arange(K) + 1) * g + shift - self.base) / self.unit - 1e-9).astype(np.int64) - 1
                own = own + (self.n_pes if self.exact_min else 0)
            else:
                own = np.floor((np.arange(K) * g + shift - self.base) / self.unit + 1e-9).astype(np.int64)
            ok = own >= 0
            idx = np.clip(own, 0, len(self.values) - 1)
            got = (np.where(ok, self.values[idx], NEG), np.where(ok, idx, -1))
            self._shifted[(shift, optimistic)] = got
        return got

    def mips(self, x: int) -> float:
        """Mips at own point ``x``."""
        return self.base + x * self.unit

    @property
    def n_pes(self) -> int:
        return sum(len(c.pes) for c in self.curves)

    def split(self, x: int) -> dict[str, float]:
        """PE -> mips at own point ``x``."""
        parts = []
        for arg in reversed(self.steps):
            i = int(arg[x])
            parts.append(i)
            x -= i
        parts.append(x)
        parts.reverse()
        out: dict[str, float] = {}
        for c, xi in zip(self.curves, parts):
            out.update({p: float(m) for p, m in zip(c.pes, c.pe_mips(xi))})
        return out


def convolve(curves: list[Curve]) -> tuple[np.ndarray, list[np.ndarray]]:
    """Max-plus convolution of the components' curves (exactly k units above their minima), and
    per point the units of the last curve (the first of equals). Nondecreasing curves with few
    breakpoints go through :func:`_convolve_breakpoints` (the same arrays, issue 49)."""
    values = curves[0].values.astype(float)
    steps: list[np.ndarray] = []
    for c in curves[1:]:
        P, Q = len(values), len(c.values)
        n = P + Q - 1
        got = _convolve_breakpoints(values, c.values.astype(float), n * Q)
        if got is not None:
            values, arg = got
            steps.append(arg)
            continue
        # issue 49: rows of one array, a block at a time, not a numpy call per point of the second
        # curve; row m of the windows, reversed, is values[m - i] for i = 0..Q-1 (-inf outside)
        pad = np.concatenate([np.full(Q - 1, NEG), values, np.full(Q - 1, NEG)])
        win = sliding_window_view(pad, Q)[:, ::-1]
        cv = c.values.astype(float)[None, :]
        new = np.empty(n)
        arg = np.empty(n, dtype=np.int64)
        rows = max(1, KNAPSACK_BLOCK // Q)
        for r0 in range(0, n, rows):
            cand = win[r0:r0 + rows] + cv
            a = np.argmax(cand, axis=1)  # the first of equals
            new[r0:r0 + rows] = cand[np.arange(len(a)), a]
            arg[r0:r0 + rows] = a
        values = new
        steps.append(arg)
    return values, steps


# a pair of breakpoints costs about this many dense candidates (measured on the first answer's
# curves: ~100 ns a pair to build and sort, ~1 ns a dense candidate; h49f, with no sort: the 418
# convolutions of 10x LSD's first answer took 29 ms at 100, 24 at 50, 22 at 25, 23 at 10)
PAIR_COST = 25


def _convolve_breakpoints(A: np.ndarray, B: np.ndarray, dense: int) -> tuple[np.ndarray, np.ndarray] | None:
    """:func:`convolve`'s step over the breakpoints of two nondecreasing curves (where each rises),
    when their pairs cost less than the ``dense`` candidates (:data:`PAIR_COST`); None otherwise
    (issue 49: the first answer's coarse curves rise every few units only, and their dense
    convolution was a tenth of its CPU on 10x LSD).

    Exact, the same values and arguments: with both curves nondecreasing, the best of exactly
    ``k`` units is the best pair of breakpoints ``(a, b)`` with ``a + b <= k`` (either curve keeps
    its value past a breakpoint; the units it does not use move to the other, which only gains),
    and the first of equals ``i`` (the last curve's units) is the least such ``b``, or the least
    ``i`` at which the first curve fits (``k - P + 1``) when that is larger: a smaller ``i`` that is
    not a breakpoint gives the same value with one unit less."""
    P, Q = len(A), len(B)
    if P == 0 or Q == 0 or not (np.all(A[1:] >= A[:-1]) and np.all(B[1:] >= B[:-1]) and np.isfinite(A[0]) and np.isfinite(B[0])):
        return None
    ka = np.flatnonzero(_head(A[1:] > A[:-1]))
    kb = np.flatnonzero(_head(B[1:] > B[:-1]))
    if PAIR_COST * len(ka) * len(kb) > dense:
        return None
    n = P + Q - 1
    S = (ka[:, None] + kb[None, :]).ravel()
    val = (A[ka][:, None] + B[kb][None, :]).ravel()
    KB = np.broadcast_to(kb[None, :], (len(ka), len(kb))).ravel()
    # per sum: the best value, then the least b among the pairs that reach it exactly (unbuffered
    # maxima and minima, h49f: a lexsort of the pairs made a few large convolutions cost 5 x more,
    # 29 ms of 10x LSD's first answer)
    at_v = np.full(n, NEG)
    np.maximum.at(at_v, S, val)
    hit = val == at_v[S]
    at_b = np.full(n, Q, dtype=np.int64)
    np.minimum.at(at_b, S[hit], KB[hit])
    M = np.maximum.accumulate(at_v)
    k = np.arange(n)
    # the least b over the sums up to k that reach M(k): a running minimum within each run of
    # equal M (M rises at a run's start, so that sum reaches it), as a running maximum of a key
    # that grows with the run
    run = np.maximum.accumulate(np.where(_head(M[1:] > M[:-1]), k, 0))
    b = np.where(at_v == M, at_b, Q)
    key = np.maximum.accumulate(run * (Q + 1) + (Q - b))
    arg = np.maximum(Q - (key - run * (Q + 1)), k - (P - 1))
    return M, arg.astype(np.int64)


def own_unit(ev: Evaluator, g: float) -> float:
    """An option's own unit: fine enough that no PE with a useful minimum or a positive marginal
    value rounds to 0 (a quarter of its smallest need), no finer than its saturation over
    ``MAX_JOB_UNITS``, never coarser than the global unit."""
    specs = ev.specs
    sat = ev.saturation()
    # a PE's need: its minimum when it has one (rounding it costs at most a quarter), else what it
    # saturates at; the policy's floor is not a need (every PE gets at least one unit anyway)
    need = [s.min_mips if s.min_mips > 0 else float(x) for s, x in zip(specs, sat)]
    need = [x for x in need if 0 < x < math.inf]
    cap = [min(float(x), s.max_mips) for s, x in zip(specs, sat)]
    total = sum(max(c, s.min_mips) for c, s in zip(cap, specs) if math.isfinite(c))
    if not need:
        return g
    u = max(min(need) / 4, total / MAX_JOB_UNITS, 1.0)
    return min(u, g)


class Items:
    """The items of one resolution: options per job group, their curves on the global grid."""

    def __init__(self, scenario: Scenario, g: float, per_job: bool, deadline: float, jobs: Iterable[str],
                 cache: dict | None = None, coarse: bool = False):
        self.s = scenario
        self.g = g
        self.per_job = per_job
        self.coarse = coarse  # own grids for minima, growth in steps of about the global unit
        self.deadline = deadline
        self.H = scenario.capacity_mips
        self.floor = scenario.policy.pe_floor_mips
        names = set(jobs)
        self.graph = scenario.job_graph().subgraph(names)  # a view: imports among these jobs
        self.deps = {j: set(self.graph.predecessors(j)) for j in names}
        self.groups = [frozenset(c) for c in sorted(nx.weakly_connected_components(self.graph), key=lambda c: min(c))]
        self.group_of = {j: i for i, grp in enumerate(self.groups) for j in grp}
        self.options: list[list[Option]] = [[] for _ in self.groups]
        self._curves: dict[tuple, Curve] = cache if cache is not None else {}
        self.knapsack_s = 0.0  # time spent in the knapsacks (the part that grows with the global grid)
        self.cheap_levels = 0  # levels the first answer solved by the LP rounding (the knapsack would not fit its time)
        self.abandon_at = math.inf  # building options past this time gives up the pass
        self.big_until: float | None = None  # curves past EXACT_LIMIT vectors are enumerated only before this time
        self._built: set[int] = set()
        self._protos: dict[tuple, Option] = {}  # one-job options per (template, weight overrides)

    def _cached(self, choice: dict[str, str], comp: frozenset[str], u: float, glued: GluedGraph,
                ev: Evaluator | None = None) -> Curve:
        """``glued``: the glued graph of ``choice``, looked up once per option (issue 49: three
        look-ups per option were a tenth of the first answer on 500 one-PE jobs)."""
        step = self._step(u, len(comp))
        key = (tuple(sorted((p, choice[glued.graph.nodes[p]["job"]]) for p in comp)), u, step, self.per_job)
        c = self._curves.get(key)
        if c is None:
            ev = ev or Evaluator(glued, sorted(comp))
            c = component_curve(ev, u, int(math.floor(self.H / u + 1e-9)), self.deadline, self.floor, step, exact_min=self.per_job,
                                capacity=self.H if self.per_job else None, big_until=self.big_until)
            self._curves[key] = c
        return c

    def _step(self, u: float, n_pes: int = 2) -> int:
        """A curve's growth step in its own units: about the global unit on a coarse pass, except
        for a one-PE component (issue 49: its exact curve is one vectorised evaluation, as cheap
        as the coarse one, and the next pass reuses it)."""
        return max(1, int(self.g / u + 1e-9)) if self.coarse and n_pes > 1 else 1

    @property
    def any_coarse(self) -> bool:
        """Whether some curve built so far grows in steps of more than one own unit."""
        return any(self._step(c.unit, len(c.pes)) > 1 for c in self.used_curves())

    def _option(self, choice: dict[str, str]) -> Option | None:
        """The option admitting ``choice``'s jobs on its templates. One job alone is its template's
        graph under its name: jobs on the same template with the same weight overrides share one
        option's curves and convolution, renamed (issue 49: many jobs on few templates built a
        glued graph, Evaluators and curves each)."""
        if len(choice) == 1:
            (jname, tname), = choice.items()
            key = (tname, tuple(sorted(self.s.job(jname).weight_overrides.items())))
            proto = self._protos.get(key)
            if proto is not None:
                return self._renamed(proto, jname, tname)
            opt = self._build_option(choice)
            if opt is not None:
                self._protos[key] = opt
            return opt
        return self._build_option(choice)

    def _renamed(self, proto: Option, jname: str, tname: str) -> Option | None:
        """``proto`` (a one-job option on ``tname``) for job ``jname``: the same arrays, its PEs
        under ``jname``; its curves also join the curve cache under their own keys (later passes)."""
        (pj,) = proto.choice
        cut = len(pj) + 1
        curves, keys = [], []
        for c in proto.curves:
            pes = tuple(pe_id(jname, p[cut:]) for p in c.pes)
            key = (tuple(sorted((p, tname) for p in pes)), c.unit, self._step(c.unit, len(pes)), self.per_job)
            have = self._curves.get(key)
            if have is not None and have.values is not c.values:
                return self._build_option({jname: tname})  # its own curve from an earlier pass: built as before
            curves.append(have or dataclasses.replace(c, pes=pes))
            keys.append(key)
        self._curves.update(zip(keys, curves))
        opt = Option(frozenset((jname,)), {jname: tname}, curves, proto.unit, proto.base, proto.values, proto.steps,
                     proto.g_values, proto.g_index, proto.exact_min, proto._shifted)
        return opt

    def _build_option(self, choice: dict[str, str]) -> Option | None:
        glued = self.s.glued(choice)
        comps = glued.components()
        evs = [Evaluator(glued, sorted(c)) for c in comps]
        # one grid per option: the finest of its components' own units (issue 49: each component's
        # curve was built on its own unit first, then again on the finest: a fifth of the curves
        # of 10x LSD's first answer were built twice)
        u = min(own_unit(ev, self.g) for ev in evs) if self.per_job else self.g
        curves = [self._cached(choice, comp, u, glued, ev) for comp, ev in zip(comps, evs)]
        values, steps = convolve(curves)
        unit = curves[0].unit
        opt = Option(frozenset(choice), dict(choice), curves, unit, sum(c.base_mips for c in curves), values, steps,
                     exact_min=self.per_job)
        opt.resample(self.g)
        return opt

    def used_curves(self) -> list[Curve]:
        """The component curves of the options built at this resolution."""
        return [c for opts in self.options for o in opts for c in o.curves]

    def build(self, gi: int) -> list[Option]:
        """Every option of group ``gi`` (job subsets closed under imports, templates). Raises
        :class:`Expired` past ``abandon_at`` (a later pass, when an earlier one already answered)."""
        if gi in self._built:
            return self.options[gi]
        if time.monotonic() > self.abandon_at:
            raise Expired
        grp = sorted(self.groups[gi])
        if len(grp) <= GROUP_LIMIT:
            subsets: Iterable[tuple[str, ...]] = (sub for k in range(1, len(grp) + 1) for sub in itertools.combinations(grp, k))
        else:  # prefixes in import order (exporters first)
            order = list(nx.topological_sort(self.graph.subgraph(grp)))
            subsets = (tuple(order[:k]) for k in range(1, len(order) + 1))
        for sub in subsets:
            s = set(sub)
            if any(not self.deps[j] <= s for j in s):
                continue  # an importer only with its exporter
            alts = [self.s.job(j).candidate_templates for j in sub]
            combos = (itertools.product(*alts) if math.prod(len(a) for a in alts) <= COMBO_LIMIT
                      else [tuple(a[0] for a in alts)])
            for combo in combos:
                opt = self._option(dict(zip(sub, combo)))
                if opt is not None:
                    self.options[gi].append(opt)
        self._built.add(gi)
        return self.options[gi]


class Expired(Exception):
    """A pass that may be abandoned ran past its time."""


@dataclass
class LevelResult:
    importance: float
    count: int
    level: int
    picks: list[tuple[Option, int]]  # (option, its own point) per admitted item


Pick = tuple[Option, int] | None  # an option and its own point, or nothing
# (forced, allowed) -> the LP rounding's picks at a level and its Lagrangian bound
Cheap = Callable[[set[str], set[str]], tuple[list[tuple[Option, int]], float] | None]


KNAPSACK_BLOCK = 1 << 18  # array elements per block of an item's points (points x units) in :func:`knapsack`


def knapsack(items: list[tuple[np.ndarray, np.ndarray, Sequence[Pick]]], U: int,
             expired: Callable[[], bool]) -> tuple[float, int, list[tuple[Option, int]]] | None:
    """Max-plus knapsack over items (values by global units, jobs counted, the option at each point)
    with at most ``U`` units; importance first, ties go to more jobs. None when infeasible or
    ``expired()``. An item's points are taken a block at a time, as rows of one array (issue 49:
    a numpy call per point and unit vector, the first answer's knapsacks at every level took most
    of its time on hundreds of jobs); within a block, the best value per total, then, within the
    tolerance, the most jobs, then the fewest units of the item."""
    F = np.full(U + 1, NEG)
    F[0] = 0.0
    C = np.zeros(U + 1, dtype=np.int64)
    args: list[np.ndarray] = []
    cols = np.arange(U + 1)
    for V, N, _ in items:
        if expired():
            return None
        # one tolerance per item (a relative one per entry cost a third of the knapsack on 3,000 jobs)
        tol = 1e-9 * (1.0 + float(np.abs(F[np.isfinite(F)]).max(initial=0.0)) + float(np.abs(V[np.isfinite(V)]).max(initial=0.0)))
        G = np.full(U + 1, NEG)
        GC = np.zeros(U + 1, dtype=np.int64)
        arg = np.full(U + 1, -1, dtype=np.int64)
        ks = np.nonzero(V[:U + 1] > NEG)[0]
        if len(ks) <= 2:  # a point at a time (two copies of F would cost more than they save)
            for k in ks.tolist():
                cand1 = F[:U + 1 - k] + V[k]
                cc1 = C[:U + 1 - k] + N[k]
                seg, segc, sega = G[k:], GC[k:], arg[k:]
                better1 = (cand1 > seg + tol) | ((cand1 >= seg - tol) & (cc1 > segc))
                seg[better1] = cand1[better1]
                segc[better1] = cc1[better1]
                sega[better1] = k
        else:
            top_k = int(ks[-1])
            # row s of these views is F (C) moved right by top_k - s units, -inf (0) shifted in
            WF = sliding_window_view(np.concatenate([np.full(top_k, NEG), F]), U + 1)
            WC = sliding_window_view(np.concatenate([np.zeros(top_k, dtype=np.int64), C]), U + 1)
            rows = max(1, KNAPSACK_BLOCK // (U + 1))
            for b0 in range(0, len(ks), rows):
                kb = ks[b0:b0 + rows]
                cand = WF[top_k - kb] + V[kb][:, None]
                cc = WC[top_k - kb] + N[kb][:, None]
                if len(kb) > 1:
                    near = cand >= cand.max(axis=0) - tol
                    r = np.argmax(np.where(near, cc, np.iinfo(np.int64).min), axis=0)  # the most jobs, then the first
                    bv, bc, bk = cand[r, cols], cc[r, cols], kb[r]
                else:
                    bv, bc, bk = cand[0], cc[0], np.full(U + 1, kb[0])
                better = np.isfinite(bv) & ((bv > G + tol) | ((bv >= G - tol) & (bc > GC)))
                G = np.where(better, bv, G)
                GC = np.where(better, bc, GC)
                arg = np.where(better, bk, arg)
        F, C = G, GC
        args.append(arg)
    if not np.isfinite(F).any():
        return None
    best = float(F.max())
    near_u = np.nonzero(F >= best - 1e-9 * (1.0 + abs(best)))[0]
    u = int(near_u[np.argmax(C[near_u])])  # ties: more jobs, then fewer units
    total, count = float(F[u]), int(C[u])
    picks: list[tuple[Option, int]] = []
    for (_, _, opts), arg in zip(reversed(items), reversed(args)):
        step = int(arg[u])
        o = opts[step]
        if o is not None:
            picks.append(o)
        u -= step
    picks.reverse()
    return total, count, picks


class _Points(Sequence[Pick]):
    """An item's pick per global point, read on demand (the knapsack's traceback reads one per item)."""

    def __init__(self, ok: list[Option], which: np.ndarray, own: np.ndarray):
        self.ok, self.which, self.own = ok, which, own

    def __len__(self) -> int:
        return len(self.which)

    def __getitem__(self, k: int) -> Pick:  # type: ignore[override]
        i = int(self.which[k])
        return None if i < 0 else (self.ok[i], int(self.own[k]))


def item_curve(options: list[Option], forced: frozenset[str], allowed: frozenset[str],
               g: float, optimistic: bool = False) -> tuple[np.ndarray, np.ndarray, Sequence[Pick], float]:
    """The best allowed option at each global point (more jobs on ties); the empty option (0 units,
    importance 0) when nothing in the group is forced. A forced item's point K is ``shift + K g``
    mips, ``shift`` its cheapest allowed option's exact minimum (returned): forced minima are
    charged exactly, never rounded up to the global unit; an optional item's point K is K g mips."""
    ok = [o for o in options if forced <= o.jobs <= allowed]
    shift = min((o.base for o in ok), default=0.0) if forced else 0.0
    grids = [o.on_grid(g, shift, optimistic) for o in ok]
    K = max([len(gv) for gv, _ in grids] + [1])
    V = np.full(K, NEG)
    N = np.zeros(K, dtype=np.int64)
    which = np.full(K, -1, dtype=np.int64)
    own = np.zeros(K, dtype=np.int64)
    if not forced:
        V[0] = 0.0
    for i, (o, (gv, gi)) in enumerate(zip(ok, grids)):
        n = len(gv)
        cur = V[:n]
        tol = _tol(cur)
        better = (gv > cur + tol) | ((gv >= cur - tol) & (len(o.jobs) > N[:n]) & (gv > NEG))
        V[:n] = np.where(better, gv, cur)
        N[:n] = np.where(better, len(o.jobs), N[:n])
        which[:n] = np.where(better, i, which[:n])
        own[:n] = np.where(better, gi, own[:n])
    return V, N, _Points(ok, which, own), shift


def solve_levels(items: Items, U: int, promised: set[str], free_rank: dict[str, int], expired: Callable[[], bool],
                 have_answer: Callable[[], bool],
                 finish: Callable[[LevelResult], LevelResult] | None = None,
                 cheap: Cheap | None = None, until: float | None = None) -> tuple[LevelResult | None, str]:
    """The best (importance, jobs) over waterline levels; status 'optimal' or 'deadline'. ``finish``:
    what the caller does with a level's answer (its give-back), applied to each level's before they
    are compared (issue 49: the knapsack's best level was not the best once both were given back).
    ``cheap(forced, allowed)``: the first answer's picks at a level whose knapsack would not end by
    ``until`` (module constants; the status is then 'deadline')."""
    levels = sorted(set(free_rank.values())) or [1]
    rank_of = dict(free_rank)
    min_g: dict[tuple[int, frozenset[str]], float] = {}  # mips of the cheapest option of a group containing these jobs

    def forced_at(r: int) -> set[str]:
        return set(promised) | {j for j, x in rank_of.items() if x < r}

    def minimum(jobs: set[str]) -> float:
        """The exact mips the jobs need at least (each group's cheapest option containing them)."""
        tot = 0.0
        for gi, grp in enumerate(items.groups):
            need = grp & jobs
            if not need:
                continue
            key = (gi, frozenset(need))
            if key not in min_g:
                min_g[key] = min((o.base for o in items.build(gi) if need <= o.jobs), default=math.inf)
            tot += min_g[key]
        return tot

    try:
        return _levels(items, U, levels, forced_at, rank_of, minimum, expired, have_answer, finish, cheap, until)
    except Expired:
        return None, "deadline"


def _levels(items: Items, U: int, levels: list[int], forced_at: Callable[[int], set[str]], rank_of: dict[str, int],
            minimum: Callable[[set[str]], float], expired: Callable[[], bool],
            have_answer: Callable[[], bool],
            finish: Callable[[LevelResult], LevelResult] | None = None,
            cheap: Cheap | None = None, until: float | None = None) -> tuple[LevelResult | None, str]:
    H = min(items.H, U * items.g + 1e-6 * (1.0 + items.H))  # the mips the knapsack may hand out
    feasible = [r for r in levels if minimum(forced_at(r)) <= H + 1e-6]
    if not feasible:
        return None, "optimal"
    top = max(feasible)
    order = [top] + [r for r in reversed(feasible) if r != top]
    best: LevelResult | None = None
    status = "optimal"
    first = not have_answer()  # the first answer: every level, whatever the clock (up to FIRST_LEVELS)
    for i, r in enumerate(order):
        if expired() and (best is not None or have_answer()) and not (first and i < FIRST_LEVELS):
            status = "deadline"
            break
        forced = forced_at(r)
        allowed = forced | {j for j, x in rank_of.items() if x == r}
        curves = []
        shifts = 0.0
        for gi, grp in enumerate(items.groups):
            if not grp & allowed:
                continue
            V, N, pick, shift = item_curve(items.build(gi), grp & forced, grp & allowed, items.g)
            curves.append((V, N, pick))
            shifts += shift
        U_r = int(math.floor((H - shifts) / items.g + 1e-9))  # units left above the forced minima
        answered = have_answer() or (best is not None and not first)

        def give_up(answered: bool = answered) -> bool:
            return expired() and answered

        # importance first, always (issue 49: a first answer that put job count first cost 20% at
        # a 1 s deadline); the jobs a cut curve understates are admitted by the give-back
        # (:func:`.refine.fill`), which admits every job whose minimum fits what is left
        work = sum(int(np.count_nonzero(V[:U_r + 1] > NEG)) for V, _, _ in curves) * (U_r + 1) if U_r >= 0 else 0
        tk = time.monotonic()
        got: tuple[float, int, list[tuple[Option, int]]] | None = None
        rounded: LevelResult | None = None  # the LP rounding's answer, given back (the first answer, many items)
        if first and cheap is not None and until is not None and len(curves) > FEW_ITEMS and U_r >= 0:
            lp = cheap(forced, allowed)
            if lp is not None:
                picks, dual = lp
                rounded = LevelResult(float(sum(o.values[x] for o, x in picks)), sum(len(o.jobs) for o, _ in picks), r, picks)
                rounded = finish(rounded) if finish is not None else rounded
            # the rounding alone only within CHEAP_GAP of its bound: a step in one item's value (a
            # job worth nothing until its PEs reach a size) is the fraction it drops, and the
            # knapsack then runs whatever the clock (issue 49: step 80 jobs lost 24% without it)
            close = rounded is not None and rounded.importance >= (1 - CHEAP_GAP) * dual - 1e-9
            if close and time.monotonic() + work * _KRATE[0] > until:
                items.cheap_levels += 1
                status = "deadline"  # not the grid's optimum: the knapsack is a later pass's
                items.knapsack_s += work * _KRATE[0]  # what it would have cost (the next grid is priced from it)
                tk = -1.0
        if tk >= 0:
            got = knapsack(curves, U_r, give_up) if U_r >= 0 else None
            items.knapsack_s += time.monotonic() - tk
            if got is not None and work >= 1e6:  # the measured speed (the machine's load) prices the next one
                _KRATE[0] = max(KNAPSACK_RATE, (time.monotonic() - tk) / work)
        if got is None and rounded is None:
            if expired() and (best is not None or have_answer()) and not first:
                status = "deadline"
                break
            continue
        res: LevelResult | None = rounded
        if got is not None:
            res = LevelResult(got[0], got[1], r, got[2])
            if finish is not None:
                res = finish(res)
            if rounded is not None and rounded.importance > res.importance * (1 + 1e-9) + 1e-9:
                res = rounded  # the knapsack's whole units lose to the LP rounding in exact mips
        assert res is not None
        imp, count = res.importance, res.count
        tol = 1e-9 * (1.0 + abs(imp))
        if best is None or imp > best.importance + tol or (imp >= best.importance - tol and count > best.count):
            best = res
    return best, status


def _tol(x: np.ndarray) -> np.ndarray:
    """Relative tolerance of importance comparisons (0-safe, -inf-safe)."""
    return 1e-9 * (1.0 + np.abs(np.where(np.isfinite(x), x, 0.0)))


def timer(deadline: float) -> Callable[[], bool]:
    return lambda: time.monotonic() > deadline
