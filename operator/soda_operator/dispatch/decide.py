"""One dispatch decision, pure: the indexed objects -> the paper's worker model (:func:`soda_optimizer.dispatch.step`,
the code path of the simulator's ``"plan"`` mode) -> which gated pods are released onto which node, which running
pods are evicted (preemption only), which released pods are lost with their node, and each Job's progress (Lin 2014,
figure 3.2, 3.5.2 "Decision Maker", 3.5.3 "Dispatcher", 4.4 "Adaptive Adjustment"; docs/dispatch.md).
No API calls: :mod:`.apply` writes what this decides.

- workers (3.4): each usable node offers ``floor(free CPU / slot CPU)`` slots, free CPU = allocatable minus the
  requests of every bound pod that is not a task of this group (capacity is shared: DESIGN, "One mechanism for
  every allocation system"), slot CPU = ``spec.slotCPU`` or the largest task pod's CPU request; a node's first slots
  are held by the tasks running there (busy workers), the others are idle;
- tasks: the Jobs' pods still gated (queued) and the ones kubesoda released (running: they hold a slot of their
  node until they finish);
- the plan (figure 3.2): the policy is offered every slot, busy or idle, and each Job's unfinished tasks, and maps
  each slot it uses to a Job. A busy slot keeps its pod (it finishes its task; the decision taken when it ends
  gives the slot to the Job the plan then names); with ``spec.preemption`` a busy slot the plan gives to a Job of
  strictly higher priority than its pod's, a Job with a gated pod no idle slot took, has its pod evicted (4.4's "kill
  some low priority running tasks", the simulator's ``"kill-lower"``; the slot is released at the decision after
  the pod is gone). Each idle slot is released at once to the next gated pod (lowest completion index first) of the
  Job the plan gives it; an idle slot planned for a Job with no gated pod (or for none) is released instead to a Job
  the plan gives a busy slot of another Job while it has a gated pod (issue 51: no slot idle while a released task
  waits, and no eviction while a slot is idle; :func:`soda_optimizer.dispatch.step`, steps 4-5). A gated pod that
  no slot is given waits (the paper's dispatcher);
- a task that succeeded is measured (container start to finish, per node class) and fed to the speed matrix (4.4),
  once per pod UID;
- a released task on a failed node (NotReady or deleted) is deleted; its Job recreates it gated (4.4's "worker
  failure": it is redone when a worker is allocated to it); a released pod being deleted (evicted, say) holds its
  slot until it is gone, and the slot is in no plan meanwhile.

Bounded (issue 45; :mod:`soda_optimizer.dispatch.limits`): a node offers at most as many slots as it can hold pods
(its allocatable ``pods`` less the other pods bound there, never more than ``MAX_SLOTS_PER_NODE``), a decision plans
at most ``MAX_WORKERS`` slots (nodes in name order), and the policy decides through the one entry
(:func:`soda_optimizer.systems.decide`, system ``dispatch``, a :class:`~soda_optimizer.systems.DispatchStep`) within
its deadline: past it the plan is the policy's best so far. :attr:`Decision.capped` says which cap bit, naming the
field (``spec.slotCPU``), :attr:`Decision.timed_out` whether the deadline did; the status shows both.

Departures from the paper: a worker is a slot of CPU on a node, not a process; decisions are taken at each event
(:mod:`.handlers`) and every ``spec.intervalSeconds``, not only on a job's submission or completion (3.5.2's
passive mode), as the simulator does; a busy slot on a cordoned or deselected node is planned until its task ends,
then the slot is gone.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from soda_optimizer import dispatch as dp
from soda_optimizer import systems

from ..kube import clock
from ..kube.pods import TERMINAL
from .objects import DispatchedJob, Node, Task, class_speed, job_of, node_class, node_of, task_of
from .spec import DispatchSpec, policy_of


@dataclass
class Decision:
    place: dict[str, str] = field(default_factory=dict)  # gated pod -> node
    evict: dict[str, str] = field(default_factory=dict)  # running pod -> the Job the plan gives its slot (preemption)
    delete: list[str] = field(default_factory=list)  # released pods on failed nodes
    plan: dict[str, str] = field(default_factory=dict)  # slot ("node/NNN") -> Job: the whole plan
    slots: dict[str, int] = field(default_factory=dict)  # node -> slots
    jobs: list[dict[str, Any]] = field(default_factory=list)  # per-Job status
    capped: list[str] = field(default_factory=list)  # the work caps that bit, each naming the field
    timed_out: bool = False  # the policy stopped at the deadline: the plan is its best so far


@dataclass
class Outcome:
    """A decision and what it was taken from, for :mod:`.apply` and :mod:`.status`."""

    decision: Decision
    policy: dp.Policy
    speeds: dp.SpeedMatrix
    slot_cpu: float
    jobs: dict[str, DispatchedJob]
    pods: dict[str, dict[str, Any]]  # task pod name -> body
    classes: dict[str, str]  # node -> class
    measured: set[str]  # UIDs of the live tasks already in the speeds
    new: list[str]  # UIDs measured by this decision


def priors_of(node_bodies: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """Each node class's prior speed factor, from the nodes' mips labels (mips / 1000)."""
    out: dict[str, float] = {}
    for b in node_bodies:
        labels = (b.get("metadata") or {}).get("labels") or {}
        f = class_speed(labels)
        if f is not None:
            out[node_class(labels)] = f
    return out


def speeds_from(status: Mapping[str, Any], spec: DispatchSpec, priors: Mapping[str, float], kinds: Iterable[str]) -> dp.SpeedMatrix:
    """The speed matrix: priors (``spec.priorThroughput`` x the class's mips factor), the observations kept in
    ``status.speeds``."""
    prior = spec.prior_throughput
    table = {(k, c): prior * f for c, f in priors.items() for k in kinds}
    observed = {(str(e["kind"]), str(e["nodeClass"])): tuple(float(x) for x in e.get("secondsPerUnit") or [] if float(x) > 0)
                for e in status.get("speeds") or [] if e.get("kind") and e.get("nodeClass")}
    return dp.SpeedMatrix(prior=prior, table=table, observed={k: v for k, v in observed.items() if v}, window=spec.window)


def measure(speeds: dp.SpeedMatrix, jobs: Mapping[str, DispatchedJob], tasks: Iterable[Task], measured: set[str]) -> tuple[dp.SpeedMatrix, list[str]]:
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


def slot_cpu(spec: DispatchSpec, tasks: Iterable[Task]) -> float:
    """CPU of one slot: ``spec.slotCPU``, else the largest task pod's CPU request (1 core when none requests any)."""
    return spec.slot_cpu if spec.slot_cpu is not None else max((t.cpu for t in tasks), default=1.0) or 1.0


def slot_caps(nodes: Iterable[Node], bound: Iterable[tuple[str, str, float, float]], mine: set[str],
              slot_cpu: float) -> tuple[dict[str, int], list[str]]:
    """Slots per usable node: floor((allocatable - requests of bound pods not in ``mine``) / slot CPU), at most the
    node's allocatable pods less the bound pods not in ``mine`` (and ``MAX_SLOTS_PER_NODE``); at most ``MAX_WORKERS``
    in all (nodes in name order). Returns the slots and what the caps cut, naming ``spec.slotCPU``."""
    usable = {n.name: n for n in nodes if n.usable}
    free = {n: u.cpu for n, u in usable.items()}
    held = dict.fromkeys(usable, 0)
    for node, key, cpu, _mem in bound:
        if node in free and key not in mine:
            free[node] -= cpu
            held[node] += 1
    if not slot_cpu > 0:
        return {}, []
    out: dict[str, int] = {}
    cut, total = 0, 0
    for n in sorted(free):
        want = max(0.0, math.floor(free[n] / slot_cpu + 1e-9))
        room = max(0, min(usable[n].pods, dp.limits.MAX_SLOTS_PER_NODE) - held[n])
        got = int(min(want, room, max(0, dp.limits.MAX_WORKERS - total)))
        cut += want > got
        out[n] = got
        total += got
    notes = []
    if cut:
        notes.append(f"spec.slotCPU: {slot_cpu:g} CPU gives more slots than {cut} node(s) can hold pods (or than one "
                     f"decision plans, {dp.limits.MAX_WORKERS}); planned {total} slot(s)")
    return out, notes


def slots_for(nodes: Iterable[Node], bound: Iterable[tuple[str, str, float, float]], mine: set[str], slot_cpu: float) -> dict[str, int]:
    """Slots per usable node (:func:`slot_caps`)."""
    return slot_caps(nodes, bound, mine, slot_cpu)[0]


def plan(jobs: Mapping[str, DispatchedJob], tasks: Iterable[Task], nodes: Iterable[Node], slots: Mapping[str, int],
         policy: dp.Policy, speeds: dp.SpeedMatrix, now: float, preemption: bool = False,
         deadline_s: float | None = None) -> Decision:
    """One dispatch decision, pure: the plan over every slot, the gated pods released onto idle slots, the running
    pods evicted (``preemption`` only, and only for a Job of strictly higher priority), the released pods lost with
    their failed node, and each Job's status.
    ``deadline_s``: the policy's budget (None: ``limits.DEADLINE_S``)."""
    out = Decision(slots=dict(slots))
    by_name = {n.name: n for n in nodes}
    queued: dict[str, list[Task]] = {}
    running: dict[str, list[Task]] = {}
    finished: dict[str, list[Task]] = {}
    leaving: dict[str, int] = {}  # node -> released pods being deleted there (they hold a slot until gone)
    for t in tasks:
        if t.job not in jobs:
            continue
        if t.phase in TERMINAL:
            finished.setdefault(t.job, []).append(t)
        elif t.gated:
            if t.phase != "Deleting":
                queued.setdefault(t.job, []).append(t)
        elif t.node is not None:
            n = by_name.get(t.node)
            if n is None or n.failed:
                if t.phase != "Deleting":
                    out.delete.append(t.name)
                continue
            if t.phase == "Deleting":
                leaving[t.node] = leaving.get(t.node, 0) + 1
                continue
            running.setdefault(t.job, []).append(t)
    # workers: each node's slots, the first ones held by the tasks running there, then the ones being freed
    per_node: dict[str, list[Task]] = {}
    for ts in running.values():
        for t in ts:
            per_node.setdefault(t.node or "", []).append(t)
    workers: list[dp.WorkerView] = []
    pod_on: dict[str, str] = {}  # busy slot -> its pod
    for name in sorted(set(slots) | set(per_node)):
        n = by_name.get(name)
        if n is None:
            continue
        held = sorted(per_node.get(name, []), key=lambda t: (t.job, t.index, t.name))
        gone = leaving.get(name, 0)
        total = max(slots.get(name, 0) if n.usable else 0, len(held) + gone)
        if len(workers) + total > dp.limits.MAX_WORKERS:  # busy slots past the cap: their pods keep running
            total = max(0, dp.limits.MAX_WORKERS - len(workers))
            held = held[:total]
        for i, t in enumerate(held):
            wid = f"{name}/{i:03d}"
            workers.append(dp.WorkerView(id=wid, node_class=n.node_class, job=t.job))
            pod_on[wid] = t.name
        for i in range(len(held) + gone, total):
            workers.append(dp.WorkerView(id=f"{name}/{i:03d}", node_class=n.node_class))
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
    decided = systems.decide("dispatch", policy, systems.DispatchStep(views, workers, now, speeds, "lower" if preemption else False), deadline_s)
    step: dp.Step = decided.result
    out.timed_out = decided.status == "deadline"
    out.plan = dict(step.plan)
    out.evict = {pod_on[w]: job for w, job in sorted(step.preempt.items())}
    given: dict[str, list[str]] = {}
    for w, job in sorted(step.start.items()):
        if w not in step.preempt:  # an evicted pod's slot is released once the pod is gone
            given.setdefault(job, []).append(w.rsplit("/", 1)[0])
    placed: dict[str, list[str]] = {}
    for job, ns in given.items():
        order = sorted(queued.get(job, []), key=lambda t: (t.index, t.name))
        for t, node in zip(order, ns, strict=False):
            out.place[t.name] = node
            placed.setdefault(job, []).append(node)
    planned = Counter(step.plan.values())
    view_of = {v.id: v for v in views}
    for j in sorted(jobs.values(), key=lambda j: (-j.priority, j.name)):
        row = _progress(j, view_of.get(j.name), queued.get(j.name, []), running.get(j.name, []),
                        finished.get(j.name, []), placed.get(j.name, []), by_name, speeds, now)
        out.jobs.append({**row, "planned": planned.get(j.name, 0)})
    return out


def _progress(j: DispatchedJob, v: dp.JobView | None, queued: list[Task], running: list[Task], finished: list[Task],
              given: list[str], nodes: Mapping[str, Node], speeds: dp.SpeedMatrix, now: float) -> dict[str, Any]:
    """A Job's status row: done / running / waiting, projected finish vs deadline, penalty so far (6.3.2)."""
    done = max(j.succeeded, sum(1 for t in finished if t.phase == "Succeeded"))
    run_nodes = [t.node for t in running if t.node] + given
    if j.finished is not None or v is None:
        projected: float | None = j.finished if j.finished is not None else max((t.finished or 0.0 for t in finished), default=now)
    else:
        # the remaining work less what the running tasks did since they started (at the estimated speed)
        w = j.work or 1.0
        rem = v.remaining_work - w * len(running)
        for t in running:
            n = nodes.get(t.node or "")
            th = speeds.throughput(j.kind, n.node_class) if n is not None else 0.0
            rem += max(0.0, w - (now - t.started) * th) if t.started is not None else w
        rate = sum(speeds.throughput(j.kind, nodes[n].node_class) for n in run_nodes if n in nodes)
        projected = now + max(0.0, rem) / rate if rate > 0 else None
    late = 0.0 if j.deadline is None else max(0.0, (j.finished if j.finished is not None else now) - j.deadline)
    return {
        "job": j.name, "priority": j.priority, "kind": j.kind,
        "done": done, "running": len(run_nodes), "waiting": max(0, len(queued) - len(given)),
        "deadline": clock.iso(j.deadline), "projectedFinish": clock.iso(projected),
        "meetsDeadline": None if j.deadline is None or projected is None else projected <= j.deadline,
        "complete": j.finished is not None,
        "penalty": round(j.penalty * late, 3),
    }


def decide(spec: DispatchSpec, job_bodies: Iterable[Mapping[str, Any]], pods_of: Mapping[str, list[dict[str, Any]]],
           node_bodies: Iterable[Mapping[str, Any]], bound: Iterable[tuple[str, str, float, float]],
           status: Mapping[str, Any], namespace: str, seen: set[str], now: float,
           inflight: Mapping[str, str] | None = None, deadline_s: float | None = None) -> Outcome:
    """One decision of a BatchDispatch in ``namespace`` from copies of the indexed objects: its Jobs' bodies, their
    task pods by Job name, the nodes, every bound pod's requests, its status (the speeds, the measured UIDs),
    ``seen`` (UIDs this operator measured already, not yet in the status) and ``inflight`` (pods this operator
    released, pod name -> node, that the index may still show gated: they are counted as released there)."""
    jobs = {j.name: j for j in (job_of(b) for b in job_bodies) if j is not None}
    pods = {(p.get("metadata") or {}).get("name", ""): p for j in jobs for p in pods_of.get(j, [])}
    node_bodies = list(node_bodies)
    nodes = [node_of(b, spec.node_selector) for b in node_bodies]
    tasks = [t for t in (task_of(p) for p in pods.values()) if t is not None]
    inflight = inflight or {}
    tasks = [replace(t, gated=False, node=inflight[t.name]) if t.gated and t.name in inflight else t for t in tasks]
    measured = set(status.get("measured") or []) | seen
    priors = priors_of(node_bodies) if spec.mips_priors else {}
    speeds = speeds_from(status, spec, priors, {j.kind for j in jobs.values()} | {dp.model.DEFAULT_KIND})
    speeds, new = measure(speeds, jobs, tasks, measured)
    cpu = max(slot_cpu(spec, tasks), dp.limits.MIN_SLOT_CPU)  # a task pod's own request may be below a slot's least
    slots, capped = slot_caps(nodes, bound, {f"{namespace}/{t.name}" for t in tasks}, cpu)
    policy = policy_of(spec)
    decision = plan(jobs, tasks, nodes, slots, policy, speeds, now, spec.preemption, deadline_s)
    decision.capped = capped
    return Outcome(decision, policy, speeds, cpu, jobs, pods, {n.name: n.node_class for n in nodes},
                   (measured | set(new)) & {t.uid for t in tasks}, new)
