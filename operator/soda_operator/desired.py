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
from .apply import Instance
from .state import Snapshot


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
        for node, f in pe.fractions.items():
            if f > 0 and node in node_cores:
                out.append(Instance(ns, jname, pe.name, node, f, node_cores[node], pe.candidates, spec, jobs_by_key[pe.job]))
    return out


def services(plan: Plan, snap: Snapshot) -> list[tuple[str, str, str, dict[str, Any]]]:
    """(namespace, job, pe, job object) of every admitted PE."""
    jobs_by_key = {crd.key(j): j for j in snap.jobs}
    admitted = {d.job for d in plan.jobs if d.admitted}
    keys = sorted({(*p.job.split("/", 1), p.name) for p in plan.pes if p.job in admitted and p.job in jobs_by_key})
    return [(ns, j, pe, jobs_by_key[f"{ns}/{j}"]) for ns, j, pe in keys]
