"""Deadline- and priority-aware dispatch of batch Jobs on heterogeneous nodes (issue 17, the Kubernetes side;
the pure policies are :mod:`soda_optimizer.dispatch`, docs/dispatch.md).

Opt-in: an ordinary ``batch/v1`` Job (Indexed or not) whose pod template carries the scheduling gate
``kubesoda.io/dispatch``. The Job's annotations say what the paper's job model needs:

- ``kubesoda.io/dispatch-group``: the namespaced ``BatchDispatch`` that dispatches it (default ``default``);
- ``kubesoda.io/priority``: integer, higher = more important (default 0);
- ``kubesoda.io/deadline``: soft deadline, seconds after the Job's creation (``"300"``, ``"300s"``) or an
  RFC 3339 time; none = no deadline;
- ``kubesoda.io/penalty``: cost per second late (default: the priority, the paper's P_j x M_j);
- ``kubesoda.io/task-work``: nominal work of one task (seconds on a speed-1 slot); none = tasks are counted;
- ``kubesoda.io/job-kind``: the row of the speed matrix (default ``default``).

The ``BatchDispatch`` (``crds/batchdispatches.yaml``) holds the policy and its parameters, and in its status the
speed matrix (so an operator restart keeps what it learned) and the per-Job status. Every ``intervalSeconds``
(:func:`dispatch_tick`, a Kopf timer; :func:`plan`, pure):

- workers: each usable node (Ready, schedulable, matching ``spec.nodeSelector``) offers
  ``floor(free CPU / slot CPU)`` slots, free CPU = allocatable minus the requests of every bound pod that is not a
  task of this group, slot CPU = ``spec.slotCPU`` or the largest task pod's CPU request; a node's class is its
  ``kubesoda.io/node-class`` label, else ``mips-<kubesoda.io/mips-per-core>``, else ``default``;
- tasks: the Jobs' pods still gated (queued) and the ones kubesoda released (annotation
  ``kubesoda.io/dispatch-node``, running: they hold a slot of their node until they finish);
- the policy assigns free slots to Jobs (``soda_optimizer.dispatch.decide``); a Job given k slots has k of its
  gated pods (lowest completion index first) released: ``nodeSelector kubernetes.io/hostname: <node>`` is set
  while the pod is gated, then the gate is removed, so the default scheduler binds it there. A gated pod that no
  slot is given waits (the paper's dispatcher);
- a task that succeeded is measured (container start to finish, per node class) and fed to the speed matrix
  (section 4.4), once per pod UID (``status.measured``);
- a released task on a node that failed (NotReady or deleted) is deleted; its Job recreates it gated and it is
  dispatched again.

Pods without the gate and without kubesoda's annotation are never touched.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import kopf
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.utils import parse_quantity

from soda_optimizer import dispatch as dp

from ..kube import conditions
from ..kube.pods import TERMINAL, bound_requests, requests
from ..memo import Memo
from ..soda import crd

log = logging.getLogger("kubesoda.dispatch")

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
HOSTNAME = "kubernetes.io/hostname"
REFERENCE_MIPS = 1000.0
TICK_S = 1.0
DEFAULT_GROUP = "default"


# ------------------------------------------------------------------------------------ pure translation


@dataclass(frozen=True)
class Task:
    """A task pod of a dispatched Job: gated (queued), released (``node`` set, running) or finished."""

    name: str
    uid: str
    job: str
    index: int  # completion index (Indexed Jobs), else a large number: ties broken by name
    cpu: float
    gated: bool
    node: str | None
    node_class: str | None
    phase: str
    started: float | None = None  # container start (epoch seconds), when known
    finished: float | None = None  # container finish (epoch seconds), when succeeded


@dataclass(frozen=True)
class JobSpec:
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


@dataclass
class Decision:
    place: dict[str, str] = field(default_factory=dict)  # gated pod -> node
    delete: list[str] = field(default_factory=list)  # released pods on failed nodes
    slots: dict[str, int] = field(default_factory=dict)  # node -> slots
    jobs: list[dict[str, Any]] = field(default_factory=list)  # per-Job status


def _time(s: Any) -> float | None:
    if not s:
        return None
    if isinstance(s, datetime):
        return s.timestamp()
    try:
        return datetime.fromisoformat(str(s).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _num(v: Any, default: float) -> float:
    try:
        x = float(str(v).strip().rstrip("s")) if v is not None else default
    except ValueError:
        return default
    return x if math.isfinite(x) else default


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
    cpu = float(parse_quantity((st.get("allocatable") or {}).get("cpu", "0")))
    return Node(md.get("name", ""), node_class(labels), cpu, selected and ready and not sp.get("unschedulable"), not ready)


def class_speed(labels: Mapping[str, str]) -> float | None:
    """The prior speed factor a node's mips label declares (mips / 1000), None without the label."""
    try:
        v = float(labels[LABEL_MIPS])
    except (KeyError, ValueError):
        return None
    return v / REFERENCE_MIPS if v > 0 and math.isfinite(v) else None


