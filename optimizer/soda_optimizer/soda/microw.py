"""microW: fractional allocations f(p, n) that track the goals g_p (SODA paper section 5.4).

A flow-pushing heuristic over the graph of under-allocated PEs, nodes and over-allocated PEs:
1. start from the previous fractions f-hat (read back from the cluster), restricted to usable
   candidate nodes;
2. over-allocated PEs give back mips, largest fractions first (fewest nodes touched); nodes that
   are overloaded (after shrinking) shed load proportionally;
3. under-allocated PEs, largest deficit first, receive mips: directly on a candidate node with idle
   capacity (the "dummy PE" holding each node's idle share), widest first; otherwise along the
   shortest augmenting path PE -> node -> PE' -> node' ... ending at a node with idle capacity
   (networkx shortest path on the residual graph), pushing the widest amount the path allows;
4. every push respects the constraints 47-53 (churn measured from f-hat after the forced
   changes: nodes gone or not ready, illegal fractions, overloaded nodes): the global and per-PE change limits (delta,
   delta_p, in mips of |f - f-hat| H_n), the limit zeta on touched nodes, legal fractions
   (a single-threaded PE gets at most one core of a node, 1/cores; an all-or-nothing PE gets 0 or
   its whole legal share of a node), at most ``max_instances`` nodes per PE (a PE runs one pod per
   node it has a fraction on), no node above 100%, and (our addition: the paper has no memory) no
   node above its memory, each instance holding its PE's rigid memory.

Departure: the paper's doubly nested loop orders PEs by deficit and nodes by spare capacity; we use
the same orders but search augmenting paths with BFS (fewest hops = fewest nodes touched) rather
than enumerating pairs.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

import networkx as nx

from ..model import DEFAULT_PE_MEMORY, PE, Scenario, split_pe_id
from ..plan import StageReport
from .stages import MicroWResult

EPS = 1e-9


class _State:
    def __init__(self, scenario: Scenario, goals: dict[str, float], candidates: dict[str, tuple[str, ...]],
                 choice: Mapping[str, str] | None = None):
        pol = scenario.policy
        self.H = {n.name: n.mips for n in scenario.usable_nodes()}
        self.cores = {n.name: n.cores for n in scenario.usable_nodes()}
        self.goals = goals
        self.delta = pol.micro_max_change
        self.delta_p = pol.micro_max_change_per_pe
        self.zeta = pol.micro_max_touched_nodes
        glued = scenario.glued(choice or _default_choice(scenario, goals))
        specs: dict[str, PE | None] = {p: glued.spec(p) if p in glued.graph else None for p in goals}
        self.specs = specs
        self.cand = {p: [n for n in candidates.get(p, ()) if n in self.H] for p in goals}
        self.prev = {p: dict(scenario.previous.fractions.get(p, {})) for p in goals}
        self.f: dict[str, dict[str, float]] = {}
        for p in goals:
            self.f[p] = {n: v for n, v in self.prev[p].items() if n in self.H and (n in self.cand[p]) and v > EPS}
            for n in list(self.f[p]):  # legal fraction sets come before churn limits
                self.f[p][n] = min(self.f[p][n], self.cap(p, n))
        # memory (rigid): each instance (a PE with a fraction on a node) holds its PE's memory there
        self.mem_cap = {n.name: n.memory_bytes for n in scenario.usable_nodes()}
        self.mem = {p: (s.memory_bytes if s is not None else DEFAULT_PE_MEMORY) for p, s in specs.items()}
        self.mem_used = dict.fromkeys(self.H, 0.0)
        self.node_load = dict.fromkeys(self.H, 0.0)  # sum of fractions per node, kept by set()
        on: dict[str, list[str]] = {n: [] for n in self.H}
        for p, fs in self.f.items():
            for n, v in fs.items():
                self.mem_used[n] += self.mem[p]
                self.node_load[n] += v
                on[n].append(p)
        for n in [n for n in self.H if self.mem_used[n] > self.mem_cap[n]]:
            # a node short of memory (its capacity shrank) loses its smallest instances first
            for p in sorted(on[n], key=lambda q: (self.f[q][n], q)):
                if self.mem_used[n] <= self.mem_cap[n]:
                    break
                self.set(p, n, 0.0)
        # forced changes: nodes that are overloaded (after shrinking) shed movable load
        # proportionally; these and the removals above are not voluntary, so the churn limits
        # (47-49) are measured from the state after them (``self.prev``)
        for n in [n for n in self.H if self.load(n) > 1 + EPS]:
            load = self.load(n)
            if load > 1 + EPS:
                mov = [p for p in on[n] if n in self.f[p] and self.movable(p, n)]
                excess = load - 1
                tot = sum(self.f[p][n] for p in mov)
                for p in mov:
                    self.set(p, n, self.f[p][n] - excess * self.f[p][n] / max(tot, EPS))
        self.prev = {p: dict(fs) for p, fs in self.f.items()}

    def cap(self, p: str, n: str) -> float:
        spec = self.specs.get(p)
        if spec is not None and spec.single_threaded:
            return min(1.0, 1.0 / max(self.cores[n], 1.0))
        return 1.0

    def load(self, n: str) -> float:
        return self.node_load[n]

    def alloc(self, p: str) -> float:
        return sum(v * self.H[n] for n, v in self.f[p].items())

    def change(self, p: str | None = None) -> float:
        ps = [p] if p else list(self.f)
        tot = 0.0
        for q in ps:
            nodes = set(self.f[q]) | set(self.prev[q])
            tot += sum(abs(self.f[q].get(n, 0.0) - self.prev[q].get(n, 0.0)) * self.H.get(n, 0.0) for n in nodes)
        return tot

    def touched(self) -> set[str]:
        out = set()
        for q in self.f:
            for n in set(self.f[q]) | set(self.prev[q]):
                if abs(self.f[q].get(n, 0.0) - self.prev[q].get(n, 0.0)) > EPS:
                    out.add(n)
        return out

    def room(self, p: str, nodes: list[str], others: list[str] = ()) -> float:  # type: ignore[assignment]
        """The largest push (mips) PE p may make touching ``nodes``, moving ``others`` (each
        moved PE changes twice: off one node, onto another) within the churn limits."""
        r = float("inf")
        if self.delta is not None:
            r = min(r, (self.delta - self.change()) / (1 + 2 * len(others)))
        if self.delta_p is not None:
            r = min(r, self.delta_p - self.change(p))
            for q in others:
                r = min(r, (self.delta_p - self.change(q)) / 2)
        if self.zeta is not None:
            new = set(nodes) - self.touched()
            if len(self.touched()) + len(new) > self.zeta:
                return 0.0
        return max(0.0, r)

    def movable(self, p: str, n: str) -> bool:
        """May PE p grow on node n: it is there already, or it runs on fewer than its
        ``max_instances`` nodes (one pod per node) and n has the memory of one more instance."""
        if n in self.f[p]:
            return True
        spec = self.specs.get(p)
        mi = spec.max_instances if spec is not None else None
        return (mi is None or len(self.f[p]) < mi) and self.mem_used[n] + self.mem[p] <= self.mem_cap[n]

    def set(self, p: str, n: str, v: float) -> None:
        old = self.f[p].get(n)
        if v <= EPS:
            if self.f[p].pop(n, None) is not None:
                self.mem_used[n] -= self.mem[p]
                self.node_load[n] -= old or 0.0
        else:
            if old is None:
                self.mem_used[n] += self.mem[p]
            self.node_load[n] += v - (old or 0.0)
            self.f[p][n] = v


def solve(
    scenario: Scenario,
    goals: dict[str, float],
    candidates: dict[str, tuple[str, ...]],
    deadline_s: float | None = None,
    choice: Mapping[str, str] | None = None,
) -> MicroWResult:
    """Fractions for ``goals`` on ``candidates``; ``choice`` (job -> template, macroQ's) names the
    PEs' specs (default: each job's chosen, else first, template)."""
    t0 = time.monotonic()
    deadline = t0 + (deadline_s if deadline_s is not None else scenario.policy.microw_deadline_s)
    st = _State(scenario, goals, candidates, choice or _default_choice(scenario, goals))
    status = "feasible"
    # 2b. over-allocated PEs give back, largest fractions first
    for p in st.f:
        over = st.alloc(p) - goals[p]
        for n in sorted(st.f[p], key=lambda n: -st.f[p][n]):
            if over <= EPS:
                break
            if not st.movable(p, n):
                continue
            room = st.room(p, [n])
            give = min(over, st.f[p][n] * st.H[n], room)
            spec = st.specs.get(p)
            if spec is not None and spec.all_or_nothing and give < st.f[p][n] * st.H[n] - EPS:
                continue
            st.set(p, n, st.f[p][n] - give / st.H[n])
            over -= give
    # 3. under-allocated PEs receive mips
    for rnd in range(50 * max(1, len(goals))):
        if rnd > 0 and time.monotonic() > deadline:  # the first pass always runs: a late start still places every PE it can
            status = "deadline"
            break
        under = sorted(((goals[p] - st.alloc(p), p) for p in st.f), reverse=True)
        progressed = False
        for deficit, p in under:
            if deficit <= 1e-6:
                break
            if _push_direct(st, p, deficit) > EPS or _push_path(st, p, goals[p] - st.alloc(p)) > EPS:
                progressed = True
        if not progressed:
            break
    fractions = {p: {n: v for n, v in fs.items() if v > EPS} for p, fs in st.f.items()}
    dev = sum(abs(st.alloc(p) - goals[p]) for p in goals)
    idle = {n: max(0.0, 1 - st.load(n)) for n in st.H}
    if dev <= 1e-6 * max(1.0, sum(goals.values())):
        status = "optimal" if status != "deadline" else status
    return MicroWResult(
        fractions=fractions,
        deviation=dev,
        report=StageReport(stage="microw", seconds=time.monotonic() - t0, status=status, objective=dev,  # type: ignore
                           detail=f"change {st.change():.0f} mips, {len(st.touched())} nodes touched"),
        extra={"idle_mips": sum(idle[n] * st.H[n] for n in st.H), "change_mips": st.change(), "touched_nodes": float(len(st.touched()))},
    )


def _push_direct(st: _State, p: str, deficit: float) -> float:
    spec = st.specs.get(p)
    pushed = 0.0
    for n in sorted(st.cand[p], key=lambda n: -(1 - st.load(n)) * st.H[n]):
        if deficit - pushed <= 1e-9:
            break
        if not st.movable(p, n):
            continue
        cur = st.f[p].get(n, 0.0)
        width = min(1 - st.load(n), st.cap(p, n) - cur) * st.H[n]
        if spec is not None and spec.all_or_nothing:
            if cur > 0 or width < st.cap(p, n) * st.H[n] - EPS:
                continue
            amt = st.cap(p, n) * st.H[n]
        else:
            amt = min(width, deficit - pushed)
        amt = min(amt, st.room(p, [n]))
        if amt <= EPS:
            continue
        st.set(p, n, cur + amt / st.H[n])
        pushed += amt
    return pushed


def _push_path(st: _State, p: str, deficit: float) -> float:
    """Augmenting path p -> n0 -> q1 -> n1 -> ... -> nk (idle capacity at nk)."""
    g = nx.DiGraph()
    for n in st.cand[p]:
        if st.movable(p, n) and st.cap(p, n) - st.f[p].get(n, 0.0) > EPS:
            g.add_edge(("pe", p), ("node", n), w=(st.cap(p, n) - st.f[p].get(n, 0.0)) * st.H[n])
    for q, fs in st.f.items():
        spec_q = st.specs.get(q)
        if q == p or (spec_q is not None and spec_q.all_or_nothing):
            continue
        for n, v in fs.items():
            if not st.movable(q, n):
                continue
            g.add_edge(("node", n), ("pe", q), w=v * st.H[n])
            for n2 in st.cand[q]:
                if n2 != n and st.movable(q, n2) and st.cap(q, n2) - fs.get(n2, 0.0) > EPS:
                    g.add_edge(("pe", q), ("node", n2), w=(st.cap(q, n2) - fs.get(n2, 0.0)) * st.H[n2])
    if ("pe", p) not in g:
        return 0.0
    targets = [("node", n) for n in st.H if 1 - st.load(n) > EPS and ("node", n) in g]
    if not targets:
        return 0.0
    g.add_node("sink")
    for t in targets:
        g.add_edge(t, "sink", w=(1 - st.load(t[1])) * st.H[t[1]])
    try:
        path = nx.shortest_path(g, ("pe", p), "sink")
    except nx.NetworkXNoPath:
        return 0.0
    width = min(g[u][v]["w"] for u, v in zip(path, path[1:]))
    nodes = [x[1] for x in path if isinstance(x, tuple) and x[0] == "node"]
    others = [x[1] for x in path[2:] if isinstance(x, tuple) and x[0] == "pe"]
    amt = min(width, deficit, st.room(p, nodes, others))
    if amt <= EPS:
        return 0.0
    # apply: p gains on n0; each q on the path loses on its left node and gains on its right node
    hops = path[:-1]
    for i in range(0, len(hops) - 1, 2):
        pe, node = hops[i][1], hops[i + 1][1]
        st.set(pe, node, st.f[pe].get(node, 0.0) + amt / st.H[node])
        if i + 2 < len(hops):
            q = hops[i + 2][1]
            st.set(q, node, st.f[q].get(node, 0.0) - amt / st.H[node])
    return amt


def check(scenario: Scenario, goals: dict[str, float], candidates: dict[str, tuple[str, ...]], result: MicroWResult,
          choice: Mapping[str, str] | None = None) -> list[str]:
    """Every violated constraint of a microW result (empty when it satisfies all)."""
    st = _State(scenario, goals, candidates, choice or _default_choice(scenario, goals))
    errs = []
    load: dict[str, float] = {}
    for p, fs in result.fractions.items():
        for n, v in fs.items():
            if n not in st.H:
                errs.append(f"{p} has fraction on unusable node {n}")
                continue
            if n not in candidates.get(p, ()):
                errs.append(f"{p} has fraction on non-candidate node {n}")
            if v > st.cap(p, n) + 1e-6:
                errs.append(f"{p} on {n}: fraction {v:.4f} above its legal maximum {st.cap(p, n):.4f}")
            load[n] = load.get(n, 0.0) + v
    for n, v in load.items():
        if v > 1 + 1e-6:
            errs.append(f"node {n} overloaded: {v:.4f}")
    mem: dict[str, float] = {}
    for p, fs in result.fractions.items():
        for n in fs:
            if n in st.mem_cap:
                mem[n] = mem.get(n, 0.0) + st.mem.get(p, DEFAULT_PE_MEMORY)
    for n, m in mem.items():
        if m > st.mem_cap[n] + 1e-6:
            errs.append(f"node {n} memory: instances need {m / 2**20:.0f}Mi > {st.mem_cap[n] / 2**20:.0f}Mi")
    for p, fs in result.fractions.items():
        mi = st.specs.get(p).max_instances if st.specs.get(p) is not None else None  # type: ignore[union-attr]
        if mi is not None and len(fs) > mi:
            errs.append(f"{p} on {len(fs)} nodes > maxInstances {mi}")
    pol = scenario.policy
    st.f = {p: dict(result.fractions.get(p, {})) for p in goals}
    if pol.micro_max_change is not None and st.change() > pol.micro_max_change + 1e-6:
        errs.append(f"global change {st.change():.1f} > delta {pol.micro_max_change}")
    if pol.micro_max_change_per_pe is not None:
        for p in goals:
            if st.change(p) > pol.micro_max_change_per_pe + 1e-6:
                errs.append(f"{p} change {st.change(p):.1f} > delta_p {pol.micro_max_change_per_pe}")
    if pol.micro_max_touched_nodes is not None and len(st.touched()) > pol.micro_max_touched_nodes:
        errs.append(f"{len(st.touched())} nodes touched > zeta {pol.micro_max_touched_nodes}")
    return errs


def _default_choice(scenario: Scenario, goals: Mapping[str, float]) -> dict[str, str]:
    jobs = {split_pe_id(p)[0] for p in goals}
    return {j.name: j.candidate_templates[0] for j in scenario.jobs if j.name in jobs}
