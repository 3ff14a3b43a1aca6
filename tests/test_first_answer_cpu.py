"""macroQ's first answer with less CPU (issue 49, h49e): each shortcut gives the same numbers as the
plain computation it replaces, checked against slow oracles written out here (no timing: the
seconds are in ``benchmarks/bench_first_answer.py``)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from soda_optimizer.soda import admission

NEG = -math.inf


def slow_convolve(a: list[float], b: list[float]) -> tuple[list[float], list[int]]:
    """Plain Python: the best of exactly k units (k - i on ``a``, i on ``b``), the first i of equals."""
    n = len(a) + len(b) - 1
    vals, args = [NEG] * n, [0] * n
    for k in range(n):
        for i in range(len(b)):
            if 0 <= k - i < len(a) and a[k - i] + b[i] > vals[k]:
                vals[k], args[k] = a[k - i] + b[i], i
    return vals, args


@st.composite
def step_curve(draw, monotone: bool = True) -> np.ndarray:
    """A curve of integer values (exact ties), rising at a few points (a coarse curve's shape), or any
    values when not ``monotone``."""
    n = draw(st.integers(1, 30))
    rises = draw(st.lists(st.integers(0, 4), min_size=n, max_size=n))
    keep = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    if monotone:
        return np.cumsum([r if k else 0 for r, k in zip(rises, keep)]).astype(float)
    return np.array([float(r) for r in rises])


@settings(max_examples=300, deadline=None)
@given(st.lists(step_curve(), min_size=2, max_size=4))
def test_convolving_breakpoints_gives_the_dense_values_and_arguments(curves):
    """:func:`admission._convolve_breakpoints` (pairs of the points where the curves rise) returns
    what the dense convolution does, value and first argument of equals, for every k."""
    acc = curves[0]
    for c in curves[1:]:
        got = admission._convolve_breakpoints(acc, c, 10**12)
        assert got is not None  # nondecreasing: it applies
        want_v, want_a = slow_convolve(list(acc), list(c))
        assert got[0].tolist() == want_v
        assert got[1].tolist() == want_a
        acc = got[0]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(step_curve(), step_curve(monotone=False)), min_size=2, max_size=3))
def test_convolve_equals_the_slow_convolution(curves):
    """:func:`admission.convolve`, whichever path each step takes (breakpoints, dense blocks),
    against plain Python, also on curves that fall (the breakpoints do not apply to them)."""
    got_v, got_steps = admission.convolve([SimpleNamespace(values=c) for c in curves])
    acc = list(curves[0])
    for c, arg in zip(curves[1:], got_steps):
        acc, want_a = slow_convolve(acc, list(c))
        assert arg.tolist() == want_a
    assert got_v.tolist() == acc


def test_the_dense_convolution_in_blocks_equals_one_block(monkeypatch):
    """Blocks of rows smaller than the convolution give the same arrays (curves that fall, so the
    breakpoints do not apply)."""
    rng = np.random.default_rng(5)
    curves = [SimpleNamespace(values=rng.integers(0, 9, size=k).astype(float)) for k in (40, 23, 17)]
    whole = admission.convolve(curves)
    monkeypatch.setattr(admission, "KNAPSACK_BLOCK", 23 * 3)  # three rows a block
    blocks = admission.convolve(curves)
    assert whole[0].tolist() == blocks[0].tolist()
    assert all(a.tolist() == b.tolist() for a, b in zip(whole[1], blocks[1]))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 6), st.integers(-3, 9)), min_size=1, max_size=40),
       st.floats(0.0, 5.0))
def test_the_bound_drops_only_dominated_points(pts, lam):
    """:func:`refine._undominated` keeps, per component, a point no earlier one dominates, and the
    Lagrangian's term ``max (V - lam X)`` of every component is the same, to the bit, for any
    ``lam >= 0`` (a slow scan over all points is the oracle)."""
    from soda_optimizer.soda import refine

    ID = np.array([p[0] for p in pts], dtype=np.int64)
    X = np.array([float(p[1]) for p in pts])
    V = np.array([float(p[2]) for p in pts])
    order = np.lexsort((X, ID))
    X, V, ID = X[order], V[order], ID[order]
    x2, v2, id2 = refine._undominated(X, V, ID)
    for c in set(ID.tolist()):
        full = [(x, v) for x, v, i in zip(X, V, ID) if i == c]
        kept = [(x, v) for x, v, i in zip(x2, v2, id2) if i == c]
        assert max(v - lam * x for x, v in full) == max(v - lam * x for x, v in kept)
        # nothing kept is dominated by an earlier point, and everything dropped is
        assert all(not any(xe <= x and ve >= v for xe, ve in kept[:k]) for k, (x, v) in enumerate(kept))
        assert all(any(xk <= x and vk >= v for xk, vk in kept) for x, v in full)


def test_each_component_curve_of_the_first_pass_is_built_once_and_used(monkeypatch):
    """An option whose components have different own units was built twice on main (each curve on
    its own unit, then again on the finest): on LSD, 37 of the first pass's 187 curves were thrown
    away. Now every curve built is one an option uses, and the options are the same as the two-step
    way's (each component on the finest own unit of its option, :func:`admission.own_unit`)."""
    from soda_optimizer import workloads
    from soda_optimizer.importance import Evaluator
    from soda_optimizer.model import Policy

    s = workloads.scenario(workloads.lsd(), workloads.nodes(30), Policy())
    built: list[object] = []
    real = admission.component_curve

    def counted(*a, **k):
        c = real(*a, **k)
        built.append(c)
        return c

    monkeypatch.setattr(admission, "component_curve", counted)
    g = s.capacity_mips / 128
    items = admission.Items(s, g, per_job=True, deadline=math.inf, jobs=[j.name for j in s.jobs], coarse=True)
    multi = 0
    for gi in range(len(items.groups)):
        for o in items.build(gi):
            glued = s.glued(o.choice)
            comps = glued.components()
            want = min(admission.own_unit(Evaluator(glued, sorted(c)), g) for c in comps)
            assert all(c.unit == want for c in o.curves)
            multi += len(comps) > 1
    used = {id(c) for c in items.used_curves()}
    assert multi > 0
    assert all(id(c) in used for c in built)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 100_000), st.integers(2, 64))
