"""The pure side of flow routing (operator/soda_operator/flows): objects -> Problem, plan -> actions,
against hand-computed cases and against the pure planner's own results."""

from __future__ import annotations

import pytest

from soda_operator import schema
from soda_operator.flows import decide, manifests, route, spec, status
from soda_operator.flows.jobs import (
    ANN_ARRIVED,
    ANN_DECISION,
    ANN_EPOCH,
    LABEL_FLOW,
    LABEL_JOB,
    LABEL_POOL,
    LABEL_STEP,
    Request,
    StepJob,
    flow_jobs,
    request_of,
    step_job_of,
)
from soda_operator.kube.errors import TranslationError
from soda_optimizer import flows as fl

EPOCH = 60.0
K = 1000  # an even absolute epoch index: pool m1's capacity schedule [0, 4] is 0 now, 4 in the next epoch


def pool_body(name, capacity, selector=None, secret=None, load_map=None):
    """A FlowPool as the API server stores it (the CRD's defaults filled in)."""
    sp = {"capacity": capacity}
    if selector:
        sp["nodeSelector"] = selector
    if secret:
        sp["cluster"] = {"kubeconfigSecret": secret}
    if load_map:
        sp["loadMap"] = load_map
    return schema.with_defaults({"apiVersion": "kubesoda.io/v1alpha1", "kind": "FlowPool", "metadata": {"name": name, "generation": 1}, "spec": sp})


def flow_body(name="f", forecast=(2, 0), lifespan=120, mode="forecast", steps=None):
    steps = steps or [
        {"name": "a", "runSeconds": 6, "pools": ["m1"], "jobTemplate": {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}}}},
        {"name": "b", "runSeconds": 3, "pools": ["m2"], "jobTemplate": {"metadata": {"labels": {"team": "t"}},
                                                                          "spec": {"backoffLimit": 2, "template": {"spec": {"containers": [{"name": "c", "image": "y"}]}}}}},
    ]
    return schema.with_defaults({
        "apiVersion": "kubesoda.io/v1alpha1", "kind": "JobFlow", "metadata": {"name": name, "namespace": "ns", "generation": 3},
        "spec": {"epochSeconds": EPOCH, "utility": 2, "lifespanSeconds": lifespan, "arrivals": {"mode": mode, "forecast": list(forecast)},
                 "steps": steps, "planner": {"evaluations": 10, "deadlineSeconds": 1}}})


def pools():
    return {p.name: p for p in (spec.pool_of(pool_body("m1", [0, 4], selector={"pool": "one"}, secret={"namespace": "kubesoda", "name": "m1"})),
                                spec.pool_of(pool_body("m2", [4], secret={"namespace": "kubesoda", "name": "m2", "key": "config"})),
                                spec.pool_of(pool_body("local", [3], selector={"zone": "z0"})))}


def sj(job_id, step, pool=None, suspended=False, complete=False, failed=False, arrived=0.0, epoch=K, decision="", counted=False, cluster=None):
    return StepJob(cluster=cluster if cluster is not None else (pool or ""), name=f"{job_id}-s{step}", job_id=job_id, step=step, pool=pool,
                   suspended=suspended, complete=complete, failed=failed, arrived=arrived, epoch=epoch, counted=counted, decision=decision)


# ------------------------------------------------------------------------------------ objects -> specs


def test_pool_and_flow_of():
    p = pools()
    assert p["m1"].kubeconfig == ("kubesoda", "m1", "kubeconfig") and p["m1"].cluster == "m1"
    assert p["m2"].kubeconfig == ("kubesoda", "m2", "config")
    assert p["local"].kubeconfig is None and p["local"].cluster == spec.LOCAL and p["local"].selector == {"zone": "z0"}
    assert p["m1"].load_map == ((0, 0), (1, 1), (2, 1))  # the CRD's default, (0, 0) implied
    assert [p["m1"].capacity_at(k) for k in (K, K + 1, K + 2)] == [0, 4, 0]
    lm = spec.pool_of(pool_body("x", [1], selector={"a": "b"}, load_map=[{"load": 0.8, "throughput": 0.8}, {"load": 1, "throughput": 0.9}]))
    assert lm.load_map == ((0, 0), (0.8, 0.8), (1, 0.9))  # (0, 0) added
    f = spec.flow_of(flow_body())
    assert (f.key, f.utility, f.lifespan_s, f.epoch_s, f.horizon, f.mode) == ("ns/f", 2, 120, 60, 2, "forecast")
    assert [s.pools for s in f.steps] == [("m1",), ("m2",)] and f.steps[0].run_seconds == 6
    assert (f.evaluations, f.deadline_s) == (10, 1)