def gated(pod: Mapping[str, Any]) -> bool:
    return any(g.get("name") == GATE for g in (pod.get("spec") or {}).get("schedulingGates") or [])


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
    g = gated(pod)
    job = owner_job(pod)
    if job is None or not (g or ANN_NODE in ann):
        return None
    labels = md.get("labels") or {}
    idx = labels.get("batch.kubernetes.io/job-completion-index") or ann.get("batch.kubernetes.io/job-completion-index")
    try:
        index = int(idx) if idx is not None else 1 << 30
    except ValueError:
        index = 1 << 30
    cpu, _ = requests(dict(pod))
    started = finished = None
    for cs in st.get("containerStatuses") or []:
        state = cs.get("state") or {}
        term = state.get("terminated") or {}
        s = _time(term.get("startedAt")) or _time((state.get("running") or {}).get("startedAt"))
        f = _time(term.get("finishedAt"))
        started = s if started is None or (s is not None and s < started) else started
        finished = f if finished is None or (f is not None and f > finished) else finished
    started = started or _time(st.get("startTime"))
    phase = "Deleting" if md.get("deletionTimestamp") else st.get("phase", "Pending")
    return Task(md.get("name", ""), md.get("uid", ""), job, index, cpu, g, None if g else (ann.get(ANN_NODE) or spec.get("nodeName")),
                ann.get(ANN_CLASS), phase, started, finished)


def job_of(body: Mapping[str, Any]) -> JobSpec | None:
    """A Job whose pod template carries the gate, as the paper's job; None otherwise."""
    md, spec, st = body.get("metadata") or {}, body.get("spec") or {}, body.get("status") or {}
    tmpl = (spec.get("template") or {}).get("spec") or {}
    if not any(g.get("name") == GATE for g in tmpl.get("schedulingGates") or []):
        return None
    ann = md.get("annotations") or {}
    arrival = _time(md.get("creationTimestamp")) or time.time()
    prio = int(_num(ann.get(ANN_PRIORITY), 0))
    dl_raw = ann.get(ANN_DEADLINE)
    deadline: float | None = None
    if dl_raw:
        deadline = _time(dl_raw) if "T" in str(dl_raw) else arrival + _num(dl_raw, math.nan)
        if deadline is not None and not math.isfinite(deadline):
            deadline = None
    work = _num(ann.get(ANN_WORK), 0.0)
    done = next((c for c in st.get("conditions") or [] if c.get("type") == "Complete" and c.get("status") == "True"), None)
    return JobSpec(md.get("name", ""), prio, arrival, deadline, _num(ann.get(ANN_PENALTY), float(prio)), str(ann.get(ANN_KIND) or dp.model.DEFAULT_KIND),
                   work if work > 0 else None, spec.get("completions"), int(st.get("succeeded") or 0),
                   (_time(st.get("completionTime")) or _time(done.get("lastTransitionTime"))) if done else None)


def policy_of(spec: Mapping[str, Any]) -> dp.Policy:
    """The BatchDispatch's policy and parameters (default: deadline-based, spare workers filled by deadline)."""
    name = str(spec.get("policy", "deadline"))
    fill_raw = spec.get("fill")
    fill: dp.Fill = None if fill_raw == "none" else fill_raw  # type: ignore[assignment]
    if name == "priority":
        return dp.PriorityPolicy(reservation=float(spec.get("reservation", 0.0)), fill=fill)
    if name == "proportion":
        return dp.ProportionPolicy(fill=fill)
    if name == "workload":
        return dp.WorkloadPolicy(horizon=float(spec.get("horizon", 1.0)), fill="priority" if fill_raw is None else fill)
    if name == "edf":
        return dp.EdfPolicy()
    if name == "deadline":
        return dp.DeadlinePolicy(fill="deadline" if fill_raw is None else fill)
    raise ValueError(f"unknown policy {name!r}")


