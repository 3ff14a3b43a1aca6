"""Level 1: single-flow, single-epoch optimisation and the rapid route builder (Montana & Zinky, sections 3.1-3.2).

For the jobs of one flow arriving in one epoch:
- *splitting*: when the flow could load some allowed pool above ``threshold`` (20%) of its capacity, it is cut into
  the smallest number N of identical subflows that brings that load under the threshold; each subflow gets a
  single-path route, in succession, and the routes are aggregated into the multipath policy (shares 1/N);
- *pool choice* (greedy): for a step in a given epoch, the allowed pool whose assignment increases the penalty least;
- *epoch choice* (dynamic programming, Fig. 4): over the layered graph of (step, epoch) states, keeping only the
  best path into each state, searched best-first (Dijkstra): the penalty never decreases along a path, so the first
  complete path popped is the best one. An epoch is legal for a step if it is not before the previous step's epoch,
  inside the horizon, and some of the jobs are still alive then.

The *rapid route builder* routes the flows of an epoch one after the other in a given order, each seeing the load
of those routed before it (and of the epochs planned before, Level 3).

Penalty of a hop (the increase of eq. (2)), from a *ledger* of the load already offered to every (epoch, pool) per
utility class:
- the subflow's own jobs not served at the pool (utility-ordered service against the ledger), charged as drops;
- the throughput the other flows of equal or lower utility lose at the pool, charged as drops at their utility;
- holding the jobs in backlog across epochs: (1 - P^tau) per job and epoch, and the jobs whose deadline passes
  meanwhile as drops; everything weighted by P^{t(e)}.

Departures from the paper, on purpose:
- the hop penalty prices the retraction at the chosen pool only (first order); the full chain reaction is in the
  simulator (:mod:`.sim`) that scores every ordering the GA proposes, so the GA still sees it. Doing the full
  simulation for every (step, epoch, pool) candidate costs about a thousand simulations per route build;
- unserved own jobs whose deadline passes in the epoch are charged as drops; the survivors are carried to the same
  pool in the next epoch (and put on the ledger there), where what the ledger's free throughput can take is charged
  the holding cost and the rest as drops (issue 36: holding counts what the jobs can still earn);
- a subflow with no legal path is refused (no pool is loaded) rather than sent to pools where it would drop;
- ``admit`` and ``hold`` modes of the builder give the planner's admit-on-arrival and backlog-all candidates;
- the ledger holds offered load as routed (rates after the losses the builder predicted), and is not revised when
  later flows take throughput from earlier ones;
- bounded (issue 45): N is at most :data:`.limits.MAX_SPLITS` (past it the subflows load a pool above the threshold),
  and the deadline (``stop``) is checked before every subflow and inside the DP's search, not only between items.
"""

from __future__ import annotations

import heapq
import math
import time
from dataclasses import dataclass

from .compiled import Compiled, class_throughput, mean_survival, survival
from .limits import MAX_SPLITS
from .model import INITIAL_COHORT
from .reach import complete_policy
from .sim import Decision, Policy


@dataclass(frozen=True)
class RouteSpec:
    """A routed subflow: ``share`` of cohort ``cohort`` of flow ``flow``; ``hops[i]`` = (epoch, pool) of step
    ``first_step + i``. ``queued`` means the first hop is an input queue the jobs already wait in (no decision)."""

    flow: int
    cohort: int
    share: float
    first_step: int
    hops: tuple[tuple[int, int], ...]
    queued: bool = False
    rates: tuple[float, ...] = ()  #: predicted rate (jobs/min) entering each hop
    carry: tuple[float, ...] = ()  #: predicted rate (jobs/min) left unserved at each hop and re-presented next epoch
    refused_step: int | None = None  #: no legal route: the jobs are refused before this step (none go on from it)
    blocked_step: int | None = None  #: and the step no allowed pool of positive capacity can serve while they live


@dataclass(frozen=True)
class Item:
    """One unit the GA orders: a flow's arrivals in an epoch, or a group of jobs waiting at time 0."""

    flow: int
    cohort: int
    rate: float  #: jobs per minute (waiting jobs: jobs / epoch length)
    first_step: int = 0
    pool: int | None = None  #: waiting in this pool's input queue
    share: float = 1.0


