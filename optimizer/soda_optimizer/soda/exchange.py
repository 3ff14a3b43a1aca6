"""macroQ's last refinement: mips moved from one admitted PE to another while that buys importance
(issue 49: "never below fixed 100-mips units").

The paper's macroQ (SODA section 5.1, Fig. 10) answers on the grid of its last resolution: each
job's curve gives the best split of the job's units among its PEs, and the knapsack the best
units per job. The automatic resolution gives every job its own grid and the capacity whole units
leave over to single PEs (:func:`.refine.polish`), so its answer lies on no one grid, and a grid
it did not search may hold a better one: on the paper's section 7.1 jobs (three-PE pipelines whose
value is the product of their PEs' shares) fixed 100-mips units beat it by up to 8 importance
(0.04%), because the answer left 100-300 mips on a PE of a low-weight job that a PE of a heavier
one turns into more.

Departure from the paper: once an answer is chosen (its admitted jobs and templates fixed), a
local search over *transfers*: ``delta`` mips taken from one PE (never below its floor: its
minimum and the policy's ``pe_floor_mips``; never from a PE past its maximum or saturation, whose
excess is the knee's to free) and given to another (never past its maximum or its saturation,
what :func:`.refine.polish` grows to), in steps from :data:`STEPS` coarse to fine,
the best transfer first, while one gains importance. Admission, rank legality and the used
capacity never grow (a transfer's surplus, when the taker has less room than ``delta``, stays
free; a PE may also take from what is free alone, as :func:`.refine.polish` does, in ``delta``
steps). A PE's gain depends on its weak component only, so a transfer between two components is
scored by the two PEs' own moves (each component's importance read apart,
:meth:`.Evaluator.importance_parts`); one within a component is scored jointly (the best few
takers and givers of every component, all their pairs). A move re-scores the one or two
components it touched. It stops at its ``expired`` clock with the best answer so far: every move
gains, so any prefix of the moves is an answer at least as good as the one it started from.
"""

from __future__ import annotations

from collections.abc import Callable

import networkx as nx
import numpy as np

from ..importance import Evaluator

STEPS = (1000.0, 300.0, 100.0, 30.0, 10.0)  # mips per transfer, coarse to fine (100: the plain grid's unit)
PAIRS = 3  # within a component, the pairs of its best PAIRS takers and PAIRS givers are scored jointly
CROSS = 16  # between components, the best CROSS takers and CROSS givers are paired


def exchange(ev: Evaluator, goals: dict[str, float], floors: dict[str, float], H: float,
             expired: Callable[[], bool], steps: tuple[float, ...] = STEPS,
             max_moves: int | None = None) -> tuple[dict[str, float], float]:
    """``goals`` (every PE of ``ev``, its admitted set) after the transfers that gain importance,
    and their importance (module docstring). ``floors``: each PE's least mips; ``H``: the
    capacity (a transfer never makes the goals use more than they do or than ``H``)."""
    if len(ev.pes) < 2:
        return goals, float(ev.importance(np.array([[goals[p] for p in ev.pes]]))[0]) if ev.pes else 0.0
    x = np.array([goals[p] for p in ev.pes], dtype=float)
    lo = np.minimum(np.array([floors.get(p, 0.0) for p in ev.pes], dtype=float), x)
    cap0 = np.minimum(np.array([ev.glued.spec(p).max_mips for p in ev.pes], dtype=float), ev.saturation())
    free = max(0.0, H - float(x.sum()))
    comps = [sorted(ev.index[p] for p in c) for c in nx.weakly_connected_components(ev.graph)]
    s = _State(ev, x, lo, cap0, free, comps)
    limit = max_moves if max_moves is not None else 4 * len(ev.pes) + 64  # per step
    for delta in steps:
        if expired():
            break
        s.score_all(delta)
        moves = 0
        while moves < limit and not expired():
            best = s.best_move()
            if best is None:
                break
            s.apply(*best, delta)
            moves += 1
    x = s.x
    return {p: float(v) for p, v in zip(ev.pes, x)}, float(ev.importance(x[None, :])[0])