def speeds_from(status: Mapping[str, Any], spec: Mapping[str, Any], priors: Mapping[str, float], kinds: Iterable[str]) -> dp.SpeedMatrix:
    """The speed matrix: priors (``spec.priorThroughput`` x the class's mips factor), the observations kept in
    ``status.speeds``."""
    prior = float(spec.get("priorThroughput", 1.0))
    table = {(k, c): prior * f for c, f in priors.items() for k in kinds}
    observed = {(str(e["kind"]), str(e["nodeClass"])): tuple(float(x) for x in e.get("secondsPerUnit") or [] if float(x) > 0)
                for e in status.get("speeds") or [] if e.get("kind") and e.get("nodeClass")}
    return dp.SpeedMatrix(prior=prior, table=table, observed={k: v for k, v in observed.items() if v},
                          window=int(spec.get("window", 20)))


def speeds_status(m: dp.SpeedMatrix) -> list[dict[str, Any]]:
    return [{"kind": k, "nodeClass": c, "samples": len(v), "throughput": round(len(v) / sum(v), 6),
             "secondsPerUnit": [round(x, 4) for x in v]} for (k, c), v in sorted(m.observed.items())]


def measure(speeds: dp.SpeedMatrix, jobs: Mapping[str, JobSpec], tasks: Iterable[Task], measured: set[str]) -> tuple[dp.SpeedMatrix, list[str]]:
    """Feed every succeeded, not yet measured task's time (start to finish, on its node's class) to the matrix."""
    new: list[str] = []
    for t in tasks:
        if t.phase != "Succeeded" or t.uid in measured or t.started is None or t.finished is None or not t.node_class:
            continue
        j = jobs.get(t.job)
        if j is None:
            continue
        new.append(t.uid)
        speeds = speeds.observe(j.kind, t.node_class, j.work or 1.0, max(t.finished - t.started, 0.5))
    return speeds, new


def slots_for(nodes: Iterable[Node], bound: Iterable[tuple[str, str, float, float]], mine: set[str], slot_cpu: float) -> dict[str, int]:
    """Slots per usable node: floor((allocatable - requests of bound pods not in ``mine``) / slot CPU)."""
    free = {n.name: n.cpu for n in nodes if n.usable}
    for node, key, cpu, _mem in bound:
        if node in free and key not in mine:
            free[node] -= cpu
    return {n: max(0, int(math.floor(c / slot_cpu + 1e-9))) for n, c in free.items()} if slot_cpu > 0 else {}


