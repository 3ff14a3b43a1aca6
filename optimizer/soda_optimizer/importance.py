"""Importance: resource functions, value functions and their composition (SODA paper section 3).

Given a glued data-flow graph (:func:`graph.glue`) and a batch of K allocations (a K x P matrix of
mips, one column per PE in ``Evaluator.pes`` order), compute every stream's rate and the total
importance  sum_s w_s V_s(rate_s)  for all K allocations at once (numpy, vectorised over K).

Rates propagate in topological order ("ready list scheduling", paper Fig. 7):
- a PE's input rate r_i combines its input streams' rates (``ResourceFunction.combine``: sum by
  default, or min/max) plus its primal inputs;
- a source PE (no input streams) produces ``r_o = min(a m, primal)``; any other PE produces
  ``r_o = min(a r_i m, b r_i)``; a PE whose function has curves (issue 38, a departure: the
  learner's family, :class:`.model.ResourceFunction`) produces ``output(min(r_i, need^-1(m)))``
  (a source with its primal rate as r_i). Paper-form PEs are evaluated by the very same numpy
  expressions as before curves existed, so a Scenario without curves gets the same numbers;
- a stream carries ``r_o x selectivity``; a sink (terminal output) carries r_o.
Cycles (templates with ``allow_cycles``) are resolved by fixed-point iteration from zero rates;
the iteration is monotone for these RFs (curves are non-decreasing), so it converges to the least
fixed point.

A PE's saturation (:meth:`Evaluator.saturation`, the mips past which its output cannot grow; the
stages cap goals with it) is ``b/a`` (``primal/a`` for a source) in the paper's form, whatever the
input; with curves it grows with the input, and it is ``need`` at the largest input rate the PE can
receive (every producer unbounded: :meth:`Evaluator.max_inputs`), so the cap never cuts mips a PE
could use.

A graph of :data:`BATCH_PES` PEs or more without a cycle (the admitted set's, thousands of PEs) is
evaluated a topological generation at a time (``nx.topological_generations``), its PEs grouped by
the expression of their rate, and its valued streams and sinks as columns summed in order (issue
49): the same expression per PE and per term on the same numbers, so the same floats as one PE at
a time, at a few numpy calls per generation instead of per PE.

Sub-results are cached (paper 5.1.3: "a cache of previous results is also employed"): an
:class:`Evaluator` caches the importance of allocations it has seen, keyed by the allocation row.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import networkx as nx
import numpy as np

from .graph import GluedGraph
from .model import ValueFunction


def value(vf: ValueFunction, rate: np.ndarray) -> np.ndarray:
    """Evaluate a value function on an array of rates."""
    if vf.kind == "zero":
        return np.zeros_like(rate)
    if vf.kind == "linear":
        return vf.slope * rate
    if vf.kind == "capped":
        assert vf.cap is not None
        return vf.slope * np.minimum(rate, vf.cap)
    xs = np.array([p[0] for p in vf.points])
    ys = np.array([p[1] for p in vf.points])
    return np.interp(rate, xs, ys, right=ys[-1])


SATURATION_CAP = 1e12  # mips: a curved PE's saturation when its input is unbounded


class Evaluator:
    """Vectorised importance and rate evaluation over one glued graph (or a sub-graph)."""

    def __init__(self, glued: GluedGraph, pes: Sequence[str] | None = None, max_iter: int = 200, tol: float = 1e-9):
        # the whole graph when ``pes`` is all of it (a job's one weak component: no subgraph view
        # to filter every look-up through; issue 49, the first answer builds one per component)
        whole = pes is None or len(pes) == glued.graph.number_of_nodes()
        self.glued = glued
        # a weak component's subgraph view only when asked for (:attr:`graph`): its edges are read
        # in the view's order off the whole graph (issue 49, h49f: the filtered views were a fifth
        # of the first answer's Evaluators)
        self._graph: nx.DiGraph | None = glued.graph if whole else None
        self.pes: list[str] = sorted(glued.graph.nodes) if pes is None else list(pes)
        self.index = {p: i for i, p in enumerate(self.pes)}
        # one traversal: the topological generations (``nx.topological_sort`` is their
        # concatenation, the order kept), or a cycle
        self._generations: list[list[str]] = []
        depth = None if whole else _depths(glued.graph)
        if depth is not None:  # a weak component's generations are the whole graph's, filtered
            gens: dict[int, list[str]] = {}
            for p in self.pes:
                gens.setdefault(depth[p], []).append(p)
            self._generations = [gens[d] for d in sorted(gens)]
            topo, self.cyclic = [p for gen in self._generations for p in gen], False
        else:
            try:
                self._generations = [list(gen) for gen in nx.topological_generations(self.graph)]
                topo = [p for gen in self._generations for p in gen]
                self.cyclic = False
            except nx.NetworkXUnfeasible:
                topo, self.cyclic = self.pes, True
        self.order = [self.index[p] for p in topo]
        self.max_iter, self.tol = max_iter, tol
        self._in: list[list[tuple[int, float]]] = [[] for _ in self.pes]  # (src index, selectivity)
        self._edges: list[tuple[int, float, float, ValueFunction, float]] = []  # src, sel, w, vf, bytes
        self.edge_keys: list[tuple[str, str]] = []
        index = self.index
        # the whole graph's successor dicts, in ``g.edges``'s order (issue 49, h49f: the edge view's
        # generator was a third of an Evaluator's construction); a subgraph view's own order as before
        succ = glued.graph._succ
        triples = ((u, v, d) for u, nbrs in succ.items() for v, d in nbrs.items()) if whole else _view_edges(succ, self.pes)
        for u, v, d in triples:
            iu, sel = index[u], d["selectivity"]
            self._in[index[v]].append((iu, sel))
            self._edges.append((iu, sel, d["weight"], d["value"], d["bytes_per_tuple"]))
            self.edge_keys.append((u, v))
        node = glued.graph._node  # the same attributes, not through a view
        nd = [node[p] for p in self.pes]
        self.specs = [d["spec"] for d in nd]  # each PE's :class:`~.model.PE` (``glued.spec``), in ``pes`` order
        self._rf = [p.rf for p in self.specs]
        self._a = np.array([rf.a for rf in self._rf])
        self._b = np.array([rf.b for rf in self._rf])
        self._combine = [rf.combine for rf in self._rf]
        self._curved = [bool(rf.need) for rf in self._rf]  # ``rf.curved``
        self._primal = np.array([d["primal_rate"] for d in nd])
        self._sinks = [(i, w, vf) for i, d in enumerate(nd) for (w, vf) in d["sinks"]]
        # :meth:`outputs`'s parameters as Python floats (the same float64 products; issue 49, h49f:
        # indexing the arrays per PE and evaluation made numpy scalars)
        self._abp = list(zip(self._a.tolist(), self._b.tolist(), self._primal.tolist()))
        self._sat: np.ndarray | None = None
        self._cache: dict[bytes, float] = {}
        self._max_in: np.ndarray | None = None
        self._gens: list[_Generation] | None = None  # :meth:`_batched`, built on the first large evaluation
        self._terms: _Terms | None = None

    @property
    def graph(self) -> nx.DiGraph:
        """The graph evaluated: the glued graph, or a view of its PEs ``pes``."""
        if self._graph is None:
            self._graph = self.glued.graph.subgraph(self.pes)
        return self._graph

    # ------------------------------------------------------------------ rates
    def outputs(self, alloc: np.ndarray) -> np.ndarray:
        """Output rate r_o of every PE: (K x P) allocations -> (K x P) rates."""
        alloc = np.atleast_2d(np.asarray(alloc, dtype=float))
        if not self.cyclic and len(self.pes) >= BATCH_PES:
            return self._batched(alloc)
        out = np.zeros_like(alloc)
        for _ in range(self.max_iter if self.cyclic else 1):
            prev = out.copy()
            for i in self.order:
                ins = self._in[i]
                m = alloc[:, i]
                a, b, primal = self._abp[i]
                if not ins:
                    if self._curved[i]:
                        out[:, i] = self._rf[i].rate_out(self._primal[i], m, source=True)
                    else:
                        out[:, i] = np.minimum(a * m, primal)
                    continue
                if len(ins) == 1:
                    r_i = out[:, ins[0][0]] * ins[0][1]
                else:
                    rates = np.stack([out[:, s] * sel for s, sel in ins], axis=1)
                    c = self._combine[i]
                    r_i = rates.sum(axis=1) if c == "sum" else rates.min(axis=1) if c == "min" else rates.max(axis=1)
                r_i = r_i + primal
                if self._curved[i]:
                    out[:, i] = self._rf[i].rate_out(r_i, m)
                else:
                    out[:, i] = np.minimum(a * r_i * m, b * r_i)
            if not self.cyclic or np.max(np.abs(out - prev), initial=0.0) <= self.tol:
                break
        return out

    def stream_rates(self, alloc: np.ndarray) -> np.ndarray:
        """Rate of every edge (K x E), in ``edge_keys`` order."""
        out = self.outputs(alloc)
        if not self._edges:
            return np.zeros((out.shape[0], 0))
        return np.stack([out[:, s] * sel for s, sel, *_ in self._edges], axis=1)

    def traffic(self, alloc: np.ndarray) -> dict[tuple[str, str], float]:
        """t(p1, p2) = rate x bytes_per_tuple for one allocation (macroW's input)."""
        r = self.stream_rates(np.atleast_2d(alloc))[0]
        return {k: float(r[j] * e[4]) for j, (k, e) in enumerate(zip(self.edge_keys, self._edges))}

    # ------------------------------------------------------------------ importance
    def importance(self, alloc: np.ndarray) -> np.ndarray:
        """Total importance for each of K allocations (vectorised)."""
        alloc = np.atleast_2d(np.asarray(alloc, dtype=float))
        out = self.outputs(alloc)
        if len(self.pes) >= BATCH_PES:
            t = self._term_values(out)
            return np.cumsum(t, axis=1)[:, -1] if t.shape[1] else np.zeros(alloc.shape[0])  # in order, from 0, as below
        total = np.zeros(alloc.shape[0])
        for s, sel, w, vf, _ in self._edges:
            if w > 0 and vf.kind != "zero":
                total += w * value(vf, out[:, s] * sel)
        for i, w, vf in self._sinks:
            if w > 0:
                total += w * value(vf, out[:, i])
        return total

    def importance_parts(self, alloc: np.ndarray, part: np.ndarray, n: int) -> np.ndarray:
        """(K x ``n``): the importance of each part for K allocations, PE ``i`` in part ``part[i]``
        (a stream counts in its source's part: parts must be unions of weak components). Their
        sum over parts is :meth:`importance`."""
        alloc = np.atleast_2d(np.asarray(alloc, dtype=float))
        out = self.outputs(alloc)
        total = np.zeros((alloc.shape[0], n))
        if len(self.pes) >= BATCH_PES:
            t = self._term_values(out)
            tp = part[self._term_plan().pe]
            # each part's terms in order, from 0, as below: the k-th term of every part at once
            order = np.argsort(tp, kind="stable")
            starts = np.searchsorted(tp[order], tp[order], side="left")
            rank = np.arange(len(order)) - starts
            for k in range(int(rank.max(initial=-1)) + 1):
                cols = order[rank == k]
                total[:, tp[cols]] += t[:, cols]
            return total
        for s, sel, w, vf, _ in self._edges:
            if w > 0 and vf.kind != "zero":
                total[:, part[s]] += w * value(vf, out[:, s] * sel)
        for i, w, vf in self._sinks:
            if w > 0:
                total[:, part[i]] += w * value(vf, out[:, i])
        return total

    def importance_cached(self, alloc: np.ndarray) -> np.ndarray:
        """Like :meth:`importance`, but rows already seen come from the cache."""
        alloc = np.atleast_2d(np.asarray(alloc, dtype=float))
        keys = [row.tobytes() for row in alloc]
        miss = [k for k, key in enumerate(keys) if key not in self._cache]
        if miss:
            vals = self.importance(alloc[miss])
            for k, v in zip(miss, vals):
                self._cache[keys[k]] = float(v)
        return np.array([self._cache[key] for key in keys])

    def max_inputs(self) -> np.ndarray:
        """The largest input rate (a source's: its primal rate) each PE can receive, with every PE
        unbounded: the bounds of :mod:`.screen`, propagated through this graph."""
        if self._max_in is not None:
            return self._max_in
        r_in = np.zeros(len(self.pes))
        out = np.zeros(len(self.pes))
        with np.errstate(over="ignore", invalid="ignore"):
            for _ in range(self.max_iter if self.cyclic else 1):
                prev = out.copy()
                for i in self.order:
                    ins = self._in[i]
                    if ins:
                        rates = [out[s] * sel for s, sel in ins]
                        c = self._combine[i]
                        r = sum(rates) if c == "sum" else min(rates) if c == "min" else max(rates)
                    else:
                        r = 0.0
                    r_in[i] = r + self._primal[i]
                    out[i] = float(self._rf[i].max_output(r_in[i], source=not ins))
                if not self.cyclic or np.max(np.abs(out - prev), initial=0.0) <= self.tol:
                    break
        self._max_in = np.where(np.isfinite(r_in), r_in, np.inf)
        return self._max_in

    def saturation(self) -> np.ndarray:
        """Mips beyond which a PE's output cannot grow: b/a for transforms, primal/a for sources;
        with curves, its need at the largest input it can receive (:meth:`max_inputs`), at most
        :data:`SATURATION_CAP` (the stages take whole units of it). Computed once per Evaluator
        (issue 49, h49f: three times per component curve) and read-only."""
        if self._sat is not None:
            return self._sat
        src = np.array([not ins for ins in self._in])
        sat = np.where(src, self._primal / self._a, self._b / self._a)
        if any(self._curved):
            r_max = self.max_inputs()
            for i, curved in enumerate(self._curved):
                if curved:
                    sat[i] = min(float(self._rf[i].saturation(r_max[i])), SATURATION_CAP)
        sat.setflags(write=False)
        self._sat = sat
        return sat

    # ------------------------------------------------------------------ large graphs, a generation at a time
    def _batched(self, alloc: np.ndarray) -> np.ndarray:
        """:meth:`outputs` of an acyclic graph a topological generation at a time (issue 49: the
        admitted set's Evaluator, thousands of PEs, spent 25 ms per evaluation in a numpy call per
        PE). Each PE's rate is the same expression as in :meth:`outputs`, on the same numbers, so
        the same floats; curved PEs and PEs of three inputs or more go one at a time as there."""
        if self._gens is None:
            self._gens = [_Generation.of(self, [self.index[p] for p in gen]) for gen in self._generations]
        out = np.zeros_like(alloc)
        for gen in self._gens:
            if len(gen.src):
                out[:, gen.src] = np.minimum(gen.src_a * alloc[:, gen.src], gen.src_primal)
            if len(gen.one):
                r_i = out[:, gen.one_in] * gen.one_sel
                r_i = r_i + gen.one_primal
                out[:, gen.one] = np.minimum(gen.one_a * r_i * alloc[:, gen.one], gen.one_b * r_i)
            for c, (idx, s0, l0, s1, l1, pr, a, b) in gen.two.items():
                x0, x1 = out[:, s0] * l0, out[:, s1] * l1
                r_i = x0 + x1 if c == "sum" else np.minimum(x0, x1) if c == "min" else np.maximum(x0, x1)
                r_i = r_i + pr
                out[:, idx] = np.minimum(a * r_i * alloc[:, idx], b * r_i)
            for i in gen.rest:
                out[:, i] = self._one_pe(i, out, alloc[:, i])
        return out

    def _one_pe(self, i: int, out: np.ndarray, m: np.ndarray) -> np.ndarray:
        """PE ``i``'s output rate, as in :meth:`outputs`."""
        ins = self._in[i]
        if not ins:
            if self._curved[i]:
                return np.asarray(self._rf[i].rate_out(self._primal[i], m, source=True))
            return np.minimum(self._a[i] * m, self._primal[i])
        if len(ins) == 1:
            r_i = out[:, ins[0][0]] * ins[0][1]
        else:
            rates = np.stack([out[:, s] * sel for s, sel in ins], axis=1)
            c = self._combine[i]
            r_i = rates.sum(axis=1) if c == "sum" else rates.min(axis=1) if c == "min" else rates.max(axis=1)
        r_i = r_i + self._primal[i]
        if self._curved[i]:
            return np.asarray(self._rf[i].rate_out(r_i, m))
        return np.minimum(self._a[i] * r_i * m, self._b[i] * r_i)

    def _term_plan(self) -> _Terms:
        if self._terms is None:
            self._terms = _Terms.of(self)
        return self._terms

    def _term_values(self, out: np.ndarray) -> np.ndarray:
        """(K x terms): each valued stream's and sink's ``w x value(rate)``, in :meth:`importance`'s
        order (the streams, then the sinks), each the same expression as there."""
        tp = self._term_plan()
        rate = out[:, tp.pe] * tp.sel  # a sink's selectivity is None there: its column is kept as is
        rate[:, tp.sink] = out[:, tp.pe[tp.sink]]
        v = np.zeros_like(rate)
        v[:, tp.linear] = tp.slope[tp.linear] * rate[:, tp.linear]
        v[:, tp.capped] = tp.slope[tp.capped] * np.minimum(rate[:, tp.capped], tp.cap[tp.capped])
        for j in tp.other:
            v[:, j] = value(tp.vf[j], rate[:, j])
        return tp.w * v


def _view_edges(succ: dict, pes: list[str]) -> Iterator[tuple[str, str, dict]]:
    """``graph.subgraph(pes).edges(data=True)`` of a DiGraph whose successor dicts are ``succ``,
    in the same order, without the view (networkx's filtered adjacency: the nodes in the order of
    the set of ``pes`` when it has less than half the graph's nodes, else in the graph's; each
    node's successors in the graph's order)."""
    nodes = set(p for p in pes if p in succ)  # as ``show_nodes(G.nbunch_iter(pes))`` builds it
    outer = (n for n in nodes if n in succ) if 2 * len(nodes) < len(succ) else (n for n in succ if n in nodes)
    for u in outer:
        for v, d in succ[u].items():
            if v in nodes:
                yield u, v, d


_DEPTHS: weakref.WeakKeyDictionary[nx.DiGraph, dict[str, int] | None] = weakref.WeakKeyDictionary()


def _depths(g: nx.DiGraph) -> dict[str, int] | None:
    """Each node's topological generation in ``g`` (None: ``g`` has a cycle), once per graph
    (issue 49: the first answer's Evaluators of a job's weak components each sorted their own
    subgraph view, a filtered look-up per node and edge; a component's nodes keep their
    generations, since no path leaves it)."""
    if g not in _DEPTHS:
        try:
            _DEPTHS[g] = {p: d for d, gen in enumerate(nx.topological_generations(g)) for p in gen}
        except nx.NetworkXUnfeasible:
            _DEPTHS[g] = None
    return _DEPTHS[g]


BATCH_PES = 32  # from this many PEs (and no cycle), :meth:`Evaluator.outputs` goes a generation at a time


@dataclass
class _Generation:
    """The PEs of one topological generation, grouped by the expression of their rate."""

    src: np.ndarray
    src_a: np.ndarray
    src_primal: np.ndarray
    one: np.ndarray
    one_in: np.ndarray
    one_sel: np.ndarray
    one_primal: np.ndarray
    one_a: np.ndarray
    one_b: np.ndarray
    two: dict[str, tuple[np.ndarray, ...]]
    rest: list[int]

    @classmethod
    def of(cls, ev: Evaluator, idx: list[int]) -> _Generation:
        src = [i for i in idx if not ev._in[i] and not ev._curved[i]]
        one = [i for i in idx if len(ev._in[i]) == 1 and not ev._curved[i]]
        two: dict[str, tuple[np.ndarray, ...]] = {}
        for c in ("sum", "min", "max"):
            ii = [i for i in idx if len(ev._in[i]) == 2 and not ev._curved[i] and ev._combine[i] == c]
            if ii:
                two[c] = (np.array(ii), np.array([ev._in[i][0][0] for i in ii]), np.array([ev._in[i][0][1] for i in ii]),
                          np.array([ev._in[i][1][0] for i in ii]), np.array([ev._in[i][1][1] for i in ii]),
                          ev._primal[ii], ev._a[ii], ev._b[ii])
        done = set(src) | set(one) | {i for t in two.values() for i in t[0].tolist()}
        a_src, a_one = np.array(src, dtype=np.int64), np.array(one, dtype=np.int64)
        return cls(a_src, ev._a[a_src], ev._primal[a_src], a_one, np.array([ev._in[i][0][0] for i in one], dtype=np.int64),
                   np.array([ev._in[i][0][1] for i in one], dtype=float), ev._primal[a_one], ev._a[a_one], ev._b[a_one], two,
                   [i for i in idx if i not in done])


@dataclass
class _Terms:
    """The valued streams (weight > 0, value not zero) and sinks (weight > 0) of an Evaluator, in
    :meth:`Evaluator.importance`'s order: the PE whose rate each reads, and its value function."""

    pe: np.ndarray
    sel: np.ndarray  # 1.0 for a sink (its column is then overwritten with the PE's rate itself)
    sink: np.ndarray
    w: np.ndarray
    slope: np.ndarray
    cap: np.ndarray
    linear: np.ndarray
    capped: np.ndarray
    other: list[int]
    vf: list[ValueFunction]

    @classmethod
    def of(cls, ev: Evaluator) -> _Terms:
        rows = [(s, sel, w, vf, False) for s, sel, w, vf, _ in ev._edges if w > 0 and vf.kind != "zero"]
        rows += [(i, 1.0, w, vf, True) for i, w, vf in ev._sinks if w > 0]
        vfs = [r[3] for r in rows]
        kinds = [vf.kind for vf in vfs]
        return cls(np.array([r[0] for r in rows], dtype=np.int64), np.array([r[1] for r in rows], dtype=float),
                   np.array([j for j, r in enumerate(rows) if r[4]], dtype=np.int64), np.array([r[2] for r in rows], dtype=float),
                   np.array([vf.slope for vf in vfs], dtype=float), np.array([vf.cap if vf.cap is not None else 0.0 for vf in vfs], dtype=float),
                   np.array([j for j, k in enumerate(kinds) if k == "linear"], dtype=np.int64),
                   np.array([j for j, k in enumerate(kinds) if k == "capped"], dtype=np.int64),
                   [j for j, k in enumerate(kinds) if k not in ("linear", "capped")], vfs)