class Late(Exception):
    """A stage's deadline passed before it finished (its partial result is unsound and dropped)."""


class Ledger:
    """Offered load per (epoch, pool, utility class), in task-minutes and jobs per minute."""

    def __init__(
        self, cp: Compiled, loads: list[list[list[float]]] | None = None, jobs: list[list[list[float]]] | None = None
    ):
        self.cp = cp
        K = len(cp.utilities)
        self.loads = (
            loads if loads is not None else [[[0.0] * K for _ in range(cp.n_pools)] for _ in range(cp.n_epochs)]
        )
        self.jobs = jobs if jobs is not None else [[[0.0] * K for _ in range(cp.n_pools)] for _ in range(cp.n_epochs)]
        self._thr: dict[tuple[int, int], list[float]] = {}

    def copy(self) -> Ledger:
        return Ledger(
            self.cp,
            [[row[:] for row in ep] for ep in self.loads],
            [[row[:] for row in ep] for ep in self.jobs],
        )

    def throughput(self, e: int, c: int) -> list[float]:
        key = (e, c)
        t = self._thr.get(key)
        if t is None:
            t = self._thr[key] = class_throughput(self.cp.maps[c], float(self.cp.caps[e, c]), self.loads[e][c])
        return t

    def add(self, e: int, c: int, k: int, rate: float, run_time: float) -> None:
        self.loads[e][c][k] += rate * run_time
        self.jobs[e][c][k] += rate
        self._thr.pop((e, c), None)


def split_count(cp: Compiled, f: int, e: int, rate: float, threshold: float) -> int:
    """N of section 3.1: the smallest number of identical subflows that keeps every pool's load <= threshold, at most
    :data:`.limits.MAX_SPLITS` (a rate of 1e308 asked for 1e307)."""
    worst = 0.0
    for s, pools in enumerate(cp.allowed[f]):
        for c in pools:
            cap = float(cp.caps[e, c])
            if cap > 0:
                worst = max(worst, rate * cp.run_time[f][s] / cap)
    if worst <= threshold:
        return 1
    if not math.isfinite(worst) or worst / threshold >= MAX_SPLITS:
        return MAX_SPLITS
    return max(1, min(MAX_SPLITS, math.ceil(worst / threshold - 1e-9)))


def hop_penalty(
    cp: Compiled, ledger: Ledger, f: int, e: int, c: int, step: int, rate: float, a: int | None = None
) -> tuple[float, float, float]:
    """(penalty, served rate, carried rate) of sending ``rate`` jobs/min of flow f's ``step`` (cohort ``a``) to pool
    c in epoch e. The jobs left unserved wait in the pool's queue: those whose deadline passes in the epoch are
    charged as drops; the survivors are re-presented at c in epoch e + 1 (the carried rate), where what the
    ledger's free throughput there can take is charged the holding cost, and the rest as drops."""
    cap = float(cp.caps[e, c])
    u = cp.flow_utility[f]
    tau = cp.tau
    if cap <= 0.0:
        return u * rate * tau * cp.weight(e), 0.0, 0.0
    k = cp.flow_class[f]
    rt = cp.run_time[f][step]
    loads = ledger.loads[e][c]
    before = ledger.throughput(e, c)
    after_loads = loads[:]
    add = rate * rt
    after_loads[k] += add
    after = class_throughput(cp.maps[c], cap, after_loads)
    ratio = after[k] / after_loads[k] if after_loads[k] > 0 else 1.0
    unserved = rate * (1.0 - ratio) * tau  # jobs
    carried = 0.0
    pen = 0.0
    if unserved > 1e-12:
        keep = _keep(cp, f, a if a is not None else e, e)
        survivors = unserved * keep
        later = 0.0
        if survivors > 0.0 and e + 1 < cp.n_epochs and cp.caps[e + 1, c] > 0:
            cap1 = float(cp.caps[e + 1, c])
            free = cap1 * _max_thr(cp.maps[c]) - sum(ledger.throughput(e + 1, c))
            later = min(survivors, max(0.0, free) * tau / rt)
            carried = survivors / tau
        pen += u * (unserved - later) * cp.weight(e)
        pen += u * later * cp.hold_cost() * cp.weight(e)
    jobs = ledger.jobs[e][c]
    oth = 0.0
    for j in range(k, len(loads)):
        if loads[j] <= 0.0:
            continue
        others_after = after[j] - (ratio * add if j == k else 0.0)
        lost = before[j] - others_after
        if lost > 1e-12:
            oth += cp.utilities[j] * lost / (loads[j] / jobs[j]) * tau
    return pen + oth * cp.weight(e), rate * ratio, carried


