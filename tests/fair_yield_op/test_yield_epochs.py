"""Issue 47 item 2, offline: a YieldGroup over many epochs in which evictions are refused (a PodDisruptionBudget) or
slow (the pod stays Terminating for k epochs) and resizes are refused, driving the operator's own code path:
the pods as the API server holds them -> :func:`..kube.pods.foreign_pods` / :func:`..kube.pods.bound_requests`
(what the pod indexes give the epoch) -> :func:`..fair_yield.decide.inputs` -> :func:`..fair_yield.decide.plan`
-> :func:`..fair_yield.apply.steps` issued by :func:`..fair_yield.apply.run`. The cluster is a plain data model
carried across epochs (:class:`Cluster`: pod bodies, a controller that recreates an evicted pod gated, a
scheduler that binds a released pod only where its requests fit, terminations that take epochs), not a mock of
the Kubernetes client.

The property: between any two writes, in the order ``run`` issues them, the CPU requests of the pods bound to a
node (running and terminating) sum within its allocatable; and every pod kubesoda releases fits where it was
placed (the scheduler never has to refuse it)."""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from test_yield_decide import group

from soda_operator.fair_yield.apply import Outcome, Step, run, steps
from soda_operator.fair_yield.decide import inputs, plan
from soda_operator.fair_yield.tasks import GATE, LABEL
from soda_operator.kube.pods import bound_requests, foreign_pods, requests

ALLOC_MEM = "64Gi"


def m(cores: float) -> int:
    return round(cores * 1000)


@dataclass
class Cluster:
    """The cluster as a plain model: nodes (allocatable millicores, cordoned), pods as the API server holds
    them, the controllers' templates (owner uid -> millicores, limit or request-only), the owners a
    PodDisruptionBudget protects (every eviction refused), and the terminating pods' epochs left."""

    cpu: dict[str, int]
    cordoned: set[str] = field(default_factory=set)
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)
    templates: dict[str, tuple[int, bool]] = field(default_factory=dict)
    protected: set[str] = field(default_factory=set)
    linger: dict[str, int] = field(default_factory=dict)
    names: Any = field(default_factory=itertools.count)
    over: list[str] = field(default_factory=list)  # every excess seen
    refused_binds: list[str] = field(default_factory=list)  # released pods that did not fit where they were placed

    def nodes(self) -> list[dict[str, Any]]:
        return [{"metadata": {"name": n}, "spec": {"unschedulable": True} if n in self.cordoned else {},
                 "status": {"allocatable": {"cpu": f"{c}m", "memory": ALLOC_MEM}, "conditions": [{"type": "Ready", "status": "True"}]}}
                for n, c in self.cpu.items()]

    def add(self, millicores: int, limit: bool, owner: str = "", group_: bool = True, node: str | None = None) -> str:
        """A pod as its creator makes it: the group's gated, another workload's bound to ``node``."""
        name = f"p{next(self.names)}"
        cpu = f"{millicores}m"
        res: dict[str, Any] = {"requests": {"cpu": cpu, "memory": "1Gi"}}
        if limit:
            res["limits"] = {"cpu": cpu, "memory": "1Gi"}
        md: dict[str, Any] = {"name": name, "namespace": "ns", "uid": f"u-{name}", "labels": {LABEL: "g"} if group_ else {},
                              "annotations": {}}
        if owner:
            md["ownerReferences"] = [{"uid": owner, "controller": True, "kind": "ReplicaSet", "name": owner}]
        spec: dict[str, Any] = {"containers": [{"name": "c", "resources": res}]}
        if group_:
            spec["schedulingGates"] = [{"name": GATE}]
        if node is not None:
            spec["nodeName"] = node
        self.pods[name] = {"metadata": md, "spec": spec, "status": {"phase": "Running" if node else "Pending"}}
        return name

    def used(self, node: str) -> int:
        """The node's CPU requests as the scheduler counts them: every bound, unfinished pod, terminating ones too."""
        return sum(m(requests(p)[0]) for p in self.pods.values()
                   if p["spec"].get("nodeName") == node and p["status"].get("phase") not in ("Succeeded", "Failed"))

    def check(self, when: str) -> None:
        for n, c in self.cpu.items():
            if self.used(n) > c:
                self.over.append(f"{when}: {n} holds {self.used(n)}m of {c}m")

    def schedule(self) -> None:
        """The scheduler: a released, unbound pod is bound to the node it is pinned to when its requests fit
        there; else it stays Pending, Unschedulable."""
        for name, p in self.pods.items():
            spec, md = p["spec"], p["metadata"]
            if spec.get("schedulingGates") or spec.get("nodeName") or md.get("deletionTimestamp"):
                continue
            node = md["annotations"].get("kubesoda.io/yield-node")
            if node is None or node in self.cordoned:
                continue
            if self.used(node) + m(requests(p)[0]) <= self.cpu[node]:
                spec["nodeName"], p["status"] = node, {"phase": "Running"}
            else:
                self.refused_binds.append(f"{name} on {node}: {self.used(node)}m + {m(requests(p)[0])}m > {self.cpu[node]}m")
                p["status"] = {"phase": "Pending", "conditions": [
                    {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "Insufficient cpu"}]}

    def gone(self, name: str) -> None:
        self.pods.pop(name, None)
        self.linger.pop(name, None)

    def tick(self) -> None:
        """An epoch passes: terminating pods count down, and go at 0."""
        for name in list(self.linger):
            self.linger[name] -= 1
            if self.linger[name] <= 0:
                self.gone(name)
        self.check("after terminations")


