"""Jobs, pods and Nodes as the dispatch paper's jobs, tasks and workers (Lin 2014, 3.1 "Job and Task Model",
3.4 "Worker", 3.5.1 "Status Checker"; docs/dispatch.md). Pure: reads plain objects, writes nothing.

A dispatched Job is an ordinary ``batch/v1`` Job whose pod template carries the scheduling gate
``kubesoda.io/dispatch``; its annotations say what the paper's job model needs (3.1, 3.3: the client's
attributes):

- ``kubesoda.io/dispatch-group``: the namespaced ``BatchDispatch`` that dispatches it (``default`` without it);
- ``kubesoda.io/priority``: integer, higher = more important (0 without it);
- ``kubesoda.io/deadline``: soft deadline, seconds after the Job's creation (``"300"``, ``"300s"``) or an
  RFC 3339 time; none = no deadline;
- ``kubesoda.io/penalty``: cost per second late (without it: the priority, 6.3.2's P_j x M_j);
- ``kubesoda.io/task-work``: nominal work of one task (seconds on a speed-1 slot); none = tasks are counted;
- ``kubesoda.io/job-kind``: the row of the speed matrix (``default`` without it).

A task is one of the Job's pods, still gated (queued) or released by kubesoda (annotation
``kubesoda.io/dispatch-node``); pods without the gate and never released are never tasks. A worker (3.4) is a
slot of a Node's CPU (:func:`..decide.slots_for`); a node's class is its ``kubesoda.io/node-class`` label, else
``mips-<kubesoda.io/mips-per-core>``, else ``default``. The status checker's worker states (3.5.1) map to
Nodes: Ready and schedulable and selected = available; NotReady = down (its tasks are lost).

Departure: annotations are read leniently (an unreadable number, or one beyond 1e12 in magnitude, counts as
absent), as they always were;
the BatchDispatch's own spec is checked (:mod:`.spec`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from soda_optimizer import dispatch as dp

from ..kube import clock, quantities
from ..kube.pods import requests

GATE = "kubesoda.io/dispatch"
ANN_GROUP = "kubesoda.io/dispatch-group"
ANN_PRIORITY = "kubesoda.io/priority"
ANN_DEADLINE = "kubesoda.io/deadline"
ANN_PENALTY = "kubesoda.io/penalty"
ANN_WORK = "kubesoda.io/task-work"
ANN_KIND = "kubesoda.io/job-kind"
ANN_NODE = "kubesoda.io/dispatch-node"  # on a released pod: the node it was given
ANN_CLASS = "kubesoda.io/dispatch-class"  # on a released pod: that node's class (the node may be gone later)
LABEL_CLASS = "kubesoda.io/node-class"
LABEL_MIPS = "kubesoda.io/mips-per-core"
LABEL_INDEX = "batch.kubernetes.io/job-completion-index"
REFERENCE_MIPS = 1000.0
DEFAULT_GROUP = "default"
UNINDEXED = 1 << 30  # the completion index of a task of a Job that is not Indexed: ties broken by name


@dataclass(frozen=True)
class Task:
    """A task pod of a dispatched Job: gated (queued), released (``node`` set, running) or finished."""

    name: str
    uid: str
    job: str
    index: int  # completion index (Indexed Jobs), else UNINDEXED
    cpu: float
    gated: bool
    node: str | None
    node_class: str | None
    phase: str
    started: float | None = None  # container start (epoch seconds), when known
    finished: float | None = None  # container finish (epoch seconds), when succeeded


@dataclass(frozen=True)
class DispatchedJob:
    """A dispatched Job as the paper's job: priority, absolute deadline (epoch s), penalty weight, kind, work."""

    name: str
    priority: int
    arrival: float
    deadline: float | None
    penalty: float
    kind: str
    work: float | None  # nominal work per task (None: counted)
    completions: int | None
    succeeded: int
    finished: float | None  # the Job's completionTime, when complete


@dataclass(frozen=True)
class Node:
    name: str
    node_class: str
    cpu: float  # allocatable cores
    usable: bool  # Ready and schedulable: may get new tasks
    failed: bool  # NotReady: its tasks are lost
    pods: int = dp.limits.MAX_SLOTS_PER_NODE  # allocatable pods: no node offers more slots than it can hold pods


def _num(v: Any, default: float) -> float:
    """An annotation's number; unreadable, not finite or beyond :data:`~soda_optimizer.dispatch.limits.MAX_ANNOTATION`
    in magnitude (issue 45: a penalty of 1e308 x seconds late overflowed): ``default``."""
    try:
        x = float(str(v).strip().rstrip("s")[:64]) if v is not None else default
    except ValueError:
        return default
    return x if math.isfinite(x) and abs(x) <= dp.limits.MAX_ANNOTATION else default


def node_class(labels: Mapping[str, str]) -> str:
    """``kubesoda.io/node-class``, else ``mips-<kubesoda.io/mips-per-core>``, else ``default``."""
    if labels.get(LABEL_CLASS):
        return str(labels[LABEL_CLASS])
    if labels.get(LABEL_MIPS):
        return f"mips-{labels[LABEL_MIPS]}"
    return "default"