def _max_thr(points: tuple[tuple[float, float], ...]) -> float:
    return points[-1][1]


def _keep(cp: Compiled, f: int, a: int, e: int) -> float:
    """Fraction of cohort a's jobs presented during epoch e whose deadline is after the end of e."""
    lo, hi = cp.window(f, a)
    s0, s1 = e * cp.tau, (e + 1) * cp.tau
    if a == e:
        return survival(s1, lo, hi)
    gm = mean_survival(s0, s1, lo, hi)
    return survival(s1, lo, hi) / gm if gm > 0 else 0.0


def _transfer(cp: Compiled, f: int, a: int, e_prev: int, e_next: int, rate: float) -> tuple[float, float]:
    """(penalty, rate on release) of holding the subflow in backlog from epoch e_prev to e_next."""
    if e_next == e_prev:
        return 0.0, rate
    tau = cp.tau
    lo, hi = cp.window(f, a)
    g_prev = survival(e_prev * tau, lo, hi) if a != e_prev else 1.0
    if g_prev <= 0.0:
        return math.inf, 0.0
    u = cp.flow_utility[f]
    n = rate * tau
    hold = cp.hold_cost()
    pen = 0.0
    for k in range(e_prev, e_next):
        alive = 1.0 if k == e_prev else survival(k * tau, lo, hi) / g_prev
        pen += u * n * alive * hold * cp.weight(k)
    presented = mean_survival(e_next * tau, (e_next + 1) * tau, lo, hi) / g_prev
    pen += 0.5 * u * n * presented * hold * cp.weight(e_next)  # released over the epoch: half of it still held
    pen += u * n * (1.0 - presented) * cp.weight(e_next)
    return pen, rate * presented


