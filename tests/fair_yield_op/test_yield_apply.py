"""A YieldGroup's writes (soda_operator.fair_yield.apply) with a fake API client, and the epoch's
node-loss and per-epoch algorithm (decide.plan): request-only pods resized so their requests
follow the plan, the node pinned by its name, moves through the Eviction API (a PDB's 429 reported,
not retried in the same epoch), shrinks before grows, cordoned nodes handled like node loss."""

from __future__ import annotations

from unittest.mock import MagicMock

from kubernetes.client.exceptions import ApiException
from test_yield_decide import GI, group

from soda_operator.fair_yield.apply import resize_body, write
from soda_operator.fair_yield.decide import Decision, plan
from soda_operator.fair_yield.tasks import GATE, LABEL, Task
from soda_operator.kube import quantities
from soda_operator.kube.pods import pinned_affinity


def pod(name, requests=None, limits=None, gated=False, affinity=None, containers=1):
    res = {k: v for k, v in (("requests", requests), ("limits", limits)) if v}
    spec = {"containers": [{"name": f"c{i}", "resources": res} for i in range(containers)]}
    if gated:
        spec["schedulingGates"] = [{"name": GATE}]
    if affinity:
        spec["affinity"] = affinity
    ann = {} if gated else {"kubesoda.io/yield-node": "n0"}
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"u-{name}", "labels": {LABEL: "g"}, "annotations": ann},
            "spec": spec, "status": {"phase": "Pending" if gated else "Running"}}


def cpu_of(body, kind):
    return sum(quantities.amount(c["resources"].get(kind, {}).get("cpu")) for c in body["spec"]["containers"])


def test_request_only_pods_follow_the_plan():
    """Three 4-core request-only pods planned at 8/3 cores on an 8-core node kept requesting 4 (12 > 8)."""
    bodies = [resize_body(pod(f"p{i}", requests={"cpu": "4", "memory": "1Gi"}), 8 / 3) for i in range(3)]
    assert all(b is not None and "limits" not in b["spec"]["containers"][0]["resources"] for b in bodies)
    assert sum(cpu_of(b, "requests") for b in bodies) <= 8.0
    assert bodies[0]["spec"]["containers"][0]["resources"]["requests"]["memory"] == "1Gi"  # memory kept


def test_limits_where_present_and_the_qos_class_kept():
    both = resize_body(pod("a", requests={"cpu": "2"}, limits={"cpu": "2"}), 1.0)
    assert cpu_of(both, "requests") == cpu_of(both, "limits") == 1.0
    burst = resize_body(pod("b", requests={"cpu": "1"}, limits={"cpu": "4"}), 2.0)  # alpha is the limit
    assert cpu_of(burst, "limits") == 2.0 and cpu_of(burst, "requests") == 0.5  # request < limit: still Burstable
    two = resize_body(pod("c", requests={"cpu": "1"}, containers=2), 1.0)
    assert cpu_of(two, "requests") == 1.0 and len(two["spec"]["containers"]) == 2
    assert resize_body(pod("d", requests={"cpu": "1"}), 1.0) is None
    assert resize_body(pod("e", requests={"memory": "1Gi"}), 1.0) is None  # no CPU declared: nothing to share


def test_the_node_is_pinned_by_its_name():
    term = {"key": "metadata.name", "operator": "In", "values": ["node-a"]}
    assert pinned_affinity(pod("a", gated=True), "node-a") == {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchFields": [term]}]}}}
    own = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1"]}]}, {"matchFields": [{"key": "x", "operator": "Exists"}]}]}},
        "podAntiAffinity": {"x": 1}}
    got = pinned_affinity(pod("b", gated=True, affinity=own), "node-a")
    terms = got["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert len(terms) == 2 and all(t["matchFields"][-1] == term for t in terms)  # added to each of its own terms
    assert terms[0]["matchExpressions"] == own["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]["matchExpressions"]
    assert got["podAntiAffinity"] == {"x": 1}


def test_moves_go_through_the_eviction_api_and_a_pdb_blocks_them():
    core = MagicMock()
    refused = [ApiException(status=429, reason="Too Many Requests"), ApiException(status=404)]
    for e in refused:
        e.body = '{"message": "Cannot evict pod as it would violate the pod\'s disruption budget."}'
    core.create_namespaced_pod_eviction.side_effect = [None, *refused]
    d = Decision(evict=["a", "b", "gone"])
    done = write(core, "ns", d, {})
    assert not core.delete_namespaced_pod.called
    assert [c.args[0] for c in core.create_namespaced_pod_eviction.call_args_list] == ["a", "b", "gone"]
    body = core.create_namespaced_pod_eviction.call_args_list[0].args[2]
    assert body.metadata.name == "a" and body.metadata.namespace == "ns"
    assert done["evicted"] == 1 and done["blocked"] == {"b": "Cannot evict pod as it would violate the pod's disruption budget."}


def test_shrinks_before_placements_before_grows():
    core = MagicMock()
    pods = {"big": pod("big", requests={"cpu": "2"}, limits={"cpu": "2"}), "small": pod("small", requests={"cpu": "1"}),
            "new": pod("new", requests={"cpu": "2"}, gated=True)}
    d = Decision(place={"new": "n0"}, cpu={"small": 2.0, "big": 1.0}, yields={"new": 0.5, "small": 1.0, "big": 0.5})
    done = write(core, "ns", d, pods)
    order = [c.args[0] for c in core.patch_namespaced_pod_resize.call_args_list]
    assert order == ["big", "new", "small"] and done["placed"] == 1 and done["resized"] == 2
    placed = [c.args[2] for c in core.patch_namespaced_pod.call_args_list if c.args[0] == "new"][0]
    assert "nodeSelector" not in placed["spec"] and placed["spec"]["affinity"]["nodeAffinity"]


def cordoned_hosts():
    return {"n1": (4.0, 8 * GI)}  # n0 is cordoned (or NotReady, or gone): not offered


def test_a_lost_node_is_node_loss():
    """Running pods on a cordoned node were taken for new tasks and resized to a plan that put them
    elsewhere without moving them."""
    tasks = [Task("ns", "owned", "u1", "rs", 2.0, GI, "n0", False), Task("ns", "bare", "u2", "", 2.0, GI, "n0", False),
             Task("ns", "new", "u3", "", 2.0, GI, None, True)]
    d = plan(tasks, cordoned_hosts(), group())
    assert d.evict == ["owned"] and sorted(d.lost) == ["bare", "owned"]
    assert "bare" not in d.cpu and "owned" not in d.cpu and d.place == {"new": "n1"}
    assert "bare" in d.message and d.min_yield == 1.0


def test_the_chosen_algorithm_runs_at_every_epoch():
    running = [Task("ns", f"r{i}", f"u{i}", "rs", 2.0, GI, "n0", False) for i in range(2)]
    new = [Task("ns", "new", "un", "rs2", 2.0, GI, None, True)]
    hosts = {"n0": (4.0, 8 * GI), "n1": (4.0, 8 * GI)}
    assert plan(running + new, hosts, group()).algorithm == "anytime"
    assert plan(running + new, hosts, group(algorithm="dynamic")).algorithm == "dynamic"
    free = plan(running + new, hosts, group(algorithm="mcb8", migrationBudget="100Gi"))
    assert free.algorithm == "mcb8"
    d = plan(running + new, hosts, group())
    assert d.bound is not None and d.gap is not None and d.gap <= 1e-6 and d.min_yield == 1.0 and not d.evict