def node_of(body: Mapping[str, Any], selector: Mapping[str, str] | None = None) -> Node:
    """A node as the dispatcher sees it: not usable (no new tasks) when ``selector`` excludes it or it is cordoned or
    NotReady; failed (its tasks are lost) only when NotReady."""
    md, st, sp = body.get("metadata") or {}, body.get("status") or {}, body.get("spec") or {}
    labels = md.get("labels") or {}
    selected = not selector or all(labels.get(k) == v for k, v in selector.items())
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in st.get("conditions") or [])
    alloc = st.get("allocatable") or {}
    cpu = quantities.amount(alloc.get("cpu"))
    pods = quantities.amount(alloc.get("pods")) if alloc.get("pods") is not None else dp.limits.MAX_SLOTS_PER_NODE
    pods = int(min(max(pods, 0), dp.limits.MAX_SLOTS_PER_NODE)) if math.isfinite(pods) else dp.limits.MAX_SLOTS_PER_NODE
    return Node(md.get("name", ""), node_class(labels), cpu, selected and ready and not sp.get("unschedulable"), not ready, pods)


def class_speed(labels: Mapping[str, str]) -> float | None:
    """The prior speed factor a node's mips label declares (mips / 1000), None without the label."""
    try:
        v = float(labels[LABEL_MIPS])
    except (KeyError, ValueError):
        return None
    return v / REFERENCE_MIPS if v > 0 and math.isfinite(v) else None


def gated(pod_spec: Mapping[str, Any]) -> bool:
    """Whether a pod spec (a pod's, or a Job's pod template's) carries kubesoda's gate."""
    return any(g.get("name") == GATE for g in pod_spec.get("schedulingGates") or [])


def dispatched(job: Mapping[str, Any]) -> bool:
    """Whether a Job opts in: its pod template carries the gate."""
    return gated(((job.get("spec") or {}).get("template") or {}).get("spec") or {})


def group_of(job: Mapping[str, Any]) -> str:
    """The BatchDispatch a Job names (``kubesoda.io/dispatch-group``, else ``default``)."""
    return str(((job.get("metadata") or {}).get("annotations") or {}).get(ANN_GROUP, DEFAULT_GROUP))


def ours(pod: Mapping[str, Any]) -> bool:
    """Whether a pod is kubesoda's to dispatch: still gated by us, or released by us."""
    return gated(pod.get("spec") or {}) or ANN_NODE in ((pod.get("metadata") or {}).get("annotations") or {})


def owner_job(pod: Mapping[str, Any]) -> str | None:
    for o in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if o.get("controller") and o.get("kind") == "Job":
            return str(o.get("name"))
    return None


def task_of(pod: Mapping[str, Any]) -> Task | None:
    """A pod as a task, or None when kubesoda must leave it alone (no gate of ours, never released by us, or no
    Job owns it)."""
    md, spec, st = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    ann = md.get("annotations") or {}
    g = gated(spec)
    job = owner_job(pod)
    if job is None or not (g or ANN_NODE in ann):
        return None
    idx = (md.get("labels") or {}).get(LABEL_INDEX) or ann.get(LABEL_INDEX)
    try:
        index = int(idx) if idx is not None else UNINDEXED
    except ValueError:
        index = UNINDEXED
    cpu, _ = requests(dict(pod))
    started = finished = None
    for cs in st.get("containerStatuses") or []:
        state = cs.get("state") or {}
        term = state.get("terminated") or {}
        s = clock.parse(term.get("startedAt")) or clock.parse((state.get("running") or {}).get("startedAt"))
        f = clock.parse(term.get("finishedAt"))
        started = s if started is None or (s is not None and s < started) else started
        finished = f if finished is None or (f is not None and f > finished) else finished
    started = started or clock.parse(st.get("startTime"))
    phase = "Deleting" if md.get("deletionTimestamp") else st.get("phase", "Pending")
    return Task(md.get("name", ""), md.get("uid", ""), job, index, cpu, g, None if g else (ann.get(ANN_NODE) or spec.get("nodeName")),
                ann.get(ANN_CLASS), phase, started, finished)


def job_of(body: Mapping[str, Any]) -> DispatchedJob | None:
    """A Job whose pod template carries the gate, as the paper's job; None otherwise."""
    if not dispatched(body):
        return None
    md, spec, st = body.get("metadata") or {}, body.get("spec") or {}, body.get("status") or {}
    ann = md.get("annotations") or {}
    arrival = clock.parse(md.get("creationTimestamp")) or time.time()
    prio = int(_num(ann.get(ANN_PRIORITY), 0))
    dl_raw = ann.get(ANN_DEADLINE)
    deadline: float | None = None
    if dl_raw:
        deadline = clock.parse(dl_raw) if "T" in str(dl_raw) else arrival + _num(dl_raw, math.nan)
        if deadline is not None and not math.isfinite(deadline):
            deadline = None
    work = _num(ann.get(ANN_WORK), 0.0)
    done = next((c for c in st.get("conditions") or [] if c.get("type") == "Complete" and c.get("status") == "True"), None)
    return DispatchedJob(md.get("name", ""), prio, arrival, deadline, _num(ann.get(ANN_PENALTY), float(prio)),
                         str(ann.get(ANN_KIND) or dp.model.DEFAULT_KIND), work if work > 0 else None, spec.get("completions"),
                         int(st.get("succeeded") or 0),
                         (clock.parse(st.get("completionTime")) or clock.parse(done.get("lastTransitionTime"))) if done else None)