def route_subflow(
    cp: Compiled, ledger: Ledger, item: Item, rate: float, admit_only: bool = False, stop: float | None = None
) -> tuple[RouteSpec, float]:
    """Best single-path route of one subflow (greedy pools, DP over (step, epoch)); returns it and its penalty.
    ``admit_only``: every step in the cohort's own epoch (admit on arrival at the best pool per step, no backlog).
    ``stop`` (a time.monotonic() value): raise :class:`Late` when it passes during the search."""
    f, a = item.flow, item.cohort
    start_epoch = max(a, 0)
    S = cp.n_steps[f]
    E = cp.n_epochs
    counter = 0
    # state: (penalty, tie, step done, epoch, rate, hops, rates)
    heap: list[
        tuple[float, int, int, int, float, tuple[tuple[int, int], ...], tuple[float, ...], tuple[float, ...]]
    ] = []
    best: dict[tuple[int, int], float] = {}
    first = item.first_step
    deepest = first - 1
    carry0: tuple[float, ...] = ()
    if item.pool is not None:
        # already in the input queue of item.pool: served there in the first epoch, no decision
        pen, out, cr = hop_penalty(cp, ledger, f, start_epoch, item.pool, first, rate, a)
        heap.append((pen, 0, first, start_epoch, out, ((start_epoch, item.pool),), (rate,), (cr,)))
        deepest = first
        carry0 = (cr,)
    else:
        heap.append((0.0, 0, first - 1, start_epoch, rate, (), (), ()))
    last_epoch = E - 1 if not admit_only else start_epoch
    while heap:
        if stop is not None and time.monotonic() >= stop:
            raise Late
        pen, _, s, e, r, hops, rates, carries = heapq.heappop(heap)
        if s == S - 1:
            return RouteSpec(f, a, item.share, first, hops, item.pool is not None, rates, carries), pen
        if best.get((s, e), math.inf) < pen:
            continue
        deepest = max(deepest, s)
        ns = s + 1
        for e2 in range(e, last_epoch + 1):
            tpen, r2 = _transfer(cp, f, a, e, e2, r)
            if not math.isfinite(tpen):
                break
            if r2 <= 1e-12 and e2 > e:
                break  # nothing left alive to release later (a starved subflow goes on at rate 0: not unroutable)
            choice: tuple[float, float, int, float] | None = None
            for c in cp.allowed[f][ns]:
                if cp.caps[e2, c] <= 0:
                    continue
                hp, out, cr = hop_penalty(cp, ledger, f, e2, c, ns, r2, a)
                if choice is None or hp < choice[0]:
                    choice = (hp, out, c, cr)
            if choice is None:
                continue
            total = pen + tpen + choice[0]
            if total < best.get((ns, e2), math.inf):
                best[(ns, e2)] = total
                counter += 1
                heapq.heappush(
                    heap,
                    (total, counter, ns, e2, choice[1], hops + ((e2, choice[2]),), rates + (r2,), carries + (choice[3],)),
                )
    # no legal path (no allowed pool of positive capacity for step deepest + 1 while the jobs live): refused as a
    # whole before any step is served (jobs already queued at a pool stay there), so they take nothing from others
    hops = ((start_epoch, item.pool),) if item.pool is not None else ()
    rates0 = (rate,) if item.pool is not None else ()
    pen = cp.flow_utility[f] * rate * cp.tau * cp.weight(start_epoch)
    return (
        RouteSpec(
            f, a, item.share, first, hops, item.pool is not None, rates0, carry0,
            refused_step=first + len(hops), blocked_step=min(deepest + 1, S - 1),
        ),
        pen,
    )


def commit(cp: Compiled, ledger: Ledger, route: RouteSpec) -> None:
    k = cp.flow_class[route.flow]
    for i, (e, c) in enumerate(route.hops):
        r = route.rates[i] if i < len(route.rates) else 0.0
        rt = cp.run_time[route.flow][route.first_step + i]
        ledger.add(e, c, k, r, rt)
        cr = route.carry[i] if i < len(route.carry) else 0.0
        if cr > 0.0 and e + 1 < cp.n_epochs:
            ledger.add(e + 1, c, k, cr, rt)  # the unserved survivors, re-presented at c in the next epoch


def build_epoch(
    cp: Compiled,
    ledger: Ledger,
    items: list[Item],
    order: list[int],
    threshold: float = 0.2,
    mode: str = "route",
    stop: float | None = None,
) -> list[RouteSpec]:
    """The rapid route builder: route ``items`` in ``order`` against ``ledger`` (which it updates). ``mode``:
    ``route`` (the paper's Level 1), ``admit`` (every step on arrival, best pool per step) or ``hold`` (backlog
    everything possible: each subflow held to the latest epoch from which its route still completes it, i.e. the
    route builder restricted to the last legal start epoch). ``stop`` (a time.monotonic() value): raise
    :class:`Late` when it passes (the ledger is then partly updated: the caller drops it)."""
    routes: list[RouteSpec] = []
    for i in order:
        if stop is not None and time.monotonic() >= stop:
            raise Late
        it = items[i]
        e = max(it.cohort, 0)
        n = split_count(cp, it.flow, e, it.rate, threshold)
        for j in range(n):
            if j and stop is not None and time.monotonic() >= stop:
                raise Late
            sub = Item(it.flow, it.cohort, it.rate, it.first_step, it.pool, it.share / n)
            if mode == "hold" and it.pool is None:
                rs = hold_subflow(cp, ledger, sub, it.rate / n, stop)
            else:
                rs, _ = route_subflow(cp, ledger, sub, it.rate / n, admit_only=mode == "admit", stop=stop)
            commit(cp, ledger, rs)
            routes.append(rs)
    return routes


