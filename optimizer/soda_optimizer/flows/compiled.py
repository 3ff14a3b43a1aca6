"""Index-based view of a :class:`~.model.Problem` shared by the simulator and the planner, and the deadline
arithmetic of the fluid model (Montana & Zinky, sections 2.2 and 2.5).

Deadlines. The jobs of a cohort (one flow, one arrival epoch a) arrive uniformly over the epoch, so their deadlines
are uniform on [a*tau + L, (a+1)*tau + L] (L the lifespan, tau the epoch length); the waiting jobs of time 0 have the
window their :class:`~.model.Waiting` gives. ``G(T)`` is the fraction of a cohort whose deadline is after T. Jobs
carried into an epoch (from backlog or an input queue) are re-presented at a constant rate over the epoch (the
paper's "flow rates that cumulatively across the epoch integrate to the right number of jobs"), so the fraction
still alive when presented is the mean of G over the epoch divided by G at its start; fresh arrivals are alive when
they arrive. A job not served during an epoch waits in its queue (or in backlog) until the epoch ends and is carried
over if its deadline is later, else dropped (section 2.2: "any job whose deadline passes while waiting in a queue is
removed"). Run times are not counted against the deadline (minutes against hours in the paper's scenario).

Departure: the paper does not say how its mean-value simulator handles lifespans inside an epoch; this uniform-window
rule is ours, chosen because it is closed under "still alive at time T" (the window stays uniform) and needs no
per-job state.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .model import INITIAL_COHORT, Problem


def survival(t: float, lo: float, hi: float) -> float:
    """G(t): fraction of deadlines uniform on [lo, hi] that are later than t."""
    if t <= lo:
        return 1.0
    if t >= hi:
        return 0.0
    return (hi - t) / (hi - lo)


def mean_survival(s: float, t: float, lo: float, hi: float) -> float:
    """Mean of G over [s, t]."""
    if t <= s:
        return survival(s, lo, hi)
    total = max(0.0, min(t, lo) - s)  # part of [s, t] before lo: G = 1
    a, b = max(s, lo), min(t, hi)
    if b > a and hi > lo:
        total += ((hi - a) ** 2 - (hi - b) ** 2) / (2.0 * (hi - lo))
    return total / (t - s)


@dataclass
class Compiled:
    """Arrays and lookups derived once from a problem."""

    problem: Problem
    n_pools: int
    n_flows: int
    n_epochs: int
    tau: float
    p_minute: float  #: P of eq. (2) per minute
    caps: np.ndarray  #: (epochs, pools) capacity
    utilities: tuple[float, ...]  #: distinct utilities, highest first (service classes)
    flow_class: tuple[int, ...]  #: class index of each flow
    flow_utility: tuple[float, ...]
    lifespan: tuple[float, ...]
    n_steps: tuple[int, ...]
    run_time: tuple[tuple[float, ...], ...]  #: [flow][step]
    allowed: tuple[tuple[tuple[int, ...], ...], ...]  #: [flow][step] -> pool indices
    rates: np.ndarray  #: (flows, epochs) arrival rate, jobs per minute
    map_groups: list[tuple[np.ndarray, np.ndarray, np.ndarray]]  #: (pool indices, loads, throughputs)
    maps: tuple[tuple[tuple[float, float], ...], ...]  #: per pool map points
    initial_window: dict[int, tuple[float, float]] = field(default_factory=dict)
    #: memo of derived lookups (:mod:`.reach`: serving epochs, lives, doomed steps), filled on use
    memo: dict[tuple[object, ...], object] = field(default_factory=dict, repr=False, compare=False)

    def window(self, f: int, cohort: int) -> tuple[float, float]:
        if cohort == INITIAL_COHORT:
            return self.initial_window[f]
        L = self.lifespan[f]
        return cohort * self.tau + L, (cohort + 1) * self.tau + L

    def weight(self, e: int) -> float:
        """P^{t(e)} of eq. (2)."""
        return float(self.p_minute ** (e * self.tau))

    def hold_cost(self) -> float:
        """1 - P^{tau(e)} of eq. (2)."""
        return float(1.0 - self.p_minute**self.tau)


def compile_problem(problem: Problem) -> Compiled:
    pidx = problem.pool_index()
    utilities = tuple(sorted({f.utility for f in problem.flows}, reverse=True))
    cls = {u: k for k, u in enumerate(utilities)}
    caps = np.array([[p.capacity[e] for p in problem.pools] for e in range(problem.epochs)], dtype=float)
    groups: dict[tuple[tuple[float, float], ...], list[int]] = {}
    for i, p in enumerate(problem.pools):
        groups.setdefault(p.load_map.points, []).append(i)
    map_groups = [
        (np.array(ix, dtype=int), np.array([x for x, _ in pts]), np.array([y for _, y in pts]))
        for pts, ix in groups.items()
    ]
    fidx = problem.flow_index()
    initial: dict[int, tuple[float, float]] = {}
    for w in problem.waiting:
        f = fidx[w.flow]
        lo, hi = initial.get(f, (w.min_remaining, w.max_remaining))
        initial[f] = (min(lo, w.min_remaining), max(hi, w.max_remaining))
    return Compiled(
        problem=problem,
        n_pools=len(problem.pools),
        n_flows=len(problem.flows),
        n_epochs=problem.epochs,
        tau=problem.epoch_length,
        p_minute=problem.discount_per_hour ** (1.0 / 60.0),
        caps=caps,
        utilities=utilities,
        flow_class=tuple(cls[f.utility] for f in problem.flows),
        flow_utility=tuple(f.utility for f in problem.flows),
        lifespan=tuple(f.lifespan for f in problem.flows),
        n_steps=tuple(len(f.steps) for f in problem.flows),
        run_time=tuple(tuple(s.run_time for s in f.steps) for f in problem.flows),
        allowed=tuple(tuple(tuple(pidx[n] for n in s.pools) for s in f.steps) for f in problem.flows),
        rates=np.array([f.arrival_rate for f in problem.flows], dtype=float).reshape(len(problem.flows), -1),
        map_groups=map_groups,
        maps=tuple(p.load_map.points for p in problem.pools),
        initial_window=initial,
    )


def class_throughput(points: tuple[tuple[float, float], ...], cap: float, loads: list[float]) -> list[float]:
    """Utility-ordered service at one pool (section 2.2): ``loads`` per class, highest utility first, in
    task-minutes per minute; returns the throughput of each class. The highest class gets T(L1), the next
    T(L1 + L2) - T(L1), and so on."""
    out = [0.0] * len(loads)
    if cap <= 0.0:
        return out
    cum = 0.0
    prev = 0.0
    for k, load in enumerate(loads):
        if load <= 0.0:
            continue
        cum += load
        t = _interp(points, cum / cap) * cap
        out[k] = t - prev
        prev = t
    return out


def _interp(points: tuple[tuple[float, float], ...], x: float) -> float:
    if x <= 0.0:
        return 0.0
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return points[-1][1]