def test_the_spread_levels_are_numpy_linspace_rounded(span, per):
    """The hybrid curve's coarse levels (:func:`curves._spread`, plain Python) are the rounded
    integers of ``np.linspace`` as before, each once, sorted."""
    from soda_optimizer.soda import curves

    want = sorted({int(round(x)) for x in np.linspace(0, span, min(per, span + 1))})
    assert curves._spread(span, per) == want


@st.composite
def big_graphs(draw):
    """A glued graph of at least :data:`importance.BATCH_PES` PEs: random DAG templates (fan-in up to
    3, every combine), some PEs on curves, every kind of value function, weights 0 or more."""
    from soda_optimizer import workloads
    from soda_optimizer.graph import glue
    from soda_optimizer.model import PE, Job, PrimalInput, ResourceFunction, Sink, Stream, Template, ValueFunction

    vfs = st.sampled_from([ValueFunction(kind="zero"), ValueFunction(kind="linear", slope=1.5),
                           ValueFunction(kind="capped", slope=2.0, cap=40.0),
                           ValueFunction(kind="piecewise", points=((0.0, 0.0), (10.0, 30.0), (50.0, 45.0)))])
    templates, jobs = [], []
    n_pes = 0
    while n_pes < 40:
        k = draw(st.integers(2, 9))
        pes, streams, sinks = [], [], []
        for i in range(k):
            curved = draw(st.booleans()) and draw(st.booleans())
            rf = (ResourceFunction(need=((0.0, 0.0), (10.0, 100.0), (30.0, 400.0))) if curved else
                  ResourceFunction(a=draw(st.floats(0.001, 0.1)), b=draw(st.sampled_from([0.5, 1.0])),
                                   combine=draw(st.sampled_from(["sum", "min", "max"]))))
            pes.append(PE(name=f"p{i}", kind="source" if i == 0 else "transform", rf=rf))
            if i:
                srcs = sorted(set(draw(st.lists(st.integers(0, i - 1), min_size=1, max_size=3))))
                streams += [Stream(src=f"p{s}", dst=f"p{i}", weight=draw(st.sampled_from([0.0, 1.0])), value=draw(vfs),
                                   selectivity=draw(st.sampled_from([0.5, 1.0]))) for s in srcs]
            if draw(st.booleans()) or i == k - 1:
                sinks.append(Sink(pe=f"p{i}", weight=draw(st.sampled_from([0.0, 1.0, 5.0])), value=draw(vfs)))
        name = f"t{len(templates)}"
        templates.append(Template(name=name, pes=tuple(pes), streams=tuple(streams), sinks=tuple(sinks),
                                  primal_inputs=(PrimalInput(pe="p0", rate=draw(st.sampled_from([50.0, 100.0]))),)))
        jobs.append(Job(name=f"j{len(jobs)}", templates=(name,)))
        n_pes += k
    s = workloads.scenario((templates, jobs), workloads.nodes(4))
    return glue(s, {j.name: j.templates[0] for j in jobs})


