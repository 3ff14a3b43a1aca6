"""The jobs of a flow as the clusters hold them: step Jobs kubesoda created, users' request Jobs, and the flow
jobs they add up to (Montana & Zinky, section 2.1: a job is a sequence of steps, each run in one cluster; 2.2: a
job waits in a cluster's backlog, here a suspended step Job).

Everything a tick needs is on the Jobs, so an operator restart rebuilds it from the clusters: labels
``kubesoda.io/flow``, ``-job``, ``-step`` and (once placed) ``-pool``; annotations with the arrival time, the
arrival epoch (the job's cohort), the last decision and whether the job was counted. Annotations are kubesoda's
own records, read leniently (an unreadable one falls back to the Job's creation time or 0).
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..kube import clock

LABEL_FLOW = "kubesoda.io/flow"
LABEL_JOB = "kubesoda.io/flow-job"
LABEL_STEP = "kubesoda.io/flow-step"
LABEL_POOL = "kubesoda.io/flow-pool"
ANN_ARRIVED = "kubesoda.io/flow-arrived"  # unix seconds of the flow job's arrival
ANN_EPOCH = "kubesoda.io/flow-epoch"  # the epoch index it arrived in (its cohort)
ANN_DECISION = "kubesoda.io/flow-decision"  # "<epoch>/<current|earlier>/<pool or backlog>" of the last decision
ANN_COUNTED = "kubesoda.io/flow-counted"  # "completed" on the last step Job, "dropped" on a dropped job's completed steps
ANN_REQUEST = "kubesoda.io/flow-request"  # on a request Job once taken in: the flow job's id
# what a request may carry into its step 0 Job besides the pod template
REQUEST_FIELDS = ("backoffLimit", "completions", "parallelism", "completionMode", "activeDeadlineSeconds", "podFailurePolicy")


@dataclass(frozen=True)
class StepJob:
    """A step Job of a flow job, in the cluster ``cluster`` (LOCAL or a member pool's name)."""

    cluster: str
    name: str
    job_id: str
    step: int
    pool: str | None  # None: backlogged (suspended, no pool yet)
    suspended: bool
    complete: bool
    failed: bool
    arrived: float
    epoch: int
    counted: bool = False
    decision: str = ""
    deleting: bool = False


@dataclass(frozen=True)
class Request:
    """A user's Job labelled ``kubesoda.io/flow=<name>``: an arrival of step 0."""

    name: str
    created: float
    suspended: bool
    taken: bool  # already annotated by kubesoda
    template: Mapping[str, Any]


@dataclass(frozen=True)
class FlowJob:
    """One job of a flow, through its steps: the step Jobs that exist for it."""

    id: str
    arrived: float
    epoch: int
    steps: tuple[StepJob, ...]

    @property
    def current(self) -> StepJob:
        live = [s for s in self.steps if not s.deleting] or list(self.steps)
        return max(live, key=lambda s: (s.step, not s.deleting))


def _number(v: Any, default: float) -> float:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return default
    return x if math.isfinite(x) else default


def _condition(st: Mapping[str, Any], kind: str) -> bool:
    return any(c.get("type") == kind and c.get("status") == "True" for c in st.get("conditions") or [])


def step_job_of(body: Mapping[str, Any], cluster: str) -> StepJob | None:
    """A Job kubesoda created for a flow step, None for any other Job."""
    md, spec, st = body.get("metadata") or {}, body.get("spec") or {}, body.get("status") or {}
    labels, ann = md.get("labels") or {}, md.get("annotations") or {}
    if LABEL_STEP not in labels or LABEL_JOB not in labels:
        return None
    try:
        step = int(labels[LABEL_STEP])
    except ValueError:
        return None
    return StepJob(
        cluster=cluster,
        name=str(md.get("name", "")),
        job_id=str(labels[LABEL_JOB]),
        step=step,
        pool=labels.get(LABEL_POOL) or None,
        suspended=bool(spec.get("suspend")),
        complete=_condition(st, "Complete"),
        failed=_condition(st, "Failed"),
        arrived=_number(ann.get(ANN_ARRIVED), clock.parse(md.get("creationTimestamp")) or 0.0),
        epoch=int(_number(ann.get(ANN_EPOCH), 0)),
        counted=ANN_COUNTED in ann,
        decision=str(ann.get(ANN_DECISION) or ""),
        deleting=bool(md.get("deletionTimestamp")),
    )


def request_of(body: Mapping[str, Any]) -> Request | None:
    """A user's Job labelled with the flow (not a step Job kubesoda made): an arrival request."""
    md, spec = body.get("metadata") or {}, body.get("spec") or {}
    labels = md.get("labels") or {}
    if LABEL_FLOW not in labels or LABEL_STEP in labels:
        return None
    tmpl = copy.deepcopy(dict(spec.get("template") or {}))
    job_spec = {k: copy.deepcopy(v) for k, v in spec.items() if k in REQUEST_FIELDS}
    return Request(name=str(md.get("name", "")), created=clock.parse(md.get("creationTimestamp")) or time.time(),
                   suspended=bool(spec.get("suspend")), taken=ANN_REQUEST in (md.get("annotations") or {}),
                   template={"metadata": {}, "spec": {**job_spec, "template": tmpl}})


def flow_jobs(steps: Iterable[StepJob]) -> list[FlowJob]:
    """The flow jobs the step Jobs add up to, by id."""
    by: dict[str, list[StepJob]] = {}
    for s in steps:
        by.setdefault(s.job_id, []).append(s)
    out = []
    for jid, ss in sorted(by.items()):
        ss.sort(key=lambda s: (s.step, s.cluster, s.name))
        out.append(FlowJob(jid, min(s.arrived for s in ss), min(s.epoch for s in ss), tuple(ss)))
    return out
