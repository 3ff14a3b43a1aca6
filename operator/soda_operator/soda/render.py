"""Scenario -> Kubernetes objects: Nodes, StreamTemplates and StreamJobs that translate back to the
same Scenario (:func:`.crd.scenario_from_objects` is its inverse; tests/test_crd.py holds the round
trip). The examples, the benchmarks and the generated manifests are written through it."""

from __future__ import annotations

import math
from typing import Any

from soda_optimizer.model import DEFAULT_PE_MEMORY, Scenario, ValueFunction

from .crd import DEFAULT_RACK_LABEL, GROUP, MIPS_LABEL, REFERENCE_MIPS_PER_CORE, ZONE_LABEL

# StreamTemplates and StreamJobs are written as v1beta1, the version the API server prefers for them
# (docs/api-versioning.md; the operator reads either). Issue 53: kubectl apply parses the whole OpenAPI
# document of an object's group-version for every object it sends (its check that the server takes
# field validation), 439 KB for v1alpha1's nine kinds against 146 KB for v1beta1's two: applying 10x
# LSD's 2,219 objects cost kubectl 25.7 CPU s as v1alpha1 and 11.9 as v1beta1 (61 s against 44 s wall).
STREAM_API_VERSION = f"{GROUP}/v1beta1"


def _vf_obj(vf: ValueFunction) -> dict[str, Any]:
    d: dict[str, Any] = {"kind": vf.kind, "slope": vf.slope}
    if vf.cap is not None:
        d["cap"] = vf.cap
    if vf.points:
        d["points"] = [{"x": x, "y": y} for x, y in vf.points]
    return d


def _cpu(mips: float) -> str:
    return f"{round(mips / REFERENCE_MIPS_PER_CORE * 1000)}m"


def scenario_to_objects(s: Scenario) -> list[dict[str, Any]]:
    """Kubernetes objects for a Scenario (round trips through :func:`scenario_from_objects`)."""
    out: list[dict[str, Any]] = []
    for n in s.nodes:
        labels = dict(n.labels)
        labels.update({DEFAULT_RACK_LABEL: n.rack, ZONE_LABEL: n.zone, MIPS_LABEL: f"{n.mips_per_core:g}"})
        out.append({"apiVersion": "v1", "kind": "Node", "metadata": {"name": n.name, "labels": labels},
                    "spec": {"unschedulable": True} if not n.schedulable else {},
                    "status": {"allocatable": {"cpu": f"{round(n.cores * 1000)}m",
                                               **({"memory": str(int(n.memory_bytes))} if math.isfinite(n.memory_bytes) else {})}}})
    for t in s.templates:
        ns, name = t.name.split("/", 1)
        pes = []
        for p in t.pes:
            d: dict[str, Any] = {"name": p.name, "kind": p.kind.value,
                                 "resourceFunction": {"a": p.rf.a, "b": p.rf.b, "combine": p.rf.combine}}
            if p.min_mips > 0:
                d["minCpu"] = _cpu(p.min_mips)
            if math.isfinite(p.max_mips):
                d["maxCpu"] = _cpu(p.max_mips)
            if p.memory_bytes != DEFAULT_PE_MEMORY:
                d["memory"] = str(int(p.memory_bytes))
            for attr, fld in (("single_threaded", "singleThreaded"), ("all_or_nothing", "allOrNothing"), ("isolated", "isolated")):
                if getattr(p, attr):
                    d[fld] = True
            for attr, fld in (("max_instances", "maxInstances"), ("color", "color"), ("max_candidates", "maxCandidates"), ("max_change", "maxChange")):
                if getattr(p, attr) is not None:
                    d[fld] = getattr(p, attr)
            if p.fairness:
                d["fairness"] = p.fairness
            if p.licenses:
                d["licenses"] = list(p.licenses)
            if p.integrity:
                d["integrity"] = p.integrity
            if p.risk:
                d["risk"] = p.risk
            if p.node_selector:
                d["nodeSelector"] = dict(p.node_selector)
            if p.min_candidates != 1:
                d["minCandidates"] = p.min_candidates
            pes.append(d)
        spec: dict[str, Any] = {"pes": pes}
        if t.streams:
            spec["streams"] = [{"from": x.src, "to": x.dst, "weight": x.weight, "value": _vf_obj(x.value), "selectivity": x.selectivity,
                                "bytesPerTuple": x.bytes_per_tuple} for x in t.streams]
        if t.sinks:
            spec["sinks"] = [{"pe": x.pe, "weight": x.weight, "value": _vf_obj(x.value)} for x in t.sinks]
        if t.primal_inputs:
            spec["primalInputs"] = [{"pe": x.pe, "rate": x.rate} for x in t.primal_inputs]
        if t.exports:
            spec["exports"] = [{"name": x.name, "pe": x.pe, "selectivity": x.selectivity} for x in t.exports]
        if t.allow_cycles:
            spec["allowCycles"] = True
        out.append({"apiVersion": STREAM_API_VERSION, "kind": "StreamTemplate", "metadata": {"name": name, "namespace": ns}, "spec": spec})
    for j in s.jobs:
        ns, name = j.name.split("/", 1)
        spec = {"templates": [t.split("/", 1)[1] for t in j.templates], "rank": j.rank, "required": j.required}
        if j.owner:
            spec["owner"] = j.owner
        if j.weight_overrides:
            spec["weightOverrides"] = dict(j.weight_overrides)
        if j.imports:
            spec["imports"] = [{"job": i.job, "export": i.export, "pe": i.pe, "weight": i.weight} for i in j.imports]
        if j.colocate:
            spec["colocate"] = [list(x) for x in j.colocate]
        if j.exlocate:
            spec["exlocate"] = [list(x) for x in j.exlocate]
        obj: dict[str, Any] = {"apiVersion": STREAM_API_VERSION, "kind": "StreamJob", "metadata": {"name": name, "namespace": ns}, "spec": spec}
        if j.chosen_template:
            obj["status"] = {"phase": "Running", "chosenTemplate": j.chosen_template.split("/", 1)[1]}
        out.append(obj)
    return out