def test_invalid_and_missing_pools():
    bad = pool_body("bad", [1], selector={"a": "b"}, load_map=[{"load": 1, "throughput": 0.9}, {"load": 2, "throughput": 0.5}])  # decreasing
    with pytest.raises(TranslationError, match="throughput must not decrease") as e:
        spec.pool_of(bad)
    assert e.value.field == "spec.loadMap"
    # an invalid pool is left out (its own status says why): the flows naming it find it missing
    assert sorted(spec.pools_of([bad, pool_body("m2", [4], selector={"a": "b"})])) == ["m2"]
    f = spec.flow_of(flow_body())
    assert spec.missing_pools(f, pools()) == [] and spec.missing_pools(f, {"m1": pools()["m1"]}) == ["m2"]


def test_epoch_index_and_due_arrivals():
    f = spec.flow_of(flow_body(forecast=(4, 0)))
    assert spec.epoch_index(K * EPOCH + 0.5, EPOCH) == K
    start = K * EPOCH
    # 4 jobs evenly spaced: due at 7.5, 22.5, 37.5, 52.5 s into the epoch
    assert route.due_arrivals(f, K, start + 7.0, 0) == 0
    assert route.due_arrivals(f, K, start + 7.5, 0) == 1
    assert route.due_arrivals(f, K, start + 40, 1) == 2
    assert route.due_arrivals(f, K, start + 59, 4) == 0
    assert route.due_arrivals(f, K + 1, start + 119, 0) == 0  # forecast 0 in odd epochs
    assert route.due_arrivals(spec.flow_of(flow_body(mode="external")), K, start + 59, 0) == 0


def test_problem_of_hand_computed():
    f = spec.flow_of(flow_body(forecast=(2, 0), lifespan=120))
    now = K * EPOCH + 10
    jobs = flow_jobs([
        sj("back", 0, suspended=True, arrived=now - 30, cluster=""),  # backlogged before step 0: 90 s left
        sj("run", 0, pool="m1", complete=True, arrived=now - 60), sj("run", 1, pool="m2", arrived=now - 60),  # at m2's queue, 60 s left
        sj("between", 0, pool="m1", complete=True, arrived=now - 20),  # step 0 done, step 1 not yet made: backlog of step 1
        sj("old", 0, suspended=True, arrived=now - 500, cluster=""),  # past its lifespan: not waiting
        sj("done", 0, pool="m1", complete=True, arrived=now - 50), sj("done", 1, pool="m2", complete=True, arrived=now - 50),
    ])
    p = decide.problem_of([f], pools(), K, {"ns/f": jobs}, now)
    assert p.epochs == 2 and p.epoch_length == 1.0
    assert [(q.name, q.capacity) for q in p.pools] == [("m1", (0.0, 4.0)), ("m2", (4.0, 4.0))]  # only the pools the flow names
    (flow,) = p.flows
    assert flow.name == "ns/f" and flow.arrival_rate == (2.0, 0.0) and flow.lifespan == 2.0 and flow.utility == 2
    assert [(s.run_time, s.pools) for s in flow.steps] == [(0.1, ("m1",)), (0.05, ("m2",))]
    w = {(x.step, x.pool): (x.jobs, x.min_remaining, x.max_remaining) for x in p.waiting}
    assert w == {(0, None): (1.0, 1.5, 1.5), (1, "m2"): (1.0, 1.0, 1.0), (1, None): (1.0, 5 / 3, 5 / 3)}
    # one epoch later the capacity schedule has moved on
    assert decide.problem_of([f], pools(), K + 1, {}, now).pools[0].capacity == (4.0, 0.0)


# ------------------------------------------------------------------------------------ apportionment


