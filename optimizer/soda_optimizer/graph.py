"""The glued data-flow graph of a job/template list (SODA paper section 5.1.1).

Given a choice of template per admitted job, the templates' PE/stream graphs are "glued" together
through exported/imported streams into one directed graph over global PE ids (``job:pe``). Every
stage that needs the graph (importance, macroQ, macroW, microQ) gets it from
``Scenario.glued(choice)``, which builds it here once per choice.

Node attributes: ``job``, ``name``, ``spec`` (the :class:`~.model.PE`), ``primal_rate`` (sum of
its primal inputs), ``sinks`` (tuple of (weight, ValueFunction) for valued terminal outputs).
Edge attributes: ``weight`` (after the job's overrides), ``value`` (ValueFunction),
``selectivity``, ``bytes_per_tuple``, ``inter_job`` (True for an import; then ``export``, the
export's name).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property

import networkx as nx

from .model import PE, Scenario, ValueFunction, pe_id


@dataclass(frozen=True)
class GluedGraph:
    graph: nx.DiGraph
    choice: Mapping[str, str]  # job -> template

    def components(self) -> list[frozenset[str]]:
        """Weak components (sorted for determinism)."""
        comps = [frozenset(c) for c in nx.weakly_connected_components(self.graph)]
        return sorted(comps, key=lambda c: min(c))

    def pes_of(self, job: str) -> list[str]:
        return list(self._by_job.get(job, ()))

    @cached_property
    def _by_job(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for p, d in self.graph.nodes(data=True):
            out.setdefault(d["job"], []).append(p)
        return out

    def spec(self, pe: str) -> PE:
        """The :class:`~.model.PE` of a global PE id in this choice."""
        return self.graph._node[pe]["spec"]  # type: ignore[no-any-return]  # (not through the node view: issue 49)


def glue(scenario: Scenario, choice: Mapping[str, str]) -> GluedGraph:
    """Build the glued graph for ``choice`` (job name -> template name).

    Imports of a job whose exporter is not in ``choice`` are dropped (the caller decides whether
    that is legal; macroQ treats the importer as dependent on the exporter).

    Each job's own PEs and streams on a template (:func:`_fragment`) are built once per Scenario
    and added in bulk (issue 49: macroQ's first answer glues every job's options, then the
    admitted set again; per-node and per-edge calls were a fifth of it on 1,040 jobs).
    """
    g = nx.DiGraph()
    memo = scenario._cache()
    frags: dict[tuple[str, str], _Fragment] = memo.setdefault("glue_fragments", {})
    importers: list[str] = []
    nodes: list = []
    edges: list = []
    for jname, tname in choice.items():
        frag = frags.get((jname, tname))
        if frag is None:
            frag = frags[(jname, tname)] = _fragment(scenario, jname, tname)
        nodes.extend(frag.nodes)
        edges.extend(frag.edges)
        if frag.imports:
            importers.append(jname)
    g.add_nodes_from(nodes)
    g.add_edges_from(edges)
    for jname in importers:
        job = scenario.job(jname)
        for imp in job.imports:
            if imp.job not in choice:
                continue
            exp_t = scenario.template(choice[imp.job])
            exp = next((e for e in exp_t.exports if e.name == imp.export), None)
            if exp is None:  # the exporter's chosen template does not export it
                continue
            g.add_edge(
                pe_id(imp.job, exp.pe),
                pe_id(jname, imp.pe),
                weight=imp.weight,
                value=imp.value,
                selectivity=exp.selectivity,
                bytes_per_tuple=1.0,
                inter_job=True,
                export=exp.name,
            )
    return GluedGraph(graph=g, choice=dict(choice))


@dataclass(frozen=True)
class _Fragment:
    """One job's PEs and streams on one template: (id, attributes) and (src, dst, attributes)."""

    nodes: tuple[tuple[str, dict], ...]
    edges: tuple[tuple[str, str, dict], ...]
    imports: bool


def _fragment(scenario: Scenario, jname: str, tname: str) -> _Fragment:
    caps = {st: scenario.pe_mips_cap(st) for st in (False, True)}
    # a template's PEs capped once per Scenario, not per glued graph (issue 49: the copies were a
    # quarter of macroQ's first answer on 1,040 jobs)
    capped: dict[tuple[str, str], PE] = scenario._cache().setdefault("capped_pes", {})
    job, t = scenario.job(jname), scenario.template(tname)
    primal: dict[str, float] = {}
    for pi in t.primal_inputs:
        primal[pi.pe] = primal.get(pi.pe, 0.0) + pi.rate
    sinks: dict[str, list[tuple[float, ValueFunction]]] = {}
    for sk in t.sinks:
        w = job.weight_overrides.get(f"sink:{sk.pe}", sk.weight)
        sinks.setdefault(sk.pe, []).append((w, sk.value))
    nodes = []
    for p in t.pes:
        cap = caps[p.single_threaded]
        if 0 < cap < p.max_mips:  # no rack hosts more (never below its minimum: macroW then says why)
            key = (tname, p.name)
            if key not in capped:
                capped[key] = p.model_copy(update={"max_mips": max(cap, p.min_mips)})
            p = capped[key]
        nodes.append((pe_id(jname, p.name), {"job": jname, "name": p.name, "spec": p, "primal_rate": primal.get(p.name, 0.0),
                                             "sinks": tuple(sinks.get(p.name, ()))}))
    edges = [(pe_id(jname, s.src), pe_id(jname, s.dst),
              {"weight": job.weight_overrides.get(s.id, s.weight), "value": s.value, "selectivity": s.selectivity,
               "bytes_per_tuple": s.bytes_per_tuple, "inter_job": False})
             for s in t.streams]
    return _Fragment(tuple(nodes), tuple(edges), bool(job.imports))