class Model:
    """The writes of :func:`steps` on the :class:`Cluster`, with the faults ``rand`` picks: how many epochs an
    evicted pod stays Terminating (0: gone at once), whether a resize is refused. A seeded ``random.Random``, not
    hypothesis' draws: which writes an epoch makes depends on the plan, and the plan on the clock (a 0.1 s
    deadline), so draws made per write made hypothesis' data generation differ between runs of one example
    (``FlakyStrategyDefinition``, 1 run in 3-5 on main)."""

    def __init__(self, cluster: Cluster, rand: random.Random, refuse_resizes: bool) -> None:
        self.c, self.rand, self.refuse_resizes = cluster, rand, refuse_resizes

    def __call__(self, s: Step) -> Outcome:
        c = self.c
        pod = c.pods.get(s.pod)
        if pod is None or pod["metadata"].get("deletionTimestamp"):
            return "gone", None
        owner = next((o["uid"] for o in pod["metadata"].get("ownerReferences", [])), "")
        if s.kind == "evict":
            if owner in c.protected and pod["spec"].get("nodeName"):
                event("an eviction refused")
                return "refused", "Cannot evict pod as it would violate the pod's disruption budget."
            k = self.rand.randint(0, 3)  # epochs it stays Terminating
            if k and pod["spec"].get("nodeName"):
                event("a pod Terminating for epochs")
                pod["metadata"]["deletionTimestamp"] = "now"
                c.linger[s.pod] = k
            else:
                c.gone(s.pod)
            if owner and owner in c.templates:  # the ReplicaSet: a terminating pod is no replica
                cpu, limit = c.templates[owner]
                c.add(cpu, limit, owner)
        elif s.kind in ("shrink", "grow"):
            if self.refuse_resizes and self.rand.randint(0, 4) == 0:  # the resize refused
                event(f"a {s.kind} refused")
                return "refused", "resize refused: 500 Internal Server Error"
            resize(pod, s.resize)
            pod["metadata"]["annotations"].update(s.annotations)
            if s.kind == "grow" and any(c.pods[n]["spec"].get("nodeName") == s.node for n in c.linger):
                event("a growth beside a terminating pod")
        else:  # place: annotations and affinity, the resize while gated, the gate removed; the scheduler binds it
            assert s.patch is not None and s.gates is not None
            pod["metadata"]["annotations"].update(s.patch["metadata"]["annotations"])
            pod["spec"]["affinity"] = s.patch["spec"]["affinity"]
            if s.resize is not None:
                resize(pod, s.resize)
            pod["spec"]["schedulingGates"] = s.gates
            c.schedule()
        c.check(f"after {s.kind} {s.pod}")
        return "done", None


def resize(pod: dict[str, Any], body: dict[str, Any] | None) -> None:
    """A pods/resize patch as the API server merges it: each named container's resources replaced by the given ones."""
    if body is None:
        return
    by = {c["name"]: c for c in body["spec"]["containers"]}
    for ctr in pod["spec"]["containers"]:
        if ctr["name"] in by:
            res = by[ctr["name"]]["resources"]
            ctr["resources"] = {k: {**ctr["resources"].get(k, {}), **v} for k, v in res.items()} | {
                k: v for k, v in ctr["resources"].items() if k not in res}


