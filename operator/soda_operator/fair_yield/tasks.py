"""A pod of a YieldGroup as the allocator's task (the paper's job i of section 2.3, a parallel job's
task of section 5.1): how a pod opts in, what kubesoda writes on it, and what the allocator reads.

A pod opts in with the scheduling gate :data:`GATE` and the label :data:`LABEL` (the group's
name); kubesoda records where it released a pod (:data:`ANN_NODE`), the pod's CPU need as created
(:data:`ANN_ALPHA`, because kubesoda resizes the pod afterwards) and its last yield
(:data:`ANN_YIELD`). A task's CPU need alpha is its CPU limit as created (its request when it has
no limit), its memory its memory request (rigid, constraint (1)).

A task also carries what the pod holds now (``held``: its CPU as the resize sees it, the limit or
the request of each container; a pod being moved is counted at it until it is gone, issue 47), its
own node constraints (:mod:`.eligible`; kubesoda's pin dropped) and, for a released pod the
scheduler has not bound (``pending``), the scheduler's reason when it says Unschedulable ("" while
it has not said).

Departure: alpha is in cores, not a fraction of one host (the hosts are not identical here;
:mod:`.decide` scales both to the largest node).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..kube import quantities
from ..kube.pods import TERMINAL, requests
from .eligible import Constraints, constraints

GATE = "kubesoda.io/yield"
LABEL = "kubesoda.io/yield-group"
ANN_ALPHA = "kubesoda.io/yield-alpha"
ANN_NODE = "kubesoda.io/yield-node"
ANN_YIELD = "kubesoda.io/yield"


@dataclass
class Task:
    namespace: str
    name: str
    uid: str
    owner: str  # the controller's uid ("" for a bare pod)
    alpha: float  # cores
    mem: float  # bytes
    node: str | None  # where it runs (None: gated, not placed yet); a released pod not bound yet: where it is pinned
    gated: bool
    held: float = 0.0  # cores it holds now (each container's CPU limit, else its request)
    pending: str | None = None  # released, not bound: the scheduler's Unschedulable message ("" until it says one)
    constraints: Constraints = field(default_factory=Constraints)  # its own nodeSelector, affinity, tolerations
    floor: float = 0.001  # the least CPU a resize gives it: 1m a container that declares CPU (:func:`.apply.resize_body`)


def unschedulable(status: dict[str, Any]) -> str:
    """The scheduler's message when it marked the pod Unschedulable, else ""."""
    for c in status.get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable":
            return str(c.get("message") or "Unschedulable")
    return ""


def task_of(pod: dict[str, Any]) -> Task | None:
    """A pod of a group as a task, or None when kubesoda must leave it alone (no gate of ours and
    never released by us, or finished)."""
    md, spec, st = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    gated = any(g.get("name") == GATE for g in spec.get("schedulingGates") or [])
    ann = md.get("annotations") or {}
    if st.get("phase") in TERMINAL or md.get("deletionTimestamp") or not (gated or ANN_NODE in ann):
        return None
    cpu_limit = 0.0
    n_cpu = 0
    for c in spec.get("containers") or []:
        res = c.get("resources") or {}
        cores = quantities.amount((res.get("limits") or {}).get("cpu") or (res.get("requests") or {}).get("cpu"))
        cpu_limit += cores
        n_cpu += cores > 0
    alpha = float(ann.get(ANN_ALPHA, cpu_limit))
    _, mem = requests(pod)
    owner = next((o.get("uid", "") for o in md.get("ownerReferences") or [] if o.get("controller")), "")
    bound = spec.get("nodeName")
    pinned = None if gated else bound or ann.get(ANN_NODE)
    pending = None if gated or bound else unschedulable(st)
    return Task(md.get("namespace", ""), md.get("name", ""), md.get("uid", ""), owner, alpha, mem, pinned, gated,
                held=cpu_limit, pending=pending, constraints=constraints(spec, None if gated else ann.get(ANN_NODE)),
                floor=0.001 * max(1, n_cpu))