def hold_subflow(cp: Compiled, ledger: Ledger, item: Item, rate: float, stop: float | None = None) -> RouteSpec:
    """Backlog everything possible: the subflow waits in backlog until the latest epoch in which at least half of
    its jobs are still alive when released, then runs every step there (best pool per step); if that epoch has no
    pool for some step, the route builder's own route."""
    f, a = item.flow, item.cohort
    start = max(a, 0)
    lo, hi = cp.window(f, a)
    g0 = survival(start * cp.tau, lo, hi) if a != start else 1.0
    target = start
    for e2 in range(start + 1, cp.n_epochs):
        if g0 > 0 and mean_survival(e2 * cp.tau, (e2 + 1) * cp.tau, lo, hi) / g0 >= 0.5:
            target = e2
    if target == start:
        return route_subflow(cp, ledger, item, rate, admit_only=True, stop=stop)[0]
    _, r2 = _transfer(cp, f, a, start, target, rate)
    hops: list[tuple[int, int]] = []
    rates: list[float] = []
    carries: list[float] = []
    r = r2
    for s in range(item.first_step, cp.n_steps[f]):
        best: tuple[float, float, int, float] | None = None
        for c in cp.allowed[f][s]:
            if cp.caps[target, c] <= 0:
                continue
            hp, out, cr = hop_penalty(cp, ledger, f, target, c, s, r, a)
            if best is None or hp < best[0]:
                best = (hp, out, c, cr)
        if best is None:
            return route_subflow(cp, ledger, item, rate, stop=stop)[0]
        hops.append((target, best[2]))
        rates.append(r)
        carries.append(best[3])
        r = best[1]
    return RouteSpec(f, a, item.share, item.first_step, tuple(hops), False, tuple(rates), tuple(carries))


def unroutable_step(cp: Compiled, f: int) -> int | None:
    """The first step of flow f none of whose allowed pools has positive capacity in any epoch (None: none such)."""
    for s, pools in enumerate(cp.allowed[f]):
        if not any(cp.caps[e, c] > 0 for c in pools for e in range(cp.n_epochs)):
            return s
    return None


def epoch_items(cp: Compiled, e: int) -> list[Item]:
    """The GA's items for epoch e: each flow with arrivals, and at epoch 0 the waiting jobs."""
    items = [Item(f, e, float(cp.rates[f, e])) for f in range(cp.n_flows) if cp.rates[f, e] > 0]
    if e == 0:
        fidx = cp.problem.flow_index()
        pidx = cp.problem.pool_index()
        for w in cp.problem.waiting:
            items.append(
                Item(
                    fidx[w.flow], INITIAL_COHORT, w.jobs / cp.tau, w.step, pidx[w.pool] if w.pool is not None else None
                )
            )
    return items


def policy_from_routes(cp: Compiled, routes: list[RouteSpec]) -> Policy:
    """Aggregate single-path routes into the per (epoch, flow, cohort, step) probabilities (section 3.1), with an
    entry for every epoch of a routed cohort's life and every step (:func:`.reach.complete_policy`, issue 50: the
    jobs a route's pool serves only in a later epoch go on from there)."""
    acc: dict[tuple[int, int, int, int], dict[int, float]] = {}
    BL, DROP = -1, -2
    for r in routes:
        prev = max(r.cohort, 0)
        if r.refused_step is not None and r.refused_step < cp.n_steps[r.flow]:
            e_last = r.hops[-1][0] if r.hops else prev
            d = acc.setdefault((e_last, r.flow, r.cohort, r.refused_step), {})
            d[DROP] = d.get(DROP, 0.0) + r.share
        for i, (e_s, c) in enumerate(r.hops):
            s = r.first_step + i
            if not (i == 0 and r.queued):
                for e in range(prev, e_s + 1):
                    d = acc.setdefault((e, r.flow, r.cohort, s), {})
                    dest = c if e == e_s else BL
                    d[dest] = d.get(dest, 0.0) + r.share
            prev = e_s
    out: Policy = {}
    for key, d in acc.items():
        tot = sum(d.values())
        pools = tuple(sorted((c, w / tot) for c, w in d.items() if c >= 0))
        bl = d.get(BL, 0.0) / tot
        dec: Decision = (pools, bl)
        out[key] = dec
    return complete_policy(cp, out)