@settings(max_examples=40, deadline=None)
@given(big_graphs(), st.integers(1, 9), st.integers(0, 10_000))
def test_a_large_graph_a_generation_at_a_time_gives_the_same_floats(glued, k, seed):
    """:meth:`Evaluator.outputs`, :meth:`~Evaluator.importance` and
    :meth:`~Evaluator.importance_parts` of a graph of at least ``BATCH_PES`` PEs (a topological
    generation at a time, issue 49) equal, to the bit, the same Evaluator a PE at a time."""
    import networkx as nx

    from soda_optimizer import importance
    from soda_optimizer.importance import Evaluator

    ev = Evaluator(glued)
    assert len(ev.pes) >= importance.BATCH_PES and not ev.cyclic
    rng = np.random.default_rng(seed)
    X = rng.uniform(0, 600, size=(k, len(ev.pes)))
    X[0, rng.random(len(ev.pes)) < 0.3] = 0.0
    comps = list(nx.weakly_connected_components(ev.graph))
    part = np.zeros(len(ev.pes), dtype=np.int64)
    for ci, c in enumerate(comps):
        part[[ev.index[p] for p in c]] = ci
    batched = (ev.outputs(X), ev.importance(X), ev.importance_parts(X, part, len(comps)))
    assert ev._gens is not None
    saved = importance.BATCH_PES
    importance.BATCH_PES = 1 << 30
    try:
        one_by_one = (ev.outputs(X), ev.importance(X), ev.importance_parts(X, part, len(comps)))
    finally:
        importance.BATCH_PES = saved
    for a, b in zip(batched, one_by_one):
        assert a.tobytes() == b.tobytes()