def epoch(c: Cluster, spec: Any, rand: random.Random, refuse_resizes: bool) -> None:
    """One epoch as the operator runs it: the indexes read, the decision, the writes in order."""
    index: dict[str, list[Any]] = {}
    for p in c.pods.values():
        for node, v in foreign_pods(p).items():
            index.setdefault(node, []).append(v)
    members = {n: p for n, p in c.pods.items() if LABEL in p["metadata"]["labels"]}
    tasks, hosts, facts = inputs(members, c.nodes(), bound_requests(index, {}))
    decision = plan(tasks, hosts, spec, facts)
    run(steps(decision, members), Model(c, rand, refuse_resizes))
    c.schedule()  # the scheduler retries what it could not bind
    c.check("after the epoch")


@st.composite
def starts(draw: Any) -> tuple[Cluster, list[tuple[int, bool, str]]]:
    """2-4 nodes of 1-4 cores (whole millicores), other workloads' pods bound on them, and the group's controllers
    (some behind a budget that refuses every eviction) and bare pods, as (millicores, limit, owner): 3-14 pods,
    enough to share nodes, so that moves leave neighbours behind."""
    c = Cluster(cpu={f"n{i}": draw(st.integers(1000, 4000)) for i in range(draw(st.integers(2, 4)))})
    for n, cpu in c.cpu.items():
        if draw(st.booleans()):
            c.add(draw(st.integers(1, cpu // 2)), False, group_=False, node=n)
    pods = []
    for k in range(draw(st.integers(1, 3))):
        owner = f"rs{k}"
        c.templates[owner] = (draw(st.integers(300, 3000)), draw(st.booleans()))
        if draw(st.booleans()):
            c.protected.add(owner)
        pods += [(*c.templates[owner], owner)] * draw(st.integers(2, 4))
    pods += [(draw(st.integers(300, 3000)), draw(st.booleans()), "") for _ in range(draw(st.integers(1, 2)))]
    return c, pods


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(starts(), st.sampled_from(["anytime", "dynamic", "mcb8"]), st.sampled_from(["0", "2Gi", "64Gi", "64Gi"]), st.booleans(), st.data())
def test_no_node_over_its_cpu_between_any_two_writes(start, algorithm, budget, refuse_resizes, data):
    """Over 8 epochs: pods arrive (some at once, the rest over the epochs), a node may be cordoned and come
    back, pods may be deleted by their owners; evictions are refused for protected controllers and otherwise
    take 0-3 epochs to finish; resizes may be refused. No node's requests above its allocatable after any
    write, and no released pod refused by the scheduler."""
    c, pods = start
    spec = group(algorithm=algorithm, migrationBudget=budget, deadlineSeconds=0.1)
    draw = data.draw
    first = draw(st.integers(len(pods) // 2, len(pods)), label="pods at the start")
    rand = random.Random(draw(st.integers(0, 2**32 - 1), label="the faults' seed"))  # Model's docstring: why not draws
    for cpu, limit, owner in pods[:first]:
        c.add(cpu, limit, owner)
    later = pods[first:]
    for e in range(8):
        if later and draw(st.booleans(), label=f"arrival at epoch {e}"):
            cpu, limit, owner = later.pop(0)
            c.add(cpu, limit, owner)
        if len(c.cpu) > 1 and draw(st.integers(0, 2), label=f"cordon at epoch {e}") == 0:
            c.cordoned ^= {draw(st.sampled_from(sorted(c.cpu)), label="node cordoned or uncordoned")}
        live = sorted(n for n, p in c.pods.items() if LABEL in p["metadata"]["labels"] and not p["metadata"].get("deletionTimestamp"))
        if live and rand.randint(0, 2) == 0:  # a pod deleted by its owner (which pods live depends on the plan)
            c.gone(rand.choice(live))
        epoch(c, spec, rand, refuse_resizes)
        c.tick()
    assert not c.over, c.over[:5]
    assert not c.refused_binds, c.refused_binds[:5]


def test_a_refused_shrink_holds_back_the_placements_and_growths_on_its_node():
    """The order of the writes, with the shrink refused: nothing is released onto that node, nothing grows there;
    the other node's writes go on."""
    plan_ = [Step("shrink", "a", "n0", {}), Step("shrink", "b", "n1", {}), Step("place", "new", "n0", None, patch={}, gates=[]),
             Step("grow", "c", "n0", {}), Step("place", "other", "n1", None, patch={}, gates=[]), Step("grow", "d", "n1", {})]
    issued: list[str] = []

    def do(s: Step) -> Outcome:
        issued.append(s.pod)
        return ("refused", "resize refused: 409 Conflict") if s.pod == "a" else ("done", None)

    done = run(plan_, do)
    assert issued == ["a", "b", "other", "d"]
    assert done["failed"] == {"a": "resize refused: 409 Conflict", "new": "not placed on n0: a shrink there was refused"}
    assert done["placed"] == 1 and done["resized"] == 2
