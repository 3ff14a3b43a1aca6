"""Plan -> the PE instances and Services that should exist (nothing is written here).

An admitted job's PE gets one instance per node where the Plan gives it a fraction > 0 (the
Plan's fractions, floored so that a node is never overloaded); every admitted job with a PE that
receives tuples (a stream's consumer in its template, or an importer of another job's export) gets
one headless Service, under which each PE's instances answer to ``<pe>.<job>.<namespace>.svc``
(:mod:`.apply`'s addressing). A job nothing sends to gets none: at 2000 nodes each Service also
costs the API server its Endpoints and EndpointSlice writes (one per job now, where it was one per
receiving PE: 5,961 at 10x LSD).
"""

from __future__ import annotations

from typing import Any

from soda_optimizer.model import Scenario
from soda_optimizer.plan import Plan

from . import crd
from .apply import Instance, service_host
from .state import Snapshot

STREAM_PORT = 9000


Importers = dict[tuple[str, str], list[tuple[str, str]]]


def importers(scen: Scenario, admitted: set[str]) -> Importers:
    """(exporting job, export) -> [(importing job, its consuming PE)] over the admitted importers."""
    out: Importers = {}
    for j in scen.jobs:
        if j.name in admitted:
            for imp in j.imports:
                out.setdefault((imp.job, imp.export), []).append((j.name, imp.pe))
    return out


def outputs(scen: Scenario, job: str, tmpl: dict[str, Any] | None, pe: str, admitted: set[str],
            by_export: Importers | None = None) -> str:
    """The PE SDK's KUBESODA_OUTPUTS for a PE: each stream leaving it to the consumer PE's name
    under its job's headless Service (every ready instance), and each export of it to every admitted importer (labels: docs/pe-metrics.md)."""
    ns, jname = job.split("/", 1)
    sp = (tmpl or {}).get("spec") or {}
    out = [f"{pe}->{s.get('to')}={service_host(ns, jname, str(s.get('to')))}:{STREAM_PORT}"
           for s in sp.get("streams") or [] if isinstance(s, dict) and s.get("from") == pe]
    exports = [e.get("name") for e in sp.get("exports") or [] if isinstance(e, dict) and e.get("pe") == pe]
    by_export = importers(scen, admitted) if by_export is None else by_export
    for export in dict.fromkeys(exports):
        for importer, ipe in by_export.get((job, str(export)), []):
            ins, ijob = importer.split("/", 1)
            out.append(f"import:{job}/{export}={service_host(ins, ijob, ipe)}:{STREAM_PORT}")
    return ",".join(out)


def instances(plan: Plan, snap: Snapshot, scen: Scenario) -> list[Instance]:
    node_cores = {n.name: n.cores for n in scen.nodes}
    jobs_by_key = {crd.key(j): j for j in snap.jobs}
    tmpl_by_key = {crd.key(t): t for t in snap.templates}
    admitted = {d.job: d for d in plan.jobs if d.admitted}
    by_export = importers(scen, set(admitted))
    out: list[Instance] = []
    for pe in plan.pes:
        if pe.job not in admitted or pe.job not in jobs_by_key:
            continue
        ns, jname = pe.job.split("/", 1)
        tmpl = tmpl_by_key.get(admitted[pe.job].template or "")
        spec: dict[str, Any] = next((p for p in ((tmpl or {}).get("spec") or {}).get("pes") or [] if p.get("name") == pe.name), {})
        outs = outputs(scen, pe.job, tmpl, pe.name, set(admitted), by_export)
        for node, f in pe.fractions.items():
            if f > 0 and node in node_cores:
                out.append(Instance(ns, jname, pe.name, node, f, node_cores[node], pe.candidates, spec, jobs_by_key[pe.job], outs))
    return out


def services(plan: Plan, snap: Snapshot, scen: Scenario) -> list[tuple[str, str, dict[str, Any]]]:
    """(namespace, job, job object) of every admitted job with a PE that receives tuples: a
    stream's consumer in the job's template, or the consuming PE of an import (a job of sources
    only gets none)."""
    jobs_by_key = {crd.key(j): j for j in snap.jobs}
    tmpl_by_key = {crd.key(t): t for t in snap.templates}
    admitted = {d.job: d for d in plan.jobs if d.admitted}
    receivers: set[tuple[str, str]] = set()
    for job, d in admitted.items():
        sp = (tmpl_by_key.get(d.template or "") or {}).get("spec") or {}
        receivers.update((job, str(s.get("to"))) for s in sp.get("streams") or [] if isinstance(s, dict))
    for imps in importers(scen, set(admitted)).values():
        receivers.update(imps)
    keys = sorted({tuple(p.job.split("/", 1)) for p in plan.pes
                   if p.job in admitted and p.job in jobs_by_key and (p.job, p.name) in receivers})
    return [(ns, j, jobs_by_key[f"{ns}/{j}"]) for ns, j in keys]