def test_apportion_follows_probabilities_exactly():
    seq, sent = [], {}
    for _ in range(8):
        d = route.apportion({"a": 0.75}, 0.25, sent)
        sent[d] = sent.get(d, 0) + 1
        seq.append(d)
    assert seq.count("a") == 6 and seq.count(route.BACKLOG) == 2
    assert seq[:4].count("a") == 3  # already right after 4
    assert route.apportion({"a": 1.0}, 0.0, {"a": 10}) == "a"
    assert route.apportion({}, 1.0, {}) == route.BACKLOG
    assert route.apportion({}, 0.0, {}) == route.BACKLOG
    seq, sent = [], {}
    for _ in range(4):
        d = route.apportion({"x": 0.5, "y": 0.5}, 0.0, sent)
        sent[d] = sent.get(d, 0) + 1
        seq.append(d)
    assert seq == ["x", "y", "x", "y"]


# ------------------------------------------------------------------------------------ decide, hand-made plans


def test_decide_arrivals_backlog_release_next_step_drop_complete():
    f = spec.flow_of(flow_body(lifespan=120))
    p = pools()
    now = K * EPOCH + 30
    entries = {("current", 0): ({}, 1.0), ("earlier", 0): ({"m1": 1.0}, 0.0), ("current", 1): ({"m2": 1.0}, 0.0),
               ("earlier", 1): ({"m2": 1.0}, 0.0)}
    jobs = flow_jobs([
        sj("b-prev", 0, suspended=True, arrived=now - 70, epoch=K - 1, decision=f"{K - 1}/current/backlog", cluster=""),  # backlogged last epoch
        sj("b-now", 0, suspended=True, arrived=now - 10, decision=f"{K}/current/backlog", cluster=""),  # backlogged this epoch: stays
        sj("next", 0, pool="m1", complete=True, arrived=now - 20),  # step 0 done: step 1 now
        sj("late", 0, pool="m1", arrived=now - 121),  # running past its lifespan: dropped
        sj("fin", 0, pool="m1", complete=True, arrived=now - 40), sj("fin", 1, pool="m2", complete=True, arrived=now - 40),
        sj("fin2", 0, pool="m1", complete=True, arrived=now - 40), sj("fin2", 1, pool="m2", complete=True, arrived=now - 40, counted=True),
        sj("broken", 0, pool="m1", failed=True, arrived=now - 5),
    ])
    req = Request(name="user-1", created=now - 1, suspended=False, taken=False, template={"spec": {"template": {"spec": {}}}})
    taken = Request(name="user-0", created=now - 9, suspended=True, taken=True, template={})
    acts = route.route(f, p, jobs, [req, taken], entries, K, now, new_ids=["f-e1000-0"])
    created = {(c.job_id, c.step): (c.pool, c.decision) for c in acts.create}
    assert created == {
        ("user-1", 0): (None, f"{K}/current/backlog"),  # the request, backlogged like the plan says
        ("f-e1000-0", 0): (None, f"{K}/current/backlog"),
        ("next", 1): ("m2", f"{K}/current/m2"),
    }
    assert [c.template for c in acts.create if c.job_id == "user-1"] == [req.template]  # a request's step 0 runs its own template
    assert [(r.job.job_id, r.pool) for r in acts.release] == [("b-prev", "m1")]  # cohort "earlier": released
    assert sorted(d.job_id for d in acts.delete) == ["broken", "late"]  # a failed step Job is dropped and deleted too
    assert sorted(d[0] for d in acts.dropped) == ["broken", "late"]
    assert [c.job_id for c in acts.completed] == ["fin"]
    assert [r.name for r in acts.take] == ["user-1"]
    assert acts.counts == {"arrivals": 2, "completed": 1, "backlogged": 2, "released": 1, "dropped": 2, "utility": 2.0}
    # a job dropped after its first step completed: the completed step Job is marked, so it is never counted again
    mid = flow_jobs([sj("mid", 0, pool="m1", complete=True, arrived=now - 200)])
    a2 = route.route(f, p, mid, [], entries, K, now)
    assert [d.job_id for d in a2.delete] == [] and [s.name for s in a2.finished_dropped] == ["mid-s0"] and a2.counts["dropped"] == 1
    marked = flow_jobs([sj("mid", 0, pool="m1", complete=True, arrived=now - 200, counted=True)])
    assert route.route(f, p, marked, [], entries, K, now).counts["dropped"] == 0
    # the next tick before the clusters show any of it: nothing is done twice
    again = route.route(f, p, jobs, [req, taken], entries, K, now, new_ids=["f-e1000-0"], recent=acts.keys)
    assert not again.create and not again.release and not again.take and not again.completed