class _State:
    """The allocation and, per PE, the gain of taking / the loss of giving one transfer's mips."""

    def __init__(self, ev: Evaluator, x: np.ndarray, lo: np.ndarray, cap0: np.ndarray, free: float, comps: list[list[int]]):
        self.ev, self.x, self.lo, self.free, self.comps = ev, x, lo, free, comps
        self.cap0 = cap0  # maximum and saturation
        self.cap = np.maximum(cap0, x)  # a PE past its cap neither takes nor gives
        n = len(x)
        self.part = np.zeros(n, dtype=np.int64)
        self.pos = np.zeros(n, dtype=np.int64)
        for ci, idx in enumerate(comps):
            self.part[idx] = ci
            self.pos[idx] = np.arange(len(idx))
        self.up = np.full(n, -np.inf)  # importance gained by taking ``take[i]`` mips
        self.down = np.full(n, np.inf)  # importance lost by giving ``give[i]`` mips
        self.take = np.zeros(n)
        self.give = np.zeros(n)
        self.intra: list[tuple[float, int, int]] = [(-np.inf, -1, -1)] * len(comps)  # best joint pair per component
        self.subs: dict[int, Evaluator] = {}
        self.base = np.zeros(len(comps))
        self.tol = 0.0

    def _amounts(self, idx: np.ndarray, delta: float) -> tuple[np.ndarray, np.ndarray]:
        take = np.minimum(delta, self.cap[idx] - self.x[idx])
        # a PE past its cap gives nothing: what it holds there is the knee's to free (:mod:`.knee`,
        # then :func:`.refine.admit_freed` may admit a job with it)
        give = np.where(self.x[idx] > self.cap0[idx] + 1e-9, 0.0, np.minimum(delta, self.x[idx] - self.lo[idx]))
        return np.where(take > 1e-9, take, 0.0), np.where(give > 1e-9, give, 0.0)

    def score_all(self, delta: float) -> None:
        """Every PE's gain and loss, and every component's best joint pair, in one evaluation of
        rows over the whole admitted set (row k moves the k-th PE of every component)."""
        ev, x, part, pos = self.ev, self.x, self.part, self.pos
        n_c = len(self.comps)
        rows_n = max(len(c) for c in self.comps)
        idx = np.arange(len(x))
        take, give = self._amounts(idx, delta)
        self.take, self.give = take, give
        rows = np.repeat(x[None, :], 1 + 2 * rows_n, axis=0)
        rows[1 + pos, idx] += take
        rows[1 + rows_n + pos, idx] -= give
        parts = ev.importance_parts(rows, part, n_c)
        self.base = parts[0].copy()
        self.tol = 1e-9 * (1.0 + abs(float(self.base.sum())))
        up = parts[1 + pos, part] - self.base[part]
        down = self.base[part] - parts[1 + rows_n + pos, part]
        self.up = np.where(take > 0, up, -np.inf)
        self.down = np.where(give > 0, down, np.inf)
        self._score_intra(list(range(n_c)), ev, part)

    def _score_intra(self, cis: list[int], ev: Evaluator, part: np.ndarray) -> None:
        """The best transfer within each component of ``cis`` (joint: both PEs move in one row)."""
        pairs: list[list[tuple[int, int]]] = []
        for ci in cis:
            idx = np.array(self.comps[ci])
            if len(idx) < 2:
                pairs.append([])
                continue
            takers = idx[np.argsort(-self.up[idx], kind="stable")[:PAIRS]]
            givers = idx[np.argsort(self.down[idx], kind="stable")[:PAIRS]]
            pairs.append([(int(p), int(q)) for p in takers for q in givers
                          if p != q and self.take[p] > 0 and self.give[q] > 0 and self.take[p] <= self.free + self.give[q]])
        k = max((len(ps) for ps in pairs), default=0)
        for ci in cis:
            self.intra[ci] = (-np.inf, -1, -1)
        if k == 0:
            return
        rows = np.repeat(self.x[None, :], k, axis=0)
        for ps in pairs:
            for r, (p, q) in enumerate(ps):
                rows[r, p] += self.take[p]
                rows[r, q] -= self.give[q]
        vals = ev.importance_parts(rows, part, len(self.comps))
        for ci, ps in zip(cis, pairs):
            for r, (p, q) in enumerate(ps):
                g = float(vals[r, ci] - self.base[ci])
                if g > self.intra[ci][0]:
                    self.intra[ci] = (g, p, q)

    def best_move(self) -> tuple[int, int] | None:
        """The transfer (taker, giver; giver -1: from what is free) that gains most, or None when
        none gains."""
        best_g, best = self.tol, None
        n = len(self.x)
        k = min(CROSS, n)
        takers = np.argpartition(-self.up, k - 1)[:k] if k < n else np.arange(n)
        givers = np.argpartition(self.down, k - 1)[:k] if k < n else np.arange(n)
        takers = takers[np.argsort(-self.up[takers], kind="stable")]
        givers = givers[np.argsort(self.down[givers], kind="stable")]
        for p in takers:
            if not np.isfinite(self.up[p]) or self.up[p] - self.down[givers[0]] <= best_g:
                break
            for q in givers:
                g = self.up[p] - self.down[q]
                if g <= best_g:
                    break
                if self.part[p] != self.part[q] and self.take[p] <= self.free + self.give[q]:
                    best_g, best = g, (int(p), int(q))
                    break
        for p in takers:  # a taker alone, from what is free (the knee's, a surplus left by a transfer)
            if self.up[p] <= best_g:
                break
            if self.take[p] <= self.free:
                best_g, best = float(self.up[p]), (int(p), -1)
                break
        for g, p, q in self.intra:
            if g > best_g and self.take[p] <= self.free + self.give[q]:  # ``free`` may have moved since it was scored
                best_g, best = g, (p, q)
        return best

    def apply(self, p: int, q: int, delta: float) -> None:
        """Move ``take[p]`` mips to p and ``give[q]`` from q (none: from what is free), then
        re-score their components."""
        self.x[p] += self.take[p]
        self.free -= self.take[p]
        if q >= 0:
            self.x[q] -= self.give[q]
            self.free += self.give[q]
        for ci in sorted({int(self.part[p])} | ({int(self.part[q])} if q >= 0 else set())):
            self._rescore(ci, delta)

    def _rescore(self, ci: int, delta: float) -> None:
        idx = np.array(self.comps[ci])
        if ci not in self.subs:
            self.subs[ci] = Evaluator(self.ev.glued, [self.ev.pes[i] for i in idx])
        sub = self.subs[ci]
        take, give = self._amounts(idx, delta)
        self.take[idx], self.give[idx] = take, give
        k = len(idx)
        rows = np.repeat(self.x[idx][None, :], 1 + 2 * k, axis=0)
        ar = np.arange(k)
        rows[1 + ar, ar] += take
        rows[1 + k + ar, ar] -= give
        v = sub.importance(rows)
        self.base[ci] = v[0]
        self.up[idx] = np.where(take > 0, v[1:1 + k] - v[0], -np.inf)
        self.down[idx] = np.where(give > 0, v[0] - v[1 + k:], np.inf)
        # the joint pairs of this component, on its own Evaluator
        self.intra[ci] = (-np.inf, -1, -1)
        if k < 2:
            return
        takers = ar[np.argsort(-self.up[idx], kind="stable")[:PAIRS]]
        givers = ar[np.argsort(self.down[idx], kind="stable")[:PAIRS]]
        pairs = [(int(a), int(b)) for a in takers for b in givers
                 if a != b and take[a] > 0 and give[b] > 0 and take[a] <= self.free + give[b]]
        if not pairs:
            return
        rows = np.repeat(self.x[idx][None, :], len(pairs), axis=0)
        for r, (a, b) in enumerate(pairs):
            rows[r, a] += take[a]
            rows[r, b] -= give[b]
        vals = sub.importance(rows) - v[0]
        r = int(np.argmax(vals))
        self.intra[ci] = (float(vals[r]), int(idx[pairs[r][0]]), int(idx[pairs[r][1]]))