@settings(max_examples=30, deadline=None)
@given(big_graphs(), st.integers(0, 10_000))
def test_a_components_evaluator_takes_its_generations_from_the_whole_graph(glued, seed):
    """The Evaluator of one weak component (its generations read off the whole glued graph's, issue
    49) gives each component's rates and importance as the whole graph's Evaluator does (to the
    last bits: a PE of three inputs or more sums them in another order there, on main too)."""
    import networkx as nx

    from soda_optimizer.importance import Evaluator

    whole = Evaluator(glued)
    rng = np.random.default_rng(seed)
    X = rng.uniform(0, 600, size=(3, len(whole.pes)))
    comps = sorted((sorted(c) for c in nx.weakly_connected_components(glued.graph)), key=len)
    part = np.zeros(len(whole.pes), dtype=np.int64)
    for ci, c in enumerate(comps):
        part[[whole.index[p] for p in c]] = ci
    parts = whole.importance_parts(X, part, len(comps))
    out = whole.outputs(X)
    for ci, c in enumerate(comps):
        ev = Evaluator(glued, c)
        idx = [whole.index[p] for p in c]
        assert ev.order and sorted(ev.order) == list(range(len(c)))
        # (a PE of three inputs or more sums them in the subgraph view's edge order, as before)
        assert ev.outputs(X[:, idx]) == pytest.approx(out[:, idx], rel=1e-12, abs=1e-12)
        assert ev.importance(X[:, idx]) == pytest.approx(parts[:, ci], rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_first_answer_is_the_same_with_the_shortcuts_off(monkeypatch, seed):
    """Seeded LSD instances (104 jobs, imports, alternatives): the first answer (deadline already
    passed) and its bound are the same, to the bit, with the shortcuts of issue 49 (h49e) on and
    off: the convolution over breakpoints, the bound over undominated points only and the
    Evaluator a generation at a time, each replaced by the plain computation."""
    from soda_optimizer import importance, workloads
    from soda_optimizer.model import Policy
    from soda_optimizer.soda import curves, macroq, refine

    def solve():
        s = workloads.scenario(workloads.lsd(seed=seed), workloads.nodes(20 + 10 * seed), Policy())
        q = macroq.solve(s, deadline_s=0.0)
        return q.importance, q.bound, q.choice, q.goals

    # the transfers between PEs (soda/exchange.py) run to their end in both: past the deadline
    # their clock would make the answers differ by how far each got (50,609.5 vs 50,841.5)
    monkeypatch.setattr(macroq, "EXCHANGE_MIN_S", 600.0)
    fast = solve()
    monkeypatch.setattr(admission, "PAIR_COST", math.inf)  # dense convolutions only
    monkeypatch.setattr(refine, "_undominated", lambda X, V, ID: (X, V, ID))
    monkeypatch.setattr(importance, "BATCH_PES", 1 << 30)  # one PE at a time
    monkeypatch.setattr(curves, "ONE_CALL", False)  # h49f: a greedy curve's evaluations one call each
    assert solve() == fast


def test_a_copied_scenario_reads_its_own_lookups():
    """``Scenario._cache`` reads the private dict itself (issue 49, h49f: pydantic's ``__getattr__``
    was 4 us a look-up): a ``model_copy`` with other jobs still gets its own templates, jobs and
    glued graphs, not the original's (the owner check)."""
    from soda_optimizer import workloads
    from soda_optimizer.model import Policy

    s = workloads.scenario(workloads.lsd(), workloads.nodes(10), Policy())
    j0 = s.jobs[0]
    s.glued({j0.name: j0.templates[0]})
    c = s.model_copy(update={"jobs": s.jobs[1:]})
    assert c._cache() is not s._cache() and c._cache() is c._cache()
    with pytest.raises(KeyError):
        c.job(j0.name)
    assert s.job(j0.name) is j0 and not c._cache()["glued"]


def slow_importance(glued, pes: list[str], X: np.ndarray) -> list[float]:
    """Plain Python per allocation row: rates in topological order, the paper's resource functions
    (curved PEs through their own ``rate_out``), then every valued stream and sink in the graph's
    edge order, summed from 0."""
    import networkx as nx

    from soda_optimizer.importance import value

    g = glued.graph.subgraph(pes)
    at = {p: k for k, p in enumerate(pes)}
    totals = []
    for row in X:
        out: dict[str, float] = {}
        for p in nx.topological_sort(g):
            d = glued.graph.nodes[p]
            rf, m, primal = d["spec"].rf, float(row[at[p]]), d["primal_rate"]
            ins = [out[u] * e["selectivity"] for u, _, e in g.in_edges(p, data=True)]
            if not ins:
                out[p] = float(rf.rate_out(primal, np.array([m]), source=True)[0]) if rf.curved else min(rf.a * m, primal)
                continue
            r = sum(ins) if rf.combine == "sum" else min(ins) if rf.combine == "min" else max(ins)
            r = r + primal
            out[p] = float(rf.rate_out(np.array([r]), np.array([m]))[0]) if rf.curved else min(rf.a * r * m, rf.b * r)
        total = 0.0
        for u, _, e in g.edges(data=True):
            if e["weight"] > 0 and e["value"].kind != "zero":
                total += e["weight"] * float(value(e["value"], np.array([out[u] * e["selectivity"]]))[0])
        for p in pes:
            for w, vf in glued.graph.nodes[p]["sinks"]:
                if w > 0:
                    total += w * float(value(vf, np.array([out[p]]))[0])
        totals.append(total)
    return totals


@settings(max_examples=30, deadline=None)
@given(big_graphs(), st.integers(0, 10_000))
def test_an_evaluator_of_a_small_component_gives_the_plain_python_floats(glued, seed):
    """An Evaluator of a whole (small) glued graph and of each weak component (Python-float
    parameters, the successor dicts read directly: issue 49, h49f) gives, to the bit, the importance
    a plain Python evaluation does (up to 1e-12 where a PE of three inputs sums them), its edges in
    the graph's order; its saturation is computed once and read-only."""
    import networkx as nx

    from soda_optimizer import importance
    from soda_optimizer.importance import Evaluator

    rng = np.random.default_rng(seed)
    comps = sorted((sorted(c) for c in nx.weakly_connected_components(glued.graph)), key=len)
    saved = importance.BATCH_PES
    importance.BATCH_PES = 1 << 30  # small graphs: one PE at a time
    try:
        for pes in [sorted(glued.graph.nodes)] + comps:
            ev = Evaluator(glued, pes if len(pes) < glued.graph.number_of_nodes() else None)
            X = rng.uniform(0, 600, size=(4, len(ev.pes)))
            X[0, rng.random(len(ev.pes)) < 0.3] = 0.0
            view = glued.graph if len(pes) == glued.graph.number_of_nodes() else glued.graph.subgraph(pes)
            assert ev.edge_keys == list(view.edges)  # h49f: a component's edges in its view's order
            assert sorted(ev.graph.edges) == sorted(view.edges)
            fan3 = any(len(i) >= 3 for i in ev._in)
            want = slow_importance(glued, ev.pes, X)
            got = ev.importance(X).tolist()
            assert got == (pytest.approx(want, rel=1e-12) if fan3 else want)
            sat = ev.saturation()
            assert ev.saturation() is sat and not sat.flags.writeable
            assert all(a is glued.graph.nodes[p]["spec"] for a, p in zip(ev.specs, ev.pes, strict=True))
    finally:
        importance.BATCH_PES = saved


@pytest.mark.parametrize("seed", [0, 3])
def test_a_late_greedy_curve_in_one_evaluation_is_the_same(monkeypatch, seed):
    """Past the deadline a greedy component curve's first point, cut path and coarse enumeration
    are evaluated in one call (issue 49, h49f): every curve of a seeded LSD's jobs (on their own
    units and coarse steps, as the first answer builds them, and on finer steps) is the same, to
    the bit, as with one call each; and the one-call path is taken (fails on lead: no ONE_CALL)."""
    from soda_optimizer import workloads
    from soda_optimizer.importance import Evaluator
    from soda_optimizer.model import Policy
    from soda_optimizer.soda import curves

    s = workloads.scenario(workloads.lsd(seed=seed), workloads.nodes(30), Policy())
    g = s.capacity_mips / 128
    calls = [0]
    real = Evaluator.importance

    def counted(self, X):
        calls[0] += 1
        return real(self, X)

    monkeypatch.setattr(Evaluator, "importance", counted)
    greedy = one_call = 0
    for j in s.jobs:
        glued = s.glued({j.name: j.templates[-1]})
        evs = [Evaluator(glued, sorted(c)) for c in glued.components()]
        u = min(admission.own_unit(ev, g) for ev in evs)
        for ev in evs:
            for step in (max(1, int(g / u)), 1):
                args = (ev, u, int(s.capacity_mips / u), 0.0, s.policy.pe_floor_mips, step)
                kw = {"exact_min": True, "capacity": s.capacity_mips}
                monkeypatch.setattr(curves, "ONE_CALL", True)
                calls[0] = 0
                a = curves.component_curve(*args, **kw)
                n_one = calls[0]
                monkeypatch.setattr(curves, "ONE_CALL", False)
                calls[0] = 0
                b = curves.component_curve(*args, **kw)
                assert a.values.tobytes() == b.values.tobytes() and a.allocs.tobytes() == b.allocs.tobytes()
                assert (a.exact, a.complete, a.ceiling) == (b.exact, b.complete, b.ceiling)
                if not b.exact:
                    greedy += 1
                    one_call += n_one < calls[0]
    assert greedy > 0 and one_call == greedy


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 30), st.lists(st.tuples(st.integers(0, 29), st.integers(0, 29)), max_size=80), st.data())
def test_a_components_edges_are_read_in_its_views_order(n, edges, data):
    """:func:`importance._view_edges` (issue 49, h49f) yields a subgraph view's edges, data and
    order, without the view: node sets smaller and larger than half the graph."""
    import networkx as nx

    from soda_optimizer import importance

    G = nx.DiGraph()
    G.add_nodes_from(f"p{i}" for i in data.draw(st.permutations(range(n))))
    G.add_edges_from((f"p{a % n}", f"p{b % n}", {"k": i}) for i, (a, b) in enumerate(edges) if a % n != b % n)
    pes = data.draw(st.lists(st.sampled_from(sorted(G.nodes)), unique=True, min_size=1))
    assert list(importance._view_edges(G._succ, pes)) == list(G.subgraph(pes).edges(data=True))
