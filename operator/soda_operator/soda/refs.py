"""A StreamJob's references to other objects, resolved or refused (issue 45): its templates, its
imports of other jobs' exports (and the exporter's consent), its colocate/exlocate pairs, and
import cycles.

Every check here is linear in the objects' size, whatever a tenant writes: each job is checked
once, a dropped job drops its importers through the reverse import graph (a breadth-first walk,
each edge once), and import cycles are found as the strongly connected components of the import
graph (Tarjan's algorithm through :func:`networkx.strongly_connected_components`), with one sample
cycle per component (:func:`networkx.find_cycle`). The cycles are never enumerated: 12 jobs each
importing the other 11 have more than 10^8 simple cycles, which ``nx.simple_cycles`` listed
before this module (the operator froze; 10 such jobs took 75 s offline).

Consent (the namespace is the boundary): a job may import an export of a job in its own
namespace; from another namespace only when every template of the exporter that offers that
export lists the importer's namespace (or ``*``) in ``spec.exports[].allowedNamespaces``. The
exporter's editors write that list; nobody else can make its stream flow into their namespace.
A refused import gets one answer whether the exporter is missing, lacks the export or does not
consent, so a tenant cannot probe another namespace's jobs through it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from soda_optimizer.model import Job, Template

from ..kube.errors import TranslationError

ANY_NAMESPACE = "*"
Consent = Mapping[str, Mapping[str, frozenset[str]]]  # template (namespace/name) -> export -> namespaces allowed
SAMPLE = 4  # job names a cycle's message shows


def export_consent(obj: Mapping[str, Any]) -> dict[str, frozenset[str]]:
    """A StreamTemplate's exports -> the namespaces besides its own whose jobs may import them
    (``spec.exports[].allowedNamespaces``; empty: its own namespace only)."""
    out: dict[str, frozenset[str]] = {}
    for i, e in enumerate((obj.get("spec") or {}).get("exports") or ()):
        allowed = e.get("allowedNamespaces")
        if allowed is None:
            allowed = []
        if not isinstance(allowed, list) or not all(isinstance(x, str) for x in allowed):
            raise TranslationError(f"spec.exports[{i}].allowedNamespaces", "must be a list of namespace names (or '*')")
        out[str(e.get("name", ""))] = frozenset(allowed)
    return out


def _ns(job: str) -> str:
    return job.split("/", 1)[0]


def _short(name: str, limit: int = 60) -> str:
    return name if len(name) <= limit else f"{name[:limit - 3]}..."


def _sample(cycle: list[str]) -> str:
    """A cycle as ``a -> b -> c -> a``, at most :data:`SAMPLE` names (a 253-character name cut short)."""
    names = [_short(n) for n in cycle]
    if len(names) > SAMPLE:
        names = [*names[:SAMPLE - 1], "...", names[-1]]
    return " -> ".join([*names, _short(cycle[0])])


class _Jobs:
    """The per-job facts the checks read, computed once: each job's PE names and, per export it
    offers, the consent of each of its templates that offers it."""

    def __init__(self, jobs: Mapping[str, tuple[Job, Any]], tmpl: Mapping[str, Template], consent: Consent):
        self.pes: dict[str, set[str]] = {}
        self.exports: dict[str, dict[str, list[frozenset[str]]]] = {}
        for name, (jj, _) in jobs.items():
            self.pes[name] = {p.name for t in jj.templates if t in tmpl for p in tmpl[t].pes}
            ex: dict[str, list[frozenset[str]]] = {}
            for t in jj.templates:
                if t in tmpl:
                    for e in tmpl[t].exports:
                        ex.setdefault(e.name, []).append((consent.get(t) or {}).get(e.name, frozenset()))
            self.exports[name] = ex


def _allowed(consents: list[frozenset[str]], exporter: str, importer: str) -> bool:
    ns = _ns(importer)
    return _ns(exporter) == ns or all(ns in c or ANY_NAMESPACE in c for c in consents)


def _local(name: str, jj: Job, jobs: Mapping[str, Any], facts: _Jobs, tmpl: Mapping[str, Template],
           bad_tmpl: Mapping[str, str]) -> TranslationError | None:
    """The first problem of ``jj`` that does not depend on another job being dropped."""
    for i, t in enumerate(jj.templates):
        if t in bad_tmpl:
            return TranslationError(f"spec.templates[{i}]", f"StreamTemplate '{t.split('/', 1)[1]}' is invalid: {bad_tmpl[t]}")
        if t not in tmpl:
            return TranslationError(f"spec.templates[{i}]", f"StreamTemplate '{t.split('/', 1)[1]}' not found in namespace {_ns(name)}")
    for i, imp in enumerate(jj.imports):
        consents = facts.exports[imp.job].get(imp.export) if imp.job in jobs else None
        if _ns(imp.job) != _ns(name) and (consents is None or not _allowed(consents, imp.job, name)):
            # one answer whether the job is missing, lacks the export or does not consent: another
            # namespace's objects are not for a tenant to probe
            return TranslationError(
                f"spec.imports[{i}].job",
                f"StreamJob '{imp.job}' does not export '{imp.export}' to namespace {_ns(name)}: a job may import from another "
                f"namespace only when the exporter's StreamTemplate lists the importer's namespace in spec.exports[].allowedNamespaces",
                "ImportNotAllowed")
        if imp.job not in jobs:
            return TranslationError(f"spec.imports[{i}].job", f"StreamJob '{imp.job}' not found (or invalid)")
        if consents is None:
            return TranslationError(f"spec.imports[{i}].export", f"'{imp.export}' is not exported by StreamJob '{imp.job}'")
        if imp.pe not in facts.pes[name]:
            return TranslationError(f"spec.imports[{i}].pe", f"no PE '{imp.pe}' in this job's templates")
    for fld, pairs in (("colocate", jj.colocate), ("exlocate", jj.exlocate)):
        for i, pair in enumerate(pairs):
            for x in pair:
                if x not in facts.pes[name]:
                    return TranslationError(f"spec.{fld}[{i}]", f"no PE '{x}' in this job's templates")
    return None


def drop_unresolved(jobs: dict[str, tuple[Job, Mapping[str, Any]]], tmpl: Mapping[str, Template], bad_tmpl: Mapping[str, str],
                    err: Callable[[Mapping[str, Any], TranslationError], None], consent: Consent | None = None) -> None:
    """Drop (from ``jobs``, in place, each with one error through ``err``) every job with a
    dangling or refused reference, every job on an import cycle, and every job that imports from a
    dropped job, directly or not. Time linear in jobs + imports + their templates' PEs."""
    import networkx as nx  # imported here: the extender's process never translates, and never pays for it

    facts = _Jobs(jobs, tmpl, consent or {})
    importers: dict[str, list[tuple[str, int]]] = {}
    for name, (jj, _) in jobs.items():
        for i, imp in enumerate(jj.imports):
            importers.setdefault(imp.job, []).append((name, i))

    def drop(queue: deque[tuple[str, TranslationError]]) -> None:
        while queue:
            name, problem = queue.popleft()
            if name not in jobs:
                continue  # dropped already, with its first problem
            err(jobs.pop(name)[1], problem)
            queue.extend((imp, TranslationError(f"spec.imports[{i}].job", f"StreamJob '{name}' not found (or invalid)"))
                         for imp, i in importers.get(name, ()) if imp in jobs)

    queue: deque[tuple[str, TranslationError]] = deque()
    for name, (jj, _) in jobs.items():
        problem = _local(name, jj, jobs, facts, tmpl, bad_tmpl)
        if problem is not None:
            queue.append((name, problem))
    drop(queue)
    # import cycles: every job of a strongly connected component of two or more, or importing itself
    g = nx.DiGraph()
    g.add_nodes_from(jobs)
    g.add_edges_from((imp.job, n) for n, (jj, _) in jobs.items() for imp in jj.imports)
    for comp in sorted((sorted(c) for c in nx.strongly_connected_components(g)), key=lambda c: c[0]):
        if len(comp) == 1 and not g.has_edge(comp[0], comp[0]):
            continue
        cycle = [u for u, _ in nx.find_cycle(g.subgraph(comp), source=comp[0])]
        others = f" ({len(comp)} jobs import each other in this knot)" if len(comp) > len(cycle) else ""
        queue.extend((n, TranslationError("spec.imports", f"jobs import each other in a cycle: {_sample(cycle)}{others}")) for n in comp)
    drop(queue)
