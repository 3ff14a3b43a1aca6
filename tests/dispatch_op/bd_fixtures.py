"""Objects for the dispatch operator's tests: Jobs, task pods and Nodes as the API server holds them, and a
BatchDispatch spec with the CRD's defaults (:func:`soda_operator.schema.with_defaults`)."""

from __future__ import annotations

from typing import Any

from soda_operator import schema
from soda_operator.dispatch import objects as ob
from soda_operator.dispatch.spec import DispatchSpec, parse

T0 = 1_800_000_000.0


def bd_body(name: str = "default", **spec: Any) -> dict[str, Any]:
    """A BatchDispatch as the API server stores it (defaulted)."""
    return schema.with_defaults({"apiVersion": "kubesoda.io/v1alpha1", "kind": "BatchDispatch",
                                 "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "generation": 1}, "spec": spec})


def spec_of(**spec: Any) -> DispatchSpec:
    """A BatchDispatch's checked spec, the CRD's defaults filled in."""
    return parse(bd_body(**spec)["spec"])


def job_body(name: str, prio: int = 0, deadline: str | None = None, gate: bool = True, completions: int = 4, **ann: str) -> dict[str, Any]:
    a = {ob.ANN_PRIORITY: str(prio), **ann}
    if deadline is not None:
        a[ob.ANN_DEADLINE] = deadline
    tmpl: dict[str, Any] = {"containers": [{"name": "c"}]}
    if gate:
        tmpl["schedulingGates"] = [{"name": ob.GATE}]
    return {"metadata": {"name": name, "namespace": "ns", "annotations": a, "creationTimestamp": "2027-01-15T08:00:00Z"},
            "spec": {"completions": completions, "template": {"spec": tmpl}}, "status": {}}


def pod_body(name: str, job: str, index: int, cpu: str = "1", gate: bool = True, node: str | None = None, phase: str = "Pending",
             cls: str | None = None) -> dict[str, Any]:
    ann = {}
    if node:
        ann = {ob.ANN_NODE: node, ob.ANN_CLASS: cls or "default"}
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]}
    if gate:
        spec["schedulingGates"] = [{"name": ob.GATE}]
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": name, "uid": f"uid-{name}", "annotations": ann,
                         "labels": {"batch.kubernetes.io/job-completion-index": str(index)},
                         "ownerReferences": [{"kind": "Job", "name": job, "controller": True}]},
            "spec": spec, "status": {"phase": phase}}


def node_body(name: str, cpu: str = "4", cls: str | None = None, mips: str | None = "1000", ready: bool = True,
              unschedulable: bool = False) -> dict[str, Any]:
    labels = {}
    if cls:
        labels[ob.LABEL_CLASS] = cls
    if mips:
        labels[ob.LABEL_MIPS] = mips
    return {"metadata": {"name": name, "labels": labels}, "spec": {"unschedulable": unschedulable},
            "status": {"allocatable": {"cpu": cpu}, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}
