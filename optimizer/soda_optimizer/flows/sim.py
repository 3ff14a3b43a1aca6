"""The fluid (mean-value) simulator and the score of eq. (2) (Montana & Zinky, sections 2.2, 2.5 and 3).

Each epoch is simulated at steady state. The jobs of a flow are grouped by cohort (arrival epoch); a *node* is
(flow, cohort, step, pool). A node's input rate is its fresh arrivals, its carried jobs re-presented over the epoch,
and the served output of the previous step's nodes times the policy probability of this pool; the rest of that
output goes to backlog (section 2.5: "the cumulative throughput for step N multiplied by the probabilities for step
N+1 gives the input rates for step N+1").

Service is utility-ordered (section 2.2): at a pool, the loads of the utility classes are stacked highest first on
the load-to-throughput map, and every node of a class is served at its class's throughput/load ratio.

Retraction chain reaction (section 2.5): the input rates and the service ratios are solved together by a fixed
point: rates -> pool loads -> class ratios -> rates downstream, repeated until nothing changes. When a higher- or
equal-utility node joins a pool, the ratios of the others fall, their downstream rates fall, which frees throughput
downstream for others, and so on, until the perturbation dies out. With pools specialised to one step (the paper's
hub and spokes) the fixed point is exact after one pass per step.

Across epochs, unserved jobs stay in their pool's input queue, backlogged jobs in backlog; each is carried to the
next epoch if its deadline is later (see :mod:`.compiled` for the deadline arithmetic) and dropped otherwise.

Score (eq. (2)): sum over epochs of P^{t(e)} * sum over flows of u(f) * (dropped + held * (1 - P^{tau})), where
``held`` counts the jobs in backlog during the epoch (eq. (1)'s deferral penalty telescoped per epoch); jobs
released during an epoch count as half held in it, since they are re-presented at a constant rate over the epoch
and so wait half of it on average. Without that half, deferring a job that is dropped anyway would cost exactly what
dropping it now costs (P^{t(e)} (1 - P^tau) + P^{t(e+1)} = P^{t(e)}), and the planner would be indifferent to
pointless backlog.

Departures from the paper, on purpose:
- jobs still queued or backlogged when the horizon ends are charged as dropped in the last epoch; otherwise a plan
  could backlog past the horizon for free (the paper's "boundary effect" of spoke 3 assumes there is no such gain);
- a policy entry may refuse a share of the jobs (:attr:`~.model.PolicyEntry.refused`): they are dropped at once
  (a plan refuses the jobs no legal route can complete, so that they take no capacity from others);
- jobs reaching a (epoch, flow, cohort, step) with no policy entry stay in backlog (a complete plan has an entry
  wherever jobs arrive); fresh arrivals of an epoch with no entry for step 0 are left out of the simulation, which
  lets the planner score partial plans (Level 3 plans the last epochs first).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import make_dataclass
from typing import Any

import numpy as np

from .compiled import Compiled, compile_problem, mean_survival, survival
from .model import (
    BACKLOG,
    INITIAL_COHORT,
    FlowEpochStats,
    JobCounts,
    Plan,
    PolicyEntry,
    PoolEpochStats,
    Problem,
    SimResult,
    built,
)

# (pool index, probability) pairs and the backlog probability
Decision = tuple[tuple[tuple[int, float], ...], float]
PolicyKey = tuple[int, int, int, int]  # epoch, flow, cohort, step
Policy = dict[PolicyKey, Decision]

# the simulator adds into one of these per (epoch, flow, cohort): :class:`~.model.JobCounts`' fields in a slotted
# mutable dataclass (a pydantic model's assignment would cost a simulation 15%; a misspelt field still fails)
_Counts: Any = make_dataclass("_Counts", [(k, float, 0.0) for k in JobCounts.model_fields], slots=True)


def _stats(counts: Any, epoch: int, flow: str, cohort: int) -> FlowEpochStats:
    return built(FlowEpochStats, {"epoch": epoch, "flow": flow, "cohort": cohort,
                                  **{k: float(getattr(counts, k)) for k in JobCounts.model_fields}})


def policy_from_plan(problem: Problem, plan: Plan) -> Policy:
    pidx, fidx = problem.pool_index(), problem.flow_index()
    out: Policy = {}
    for en in plan.entries:
        pools = tuple((pidx[p], float(v)) for p, v in en.pools.items() if v > 0)
        out[(en.epoch, fidx[en.flow], en.cohort, en.step)] = (pools, float(en.backlog))
    return out


def plan_entries(problem: Problem, policy: Policy) -> tuple[PolicyEntry, ...]:
    """The policy as plan entries (decisions shared by many keys share one ``pools`` dict)."""
    names = [p.name for p in problem.pools]
    fnames = [f.name for f in problem.flows]
    out = []
    cache: dict[Decision, tuple[dict[str, float], float, float]] = {}
    for (e, f, a, s), dec in sorted(policy.items()):
        v = cache.get(dec)
        if v is None:
            pools, bl = dec
            tot = sum(p for _, p in pools)
            back = min(bl, max(0.0, 1.0 - tot))
            v = cache[dec] = ({names[c]: p for c, p in pools}, back, max(0.0, 1.0 - tot - back))
        out.append(built(PolicyEntry, {"epoch": e, "flow": fnames[f], "cohort": a, "step": s, "pools": v[0],
                                       "backlog": v[1], "refused": v[2]}))
    return tuple(out)


def simulate(problem: Problem, plan: Plan) -> SimResult:
    """Simulate a :class:`~.model.Plan` over the whole horizon."""
    cp = compile_problem(problem)
    return simulate_policy(cp, policy_from_plan(problem, plan))


#: policies with more entries than this are simulated over numpy arrays (:mod:`.fastsim`); below it the reference
#: simulator is the faster (measured: 9 ms against 15 ms at the paper's 24 flows, 1.1 s against 0.17 s at 2,400)
ARRAY_ENTRIES = 1500


def simulate_policy(cp: Compiled, policy: Policy | Any, start_epoch: int = 0, detail: bool = True) -> SimResult:
    """Simulate an index-keyed policy from ``start_epoch`` (no carried jobs before it, except the waiting jobs
    of time 0 when it is 0). ``detail=False`` skips the per-flow and per-pool records (the planner's fast path).
    Large policies go to the vectorised simulator, which gives the same numbers (tests/flows/test_flows_fastsim.py)."""
    from .fastsim import PolicyArrays, simulate_arrays

    if isinstance(policy, PolicyArrays) or len(policy) > ARRAY_ENTRIES:
        return simulate_arrays(cp, policy, start_epoch, detail)
    return simulate_policy_ref(cp, policy, start_epoch, detail)


def simulate_policy_ref(cp: Compiled, policy: Policy, start_epoch: int = 0, detail: bool = True) -> SimResult:
    """The reference simulator: one Python record per node and per (epoch, flow, cohort)."""
    hold_cost = cp.hold_cost()
    fidx = cp.problem.flow_index()
    pidx = cp.problem.pool_index()
    # carried jobs, alive at the start of the epoch
    backlog: dict[tuple[int, int, int], float] = defaultdict(float)  # (flow, cohort, step)
    queue: dict[tuple[int, int, int, int], float] = defaultdict(float)  # (flow, cohort, step, pool)
    if start_epoch == 0:
        for w in cp.problem.waiting:
            f = fidx[w.flow]
            if w.pool is None:
                backlog[(f, INITIAL_COHORT, w.step)] += w.jobs
            else:
                queue[(f, INITIAL_COHORT, w.step, pidx[w.pool])] += w.jobs
    scores: list[float] = [0.0] * cp.n_epochs
    flow_stats: dict[tuple[int, int, int], Any] = {}  # _Counts
    pool_stats: list[PoolEpochStats] = []
    left = 0.0

    def st(e: int, f: int, a: int) -> Any:
        key = (e, f, a)
        s = flow_stats.get(key)
        if s is None:
            s = flow_stats[key] = _Counts()
        return s

    for e in range(start_epoch, cp.n_epochs):
        backlog, queue = _epoch(cp, policy, e, backlog, queue, st, pool_stats, detail)
        if e == cp.n_epochs - 1:
            for (f, a, _s), n in backlog.items():
                st(e, f, a).dropped += n
                left += n
            for (f, a, _s, _c), n in queue.items():
                st(e, f, a).dropped += n
                left += n
        wt = cp.weight(e)
        tot = 0.0
        for (e2, f, _a), sx in flow_stats.items():
            if e2 == e:
                tot += cp.flow_utility[f] * (sx.dropped + sx.held * hold_cost)
        scores[e] = wt * tot
    flows: tuple[FlowEpochStats, ...] = ()
    if detail:
        flows = tuple(
            _stats(v, e, cp.problem.flows[f].name, a)
            for (e, f, a), v in sorted(flow_stats.items())
        )
    return SimResult(
        score=float(sum(scores)),
        score_by_epoch=tuple(scores),
        flows=flows,
        pools=tuple(pool_stats),
        left_at_horizon=left,
    )


def _epoch(
    cp: Compiled,
    policy: Policy,
    e: int,
    backlog: dict[tuple[int, int, int], float],
    queue: dict[tuple[int, int, int, int], float],
    st: Callable[[int, int, int], Any],
    pool_stats: list[PoolEpochStats],
    detail: bool,
) -> tuple[dict[tuple[int, int, int], float], dict[tuple[int, int, int, int], float]]:
    """One epoch at steady state: carried jobs and fresh arrivals through the policy, service by the fixed point."""
    tau = cp.tau
    K = len(cp.utilities)
    P = cp.n_pools
    s0, s1 = e * tau, (e + 1) * tau
    caps = cp.caps[e]
    # per cohort: (alive at presentation, survive to end | presented, survive to end | alive at start)
    surv_cache: dict[tuple[int, int], tuple[float, float, float]] = {}

    def surv(f: int, a: int) -> tuple[float, float, float]:
        key = (f, a)
        v = surv_cache.get(key)
        if v is None:
            lo, hi = cp.window(f, a)
            if a == e:
                g_end = survival(s1, lo, hi)
                v = (1.0, g_end, g_end)
            else:
                g0 = survival(s0, lo, hi)
                if g0 <= 0.0:
                    v = (0.0, 0.0, 0.0)
                else:
                    gm = mean_survival(s0, s1, lo, hi)
                    g1 = survival(s1, lo, hi)
                    v = (gm / g0, (g1 / gm) if gm > 0 else 0.0, g1 / g0)
            surv_cache[key] = v
        return v

    node_of: dict[tuple[int, int, int, int], int] = {}
    keys: list[tuple[int, int, int, int]] = []
    src: list[float] = []

    def node(key: tuple[int, int, int, int]) -> int:
        i = node_of.get(key)
        if i is None:
            i = node_of[key] = len(keys)
            keys.append(key)
            src.append(0.0)
        return i

    new_backlog: dict[tuple[int, int, int], float] = defaultdict(float)
    new_queue: dict[tuple[int, int, int, int], float] = defaultdict(float)

    def to_backlog(f: int, a: int, s: int, jobs: float, keep: float) -> None:
        sx = st(e, f, a)
        sx.held += jobs
        new_backlog[(f, a, s)] += jobs * keep
        sx.dropped += jobs * (1.0 - keep)

    # carried backlog: release or hold
    for (f, a, s), n in backlog.items():
        if n <= 0:
            continue
        p_alive, _, keep_start = surv(f, a)
        dec = policy.get((e, f, a, s))
        pools, bl = dec if dec is not None else ((), 1.0)
        sx = st(e, f, a)
        for c, pr in pools:
            jobs = n * pr
            sx.released += jobs
            sx.held += 0.5 * jobs  # re-presented at a constant rate: half an epoch more in backlog on average
            if s == 0:
                sx.admitted += jobs
            sx.dropped += jobs * (1.0 - p_alive)
            src[node((f, a, s, c))] += jobs * p_alive / tau
        rest = n * min(bl, 1.0 - sum(pr for _, pr in pools)) if dec is not None else n
        refused = n * (1.0 - sum(pr for _, pr in pools)) - rest
        if refused > 1e-12:
            sx.dropped += refused
        if rest > 1e-12:
            to_backlog(f, a, s, rest, keep_start)
    # carried input queues: re-presented over the epoch at the same pool
    for (f, a, s, c), n in queue.items():
        if n <= 0:
            continue
        p_alive, _, _ = surv(f, a)
        st(e, f, a).dropped += n * (1.0 - p_alive)
        src[node((f, a, s, c))] += n * p_alive / tau
    # fresh arrivals
    for f in range(cp.n_flows):
        r = float(cp.rates[f, e])
        dec = policy.get((e, f, e, 0))
        if r <= 0 or dec is None:
            continue
        sx = st(e, f, e)
        sx.arrived += r * tau
        pools, bl = dec
        for c, pr in pools:
            src[node((f, e, 0, c))] += r * pr
            sx.admitted += r * pr * tau
        rest = min(bl, 1.0 - sum(pr for _, pr in pools))
        refused = 1.0 - sum(pr for _, pr in pools) - rest
        if refused > 1e-12:
            sx.dropped += r * refused * tau
        if rest > 1e-12:
            sx.backlogged += r * rest * tau
            to_backlog(f, e, 0, r * rest * tau, surv(f, e)[1])
    # expand the node graph step by step (nodes only ever feed the next step)
    edges: list[tuple[int, int, float]] = []
    out_backlog: dict[int, float] = {}
    out_refused: dict[int, float] = {}
    i = 0
    while i < len(keys):
        f, a, s, c = keys[i]
        if s + 1 < cp.n_steps[f]:
            dec = policy.get((e, f, a, s + 1))
            pools, bl = dec if dec is not None else ((), 1.0)
            for c2, pr in pools:
                edges.append((node((f, a, s + 1, c2)), i, pr))
            rest = min(bl, 1.0 - sum(pr for _, pr in pools))
            if rest > 1e-12:
                out_backlog[i] = rest
            if 1.0 - sum(pr for _, pr in pools) - rest > 1e-12:
                out_refused[i] = 1.0 - sum(pr for _, pr in pools) - rest
        i += 1
    n_nodes = len(keys)
    if n_nodes:
        src_v = np.array(src)
        # sparse transfer matrix M[j, i] = probability that node i's served output goes to node j
        e_dst = np.array([j for j, _, _ in edges], dtype=int)
        e_src = np.array([i2 for _, i2, _ in edges], dtype=int)
        e_pr = np.array([pr for _, _, pr in edges], dtype=float)
        rt = np.array([cp.run_time[k[0]][k[2]] for k in keys])
        pc = np.array([k[3] * K + cp.flow_class[k[0]] for k in keys])
        x, rho, load_pc, thr_pc = _fixed_point(cp, caps, src_v, (e_dst, e_src, e_pr), rt, pc, P, K)
        served = rho * x
        for i2 in range(n_nodes):
            f, a, s, c = keys[i2]
            _, keep_p, _ = surv(f, a)
            sx = st(e, f, a)
            un = (1.0 - rho[i2]) * x[i2] * tau
            if un > 1e-12:
                new_queue[(f, a, s, c)] += un * keep_p
                sx.dropped += un * (1.0 - keep_p)
            if s + 1 == cp.n_steps[f]:
                sx.completed += served[i2] * tau
            else:
                frac_ref = out_refused.get(i2, 0.0)
                if frac_ref > 0.0:
                    sx.dropped += served[i2] * frac_ref * tau
                frac_bl = out_backlog.get(i2, 0.0)
                if frac_bl > 0.0:
                    jobs = served[i2] * frac_bl * tau
                    sx.backlogged += jobs
                    to_backlog(f, a, s + 1, jobs, keep_p)
        if detail:
            names = [p.name for p in cp.problem.pools]
            jobs_in = np.bincount(np.array([k[3] for k in keys]), weights=x, minlength=P)
            jobs_out = np.bincount(np.array([k[3] for k in keys]), weights=served, minlength=P)
            loadp = load_pc.sum(axis=1)
            thrp = thr_pc.sum(axis=1)
            for c in range(P):
                pool_stats.append(
                    PoolEpochStats(
                        epoch=e,
                        pool=names[c],
                        capacity=float(caps[c]),
                        load=float(loadp[c]),
                        throughput=float(thrp[c]),
                        jobs_in=float(jobs_in[c]),
                        jobs_out=float(jobs_out[c]),
                    )
                )
    elif detail:
        for c, p in enumerate(cp.problem.pools):
            pool_stats.append(
                PoolEpochStats(
                    epoch=e, pool=p.name, capacity=float(caps[c]), load=0.0, throughput=0.0, jobs_in=0.0, jobs_out=0.0
                )
            )
    return new_backlog, new_queue


def _fixed_point(
    cp: Compiled,
    caps: np.ndarray,
    src: np.ndarray,
    M: tuple[np.ndarray, np.ndarray, np.ndarray],
    rt: np.ndarray,
    pc: np.ndarray,
    P: int,
    K: int,
    max_iter: int = 500,
    tol: float = 1e-10,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Solve x = src + M (rho(x) * x): the chain reaction of retracted throughput (section 2.5). M is given
    sparse as (destination, source, probability) arrays."""
    dst, srci, pr = M
    n = len(src)
    x = src.copy()
    safe_cap = np.where(caps > 0, caps, 1.0)
    for _ in range(max_iter):
        rho, _, _ = _service(cp, caps, safe_cap, x, rt, pc, P, K)
        x_new = src + np.bincount(dst, weights=pr * (rho * x)[srci], minlength=n)
        done = float(np.max(np.abs(x_new - x))) <= tol * (1.0 + float(np.max(np.abs(x_new))))
        x = x_new
        if done:
            break
    rho, load_pc, thr_pc = _service(cp, caps, safe_cap, x, rt, pc, P, K)  # the ratios of the converged rates
    return x, rho, load_pc, thr_pc


def _service(
    cp: Compiled, caps: np.ndarray, safe_cap: np.ndarray, x: np.ndarray, rt: np.ndarray, pc: np.ndarray, P: int, K: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Utility-ordered service at rates ``x`` (section 2.2): per node its served fraction rho, and per (pool, class)
    the load and the throughput (the classes' loads stacked highest utility first on the pool's map)."""
    load_pc = np.bincount(pc, weights=x * rt, minlength=P * K).astype(float).reshape(P, K)
    cum = np.cumsum(load_pc, axis=1) / safe_cap[:, None]
    tput = np.empty_like(cum)
    for ix, xs, ys in cp.map_groups:
        tput[ix] = np.interp(cum[ix], xs, ys)
    tput *= safe_cap[:, None]
    tput[caps <= 0] = 0.0
    thr_pc = np.diff(tput, axis=1, prepend=0.0)
    ratio = np.divide(thr_pc, load_pc, out=np.ones_like(thr_pc), where=load_pc > 1e-15)
    ratio[caps <= 0] = 0.0
    return np.clip(ratio.ravel()[pc], 0.0, 1.0), load_pc, thr_pc


__all__ = [
    "BACKLOG", "Decision", "Policy", "plan_entries", "policy_from_plan", "simulate", "simulate_policy",
    "simulate_policy_ref",
]