def test_decide_splits_by_plan_and_holds_rebacklogged():
    f = spec.flow_of(flow_body(steps=[{"name": "a", "runSeconds": 6, "pools": ["m1", "local"]}]))
    p = pools()
    now = K * EPOCH + 1
    entries = {("current", 0): ({"m1": 0.5, "local": 0.25}, 0.25), ("earlier", 0): ({}, 1.0)}
    acts = route.route(f, p, [], [], entries, K, now, new_ids=[f"j{i}" for i in range(8)])
    where = [c.pool for c in acts.create]
    assert where.count("m1") == 4 and where.count("local") == 2 and where.count(None) == 2
    # a job backlogged in an earlier epoch that the plan still backlogs: held, the decision written once per epoch
    old = flow_jobs([sj("o", 0, suspended=True, arrived=now - 20, epoch=K - 1, decision=f"{K - 1}/current/backlog", cluster="")])
    acts = route.route(f, p, old, [], entries, K, now)
    assert [(h[0].job_id, h[1]) for h in acts.hold] == [("o", f"{K}/earlier/backlog")] and not acts.release
    # no entry for a (cohort, step): the allowed pool with the most capacity now (m1 has 0 in this epoch)
    acts = route.route(f, p, [], [], {}, K, now, new_ids=["x"])
    assert [c.pool for c in acts.create] == ["local"]


def test_request_past_lifespan_is_dropped_at_intake():
    f = spec.flow_of(flow_body(lifespan=10))
    req = Request(name="r", created=K * EPOCH, suspended=True, taken=False, template={})
    acts = route.route(f, pools(), [], [req], {}, K, K * EPOCH + 11)
    assert not acts.create and acts.dropped == [("r", 0, "lifespan passed before it was taken in")]
    assert acts.counts["arrivals"] == 1 and acts.counts["dropped"] == 1 and [r.name for r in acts.take] == ["r"]


# ------------------------------------------------------------------------------------ against the planner


def plan_at(f, p, k, jobs, now):
    problem = decide.problem_of([f], p, k, {f.key: jobs}, now)
    res = fl.plan_flows(problem, fl.PlannerParams(evaluations=10, deadline_s=2))
    return problem, res, decide.current_entries(res.plan, f.key)


def test_against_the_planner_backlog_then_release_then_next_pool():
    """m1 has no capacity in even epochs: the planner backlogs the arrivals there, the translation creates them
    suspended; in the next epoch the plan (jobs now waiting in backlog) releases them into m1; the step after runs in
    m2."""
    f = spec.flow_of(flow_body(forecast=(2, 0), lifespan=240))
    p = pools()
    now = K * EPOCH + 1
    problem, res, entries = plan_at(f, p, K, [], now)
    # the planner's own policy for the current epoch is what the translation reads
    own = {(e.cohort, e.step): e for e in res.plan.entries if e.epoch == 0}
    assert own[(0, 0)].backlog == pytest.approx(1.0)
    assert entries[("current", 0)] == ({}, pytest.approx(1.0))
    planned = decide.planned_figures(res.result, f.key, f.utility)
    sim = [s for s in res.result.flows if s.epoch == 0]
    assert planned["backlogged"] == pytest.approx(sum(s.backlogged for s in sim), abs=1e-3) and planned["backlogged"] == pytest.approx(2.0)
    acts = route.route(f, p, [], [], entries, K, K * EPOCH + 45, new_ids=["j0", "j1"])
    assert [(c.job_id, c.pool) for c in acts.create] == [("j0", None), ("j1", None)]
    assert acts.counts["backlogged"] == 2
    # next epoch: the two suspended step Jobs are the problem's waiting jobs (backlog, step 0)
    now = (K + 1) * EPOCH + 1
    jobs = flow_jobs([sj(c.job_id, 0, suspended=True, arrived=K * EPOCH + 30, epoch=K, decision=c.decision, cluster="") for c in acts.create])
    problem, res, entries = plan_at(f, p, K + 1, jobs, now)
    assert [(w.step, w.pool, w.jobs) for w in problem.waiting] == [(0, None, 2.0)]
    assert entries[("earlier", 0)][0] == {"m1": pytest.approx(1.0)}
    acts = route.route(f, p, jobs, [], entries, K + 1, now, recent=acts.keys)  # having created them does not block their release
    assert sorted((r.job.job_id, r.pool) for r in acts.release) == [("j0", "m1"), ("j1", "m1")]
    assert acts.counts["released"] == 2
    # step 0 done in m1: step 1 goes where the plan sends the earlier cohort's step 1 (m2, its only pool)
    done = flow_jobs([sj("j0", 0, pool="m1", complete=True, arrived=K * EPOCH + 30, epoch=K)])
    acts = route.route(f, p, done, [], entries, K + 1, now + 5)
    assert [(c.job_id, c.step, c.pool) for c in acts.create] == [("j0", 1, "m2")]


