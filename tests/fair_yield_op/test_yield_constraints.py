"""Issue 47 on the Kubernetes side of the fair-yield groups, pure (decide.plan, eligible, apply.resize_body):
each pod's own constraints bind the plan (nodeSelector, required node affinity, taints and tolerations), a pod no
node admits is reported and left gated, a released pod stuck Pending is re-planned even with a zero migration
budget, a moving pod keeps its CPU counted where it is, a lowering resize is never skipped, and the state is
``optimal`` only when what is applied is what was proven. The property: on every node the CPU limits in force
after the writes (resized, placed, or still held by a pod being moved) sum within what the node offers."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_yield_decide import GI, group

from soda_operator.fair_yield import status as group_status
from soda_operator.fair_yield.apply import held, resize_body
from soda_operator.fair_yield.decide import hosts_for, node_facts, plan
from soda_operator.fair_yield.eligible import Constraints, NodeFacts, constraints, tolerates, why_not
from soda_operator.fair_yield.tasks import ANN_NODE, LABEL, Task, task_of
from soda_operator.kube import quantities
from soda_operator.kube.pods import pinned_affinity

INFRA = {"key": "dedicated", "value": "infra", "effect": "NoSchedule"}


def node(name, zone="z0", taints=(), cpu="4", ready=True, unschedulable=False, labels=None):
    return {"metadata": {"name": name, "labels": {"zone": zone, **(labels or {})}},
            "spec": {"taints": list(taints), **({"unschedulable": True} if unschedulable else {})},
            "status": {"allocatable": {"cpu": cpu, "memory": "8Gi"}, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def task(name, alpha=1.0, owner="rs", node=None, held=None, c=None, pending=None):
    return Task("ns", name, f"u-{name}", owner, alpha, GI, node, node is None, held=alpha if held is None else held,
                pending=pending, constraints=c or Constraints())


def test_taints_and_tolerations_as_the_scheduler_reads_them():
    assert not tolerates([], INFRA)
    assert tolerates([{"key": "dedicated", "operator": "Equal", "value": "infra"}], INFRA)
    assert tolerates([{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}], INFRA)
    assert tolerates([{"operator": "Exists"}], INFRA)  # an empty key with Exists tolerates everything
    assert not tolerates([{"key": "dedicated", "value": "gpu"}], INFRA)
    assert not tolerates([{"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}], INFRA)
    prefer = NodeFacts("n", {}, ({"key": "k", "effect": "PreferNoSchedule"},))
    assert why_not(Constraints(), prefer) is None  # a preference, not a filter
    assert why_not(Constraints(), NodeFacts("n", {}, (INFRA,))) == "untolerated taint dedicated=infra:NoSchedule"


def test_node_selector_and_required_affinity():
    n = NodeFacts("n1", {"zone": "z1", "cores": "8"})
    assert why_not(Constraints(selector={"zone": "z1"}), n) is None
    assert why_not(Constraints(selector={"zone": "z0"}), n) == "nodeSelector"

    def term(*exprs, fields=()):
        return {"matchExpressions": list(exprs), "matchFields": list(fields)}

    def ok(*terms):
        return why_not(Constraints(terms=terms), n) is None

    assert ok(term({"key": "zone", "operator": "In", "values": ["z1", "z2"]}))
    assert not ok(term({"key": "zone", "operator": "NotIn", "values": ["z1"]}))
    assert ok(term({"key": "gpu", "operator": "DoesNotExist"}), term({"key": "zone", "operator": "In", "values": ["z9"]}))  # ORed
    assert not ok(term({"key": "zone", "operator": "Exists"}, {"key": "gpu", "operator": "Exists"}))  # ANDed
    assert ok(term({"key": "cores", "operator": "Gt", "values": ["4"]})) and not ok(term({"key": "cores", "operator": "Lt", "values": ["4"]}))
    assert ok(term(fields=[{"key": "metadata.name", "operator": "In", "values": ["n1"]}]))
    assert not ok(term(fields=[{"key": "metadata.name", "operator": "NotIn", "values": ["n1"]}]))
    assert not ok(term())  # an empty term matches no node
    assert not ok()  # no term at all: no node


def test_kubesodas_own_pin_is_not_the_pods_constraint():
    own = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1"]}]}]}}}
    pinned = {"affinity": pinned_affinity({"spec": {"affinity": own}}, "n1")}
    c = constraints(pinned, "n1")
    assert c.terms is not None and len(c.terms) == 1 and c.terms[0]["matchFields"] == []
    assert why_not(c, NodeFacts("n2", {"zone": "z1"})) is None  # the pod's own: zone z1, wherever kubesoda put it
    bare = constraints({"affinity": pinned_affinity({"spec": {}}, "n1")}, "n1")
    assert bare.terms is None and why_not(bare, NodeFacts("n9", {})) is None


def issue_cluster():
    """Issue 47's case: two zone-0 nodes tainted dedicated=infra:NoSchedule, two zone-1 nodes, and 4 pods of
    a Deployment with nodeSelector zone z1."""
    nodes = [node("a0", "z0", [INFRA]), node("a1", "z0", [INFRA]), node("b0", "z1"), node("b1", "z1")]
    return nodes, node_facts(nodes), hosts_for(nodes, [], set())


def test_the_tainted_nodes_are_never_planned():
    """All 4 pods went to the two tainted zone-0 nodes (MCB8 fills nodes in name order), Pending for good,
    and the group said optimal."""
    nodes, facts, hosts = issue_cluster()
    web = [task(f"web-{i}", alpha=2.0, c=Constraints(selector={"zone": "z1"})) for i in range(4)]
    d = plan(web, hosts, group(), facts)
    assert sorted(d.place.values()) == ["b0", "b0", "b1", "b1"]
    assert d.min_yield == 1.0 and d.status == "optimal" and not d.unplaceable
    tolerant = task("infra", c=Constraints(tolerations=({"key": "dedicated", "operator": "Exists"},)))
    plain = task("plain", owner="rs2")
    d = plan([*web, tolerant, plain], hosts, group(), facts)
    assert d.place["plain"] in ("b0", "b1") and d.place["infra"] in ("a0", "a1", "b0", "b1")


def test_a_pod_no_node_admits_is_reported_and_left_gated():
    nodes, facts, hosts = issue_cluster()
    lost = task("gpu", owner="", c=Constraints(selector={"gpu": "true"}))
    fenced = task("fenced", owner="", c=Constraints(selector={"zone": "z0"}))  # only the tainted nodes carry z0
    ok = task("ok", owner="rs")
    d = plan([lost, fenced, ok], hosts, group(), facts)
    assert d.place == {"ok": d.place["ok"]} and set(d.unplaceable) == {"gpu", "fenced"}
    assert d.unplaceable["gpu"] == "0/4 nodes admit it: 2 nodeSelector, 2 untolerated taint dedicated=infra:NoSchedule"
    assert d.unplaceable["fenced"] == "0/4 nodes admit it: 2 nodeSelector, 2 untolerated taint dedicated=infra:NoSchedule"
    assert d.status == "partial" and "gpu" in d.message
    status = group_status.allocated(d, 3, 1, None)
    assert status["state"] == "partial" and status["conditions"][0]["status"] == "False"
    assert [u["pod"] for u in status["unplaceable"]] == ["fenced", "gpu"]
    (ev,) = [e for e in group_status.events(d, 1, 0) if e[0] == "Unplaceable"]
    assert ev[2] == "Warning" and "gpu: 0/4 nodes admit it" in ev[1]


def test_hosts_for_counts_no_node_the_group_may_not_use():
    nodes = [node("cp", taints=[{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]),
             node("gpu", taints=[{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]), node("w0"),
             node("down", ready=False), node("cordoned", unschedulable=True)]
    plain = [task("p")]
    assert sorted(hosts_for(nodes, [], set(), plain)) == ["w0"]
    gpu = [task("g", c=Constraints(tolerations=({"key": "nvidia.com/gpu", "operator": "Exists"},)))]
    assert sorted(hosts_for(nodes, [], set(), plain + gpu)) == ["gpu", "w0"]
    running = [task("r", node="cp")]  # it runs there (placed before the taint): its node is counted
    assert sorted(hosts_for(nodes, [], set(), running)) == ["cp", "w0"]


def released(name, node, unschedulable=None, owner=True, selector=None):
    """A pod kubesoda released onto ``node`` that the scheduler has not bound (``unschedulable``: its message)."""
    md = {"name": name, "namespace": "ns", "uid": f"u-{name}", "labels": {LABEL: "g"}, "annotations": {ANN_NODE: node}}
    if owner:
        md["ownerReferences"] = [{"uid": "rs", "controller": True, "kind": "ReplicaSet", "name": "rs"}]
    spec = {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}}}],
            "affinity": pinned_affinity({"spec": {}}, node), **({"nodeSelector": selector} if selector else {})}
    st: dict = {"phase": "Pending"}
    if unschedulable:
        st["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": unschedulable}]
    return {"metadata": md, "spec": spec, "status": st}


def test_a_released_pod_stuck_pending_is_re_planned_with_a_zero_budget():
    """Pods planned onto nodes they cannot use were never re-planned with the default migrationBudget 0."""
    nodes, facts, hosts = issue_cluster()
    stuck = task_of(released("stuck", "a0", "0/4 nodes are available: 1 node(s) had untolerated taint"))
    misplaced = task_of(released("misplaced", "a1", selector={"zone": "z1"}))  # its own nodeSelector refuses a1
    waiting = task_of(released("waiting", "b0"))  # released a moment ago: the scheduler has not said anything
    bare = task_of(released("bare", "a0", "untolerated taint", owner=False))
    assert stuck is not None and misplaced is not None and waiting is not None and bare is not None
    assert stuck.pending and misplaced.pending == "" and waiting.pending == ""
    d = plan([stuck, misplaced, waiting, bare], hosts, group(migrationBudget="0"), facts)
    assert sorted(d.evict) == ["misplaced", "stuck"]  # recreated gated by the controller; not a migration
    assert set(d.pending) == {"stuck", "misplaced", "bare"} and "no controller" in d.pending["bare"]
    assert d.pending["misplaced"] == "a1: untolerated taint dedicated=infra:NoSchedule"
    assert d.cpu == {"waiting": 1.0} and d.status == "partial"
    assert any(e[0] == "PendingReplanned" and e[2] == "Warning" for e in group_status.events(d, 0, 2))


def test_a_moving_pod_keeps_its_cpu_counted_where_it_is():
    """A pod evicted to move (or whose eviction a PDB refuses) still holds its CPU; its neighbours were grown
    as if it held only its new share (108m over the node's offer in the issue's minimal case)."""
    hosts = {"n0": (2.0, 8 * GI), "n1": (2.0, 8 * GI)}
    a = task("a", alpha=2.0, owner="rsA", node="n0", held=1.0)
    b = task("b", alpha=2.0, owner="rsB", node="n0", held=1.0)
    d = plan([a, b], hosts, group(migrationBudget="4Gi"))
    assert len(d.evict) == 1 and d.status == "moving"
    (moving,) = d.evict
    (stays,) = set(d.cpu)
    assert d.held == {moving: ("n0", 1.0)} and d.cpu[stays] <= 1.0 + 1e-9  # not 2 cores while the other holds 1
    blocked = group_status.allocated(d, 2, 1, None, {moving: "Cannot evict pod as it would violate the pod's disruption budget."})
    assert blocked["state"] == "blocked" and blocked["conditions"][0]["reason"] == "MoveBlocked"


def test_a_lowering_resize_is_never_skipped():
    """A 4-core pod planned at yield 0.99975 (3999m) on a 4000m node holding a 1m pod kept 4 cores: the resize
    skipped changes under 1.5m, and the pod stayed Pending, Insufficient cpu."""
    d = plan([task("big", alpha=4.0, owner="")], {"n0": (3.999, 8 * GI)}, group())
    pod = {"spec": {"containers": [{"name": "c", "resources": {"limits": {"cpu": "4"}, "requests": {"cpu": "4"}}}]}}
    body = resize_body(pod, 4.0 * d.yields["big"])
    assert body is not None and body["spec"]["containers"][0]["resources"]["limits"]["cpu"] == "3999m"
    assert resize_body(pod, 4.0) is None and resize_body(pod, 4.0009) is None  # equal, or a growth under 1.5m
    assert d.status == "optimal"


def cpu_body(held_m: list[int]) -> dict:
    return {"spec": {"containers": [{"name": f"c{i}", "resources": {"limits": {"cpu": f"{m}m"}, "requests": {"cpu": f"{m}m"}}}
                                    for i, m in enumerate(held_m)]}}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 4000), min_size=1, max_size=3), st.floats(0.01, 8.0))
def test_a_resize_never_gives_more_than_planned(held_m: list[int], cores: float) -> None:
    body = resize_body(cpu_body(held_m), cores)
    now = sum(held_m) / 1000
    if body is None:
        assert now <= cores + 1e-9 or abs(now - cores) < 1e-9
        return
    limits = [quantities.amount(c["resources"]["limits"]["cpu"]) for c in body["spec"]["containers"]]
    assert sum(limits) <= max(cores, 0.001 * len(held_m)) + 1e-9


@st.composite
def clusters(draw):
    """Nodes with labels and taints, offers in whole millicores, and a group whose pods carry random
    constraints: gated, running (holding some CPU), released and Pending."""
    n = draw(st.integers(1, 4))
    names = [f"n{i}" for i in range(n)]
    nodes = [node(x, zone=draw(st.sampled_from(["z0", "z1"])), taints=[INFRA] if draw(st.booleans()) else [],
                  cpu=f"{draw(st.integers(500, 4000))}m") for x in names]
    hosts = hosts_for(nodes, [], set())
    tasks, used = [], dict.fromkeys(names, 0.0)
    for k in range(draw(st.integers(1, 8))):
        sel = {"zone": draw(st.sampled_from(["z0", "z1"]))} if draw(st.booleans()) else {}
        tol = ({"key": "dedicated", "operator": "Exists"},) if draw(st.booleans()) else ()
        owner = draw(st.sampled_from(["", "rs1", "rs2"]))
        alpha = draw(st.integers(100, 3000)) / 1000
        where = draw(st.sampled_from([None, *names]))
        c = Constraints(selector=sel, tolerations=tol)
        h = None
        if where is not None:
            room = hosts[where][0] - used[where]
            h = min(alpha, draw(st.integers(1, 3000)) / 1000)
            if h > room:
                where = None
            else:
                used[where] += h
        pending = "" if where is not None and draw(st.integers(0, 4)) == 0 else None
        tasks.append(Task("ns", f"p{k}", f"u{k}", owner, alpha, 0.5 * GI, where, where is None, held=h or alpha, pending=pending, constraints=c))
    return nodes, hosts, tasks, draw(st.sampled_from(["0", "4Gi"]))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(), st.sampled_from(["anytime", "mcb8", "dynamic", "sg"]))
def test_no_node_is_ever_over_its_offer(c, algorithm):
    """Per node, the CPU limits in force once the epoch is written (pods resized or left as they are, pods
    placed at their share, pods being moved or re-planned at what they still hold) sum within the node's
    offer; every pod is where its constraints allow."""
    nodes, hosts, tasks, budget = c
    facts = node_facts(nodes)
    d = plan(tasks, hosts, group(algorithm=algorithm, migrationBudget=budget, deadlineSeconds=0.3), facts)
    by = {t.name: t for t in tasks}
    total = dict.fromkeys(hosts, 0)
    for t in tasks:
        pod = cpu_body([round(t.held * 1000)])
        if t.name in d.place:
            body = resize_body(pod, t.alpha * d.yields[t.name])
            where = d.place[t.name]
            assert why_not(t.constraints, facts[where]) is None, (t, where)
        elif t.gated:
            continue  # left gated: holds nothing
        elif t.name in d.cpu:
            body = resize_body(pod, d.cpu[t.name])
            where = str(t.node)
        else:  # moving, re-planned or lost: holds what it holds until it is gone
            body, where = None, str(t.node)
        limit = held(body) if body is not None else t.held
        if where in total and (t.pending is None or t.name in d.place or t.name in d.cpu):
            total[where] += round(limit * 1000)
        elif t.pending is not None and t.name in d.evict:
            pass  # never bound: holds nothing on any node
    for n, m in total.items():
        assert m <= round(hosts[n][0] * 1000), (n, m, hosts[n], d)
    if d.status == "optimal":
        assert not d.evict and not d.unplaceable and not d.pending
    for name in d.evict:
        assert by[name].owner


def test_no_placement_within_the_deadline_is_not_allocated():
    from soda_operator.fair_yield.decide import Decision

    d = Decision(status="deadline", allocator="deadline", algorithm="anytime", message="anytime: no placement found within the deadline (deadline)")
    st = group_status.allocated(d, 2, 1, None)
    assert st["state"] == "deadline" and (st["conditions"][0]["status"], st["conditions"][0]["reason"]) == ("False", "NoPlacement")
