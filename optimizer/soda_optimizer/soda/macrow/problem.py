"""macroW's problem (SODA paper 5.2.1): the units to place (super-PEs of colocated PEs, constraint
27), their goals, candidate need (19), traffic between them, exlocation (28), resource matching
(12) and the per-unit attributes the constraints read; and a :class:`Solution` (candidate sets) with
the objective W1/N sum alpha + W2 max alpha + W3/E sum beta + W4 max beta.

Departure on alpha_n (constraint 4): the paper's  sum_p H_{p,n} v_{p,n} / H_n  counts every
candidate PE as if it could fill the node; we count  min(phi_p g_p, H_{p,n})  so that a light PE
weighs lightly (still linear in v).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass, field

import networkx as nx

from ... import topology as topo_mod
from ...model import PE, Node, Scenario, pe_id
from ..stages import MacroQResult


@dataclass
class Unit:
    """A super-PE: PEs colocated together (constraint 27) share one candidate set."""

    name: str
    members: tuple[str, ...]
    goal: float
    specs: tuple[PE, ...]
    phi: float
    min_c: int
    max_c: int | None
    max_change: int | None
    prev: frozenset[str] = field(default_factory=frozenset)
    need: float = 0.0  # candidate mips required by (19)

    @property
    def single_threaded(self) -> bool:
        return any(s.single_threaded for s in self.specs)

    @property
    def isolated(self) -> bool:
        return any(s.isolated for s in self.specs)


class Problem:
    def __init__(self, scenario: Scenario, macroq: MacroQResult):
        self.s = scenario
        pol = scenario.policy
        self.pol = pol
        self.topo = topo_mod.build(scenario)
        self.nodes: dict[str, Node] = {n.name: n for n in scenario.usable_nodes()}
        glued = scenario.glued(macroq.choice)
        g = glued.graph
        uf = nx.Graph()
        uf.add_nodes_from(g.nodes)
        for job in macroq.choice:
            for a, b in scenario.job(job).colocate:
                uf.add_edge(pe_id(job, a), pe_id(job, b))
        self.units: list[Unit] = []
        self.unit_of: dict[str, int] = {}
        for comp in sorted(nx.connected_components(uf), key=lambda c: min(c)):
            members = tuple(sorted(comp))
            specs = tuple(glued.spec(p) for p in members)
            goal = sum(macroq.goals.get(p, 0.0) for p in members)
            prev_sets = [frozenset(scenario.previous.candidates.get(p, ())) for p in members]
            mc = [s.max_candidates for s in specs if s.max_candidates is not None]
            mch = [s.max_change for s in specs if s.max_change is not None]
            u = Unit(
                name=members[0],
                members=members,
                goal=goal,
                specs=specs,
                phi=max([s.fairness for s in specs if s.fairness > 0] or [pol.overallocation]),
                min_c=max(s.min_candidates for s in specs),
                max_c=min(mc) if mc else None,
                max_change=min(mch) if mch else None,
                prev=prev_sets[0] if prev_sets else frozenset(),
            )
            explicit = any(s.fairness > 0 for s in specs)
            u.need = u.phi * u.goal
            if not explicit:  # the policy's default over-allocation is capped by the biggest rack (its cores, if single-threaded)
                u.need = max(u.goal, min(u.need, scenario.pe_mips_cap(u.single_threaded)))
            for p in members:
                self.unit_of[p] = len(self.units)
            self.units.append(u)
        # streams between units with their traffic
        self.traffic: dict[tuple[int, int], float] = {}
        for (a, b), t in macroq.stream_rates.items():
            ua, ub = self.unit_of.get(a), self.unit_of.get(b)
            if ua is None or ub is None or ua == ub:
                continue
            key = (min(ua, ub), max(ua, ub))
            self.traffic[key] = self.traffic.get(key, 0.0) + t
        self.neighbours: dict[int, list[tuple[int, float]]] = {i: [] for i in range(len(self.units))}
        for (ia, ib), t in self.traffic.items():
            self.neighbours[ia].append((ib, t))
            self.neighbours[ib].append((ia, t))
        # exlocation (28) between units
        self.exl: dict[int, set[int]] = {i: set() for i in range(len(self.units))}
        for job in macroq.choice:
            for a, b in scenario.job(job).exlocate:
                ua, ub = self.unit_of[pe_id(job, a)], self.unit_of[pe_id(job, b)]
                self.exl[ua].add(ub)
                self.exl[ub].add(ua)
        for i, u in enumerate(self.units):
            if u.isolated:
                for j in range(len(self.units)):
                    if j != i:
                        self.exl[i].add(j)
                        self.exl[j].add(i)
        # resource matching (12)
        # computed once per distinct node selector (most PEs have none): at 2000 nodes x 7,370 PEs
        # a per-PE scan was 15M label checks
        self.match: list[list[str]] = []
        self._sel: list[tuple[tuple[str, str], ...]] = []
        self._match_of: dict[tuple[tuple[str, str], ...], list[str]] = {}
        self._match_set: dict[tuple[tuple[str, str], ...], frozenset[str]] = {}
        self._rack_nodes: dict[tuple[tuple[tuple[str, str], ...], str], list[str]] = {}
        # memory (rigid, per instance): a unit's instance on a node holds the memory of each of its
        # colocated PEs, so only nodes with that much memory match
        self.memory = [sum(sp.memory_bytes for sp in u.specs) for u in self.units]
        for i, u in enumerate(self.units):
            sel: dict[str, str] = {}
            for sp in u.specs:
                sel.update(sp.node_selector)
            mem = self.memory[i]
            skey = (*sorted(sel.items()), ("memory", repr(mem)))
            if skey not in self._match_of:
                self._match_of[skey] = [n for n, node in self.nodes.items()
                                        if node.memory_bytes >= mem and all(node.labels.get(k) == v for k, v in skey[:-1])]
                self._match_set[skey] = frozenset(self._match_of[skey])
            self._sel.append(skey)
            self.match.append(self._match_of[skey])
        # the default over-allocation is also capped by what the unit's matching nodes of one rack
        # offer: a PE pinned to one node by its selector can never have candidates worth more than
        # that node (before, a goal of 1000 mips on a 1,200-mips node needed 1,500: Rejected)
        rack_cap: dict[tuple[tuple[tuple[str, str], ...], bool], float] = {}
        for i, u in enumerate(self.units):
            if any(s.fairness > 0 for s in u.specs) or u.need <= u.goal:
                continue
            ck = (self._sel[i], u.single_threaded)
            if ck not in rack_cap:
                per_rack: dict[str, float] = {}
                for n in self.match[i]:
                    node = self.nodes[n]
                    per_rack[node.rack] = per_rack.get(node.rack, 0.0) + (
                        min(node.mips, node.mips_per_core) if u.single_threaded else node.mips)
                rack_cap[ck] = max(per_rack.values(), default=0.0)
            u.need = max(u.goal, min(u.need, rack_cap[ck]))
        self.integrity = [max(s.integrity for s in u.specs) for u in self.units]
        self.integrity_lo = [min(s.integrity for s in u.specs) for u in self.units]
        self.colors = [{s.color for s in u.specs if s.color} for u in self.units]
        self.risk = [sum(s.risk for s in u.specs) for u in self.units]
        self.licenses = [{lic for s in u.specs for lic in s.licenses} for u in self.units]

    def match_set(self, i: int) -> frozenset[str]:
        """The nodes unit ``i`` may run on (resource matching, 12), as a set."""
        return self._match_set[self._sel[i]]

    def rack_match(self, i: int, rack: str) -> list[str]:
        """The nodes of ``rack`` unit ``i`` may run on (cached per node selector and rack)."""
        key = (self._sel[i], rack)
        out = self._rack_nodes.get(key)
        if out is None:
            ms = self._match_set[self._sel[i]]
            out = self._rack_nodes[key] = [n for n in self.topo.racks.get(rack, ()) if n in ms]
        return out

    @functools.cached_property
    def node_rules(self) -> bool:
        """Whether any per-node constraint (14-15, 17-18, 24, 28) can bite: when none can, a node's
        other occupants need not be looked at."""
        return (any(n.max_pes is not None or n.integrity_range is not None or n.incompatible_colors for n in self.nodes.values())
                or bool(self.pol.incompatible_colors) or any(self.exl.values()))

    @functools.cached_property
    def fill_target(self) -> float:
        """The node utilisation alpha_n up to which BottomLevel puts a PE next to its stream
        partners: 1, or the mean alpha_n when the candidate needs exceed the nodes' mips (with the
        default over-allocation phi = 1.5, above 2/3 of the capacity), so that partners can share
        a node as long as it stays at the average."""
        cap = sum(node.mips for node in self.nodes.values())
        if cap <= 0:
            return 1.0
        most = max(node.mips for node in self.nodes.values())
        core = max(self._one_core.values())
        need = sum(min(u.need, core if self._single[i] else most) for i, u in enumerate(self.units))
        return max(1.0, need / cap)

    @functools.cached_property
    def _single(self) -> list[bool]:
        return [u.single_threaded for u in self.units]

    @functools.cached_property
    def _one_core(self) -> dict[str, float]:
        return {n: min(node.mips, node.mips_per_core) for n, node in self.nodes.items()}

    def H(self, i: int, n: str) -> float:
        """H_{p,n}: the mips unit ``i`` can use on node ``n`` (one core if single-threaded)."""
        return self._one_core[n] if self._single[i] else self.nodes[n].mips

    def weight(self, i: int, n: str) -> float:
        """What unit ``i`` adds to node ``n``'s alpha (see the departure on constraint 4)."""
        return min(self.units[i].need, self._one_core[n] if self._single[i] else self.nodes[n].mips)