def plan(jobs: Mapping[str, JobSpec], tasks: Iterable[Task], nodes: Iterable[Node], slots: Mapping[str, int],
         policy: dp.Policy, speeds: dp.SpeedMatrix, now: float) -> Decision:
    """One dispatch decision, pure: which gated pods are released onto which node, which released pods are lost
    with their failed node, and each Job's status."""
    out = Decision(slots=dict(slots))
    nodes = {n.name: n for n in nodes}
    queued: dict[str, list[Task]] = {}
    running: dict[str, list[Task]] = {}
    finished: dict[str, list[Task]] = {}
    for t in tasks:
        if t.job not in jobs:
            continue
        if t.phase in TERMINAL:
            finished.setdefault(t.job, []).append(t)
        elif t.gated:
            if t.phase != "Deleting":
                queued.setdefault(t.job, []).append(t)
        elif t.node is not None:
            n = nodes.get(t.node)
            if n is None or n.failed:
                if t.phase != "Deleting":
                    out.delete.append(t.name)
                continue
            running.setdefault(t.job, []).append(t)
    # workers: each node's slots, the first ones held by the tasks running there
    per_node: dict[str, list[str]] = {}
    for j, ts in running.items():
        for t in ts:
            per_node.setdefault(t.node or "", []).append(j)
    workers: list[dp.WorkerView] = []
    for name in sorted(set(slots) | set(per_node)):
        n = nodes.get(name)
        if n is None:
            continue
        held = sorted(per_node.get(name, []))
        total = max(slots.get(name, 0) if n.usable else 0, len(held))
        for i in range(total):
            workers.append(dp.WorkerView(id=f"{name}/{i:03d}", node_class=n.node_class, job=held[i] if i < len(held) else None))
    views = []
    for j in sorted(jobs.values(), key=lambda j: j.name):
        q, r = len(queued.get(j.name, [])), len(running.get(j.name, []))
        remaining = q + r
        if j.completions is not None:
            succeeded = sum(1 for t in finished.get(j.name, []) if t.phase == "Succeeded")
            remaining = max(remaining, j.completions - max(j.succeeded, succeeded))
        if remaining <= 0 and q == 0:
            continue
        views.append(dp.JobView(j.name, j.priority, j.arrival, j.deadline, j.kind, q, r, remaining * (j.work or 1.0)))
    assignment = dp.decide(policy, views, workers, now, speeds) if views and workers else {}
    wnode = {w.id: w.id.rsplit("/", 1)[0] for w in workers}
    given: dict[str, list[str]] = {}
    for w, j in sorted(assignment.items()):
        given.setdefault(j, []).append(wnode[w])
    for j, ns in given.items():
        order = sorted(queued.get(j, []), key=lambda t: (t.index, t.name))
        for t, node in zip(order, ns, strict=False):
            out.place[t.name] = node
    # status: done / running / waiting, projected finish vs deadline, penalty so far
    view_of = {v.id: v for v in views}
    for j in sorted(jobs.values(), key=lambda j: (-j.priority, j.name)):
        done = max(j.succeeded, sum(1 for t in finished.get(j.name, []) if t.phase == "Succeeded"))
        run_nodes = [t.node for t in running.get(j.name, []) if t.node] + given.get(j.name, [])
        waiting = len(queued.get(j.name, [])) - len(given.get(j.name, []))
        v = view_of.get(j.name)
        if j.finished is not None or v is None:
            end = j.finished if j.finished is not None else max((t.finished or 0.0 for t in finished.get(j.name, [])), default=now)
            projected: float | None = end
        else:
            # the remaining work less what the running tasks did since they started (at the estimated speed)
            w = j.work or 1.0
            rem = v.remaining_work - w * len(running.get(j.name, []))
            for t in running.get(j.name, []):
                th = speeds.throughput(j.kind, nodes[t.node].node_class) if t.node in nodes else 0.0
                rem += max(0.0, w - (now - t.started) * th) if t.started is not None else w
            rate = sum(speeds.throughput(j.kind, nodes[n].node_class) for n in run_nodes if n in nodes)
            projected = now + max(0.0, rem) / rate if rate > 0 else None
        late = 0.0 if j.deadline is None else max(0.0, (j.finished if j.finished is not None else now) - j.deadline)
        out.jobs.append({
            "job": j.name, "priority": j.priority, "kind": j.kind,
            "done": done, "running": len(run_nodes), "waiting": max(0, waiting),
            "deadline": _iso(j.deadline), "projectedFinish": _iso(projected),
            "meetsDeadline": None if j.deadline is None or projected is None else projected <= j.deadline,
            "complete": j.finished is not None,
            "penalty": round(j.penalty * late, 3),
        })
    return out


def _iso(t: float | None) -> str | None:
    return None if t is None or not math.isfinite(t) else datetime.fromtimestamp(t).astimezone().isoformat(timespec="seconds")


# ------------------------------------------------------------------------------------ Kubernetes


def _trim(body: Mapping[str, Any]) -> dict[str, Any]:
    raw = {k: copy.deepcopy(dict(body.get(k) or {})) for k in ("metadata", "spec", "status")}
    raw["metadata"].pop("managedFields", None)
    return raw


@kopf.index("", "v1", "pods")
async def dispatch_pods(namespace: str, body: kopf.Body, **_: Any) -> dict[Any, Any]:
    """Task pods (gated by us or released by us) by (namespace, Job)."""
    ann = (body.get("metadata") or {}).get("annotations") or {}
    if not (gated(body) or ANN_NODE in ann):
        return {}
    job = owner_job(body)
    return {(namespace, job): _trim(body)} if job else {}


