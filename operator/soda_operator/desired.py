"""Plan -> the PE instances and Services that should exist (nothing is written here).

An admitted job's PE gets one instance per node where the Plan gives it a fraction > 0 (the
Plan's fractions, floored so that a node is never overloaded); every admitted job's PE gets a
headless Service.
"""

from __future__ import annotations

from typing import Any

from soda_optimizer.model import Scenario
from soda_optimizer.plan import Plan

from . import crd
from .apply import Instance, service_host
from .state import Snapshot

STREAM_PORT = 9000


def outputs(scen: Scenario, job: str, tmpl: dict[str, Any] | None, pe: str, admitted: set[str]) -> str:
    """The PE SDK's KUBESODA_OUTPUTS for a PE: each stream leaving it to the consumer's headless
    Service, and each export of it to every admitted importer (labels: docs/pe-metrics.md)."""
    ns, jname = job.split("/", 1)
    sp = (tmpl or {}).get("spec") or {}
    out = [f"{pe}->{s.get('to')}={service_host(ns, jname, str(s.get('to')))}:{STREAM_PORT}"
           for s in sp.get("streams") or [] if isinstance(s, dict) and s.get("from") == pe]
    exports = {e.get("name") for e in sp.get("exports") or [] if isinstance(e, dict) and e.get("pe") == pe}
    for j in scen.jobs:
        if j.name not in admitted:
            continue
        for imp in j.imports:
            if imp.job == job and imp.export in exports:
                ins, ijob = j.name.split("/", 1)
                out.append(f"import:{job}/{imp.export}={service_host(ins, ijob, imp.pe)}:{STREAM_PORT}")
    return ",".join(out)


def instances(plan: Plan, snap: Snapshot, scen: Scenario) -> list[Instance]:
    node_cores = {n.name: n.cores for n in scen.nodes}
    jobs_by_key = {crd.key(j): j for j in snap.jobs}
    tmpl_by_key = {crd.key(t): t for t in snap.templates}
    admitted = {d.job: d for d in plan.jobs if d.admitted}
    out: list[Instance] = []
    for pe in plan.pes:
        if pe.job not in admitted or pe.job not in jobs_by_key:
            continue
        ns, jname = pe.job.split("/", 1)
        tmpl = tmpl_by_key.get(admitted[pe.job].template or "")
        spec = next((p for p in ((tmpl or {}).get("spec") or {}).get("pes") or [] if p.get("name") == pe.name), {})
        outs = outputs(scen, pe.job, tmpl, pe.name, set(admitted))
        for node, f in pe.fractions.items():
            if f > 0 and node in node_cores:
                out.append(Instance(ns, jname, pe.name, node, f, node_cores[node], pe.candidates, spec, jobs_by_key[pe.job], outs))
    return out


def services(plan: Plan, snap: Snapshot) -> list[tuple[str, str, str, dict[str, Any]]]:
    """(namespace, job, pe, job object) of every admitted PE."""
    jobs_by_key = {crd.key(j): j for j in snap.jobs}
    admitted = {d.job for d in plan.jobs if d.admitted}
    keys = sorted({(*p.job.split("/", 1), p.name) for p in plan.pes if p.job in admitted and p.job in jobs_by_key})
    return [(ns, j, pe, jobs_by_key[f"{ns}/{j}"]) for ns, j, pe in keys]