class Solution:
    """Candidate node sets, one per unit, and the objective. ``base`` and ``changed``: this solution
    is ``base`` with only the units ``changed`` given other candidates; its loads, racks and link
    traffic are then derived from the base's instead of from every unit (miniW's moves change one or
    a few units of thousands)."""

    def __init__(self, prob: Problem, cand: list[set[str]], base: Solution | None = None, changed: Iterable[int] = ()):
        self.p = prob
        self.cand = cand
        self._base = base
        self._changed = sorted(set(changed)) if base is not None else []

    def copy(self) -> Solution:
        return Solution(self.p, [set(c) for c in self.cand])

    def rack(self, i: int) -> str | None:
        return self.racks[i]

    def _rack_of(self, i: int) -> str | None:
        c = self.cand[i]
        return self.p.nodes[next(iter(c))].rack if c else None

    @functools.cached_property
    def racks(self) -> list[str | None]:
        """The rack of each unit's candidates (None when it has none)."""
        if self._base is not None:
            out = list(self._base.racks)
            for i in self._changed:
                out[i] = self._rack_of(i)
            return out
        return [self._rack_of(i) for i in range(len(self.cand))]

    @functools.cached_property
    def load(self) -> dict[str, float]:
        """Per node, the weight of the units that have it as a candidate (alpha_n x H_n)."""
        p = self.p
        if self._base is not None:
            load = dict(self._base.load)
            for i in self._changed:
                for n in self._base.cand[i]:
                    load[n] -= p.weight(i, n)
                for n in self.cand[i]:
                    load[n] += p.weight(i, n)
            return load
        load = dict.fromkeys(p.nodes, 0.0)
        for i, c in enumerate(self.cand):
            for n in c:
                load[n] += p.weight(i, n)
        return load

    @functools.cached_property
    def link_traffic(self) -> list[float]:
        """Per link, the stream traffic crossing it (beta_e x K_e)."""
        p = self.p
        if self._base is not None:
            beta = list(self._base.link_traffic)
            old, new = self._base.racks, self.racks
            touched = set(self._changed)
            seen: set[tuple[int, int]] = set()
            for i in self._changed:
                for j, t in p.neighbours[i]:
                    key = (min(i, j), max(i, j))
                    if key in seen:
                        continue
                    seen.add(key)
                    oa, ob, na, nb = old[i], old[j], new[i], new[j]
                    if j not in touched:
                        ob = nb = new[j]
                    if oa and ob:
                        for e in p.topo.crossed(oa, ob):
                            beta[e] -= t
                    if na and nb:
                        for e in p.topo.crossed(na, nb):
                            beta[e] += t
            return beta
        racks = self.racks
        beta = [0.0] * len(p.topo.links)
        for (a, b), t in p.traffic.items():
            ra, rb = racks[a], racks[b]
            if ra and rb and ra != rb:
                for e in p.topo.crossed(ra, rb):
                    beta[e] += t
        return beta

    def objective(self) -> float:
        p, pol = self.p, self.p.pol
        load = self.load
        alpha = [load[n] / node.mips for n, node in p.nodes.items()]
        beta = [x / lk.capacity for x, lk in zip(self.link_traffic, p.topo.links)]
        obj = pol.w1 * sum(alpha) / max(1, len(alpha)) + pol.w2 * max(alpha, default=0.0)
        if beta:
            obj += pol.w3 * sum(beta) / len(beta) + pol.w4 * max(beta)
        self._base = None  # loads, racks and links are cached now: do not keep a chain of bases alive
        return obj