@kopf.index("batch", "v1", "jobs")
async def dispatch_jobs(namespace: str, body: kopf.Body, **_: Any) -> dict[Any, Any]:
    """Jobs whose pod template carries the gate, by (namespace, dispatch group)."""
    tmpl = ((body.get("spec") or {}).get("template") or {}).get("spec") or {}
    if not any(g.get("name") == GATE for g in tmpl.get("schedulingGates") or []):
        return {}
    group = ((body.get("metadata") or {}).get("annotations") or {}).get(ANN_GROUP, DEFAULT_GROUP)
    return {(namespace, group): {**_trim(body), "apiVersion": "batch/v1", "kind": "Job"}}


def post_events(core: client.CoreV1Api, items: list[tuple[Mapping[str, Any], str, str, str]]) -> None:
    """Events (object, type, reason, message) through the API (Kopf's poster drops Normal ones below the operator's
    posting level)."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    for obj, type_, reason, message in items:
        md = obj.get("metadata") or {}
        ns = md.get("namespace") or "default"
        body = {"metadata": {"generateName": f"{md.get('name')}.", "namespace": ns},
                "involvedObject": {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"), "name": md.get("name"),
                                   "namespace": ns, "uid": md.get("uid")},
                "reason": reason, "message": message[:1000], "type": type_, "source": {"component": "kubesoda"},
                "firstTimestamp": now, "lastTimestamp": now, "count": 1}
        try:
            core.create_namespaced_event(ns, body)
        except ApiException as e:
            log.warning("event for %s failed: %s", md.get("name"), e.reason)


def apply(core: client.CoreV1Api, namespace: str, decision: Decision, pods: Mapping[str, Mapping[str, Any]],
          classes: Mapping[str, str]) -> dict[str, int]:
    """Write a decision: release (nodeSelector + annotations while gated, then the gate removed), delete lost."""
    done = {"placed": 0, "deleted": 0}
    for name, node in decision.place.items():
        spec = pods[name].get("spec") or {}
        gates = [g for g in spec.get("schedulingGates") or [] if g.get("name") != GATE]
        body = {"metadata": {"annotations": {ANN_NODE: node, ANN_CLASS: classes.get(node, "default")}},
                "spec": {"nodeSelector": {**(spec.get("nodeSelector") or {}), HOSTNAME: node}}}
        try:
            core.patch_namespaced_pod(name, namespace, body)
            core.patch_namespaced_pod(name, namespace, [{"op": "replace", "path": "/spec/schedulingGates", "value": gates}])
            done["placed"] += 1
        except ApiException as e:
            if e.status != 404:
                log.error("releasing %s/%s onto %s failed: %s", namespace, name, node, e.reason)
    for name in decision.delete:
        try:
            core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
            done["deleted"] += 1
        except ApiException as e:
            if e.status != 404:
                log.error("deleting %s/%s failed: %s", namespace, name, e.reason)
    return done


@kopf.timer(crd.GROUP, crd.VERSION, "batchdispatches", interval=TICK_S, initial_delay=1.0)
async def dispatch_tick(namespace: str, name: str, spec: kopf.Spec, status: kopf.Status, memo: Memo, patch: kopf.Patch,
                        body: kopf.Body, dispatch_pods: kopf.Index, dispatch_jobs: kopf.Index, foreign_pods: kopf.Index, kubesoda_pods: kopf.Index,
                        kubesoda_nodes: kopf.Index, **_: Any) -> None:
    """One decision of a BatchDispatch when due (the timer ticks every TICK_S)."""
    last = memo.dispatch.last
    key = (namespace, name)
    if time.monotonic() - last.get(key, -math.inf) < float(spec.get("intervalSeconds", 2)) - 1e-3:
        return
    last[key] = time.monotonic()
    # copy what the decision reads on Kopf's event loop
    job_bodies = list(dispatch_jobs.get(key, []))
    jobs = {j.name: j for j in (job_of(b) for b in job_bodies) if j is not None}
    pods = {(p.get("metadata") or {}).get("name", ""): p for j in jobs for p in dispatch_pods.get((namespace, j), [])}
    node_bodies = [v for k in kubesoda_nodes for v in kubesoda_nodes[k]]
    bound = bound_requests(foreign_pods, kubesoda_pods)
    selector = dict(spec.get("nodeSelector") or {})
    nodes = [node_of(b, selector) for b in node_bodies]
    priors = {node_class((b.get("metadata") or {}).get("labels") or {}): f
              for b in node_bodies if (f := class_speed((b.get("metadata") or {}).get("labels") or {})) is not None}
    if not spec.get("mipsPriors", True):
        priors = {}
    tasks = [t for t in (task_of(p) for p in pods.values()) if t is not None]
    try:
        policy = policy_of(spec)
    except ValueError as e:
        patch.status["state"] = "invalid"
        patch.status["message"] = str(e)
        patch.status["conditions"] = [conditions.condition("Dispatching", False, "InvalidSpec", str(e), (body.get("metadata") or {}).get("generation"),
                                                           status.get("conditions"))]
        return
    seen = memo.dispatch.measured.setdefault(key, set())
    measured = set(status.get("measured") or []) | seen
    speeds = speeds_from(status, spec, priors, {j.kind for j in jobs.values()} | {dp.model.DEFAULT_KIND})
    speeds, new = measure(speeds, jobs, tasks, measured)
    measured |= set(new)
    seen |= set(new)
    live = {t.uid for t in tasks}
    slot_cpu = float(parse_quantity(str(spec["slotCPU"]))) if spec.get("slotCPU") else max((t.cpu for t in tasks), default=1.0) or 1.0
    mine = {f"{namespace}/{t.name}" for t in tasks}
    slots = slots_for(nodes, bound, mine, slot_cpu)
    decision = plan(jobs, tasks, nodes, slots, policy, speeds, time.time())
    done = await asyncio.to_thread(apply, memo.loops.core, namespace, decision, pods, {n.name: n.node_class for n in nodes})
    patch.status["state"] = "dispatching"
    patch.status["message"] = ""
    patch.status["conditions"] = [conditions.condition(
        "Dispatching", True, "Dispatching", f"{policy.name}: {len(jobs)} Job(s), {sum(slots.values())} slot(s) of {slot_cpu:g} CPU",
        (body.get("metadata") or {}).get("generation"), status.get("conditions"))]
    patch.status["policy"] = policy.name
    patch.status["slots"] = sum(slots.values())
    patch.status["slotCPU"] = slot_cpu
    patch.status["jobs"] = decision.jobs
    patch.status["speeds"] = speeds_status(speeds)
    patch.status["measured"] = sorted(measured & live)
    patch.status["released"] = int(status.get("released") or 0) + done["placed"]
    patch.status["redispatched"] = int(status.get("redispatched") or 0) + done["deleted"]
    job_body = {(b.get("metadata") or {}).get("name", ""): b for b in job_bodies}
    me = {"apiVersion": crd.API_VERSION, "kind": "BatchDispatch", "metadata": dict(body.get("metadata") or {})}
    events: list[tuple[Mapping[str, Any], str, str, str]] = []
    if done["placed"]:
        by_node: dict[str, int] = {}
        per_job: dict[str, dict[str, int]] = {}
        for p, n in decision.place.items():
            by_node[n] = by_node.get(n, 0) + 1
            j = owner_job(pods[p]) or ""
            per_job.setdefault(j, {})[n] = per_job.setdefault(j, {}).get(n, 0) + 1
        events.append((me, "Normal", "Dispatched", f"{done['placed']} task(s) released ({policy.name}): "
                       + ", ".join(f"{n} x{c}" for n, c in sorted(by_node.items()))))
        for j, where in per_job.items():
            if j in job_body:
                events.append((job_body[j], "Normal", "Dispatched", f"{sum(where.values())} task(s) released by BatchDispatch {name}: "
                               + ", ".join(f"{n} x{c}" for n, c in sorted(where.items()))))
    if done["deleted"]:
        events.append((me, "Warning", "Redispatch", f"{done['deleted']} task(s) on failed nodes deleted; their Jobs recreate them gated"))
    warned = memo.dispatch.warned
    for js in decision.jobs:
        if js["meetsDeadline"] is False and (namespace, js["job"]) not in warned and not js["complete"]:
            warned.add((namespace, js["job"]))
            msg = f"job {js['job']}: projected finish {js['projectedFinish']} after deadline {js['deadline']}"
            events.append((me, "Warning", "DeadlineAtRisk", msg))
            if js["job"] in job_body:
                events.append((job_body[js["job"]], "Warning", "DeadlineAtRisk", msg))
    if events:
        await asyncio.to_thread(post_events, memo.loops.core, events)
