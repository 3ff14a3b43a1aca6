"""The fluid simulator of :mod:`.sim` over numpy arrays (issue 36: the planner's deadline at 20,000 flows).

Same model, same numbers (to rounding) as :func:`.sim.simulate_policy_ref`, which stays as the reference the tests
compare against: the policy is turned once into sorted key codes with its decisions in CSR form, and each epoch is
a handful of vectorised passes (carried backlog, carried queues, fresh arrivals, the node graph level by level, the
fixed point of section 2.5, the bookkeeping of what is served, queued, backlogged or dropped). The per-job-class
Python objects of the reference simulator (a dict entry per node, a counter object per (epoch, flow, cohort)) are
what cost 6 s per simulation at 10,000 flows; here the cost is a few array passes per epoch.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .compiled import Compiled
from .model import FlowEpochStats, JobCounts, PoolEpochStats, SimResult, built

_FIELDS = tuple(JobCounts.model_fields)
_ARR, _ADM, _CMP, _DRP, _BKL, _REL, _HLD = range(7)
assert _FIELDS == ("arrived", "admitted", "completed", "dropped", "backlogged", "released", "held")
_EPS = 1e-12


class PolicyArrays:
    """A policy (``{(epoch, flow, cohort, step): ((pool, probability), ...), backlog)}``) as sorted key codes and
    CSR decisions."""

    def __init__(self, cp: Compiled, policy: dict[tuple[int, int, int, int], Any]):
        self.F, self.E, self.S = cp.n_flows, cp.n_epochs, max(cp.n_steps)
        n = len(policy)
        keys = np.array(list(policy.keys()), dtype=np.int64).reshape(n, 4)
        decs = list(policy.values())
        lens = np.fromiter((len(d[0]) for d in decs), dtype=np.int64, count=n)
        bl = np.fromiter((d[1] for d in decs), dtype=float, count=n)
        flat = np.array([x for d in decs for x in d[0]], dtype=float).reshape(-1, 2)
        codes = self.code(keys[:, 0], keys[:, 1], keys[:, 2], keys[:, 3])
        order = np.argsort(codes, kind="stable")
        ptr0 = np.concatenate(([0], np.cumsum(lens)))
        self.codes = codes[order]
        self.lens = lens[order]
        self.bl = bl[order]
        self.start = ptr0[:-1][order]
        self.pool = flat[:, 0].astype(np.int64) if len(flat) else np.zeros(0, dtype=np.int64)
        self.prob = flat[:, 1] if len(flat) else np.zeros(0)
        psum = np.bincount(np.repeat(np.arange(n), lens), weights=self.prob, minlength=n) if n else np.zeros(0)
        self.sumpr = psum[order]

    @classmethod
    def of(cls, cp: Compiled, codes: np.ndarray, lens: np.ndarray, bl: np.ndarray, start: np.ndarray,
           pool: np.ndarray, prob: np.ndarray, sorted_codes: bool = False) -> PolicyArrays:
        """From arrays: key codes (any order; ``sorted_codes``: already ascending), and per key its pool count,
        backlog share and start in the shared (pool, prob) table."""
        self = cls.__new__(cls)
        self.F, self.E, self.S = cp.n_flows, cp.n_epochs, max(cp.n_steps)
        if sorted_codes:
            self.codes, self.lens, self.bl, self.start = codes, lens, bl, start
        else:
            order = np.argsort(codes, kind="stable")
            self.codes, self.lens, self.bl, self.start = codes[order], lens[order], bl[order], start[order]
        self.pool, self.prob = pool, prob
        csum = np.concatenate(([0.0], np.cumsum(prob)))
        self.sumpr = csum[self.start + self.lens] - csum[self.start]
        return self

    def __len__(self) -> int:
        return len(self.codes)

    def at_epoch(self, epoch: int) -> PolicyArrays:
        """The decisions of one epoch only (the codes are sorted by epoch first: a slice)."""
        out = type(self).__new__(type(self))
        out.F, out.E, out.S = self.F, self.E, self.S
        per = self.S * (self.E + 1) * self.F
        lo, hi = np.searchsorted(self.codes, [epoch * per, (epoch + 1) * per])
        out.codes, out.lens, out.bl, out.start = (x[lo:hi] for x in (self.codes, self.lens, self.bl, self.start))
        out.sumpr, out.pool, out.prob = self.sumpr[lo:hi], self.pool, self.prob
        return out

    def to_policy(self) -> dict[tuple[int, int, int, int], Any]:
        """The policy as a dict (for the plan's entries)."""
        S, A, F = self.S, self.E + 1, self.F
        c = self.codes
        s = c % S
        a = (c // S) % A - 1
        f = (c // (S * A)) % F
        e = c // (S * A * F)
        cache: dict[tuple[int, int, float], Any] = {}
        out: dict[tuple[int, int, int, int], Any] = {}
        pl, pr = self.pool.tolist(), self.prob.tolist()
        for key, st, ln, b in zip(zip(e.tolist(), f.tolist(), a.tolist(), s.tolist()), self.start.tolist(),
                                  self.lens.tolist(), self.bl.tolist()):
            d = cache.get((st, ln, b))
            if d is None:
                d = cache[(st, ln, b)] = (tuple(zip(pl[st:st + ln], pr[st:st + ln])), b)
            out[key] = d
        return out

    def code(self, e: Any, f: Any, a: Any, s: Any) -> Any:
        return ((np.asarray(e, dtype=np.int64) * self.F + f) * (self.E + 1) + (np.asarray(a) + 1)) * self.S + s

    def lookup(self, e: int, f: np.ndarray, a: np.ndarray, s: np.ndarray) -> np.ndarray:
        """Row of each key's decision, -1 where the policy has none."""
        if len(f) == 0 or len(self.codes) == 0:
            return np.full(len(f), -1, dtype=np.int64)
        c = self.code(e, f, a, s)
        i = np.minimum(np.searchsorted(self.codes, c), len(self.codes) - 1)
        return np.where(self.codes[i] == c, i, -1)

    def expand(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For decision rows: (index of the row each pool entry belongs to, pool, probability)."""
        cnt = self.lens[rows]
        tot = int(cnt.sum())
        owner = np.repeat(np.arange(len(rows)), cnt)
        offs = np.arange(tot) - np.repeat(np.cumsum(cnt) - cnt, cnt)
        pos = np.repeat(self.start[rows], cnt) + offs
        return owner, self.pool[pos], self.prob[pos]


def _survival(t: float, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    span = np.where(hi > lo, hi - lo, 1.0)
    return np.where(t <= lo, 1.0, np.where(t >= hi, 0.0, (hi - t) / span))


def _mean_survival(s: float, t: float, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    total = np.maximum(0.0, np.minimum(t, lo) - s)
    a = np.maximum(s, lo)
    b = np.minimum(t, hi)
    span = np.where(hi > lo, hi - lo, 1.0)
    part = ((hi - a) ** 2 - (hi - b) ** 2) / (2.0 * span)
    total = total + np.where((b > a) & (hi > lo), part, 0.0)
    return total / (t - s)


def simulate_arrays(
    cp: Compiled, policy: dict[tuple[int, int, int, int], Any] | PolicyArrays, start_epoch: int = 0,
    detail: bool = True,
) -> SimResult:
    """:func:`.sim.simulate_policy_ref` vectorised (see the module docstring)."""
    from .sim import _fixed_point  # the fixed point is shared with the reference simulator

    F, E, P, K = cp.n_flows, cp.n_epochs, cp.n_pools, len(cp.utilities)
    S = max(cp.n_steps)
    A = E + 1  # cohort index = cohort + 1 (cohort -1: waiting at time 0)
    tau = cp.tau
    pa = policy if isinstance(policy, PolicyArrays) else PolicyArrays(cp, policy)
    nsteps = np.array(cp.n_steps, dtype=np.int64)
    util = np.array(cp.flow_utility)
    fcls = np.array(cp.flow_class, dtype=np.int64)
    rt_tab = np.zeros((F, S))
    for f, rts in enumerate(cp.run_time):
        rt_tab[f, : len(rts)] = rts
    # deadline windows per (flow, cohort index)
    life = np.array(cp.lifespan)
    lo_t = np.zeros((F, A))
    for ai in range(1, A):
        lo_t[:, ai] = (ai - 1) * tau + life
    hi_t = lo_t + tau
    lo_t[:, 0] = 0.0
    hi_t[:, 0] = 0.0
    for f, (lo, hi) in cp.initial_window.items():
        lo_t[f, 0], hi_t[f, 0] = lo, hi
    hold_cost = cp.hold_cost()

    # carried state: backlog (flow, cohort idx, step, jobs) and queues (flow, cohort idx, step, pool, jobs)
    z_i = np.zeros(0, dtype=np.int64)
    bf: np.ndarray = z_i
    ba: np.ndarray = z_i
    bs: np.ndarray = z_i
    bn: np.ndarray = np.zeros(0)
    qf, qa, qs, qc, qn = z_i, z_i, z_i, z_i, np.zeros(0)
    if start_epoch == 0 and cp.problem.waiting:
        fidx, pidx = cp.problem.flow_index(), cp.problem.pool_index()
        wb = [(fidx[w.flow], w.step, w.jobs) for w in cp.problem.waiting if w.pool is None]
        wq = [(fidx[w.flow], w.step, pidx[w.pool], w.jobs) for w in cp.problem.waiting if w.pool is not None]
        if wb:
            arr = np.array(wb, dtype=float)
            bf, bs, bn = arr[:, 0].astype(np.int64), arr[:, 1].astype(np.int64), arr[:, 2]
            ba = np.zeros(len(bf), dtype=np.int64)
        if wq:
            arr = np.array(wq, dtype=float)
            qf, qs, qc, qn = (arr[:, 0].astype(np.int64), arr[:, 1].astype(np.int64), arr[:, 2].astype(np.int64),
                              arr[:, 3])
            qa = np.zeros(len(qf), dtype=np.int64)
    scores = [0.0] * E
    flows_out: list[FlowEpochStats] = []
    pool_stats: list[PoolEpochStats] = []
    left = 0.0
    fnames = [f.name for f in cp.problem.flows]
    pnames = [p.name for p in cp.problem.pools]

    for e in range(start_epoch, E):
        s0, s1 = e * tau, (e + 1) * tau
        caps = cp.caps[e]
        cnt = np.zeros((7, F * A))
        touched = np.zeros(F * A, dtype=bool)
        # survival factors per (flow, cohort idx): alive when presented, keep to end | presented, keep | start
        g0 = _survival(s0, lo_t, hi_t)
        gm = _mean_survival(s0, s1, lo_t, hi_t)
        g1 = _survival(s1, lo_t, hi_t)
        pos0 = g0 > 0
        p_alive = np.where(pos0, gm / np.where(pos0, g0, 1.0), 0.0)
        keep_p = np.where(pos0 & (gm > 0), g1 / np.where(gm > 0, gm, 1.0), 0.0)
        keep_s = np.where(pos0, g1 / np.where(pos0, g0, 1.0), 0.0)
        fresh_i = e + 1
        p_alive[:, fresh_i] = 1.0
        keep_p[:, fresh_i] = g1[:, fresh_i]
        keep_s[:, fresh_i] = g1[:, fresh_i]
        p_alive, keep_p, keep_s = p_alive.ravel(), keep_p.ravel(), keep_s.ravel()

        def add(k: int, fa: np.ndarray, v: np.ndarray, cnt: np.ndarray = cnt) -> None:
            if len(fa):
                cnt[k] += np.bincount(fa, weights=v, minlength=F * A)

        nb_parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # (fa, step, jobs kept)
        src_parts: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []  # (fa, step, pool, rate)

        def to_backlog(fa: np.ndarray, s: np.ndarray, jobs: np.ndarray, keep: np.ndarray,
                       nb_parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = nb_parts,
                       touched: np.ndarray = touched) -> None:
            add(_HLD, fa, jobs)
            add(_DRP, fa, jobs * (1.0 - keep))
            nb_parts.append((fa, s, jobs * keep))
            touched[fa] = True

        # carried backlog: release or hold
        m = bn > 0
        if m.any():
            f_, a_, s_, n_ = bf[m], ba[m], bs[m], bn[m]
            fa = f_ * A + a_
            touched[fa] = True
            rows = pa.lookup(e, f_, a_ - 1, s_)
            has = rows >= 0
            if has.any():
                hi_ = np.nonzero(has)[0]
                r = rows[hi_]
                own, c, pr = pa.expand(r)
                src_row = hi_[own]
                jobs = n_[src_row] * pr
                fa_j = fa[src_row]
                add(_REL, fa_j, jobs)
                add(_HLD, fa_j, 0.5 * jobs)
                add(_ADM, fa_j, np.where(s_[src_row] == 0, jobs, 0.0))
                add(_DRP, fa_j, jobs * (1.0 - p_alive[fa_j]))
                src_parts.append((fa_j, s_[src_row], c, jobs * p_alive[fa_j] / tau))
                rest = n_[hi_] * np.minimum(pa.bl[r], 1.0 - pa.sumpr[r])
                refused = n_[hi_] * (1.0 - pa.sumpr[r]) - rest
                add(_DRP, fa[hi_], np.where(refused > _EPS, refused, 0.0))
                k = rest > _EPS
                if k.any():
                    to_backlog(fa[hi_][k], s_[hi_][k], rest[k], keep_s[fa[hi_][k]])
            no = ~has
            if no.any():
                to_backlog(fa[no], s_[no], n_[no], keep_s[fa[no]])
        # carried input queues: re-presented over the epoch at the same pool
        m = qn > 0
        if m.any():
            fa = qf[m] * A + qa[m]
            touched[fa] = True
            add(_DRP, fa, qn[m] * (1.0 - p_alive[fa]))
            src_parts.append((fa, qs[m], qc[m], qn[m] * p_alive[fa] / tau))
        # fresh arrivals
        fl = np.nonzero(cp.rates[:, e] > 0)[0]
        if len(fl):
            rows = pa.lookup(e, fl, np.full(len(fl), e), np.zeros(len(fl), dtype=np.int64))
            ok = rows >= 0
            fl, rows = fl[ok], rows[ok]
            r_ = cp.rates[fl, e]
            fa = fl * A + fresh_i
            touched[fa] = True
            add(_ARR, fa, r_ * tau)
            own, c, pr = pa.expand(rows)
            src_parts.append((fa[own], np.zeros(len(own), dtype=np.int64), c, r_[own] * pr))
            add(_ADM, fa[own], r_[own] * pr * tau)
            rest = np.minimum(pa.bl[rows], 1.0 - pa.sumpr[rows])
            refused = 1.0 - pa.sumpr[rows] - rest
            add(_DRP, fa, np.where(refused > _EPS, r_ * refused * tau, 0.0))
            k = rest > _EPS
            if k.any():
                add(_BKL, fa[k], r_[k] * rest[k] * tau)
                to_backlog(fa[k], np.zeros(int(k.sum()), dtype=np.int64), r_[k] * rest[k] * tau, keep_p[fa[k]])
        # the node graph, level by level (a node feeds only the next step)
        if src_parts:
            s_fa = np.concatenate([p[0] for p in src_parts])
            s_s = np.concatenate([p[1] for p in src_parts])
            s_c = np.concatenate([p[2] for p in src_parts])
            s_v = np.concatenate([p[3] for p in src_parts])
        else:
            s_fa = s_s = s_c = z_i
            s_v = np.zeros(0)
        s_code = (s_fa * S + s_s) * P + s_c
        lvl_codes: list[np.ndarray] = []
        lvl_src: list[np.ndarray] = []
        edges: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # (level-local dst, level-local src, pr) at s+1
        out_bl: list[np.ndarray] = []
        out_ref: list[np.ndarray] = []
        child_codes = np.zeros(0, dtype=np.int64)
        child_src = np.zeros(0, dtype=np.int64)
        child_pr = np.zeros(0)
        for s in range(S):
            ms = s_s == s
            codes = np.concatenate((s_code[ms], child_codes))
            uniq, inv = np.unique(codes, return_inverse=True)
            nsrc = int(ms.sum())
            src = np.bincount(inv[:nsrc], weights=s_v[ms], minlength=len(uniq)) if nsrc else np.zeros(len(uniq))
            if s > 0:
                edges.append((inv[nsrc:], child_src, child_pr))
            lvl_codes.append(uniq)
            lvl_src.append(src)
            # decisions for step s + 1
            fa_n = uniq // (S * P)
            f_n = fa_n // A
            a_n = fa_n % A
            c_n = uniq % P
            bl_n = np.zeros(len(uniq))
            ref_n = np.zeros(len(uniq))
            nxt = (s + 1) < nsteps[f_n]
            child_codes = np.zeros(0, dtype=np.int64)
            child_src = np.zeros(0, dtype=np.int64)
            child_pr = np.zeros(0)
            if nxt.any():
                ix = np.nonzero(nxt)[0]
                rows = pa.lookup(e, f_n[ix], a_n[ix] - 1, np.full(len(ix), s + 1))
                has = rows >= 0
                bl_n[ix[~has]] = 1.0
                hi_ = ix[has]
                r = rows[has]
                own, c2, pr = pa.expand(r)
                child_codes = (fa_n[hi_][own] * S + (s + 1)) * P + c2
                child_src = hi_[own]
                child_pr = pr
                rest = np.minimum(pa.bl[r], 1.0 - pa.sumpr[r])
                bl_n[hi_] = np.where(rest > _EPS, rest, 0.0)
                ref = 1.0 - pa.sumpr[r] - rest
                ref_n[hi_] = np.where(ref > _EPS, ref, 0.0)
            del c_n
            out_bl.append(bl_n)
            out_ref.append(ref_n)
        offs = np.concatenate(([0], np.cumsum([len(c) for c in lvl_codes])))
        n_nodes = int(offs[-1])
        if n_nodes:
            codes = np.concatenate(lvl_codes)
            src_v = np.concatenate(lvl_src)
            e_dst = np.concatenate([d + offs[i + 1] for i, (d, _, _) in enumerate(edges)]) if edges else z_i
            e_src = np.concatenate([s2 + offs[i] for i, (_, s2, _) in enumerate(edges)]) if edges else z_i
            e_pr = np.concatenate([p for _, _, p in edges]) if edges else np.zeros(0)
            fa_n = codes // (S * P)
            s_n = (codes // P) % S
            c_n = codes % P
            f_n = fa_n // A
            rt = rt_tab[f_n, s_n]
            pc = c_n * K + fcls[f_n]
            x, rho, load_pc, thr_pc = _fixed_point(cp, caps, src_v, (e_dst, e_src, e_pr), rt, pc, P, K)
            served = rho * x
            touched[fa_n] = True
            kp = keep_p[fa_n]
            un = (1.0 - rho) * x * tau
            uq = un > _EPS
            add(_DRP, fa_n[uq], un[uq] * (1.0 - kp[uq]))
            nq_fa, nq_s, nq_c, nq_n = fa_n[uq], s_n[uq], c_n[uq], un[uq] * kp[uq]
            last = (s_n + 1) == nsteps[f_n]
            add(_CMP, fa_n[last], served[last] * tau)
            bl_all = np.concatenate(out_bl)
            ref_all = np.concatenate(out_ref)
            mid = ~last
            add(_DRP, fa_n[mid], served[mid] * ref_all[mid] * tau)
            k = mid & (bl_all > 0)
            if k.any():
                jobs = served[k] * bl_all[k] * tau
                add(_BKL, fa_n[k], jobs)
                to_backlog(fa_n[k], s_n[k] + 1, jobs, kp[k])
            if detail:
                jobs_in = np.bincount(c_n, weights=x, minlength=P)
                jobs_out = np.bincount(c_n, weights=served, minlength=P)
                loadp, thrp = load_pc.sum(axis=1), thr_pc.sum(axis=1)
                for ci in range(P):
                    pool_stats.append(PoolEpochStats(
                        epoch=e, pool=pnames[ci], capacity=float(caps[ci]), load=float(loadp[ci]),
                        throughput=float(thrp[ci]), jobs_in=float(jobs_in[ci]), jobs_out=float(jobs_out[ci])))
        else:
            nq_fa = nq_s = nq_c = z_i
            nq_n = np.zeros(0)
            if detail:
                for ci in range(P):
                    pool_stats.append(PoolEpochStats(epoch=e, pool=pnames[ci], capacity=float(caps[ci]), load=0.0,
                                                     throughput=0.0, jobs_in=0.0, jobs_out=0.0))
        # the new carried state, aggregated by key
        if nb_parts:
            b_fa = np.concatenate([p[0] for p in nb_parts])
            b_s = np.concatenate([p[1] for p in nb_parts])
            b_n = np.concatenate([p[2] for p in nb_parts])
            uq_b, inv = np.unique(b_fa * S + b_s, return_inverse=True)
            bn = np.bincount(inv, weights=b_n, minlength=len(uq_b))
            bfa, bs = uq_b // S, uq_b % S
            bf, ba = bfa // A, bfa % A
        else:
            bf = ba = bs = z_i
            bn = np.zeros(0)
        qf, qa, qs, qc, qn = nq_fa // A, nq_fa % A, nq_s, nq_c, nq_n  # one queue entry per node: already unique
        if e == E - 1:
            add(_DRP, bf * A + ba, bn)
            add(_DRP, qf * A + qa, qn)
            left += float(bn.sum() + qn.sum())
        cnt3 = cnt.reshape(7, F, A)
        scores[e] = cp.weight(e) * float(np.sum(util[:, None] * (cnt3[_DRP] + cnt3[_HLD] * hold_cost)))
        if detail:
            tix = np.nonzero(touched)[0]
            for f, a1, v in zip((tix // A).tolist(), (tix % A - 1).tolist(), cnt[:, tix].T.tolist()):
                flows_out.append(built(FlowEpochStats, {"epoch": e, "flow": fnames[f], "cohort": a1,
                                                        **dict(zip(_FIELDS, v))}))
    return SimResult(
        score=float(sum(scores)), score_by_epoch=tuple(scores), flows=tuple(flows_out), pools=tuple(pool_stats),
        left_at_horizon=left,
    )


def admit_arrays(cp: Compiled) -> PolicyArrays:
    """:func:`.planner.admit_policy` built over arrays (:func:`.reach.admit_decision` for every cohort, epoch of its
    life and step: proportional to capacity now; held at entry until every step can run; waiting between steps
    when the next has no capacity now; refused when no schedule completes the jobs while they live)."""
    from .reach import entry_steps

    F, E, S = cp.n_flows, cp.n_epochs, max(cp.n_steps)
    tau = cp.tau
    sets: dict[tuple[int, ...], int] = {}
    set_of = np.full((F, S), -1, dtype=np.int64)
    for f, steps in enumerate(cp.allowed):
        for s, pools in enumerate(steps):
            set_of[f, s] = sets.setdefault(pools, len(sets))
    # the decision table: per (epoch, pool set) its pools and capacity shares
    t_pool: list[int] = []
    t_prob: list[float] = []
    t_start = np.zeros((E, len(sets)), dtype=np.int64)
    t_len = np.zeros((E, len(sets)), dtype=np.int64)
    for e in range(E):
        for pools, k in sets.items():
            caps = [(c, float(cp.caps[e, c])) for c in sorted(pools) if cp.caps[e, c] > 0]
            tot = sum(v for _, v in caps)
            t_start[e, k], t_len[e, k] = len(t_pool), len(caps)
            t_pool += [c for c, _ in caps]
            t_prob += [v / tot for _, v in caps]
    nsteps = np.array(cp.n_steps, dtype=np.int64)
    step_ok = np.arange(S)[None, :] < nsteps[:, None]  # (F, S)
    sid = np.maximum(set_of, 0)
    serve = np.stack([step_ok & (t_len[e][sid] > 0) for e in range(E)], axis=1)  # (F, E, S)
    # the earliest epoch >= e in which step s can be served (E: none), with a row E for "past the horizon"
    nxt = np.full((F, E + 1, S), E, dtype=np.int64)
    for e in reversed(range(E)):
        nxt[:, e] = np.where(serve[:, e], e, nxt[:, e + 1])
    # every step from s on can be served in epoch e (steps past the flow's last count as served)
    all_now = np.flip(np.cumprod(np.flip(serve | ~step_ok[:, None, :], axis=2), axis=2), axis=2).astype(bool)
    first = entry_steps(cp)
    if not first:
        z = np.zeros(0, dtype=np.int64)
        return PolicyArrays.of(cp, z, z, np.zeros(0), z, np.array(t_pool, dtype=np.int64), np.array(t_prob))
    co = np.array([(f, a, s0) for (f, a), s0 in first.items()], dtype=np.int64)
    cf, ca, cs0 = co[:, 0], co[:, 1], co[:, 2]
    a0 = np.maximum(ca, 0)
    life = np.array(cp.lifespan)[cf]
    hi = np.where(ca >= 0, (ca + 1) * tau + life, 0.0)
    for i in np.nonzero(ca < 0)[0]:
        hi[i] = cp.initial_window[int(cf[i])][1]
    end = a0.copy()
    for e in range(1, E):
        end = np.where((e >= a0) & (e * tau < hi), np.maximum(end, e), end)
    eg = np.arange(E)[None, :, None]
    sg = np.arange(S)[None, None, :]
    mask = (eg >= a0[:, None, None]) & (eg <= end[:, None, None]) & (sg >= cs0[:, None, None]) & (
        sg < nsteps[cf][:, None, None])
    ci, ke, ks = np.nonzero(mask)
    kf, ka = cf[ci], ca[ci]
    # doomed from (e, s): follow the earliest serving epoch step by step; past the cohort's life: refused
    t = ke.copy()
    for k in range(S):
        on = (k >= ks) & (k < nsteps[kf])
        t = np.where(on, nxt[kf, t, k], t)
    doomed = t > end[ci]
    now = serve[kf, ke, ks]
    hold = ~doomed & (((ks == cs0[ci]) & ~all_now[kf, ke, ks]) | ~now)
    prop = ~doomed & ~hold
    codes = ((ke * F + kf) * (E + 1) + (ka + 1)) * S + ks
    sk = set_of[kf, ks]
    lens = np.where(prop, t_len[ke, sk], 0)
    starts = np.where(prop, t_start[ke, sk], 0)
    return PolicyArrays.of(cp, codes, lens, hold.astype(float), starts, np.array(t_pool, dtype=np.int64),
                           np.array(t_prob, dtype=float))


__all__ = ["PolicyArrays", "admit_arrays", "simulate_arrays"]