def test_against_the_planner_split_between_pools():
    """Two pools for one step, one flow too big for either: the translation's decisions match the plan's shares."""
    f = spec.flow_of(flow_body(forecast=(12,), lifespan=600, steps=[{"name": "a", "runSeconds": 30, "pools": ["m2", "local"]}]))
    p = pools()
    now = K * EPOCH
    problem, res, entries = plan_at(f, p, K, [], now)
    probs, bl = entries[("current", 0)]
    acts = route.route(f, p, [], [], entries, K, now + 59, new_ids=[f"j{i}" for i in range(12)])
    got = {d: sum(1 for c in acts.create if (c.pool or route.BACKLOG) == d) for d in {*probs, route.BACKLOG}}
    for d, v in {**probs, route.BACKLOG: bl}.items():
        assert abs(got.get(d, 0) - 12 * v) <= 1, (got, probs, bl)
    assert len(probs) == 2 and sum(got.values()) == 12  # the plan splits the flow over both pools


# ------------------------------------------------------------------------------------ manifests and status


def test_step_manifest_local_remote_backlog():
    f = spec.flow_of(flow_body())
    p = pools()
    c = route.Create("j0", 1, "local", 123.0, K, f"{K}/current/local", f.steps[1].template)
    m = manifests.step_manifest(f, c, p["local"])
    assert m["metadata"]["name"] == "j0-s1" and m["metadata"]["namespace"] == "ns"
    assert m["metadata"]["labels"] == {"team": "t", LABEL_FLOW: "f", LABEL_JOB: "j0", LABEL_STEP: "1", LABEL_POOL: "local"}
    assert m["metadata"]["annotations"][ANN_ARRIVED] == "123.000" and m["metadata"]["annotations"][ANN_EPOCH] == str(K)
    assert m["spec"]["suspend"] is False and m["spec"]["backoffLimit"] == 2
    terms = m["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z0"]}]}]
    assert m["spec"]["template"]["metadata"]["labels"][LABEL_STEP] == "1"
    assert step_job_of(m, spec.LOCAL) == StepJob(cluster="", name="j0-s1", job_id="j0", step=1, pool="local", suspended=False, complete=False,
                                                     failed=False, arrived=123.0, epoch=K, decision=f"{K}/current/local")
    # backlogged: suspended, no pool label, no affinity yet
    b = manifests.step_manifest(f, route.Create("j1", 0, None, 1.0, K, "x", f.steps[0].template), None)
    assert b["spec"]["suspend"] is True and LABEL_POOL not in b["metadata"]["labels"] and "affinity" not in b["spec"]["template"]["spec"]
    # released into a local pool: affinity and unsuspend, existing terms ANDed
    b["spec"]["template"]["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "arch", "operator": "In", "values": ["amd64"]}]}]}}}
    rp = manifests.release_patch(b, p["local"], "d")
    assert rp["spec"]["suspend"] is False and rp["metadata"]["labels"] == {LABEL_POOL: "local"}
    exprs = rp["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]["matchExpressions"]
    assert [e["key"] for e in exprs] == ["arch", "zone"]
    # released into a member cluster: a new Job there with the pool's selector (m1: pool=one)
    b["metadata"]["annotations"]["kopf.zalando.org/x"] = "y"
    b["spec"]["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": "u"}}
    mv = manifests.moved_manifest(b, p["m1"], "d2")
    assert mv["spec"]["suspend"] is False and "selector" not in mv["spec"] and mv["metadata"]["labels"][LABEL_POOL] == "m1"
    assert mv["metadata"]["annotations"][ANN_DECISION] == "d2" and not any(a.startswith("kopf.") for a in mv["metadata"]["annotations"])
    assert step_job_of(mv, "m1").pool == "m1"


def test_request_of_and_step_job_of_tell_them_apart():
    user = {"metadata": {"name": "u", "labels": {LABEL_FLOW: "f"}, "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"suspend": True, "backoffLimit": 1, "selector": {"matchLabels": {"a": "b"}},
                     "template": {"metadata": {"labels": {"batch.kubernetes.io/controller-uid": "u1", "app": "x"}}, "spec": {"containers": []}}}}
    r = request_of(user)
    assert r and r.suspended and not r.taken and r.template["spec"]["backoffLimit"] == 1 and "selector" not in r.template["spec"]
    assert step_job_of(user, "") is None
    m = manifests.step_manifest(spec.flow_of(flow_body()), route.Create("u", 0, None, 0.0, K, "d", r.template), None)
    assert m["spec"]["template"]["metadata"]["labels"]["app"] == "x" and "batch.kubernetes.io/controller-uid" not in m["spec"]["template"]["metadata"]["labels"]
    assert request_of(m) is None and step_job_of(m, "").job_id == "u"
    done = {**m, "status": {"conditions": [{"type": "Complete", "status": "True"}]}}
    assert step_job_of(done, "").complete


def test_status_counts_and_where_now():
    f = spec.flow_of(flow_body())
    epochs, totals = [], {}
    status.add_counts(epochs, totals, K, {"arrivals": 2, "backlogged": 2}, {"arrivals": 2.0, "completed": 0.0, "utility": 0.0}, EPOCH)
    status.add_counts(epochs, totals, K, {"arrivals": 1}, None, EPOCH)
    status.add_counts(epochs, totals, K + 1, {"released": 2, "completed": 2, "utility": 4.0}, {"completed": 3.0, "utility": 6.0}, EPOCH)
    status.add_counts(epochs, totals, K + 1, {}, {"completed": 0.0, "utility": 0.0}, EPOCH)  # a mid-epoch replan: the epoch's plan stays
    assert [(e["epoch"], e["arrivals"], e["backlogged"], e["completed"], e["utilityEarned"], e["utilityPlanned"]) for e in epochs] == [
        (K, 3, 2, 0, 0.0, 0.0), (K + 1, 0, 0, 2, 4.0, 6.0)]
    assert totals == {"arrivals": 3, "completed": 2, "backlogged": 2, "released": 2, "dropped": 0, "utilityEarned": 4.0}
    for i in range(20):
        status.add_counts(epochs, totals, K + 2 + i, {}, None, EPOCH)
    assert len(epochs) == status.EPOCHS_KEPT and epochs[-1]["epoch"] == K + 21
    jobs = flow_jobs([sj("a", 0, suspended=True, cluster=""), sj("b", 0, pool="m1"), sj("c", 0, pool="m1", complete=True),
                         sj("d", 0, pool="m1", complete=True), sj("d", 1, pool="m2", complete=True)])
    assert status.where_now(f, jobs) == {"backlogged": 1, "running": 1, "byPool": {"m1": 1}}
    st = status.entries_status(f, {("current", 0): ({"m1": 1.0}, 0.0), ("earlier", 1): ({}, 1.0)})
    assert st == [{"cohort": "current", "step": 0, "stepName": "a", "pools": {"m1": 1.0}, "backlog": 0.0},
                  {"cohort": "earlier", "step": 1, "stepName": "b", "pools": {}, "backlog": 1.0}]


def test_a_pool_losing_capacity_changes_the_next_plan():
    """The same backlogged jobs: released into m1 when it has capacity in the epoch, kept backlogged when m1 has lost
    it for this epoch and the next (its FlowPool edited), released once it returns."""
    f = spec.flow_of(flow_body(forecast=(2, 0), lifespan=240))
    f = spec.FlowSpec(**{**f.__dict__, "horizon": 3})
    now = (K + 1) * EPOCH + 1
    jobs = flow_jobs([sj(f"j{i}", 0, suspended=True, arrived=K * EPOCH + 30, epoch=K, decision=f"{K}/current/backlog", cluster="")
                         for i in range(2)])
    _, _, before = plan_at(f, pools(), K + 1, jobs, now)
    assert before[("earlier", 0)][0] == {"m1": pytest.approx(1.0)}
    lost = {**pools(), "m1": spec.pool_of(pool_body("m1", [4, 0, 0, 4], secret={"namespace": "kubesoda", "name": "m1"}))}  # 0 in K+1, K+2
    problem, _, after = plan_at(f, lost, K + 1, jobs, now)
    assert problem.pools[0].capacity == (0.0, 0.0, 4.0)
    assert after[("earlier", 0)] == ({}, pytest.approx(1.0))
    acts = route.route(f, lost, jobs, [], after, K + 1, now)
    assert not acts.release and [(h[0].job_id, h[1]) for h in acts.hold] == [("j0", f"{K + 1}/earlier/backlog"), ("j1", f"{K + 1}/earlier/backlog")]


def test_an_unroutable_flow_is_held_and_its_condition_names_the_step():
    """Step b's only pool has capacity 0 in every epoch of the horizon: the planner refuses the flow as a whole, the
    translation holds its jobs in backlog (a suspended Job takes no capacity), the Routing condition names step b."""
    f = spec.flow_of(flow_body(forecast=(2, 0), lifespan=240))
    p = {**pools(), "m2": spec.pool_of(pool_body("m2", [0], secret={"namespace": "kubesoda", "name": "m2", "key": "config"}))}
    _, res, entries = plan_at(f, p, K, [], (K) * EPOCH + 1)
    assert [(u.flow, u.step) for u in res.unroutable] == [(f.key, "b")]
    assert entries[("current", 0)] == ({}, pytest.approx(1.0))
    acts = route.route(f, p, [], [], entries, K, (K) * EPOCH + 45, new_ids=["j0"])
    assert [(c.job_id, c.pool) for c in acts.create] == [("j0", None)]
    planned = decide.Planned((), K, res, None, 0.1, "")
    c = status.Counters.seeded(None, {})
    st = status.flow_status(f, K, c, [], {}, [], planned, entries, 1, None)
    cond, _budget = st["conditions"]
    assert (st["state"], cond["status"], cond["reason"]) == ("unroutable", "False", "Unroutable")
    assert "step b" in cond["message"]


def test_status_and_metric_report_the_bound_and_gap():
    """The plan's LP bound and gap (issue 36) reach the JobFlow's status.plan and the kubesoda_flows_gap gauge: the
    bound never above the score, the gap (score - bound) / score; the gauge set by the handler's plan step."""
    import asyncio

    from soda_operator.flows import handlers
    from soda_operator.kube import metrics
    from soda_operator.memo import FlowsState

    f = spec.flow_of(flow_body(forecast=(2, 0), lifespan=240))
    now = K * EPOCH + 1
    state = FlowsState()
    planned = asyncio.run(handlers._plan(state, [f], pools(), K, {f.key: []}, now))
    res = planned.result
    assert res is not None and res.bound is not None and res.gap is not None
    st = status.flow_status(f, K, status.Counters.seeded(None, {}), [], {}, [], planned,
                            decide.current_entries(res.plan, f.key), 1, None)
    plan = st["plan"]
    assert plan["bound"] <= plan["score"] + 1e-6
    assert plan["gap"] == pytest.approx((plan["score"] - plan["bound"]) / plan["score"] if plan["score"] > 0 else 0.0,
                                        abs=1e-5)
    gauge = metrics.FLOWS_GAP.labels(epoch_seconds=str(f.epoch_s))._value.get()
    assert gauge == pytest.approx(res.gap)
