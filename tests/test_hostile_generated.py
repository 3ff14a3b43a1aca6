"""The generated hostile suite, offline (issue 45, "What to build" 4): objects of every kind the operator decides on,
drawn from the CRDs' own schemas (:mod:`hostile_schema`: each field at its minimum, its maximum, the largest finite
value where the schema has no maximum, the longest strings, lists at ``maxItems``) plus reference structure (a
clique of StreamJobs importing each other, a fan-in of many importers on one exporter), are decided beside a fixed
healthy set of every kind in the namespace ``healthy``, the way the operator decides them:

- StreamJob + StreamTemplate (+ the SchedulingPolicy, an administrator's): SODA's offline path, the one of
  ``kubesoda plan -f`` (:func:`soda_operator.soda.crd.scenario_from_objects` with schema validation, then the
  pipeline guard around :func:`soda_optimizer.pipeline.run`);
- YieldGroup: :func:`soda_operator.fair_yield.spec.parse` and :func:`soda_operator.fair_yield.decide.plan`;
- BatchDispatch: :func:`soda_operator.dispatch.spec.parse` and :func:`soda_operator.dispatch.decide.decide`;
- JobFlow + FlowPool: :func:`soda_operator.flows.spec.flows_of` / ``pools_of``, :func:`soda_operator.flows.decide.plan`
  for each epoch length's flows together, and each flow's tick (:func:`soda_operator.flows.route.route`).

Properties: the healthy set's decisions are identical to the ones it gets alone (for SODA, whose capacity is shared
by design, the admission, template and reason of each healthy job: the healthy job is required, as an
administrator's would be, so no tenant can outrank it; no error names a healthy object); and each decision finishes
within its budget: every decision runs in a forked worker (address space capped) that is killed at ``3 x budget +
SLACK_S`` seconds, so the test fails, naming the kind and the budget, where today's code would hang. Budgets: SODA
the sum of the policy's four stage deadlines (the defaults when the policy is refused); a YieldGroup its
``deadlineSeconds``; a flow plan its planner deadline plus :data:`ROUTE_S` for the ticks; a BatchDispatch, which has
no deadline of its own, :data:`DISPATCH_S`.

The rows of the issue's table each have a fixed example (``test_issue_row``) besides the drawn ones.
"""

from __future__ import annotations

import copy
import multiprocessing as mp
import resource
import time
import traceback
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import pytest
from hostile_schema import from_schema, spec_schema
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from soda_operator import schema
from soda_operator.dispatch import decide as ddecide
from soda_operator.dispatch import objects as dob
from soda_operator.dispatch import spec as dspec
from soda_operator.fair_yield import decide as ydecide
from soda_operator.fair_yield import spec as yspec
from soda_operator.fair_yield.tasks import Task
from soda_operator.flows import decide as fdecide
from soda_operator.flows import route as froute
from soda_operator.flows import spec as fspec
from soda_operator.kube.errors import TranslationError
from soda_operator.soda import crd
from soda_optimizer.flows import limits

SLACK_S = 5.0  # a worker's start, the translation and the screen
WAIT_S = 30.0  # the longest a test waits for one decision, whatever its budget (a budget may be unbounded today)
_STALLED: dict[int, str] = {}  # decisions that ran out of time, by their inputs: hypothesis replays a failing example
DISPATCH_S = 1.0  # a dispatch decision has no deadline of its own: what one must take at most
ROUTE_S = 1.0  # the ticks of a plan's flows
MEMORY = 2 * 2**30  # address space a worker may add to what it inherits
NOW = datetime(2027, 1, 15, 8, 0, tzinfo=UTC)
T0 = 1_800_000_000.0
H, T = "healthy", "tenant"
API = crd.API_VERSION
# no shrinking: each failing example waits for its worker's time limit, and the first one found is informative
EXAMPLES = settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck), phases=(Phase.explicit, Phase.generate),
                    report_multiple_bugs=False)
CHEAP = settings(EXAMPLES, max_examples=10)  # the kinds whose decision takes milliseconds when it is sound


# ------------------------------------------------------------------------------------------ the bounded worker


def _child(conn: Any, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    try:
        with open("/proc/self/status") as f:
            vm = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
        resource.setrlimit(resource.RLIMIT_AS, (vm + MEMORY, vm + MEMORY))
        conn.send(("ok", fn(*args)))
    except BaseException as e:  # noqa: BLE001 - whatever the decision raised is the finding
        conn.send(("raised", f"{type(e).__name__}: {str(e)[:300]}\n{''.join(traceback.format_exc(limit=-4))[-1500:]}"))


def bounded(what: str, budget_s: float, fn: Callable[..., Any], *args: Any, wait_s: float = WAIT_S) -> Any:
    """``fn(*args)`` in a forked worker, killed at ``3 x budget_s + SLACK_S`` seconds (at most ``wait_s``): the test
    fails instead of hanging, naming ``what``."""
    key = hash((what, repr(args)))
    if key in _STALLED:
        pytest.fail(_STALLED[key])
    ctx = mp.get_context("fork")
    rx, tx = ctx.Pipe(duplex=False)
    p = ctx.Process(target=_child, args=(tx, fn, args), daemon=True)
    limit = min(3 * budget_s + SLACK_S, wait_s)
    t0 = time.monotonic()
    p.start()
    try:
        if not rx.poll(limit):
            _STALLED[key] = (f"{what}: no decision within {limit:.1f} s (budget {budget_s:g} s x 3 + {SLACK_S:g} s, at most {wait_s:g} s): "
                             f"one tenant's object stalls the decision (worker alive: {p.is_alive()}, exit code {p.exitcode})")
            pytest.fail(_STALLED[key])
        status, out = rx.recv()
    except EOFError:
        pytest.fail(f"{what}: the worker died after {time.monotonic() - t0:.1f} s (exit code {p.exitcode}): out of memory?")
    finally:
        if p.is_alive():
            p.kill()
        p.join()
    if status != "ok":
        pytest.fail(f"{what}: the decision raised {out}")
    return out


# ------------------------------------------------------------------------------------------------- SODA

NODES = [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"n{i}", "labels": {"kubesoda.io/rack": f"r{i % 2}"}},
          "status": {"allocatable": {"cpu": "8", "memory": "32Gi"}}} for i in range(4)]
FAST = {"macroQDeadlineSeconds": 0.5, "macroWDeadlineSeconds": 0.5, "microQDeadlineSeconds": 0.25, "microWDeadlineSeconds": 0.25}
POLICY = {"apiVersion": API, "kind": "SchedulingPolicy", "metadata": {"name": "default"}, "spec": FAST}
HEALTHY_T = {"apiVersion": API, "kind": "StreamTemplate", "metadata": {"name": "clickstream", "namespace": H}, "spec": {
    "pes": [{"name": "ingest", "kind": "source", "minCpu": "250m", "resourceFunction": {"a": 0.1}},
            {"name": "parse", "resourceFunction": {"a": 0.002, "b": 1.0}},
            {"name": "score", "kind": "sink", "resourceFunction": {"a": 0.0005, "b": 1.0}}],
    "streams": [{"from": "ingest", "to": "parse"}, {"from": "parse", "to": "score"}],
    "sinks": [{"pe": "score", "weight": 2}], "primalInputs": [{"pe": "ingest", "rate": 200}], "exports": [{"name": "scored", "pe": "score"}]}}
HEALTHY_J = [{"apiVersion": API, "kind": "StreamJob", "metadata": {"name": "clicks", "namespace": H, "creationTimestamp": "2027-01-01T00:00:00Z"},
              "spec": {"templates": ["clickstream"], "required": True}},
             {"apiVersion": API, "kind": "StreamJob", "metadata": {"name": "alerts", "namespace": H, "creationTimestamp": "2027-01-01T00:00:00Z"},
              "spec": {"templates": ["clickstream"], "required": True, "imports": [{"job": "clicks", "export": "scored", "pe": "ingest"}]}}]
HOLDER = {"apiVersion": API, "kind": "StreamTemplate", "metadata": {"name": "holder", "namespace": T}, "spec": {
    "pes": [{"name": "p", "kind": "source"}], "primalInputs": [{"pe": "p", "rate": 10}], "sinks": [{"pe": "p"}], "exports": [{"name": "e", "pe": "p"}]}}


def soda_decide(templates: list[dict[str, Any]], jobs: list[dict[str, Any]], policy: dict[str, Any],
                profiles: list[dict[str, Any]] = ()) -> dict[str, Any]:  # type: ignore[assignment]
    """The healthy jobs' decisions as ``kubesoda plan -f`` makes them (its own function, on a file of the objects):
    (admitted, template, reason) per job, and every error that names a healthy object."""
    import argparse
    import io
    import os
    import sys
    import tempfile

    import yaml

    from soda_operator import cli

    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "objects.yaml")
        with open(path, "w") as f:
            yaml.safe_dump_all([*NODES, policy, *templates, *jobs, *profiles], f)
        args = argparse.Namespace(file=[path], at_nodes=None, resolution_units=None, unit_mips=None, deadline_scale=1.0, json=True)
        sys.stderr = io.StringIO()  # the progress line and the errors (returned below)
        got = cli._plan_files(args)
    if isinstance(got, int):
        return {"jobs": {}, "blamed": [f"kubesoda plan -f exits {got}: {sys.stderr.getvalue()[-500:]}"]}
    plan, errors = got
    mine = {d.job: (d.admitted, d.template, d.reason) for d in plan.jobs if d.job.startswith(f"{H}/")}
    return {"jobs": mine, "blamed": [str(e) for e in errors if e.name.startswith(f"{H}/")]}


def soda_budget(policy: Mapping[str, Any]) -> float:
    try:
        p, _ = crd.policy_from_object(policy)
    except (TranslationError, ValueError, TypeError, OverflowError):
        p, _ = crd.policy_from_object(None)
    return float(p.macroq_deadline_s + p.macrow_deadline_s + p.microq_deadline_s + p.microw_deadline_s)


def check_soda(what: str, templates: list[dict[str, Any]], jobs: list[dict[str, Any]], policy: dict[str, Any],
               profiles: list[dict[str, Any]] = ()) -> None:  # type: ignore[assignment]
    alone = bounded(f"SODA, the healthy set alone ({what})", soda_budget(policy), soda_decide, [HEALTHY_T], HEALTHY_J, policy)
    beside = bounded(f"SODA, {what}", soda_budget(policy), soda_decide, [HEALTHY_T, *templates], [*HEALTHY_J, *jobs], policy, list(profiles))
    assert not beside["blamed"], f"SODA, {what}: a healthy object is blamed: {beside['blamed']}"
    if beside["jobs"] != alone["jobs"]:
        pytest.fail(f"SODA, {what}: the healthy jobs' decisions changed: {alone['jobs']} -> {beside['jobs']}")


def _named(i: int, n: int = 40) -> str:
    return f"p{i}".ljust(n, "x")


def repair_template(spec: dict[str, Any], name: str) -> dict[str, Any]:
    """A drawn StreamTemplate spec with its references made to hold (PE names unique, at their longest; a chain of
    streams; the sinks on the last PE, the primal input on the first, an export on the last), its numbers as drawn."""
    sp = copy.deepcopy(spec)
    pes = sp["pes"]
    for i, p in enumerate(pes):
        p["name"] = _named(i)
    pes[0]["kind"] = "source"
    n = len(pes)
    sp["streams"] = [{**s, "from": _named(i), "to": _named(i + 1)} for i, s in enumerate((sp.get("streams") or [])[: n - 1])]
    for s in [*sp["streams"], *(sp.get("sinks") or [])]:
        v = s.get("value")
        if isinstance(v, dict) and v.get("kind") == "piecewise":
            xs = sorted({float(q["x"]) for q in v.get("points") or []} | {0.0})
            v["points"] = [{"x": x, "y": float(q.get("y", 0))} for x, q in zip(xs, [*(v.get("points") or []), {"y": 1}] * len(xs))]
            if len(v["points"]) < 2:
                v["kind"] = "linear"
                v.pop("points")
        if isinstance(v, dict) and v.get("kind") == "capped":
            v.setdefault("cap", 1.0)
    sp["sinks"] = [{**s, "pe": _named(n - 1)} for s in sp.get("sinks") or []]
    sp["primalInputs"] = [{**x, "pe": _named(0)} for x in (sp.get("primalInputs") or [])[:1]]
    sp["exports"] = [{**x, "name": f"e{i}", "pe": _named(n - 1)} for i, x in enumerate(sp.get("exports") or [])] or [{"name": "e0", "pe": _named(n - 1)}]
    return {"apiVersion": API, "kind": "StreamTemplate", "metadata": {"name": name, "namespace": T}, "spec": sp}


def repair_job(spec: dict[str, Any], name: str, template: str) -> dict[str, Any]:
    sp = copy.deepcopy(spec)
    sp["templates"] = [template]
    sp["required"] = False  # an administrator's field (the chart's ValidatingAdmissionPolicy)
    for k in ("imports", "colocate", "exlocate"):
        sp.pop(k, None)
    return {"apiVersion": API, "kind": "StreamJob", "metadata": {"name": name, "namespace": T, "creationTimestamp": "2027-01-01T00:00:00Z"},
            "spec": sp}


def structure(kind: str, n: int) -> list[dict[str, Any]]:
    """``n`` tenant StreamJobs on the holder template: ``clique`` (each imports every other one, at most the
    schema's 16 imports), ``fan-in`` (every one imports job 0) or ``chain``."""
    def job(i: int, imports: list[int]) -> dict[str, Any]:
        return {"apiVersion": API, "kind": "StreamJob", "metadata": {"name": f"s{i}", "namespace": T, "creationTimestamp": "2027-01-01T00:00:00Z"},
                "spec": {"templates": ["holder"], "imports": [{"job": f"s{j}", "export": "e", "pe": "p"} for j in imports][:16]}}

    if kind == "clique":
        return [job(i, [j for j in range(n) if j != i]) for i in range(n)]
    if kind == "fan-in":
        return [job(0, [])] + [job(i, [0]) for i in range(1, n)]
    return [job(i, [i - 1] if i else []) for i in range(n)]


def drawn(s: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Objects of schema ``s``: every property present first, then only some."""
    return from_schema(s, full=True) | from_schema(s)


TEMPLATE_S = spec_schema("streamtemplates")
PROFILE_S = spec_schema("resourceprofiles")
LEARNING = {**POLICY, "spec": {**FAST, "learning": {"enabled": True}}}


def profile(spec: dict[str, Any]) -> dict[str, Any]:
    """A ResourceProfile with a drawn spec, as the learner writes one for a signature no healthy PE has."""
    name = "transform.hostile"
    return {"apiVersion": API, "kind": "ResourceProfile", "metadata": {"name": name}, "spec": spec,
            "status": {"key": name, "kind": "transform", "level": "flowspec", "a": 1.0, "b": 1.0, "samples": 0,
                       "path": ["transform", "exe:hostile", "args:hostile", "flow:hostile"]}}
JOB_S = spec_schema("streamjobs")
POLICY_S = spec_schema("schedulingpolicies")


@EXAMPLES
@given(t=drawn(TEMPLATE_S), j=drawn(JOB_S), r=drawn(PROFILE_S), shape=st.sampled_from(["clique", "fan-in", "chain"]), n=st.integers(2, 12))
def test_stream_jobs_and_templates_cost_the_healthy_namespace_nothing(t, j, r, shape, n):
    tmpl = repair_template(t, "hx")
    job = repair_job(j, "hx", "hx")
    check_soda(f"tenant template and job drawn from the schema, {n} jobs in a {shape}, a ResourceProfile drawn from its schema",
               [tmpl, HOLDER], [job, *structure(shape, n)], LEARNING, [profile(r)])


def repair_policy(spec: dict[str, Any]) -> dict[str, Any]:
    sp = copy.deepcopy(spec)
    if "resolutionUnits" in sp and "unitMips" in sp:
        sp.pop("unitMips")
    sp["microEpochSeconds"] = min(sp.get("microEpochSeconds", 10), sp.get("macroEpochSeconds", 60))
    for w in (sp.get("merit") or {}).get("windows") or []:
        w.setdefault("weights", {})
        if w.get("startHour", 0) == w.get("endHour", 24):
            w["endHour"] = (w.get("startHour", 0) + 1) if w.get("startHour", 0) < 23 else 24
    sp.pop("placement", None)  # the baselines are an administrator's choice of plan, not a fault
    return {"apiVersion": API, "kind": "SchedulingPolicy", "metadata": {"name": "default"}, "spec": sp}


def policy_decide(policy: dict[str, Any]) -> dict[str, Any]:
    return soda_decide([HEALTHY_T], HEALTHY_J, policy)


@EXAMPLES
@given(p=drawn(POLICY_S))
def test_a_policy_drawn_from_its_schema_never_blames_a_job(p):
    """A SchedulingPolicy is the administrator's: any value its schema admits may change the plan, but a value
    that breaks a stage is the policy's fault, never a healthy job's (issue 45, "What to build" 7), and the plan
    comes within the policy's own deadlines."""
    policy = repair_policy(p)
    got = bounded("SODA under a SchedulingPolicy drawn from its schema", soda_budget(policy), policy_decide, policy)
    assert not got["blamed"], f"a healthy job is blamed for the policy's values: {got['blamed']}"


# ------------------------------------------------------------------------------------------------ YieldGroup

YG_NODES = [{"metadata": {"name": f"y{i}"}, "spec": {}, "status": {"allocatable": {"cpu": "4", "memory": "16Gi"},
                                                                     "conditions": [{"type": "Ready", "status": "True"}]}} for i in range(4)]


def _tasks(ns: str, n: int, cores: float) -> list[Task]:
    return [Task(ns, f"{ns}-t{i}", f"uid-{ns}-{i}", f"owner-{ns}", cores, 2**30, None, True) for i in range(n)]


def yield_decide(groups: list[tuple[str, Mapping[str, Any], list[Task]]]) -> dict[str, Any]:
    """Each group's epoch in turn, as the operator's ticks take them; the healthy group's decision."""
    out: dict[str, Any] = {}
    for ns, spec, tasks in groups:
        try:
            s = yspec.parse(spec)
        except TranslationError as e:
            out[ns] = ("invalid", e.field)
            continue
        hosts = ydecide.hosts_for(YG_NODES, [], {t.name for t in tasks})
        d = ydecide.plan(tasks, hosts, s)
        out[ns] = (d.place, d.cpu, d.min_yield, d.status) if ns == H else d.status
    return out


YG_HEALTHY = schema.with_defaults({"apiVersion": API, "kind": "YieldGroup", "metadata": {"name": "g", "namespace": H}, "spec": {}})["spec"]
YG_S = spec_schema("yieldgroups")


def _yield_budget(spec: Mapping[str, Any]) -> float:
    try:
        return float(yspec.parse(spec).deadline_seconds)
    except TranslationError:
        return 0.0


@CHEAP
@given(g=drawn(YG_S), n=st.integers(1, 16))
def test_a_yield_group_costs_the_healthy_namespace_nothing(g, n):
    hostile = {**YG_HEALTHY, **g}
    healthy = (H, YG_HEALTHY, _tasks(H, 4, 1.0))
    budget = _yield_budget(YG_HEALTHY)
    alone = bounded("YieldGroup, the healthy group alone", budget, yield_decide, [healthy])
    beside = bounded("YieldGroup drawn from its schema, beside the healthy one", budget + _yield_budget(hostile), yield_decide,
                     [(T, hostile, _tasks(T, n, 0.5)), healthy])
    if beside[H] != alone[H]:
        pytest.fail(f"YieldGroup: the healthy group's decision changed: {alone[H]} -> {beside[H]}")


# --------------------------------------------------------------------------------------------- BatchDispatch

BD_NODES = [{"metadata": {"name": f"d{i}", "labels": {dob.LABEL_MIPS: "1000"}}, "spec": {},
             "status": {"allocatable": {"cpu": "4"}, "conditions": [{"type": "Ready", "status": "True"}]}} for i in range(8)]


def _bd_jobs(ns: str) -> tuple[list[dict[str, Any]], dict[str, list[dict[str, Any]]]]:
    jobs, pods = [], {}
    for j in range(2):
        name = f"{ns}-job{j}"
        jobs.append({"metadata": {"name": name, "namespace": ns, "annotations": {dob.ANN_PRIORITY: str(j)}, "creationTimestamp": "2027-01-15T08:00:00Z"},
                     "spec": {"completions": 4, "template": {"spec": {"containers": [{"name": "c"}], "schedulingGates": [{"name": dob.GATE}]}}},
                     "status": {}})
        pods[name] = [{"metadata": {"name": f"{name}-{i}", "namespace": ns, "uid": f"uid-{name}-{i}", "annotations": {},
                                    "labels": {"batch.kubernetes.io/job-completion-index": str(i)},
                                    "ownerReferences": [{"kind": "Job", "name": name, "controller": True}]},
                       "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}], "schedulingGates": [{"name": dob.GATE}]},
                       "status": {"phase": "Pending"}} for i in range(4)]
    return jobs, pods


def dispatch_decide(groups: list[tuple[str, Mapping[str, Any]]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for ns, spec in groups:
        try:
            s = dspec.parse(spec)
        except TranslationError as e:
            out[ns] = ("invalid", e.field)
            continue
        jobs, pods = _bd_jobs(ns)
        o = ddecide.decide(s, jobs, pods, BD_NODES, [], {}, ns, set(), T0)
        out[ns] = (o.decision.place, o.decision.plan) if ns == H else len(o.decision.plan)
    return out


BD_HEALTHY = schema.with_defaults({"apiVersion": API, "kind": "BatchDispatch", "metadata": {"name": "default", "namespace": H}, "spec": {}})["spec"]
BD_S = spec_schema("batchdispatches")


def check_dispatch(what: str, hostile: Mapping[str, Any]) -> None:
    alone = bounded("BatchDispatch, the healthy one alone", DISPATCH_S, dispatch_decide, [(H, BD_HEALTHY)])
    beside = bounded(f"BatchDispatch, {what}", 2 * DISPATCH_S, dispatch_decide, [(T, hostile), (H, BD_HEALTHY)])
    if beside[H] != alone[H]:
        pytest.fail(f"BatchDispatch, {what}: the healthy decision changed: {alone[H]} -> {beside[H]}")


@CHEAP
@given(b=drawn(BD_S))
def test_a_batch_dispatch_costs_the_healthy_namespace_nothing(b):
    hostile = {**BD_HEALTHY, **b}
    hostile.pop("nodeSelector", None)  # drawn labels match no node: the object would be harmless
    check_dispatch("a BatchDispatch drawn from its schema", hostile)


# ---------------------------------------------------------------------------------------------------- flows

EPOCH = 240.0
NOW_S = 1000 * EPOCH + 30.0
STEP_JOB = {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}}}


def pool_body(name: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    return schema.with_defaults({"apiVersion": API, "kind": "FlowPool", "metadata": {"name": name, "generation": 1}, "spec": dict(spec)})


def flow_body(ns: str, name: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    return schema.with_defaults({"apiVersion": API, "kind": "JobFlow", "metadata": {"name": name, "namespace": ns, "generation": 1}, "spec": dict(spec)})


FLOW_HEALTHY = flow_body(H, "f", {"epochSeconds": EPOCH, "utility": 2, "lifespanSeconds": 1200,
                                  "arrivals": {"mode": "forecast", "forecast": [4, 2]},
                                  "steps": [{"name": "a", "runSeconds": 60, "pools": ["healthy-pool"], "jobTemplate": STEP_JOB}],
                                  "planner": {"evaluations": 20, "deadlineSeconds": 2}})
# the administrator shares the healthy pool with the healthy namespace only (spec.allowedNamespaces)
POOL_HEALTHY = pool_body("healthy-pool", {"capacity": [4], "nodeSelector": {"pool": "healthy"}, "allowedNamespaces": [H]})


def flows_decide(flow_bodies: list[dict[str, Any]], pool_bodies: list[dict[str, Any]]) -> dict[str, Any]:
    """Every epoch length's flows planned together, then every flow's tick; the healthy flow's entries, plan
    figures and actions."""
    pools = fspec.pools_of(pool_bodies)
    flows = fspec.flows_of(flow_bodies)
    out: dict[str, Any] = {}
    by_epoch: dict[float, list[fspec.FlowSpec]] = {}
    for f in flows:
        if not fspec.missing_pools(f, pools):
            by_epoch.setdefault(f.epoch_s, []).append(f)
    for epoch_s, group in sorted(by_epoch.items()):
        k = fspec.epoch_index(NOW_S, epoch_s)
        planned = fdecide.plan(group, pools, k, {}, NOW_S)
        for f in group:
            if f.key in planned.refused:
                continue  # refused (the tick says so in its status and routes nothing)
            entries = fdecide.current_entries(planned.result.plan, f.key) if planned.result else {}
            due = froute.due_arrivals(f, k, NOW_S, 0)
            acts = froute.route(f, pools, [], [], entries, k, NOW_S, new_ids=[f"{f.name}-{i}" for i in range(due)])
            if f.namespace == H:
                figures = fdecide.planned_figures(planned.result.result, f.key, f.utility) if planned.result else None
                out[f.key] = (sorted(entries.items()), figures, planned.error, sorted((c.job_id, c.pool) for c in acts.create))
    return out


def flows_budget(flow_bodies: list[dict[str, Any]]) -> float:
    """The planner deadline of each epoch length's flows (the smallest among them), plus the ticks."""
    by_epoch: dict[float, float] = {}
    for f in fspec.flows_of(flow_bodies):
        by_epoch[f.epoch_s] = min(by_epoch.get(f.epoch_s, f.deadline_s), f.deadline_s)
    return sum(by_epoch.values()) + ROUTE_S


# a flow plan's budget is bounded by the CRDs (planner.deadlineSeconds <= 60 s per epoch length): a tenant's plan
# may legitimately take that long (a drawn 56 s deadline ran 44 s), so the flows are held to their whole budget
FLOWS_WAIT_S = 3 * (2 * limits.FLOW_RANGES["planner.deadlineSeconds"][1] + ROUTE_S) + SLACK_S


def check_flows(what: str, flows: list[dict[str, Any]], pools: list[dict[str, Any]]) -> None:
    alone = bounded("JobFlow, the healthy flow alone", flows_budget([FLOW_HEALTHY]), flows_decide, [FLOW_HEALTHY], [POOL_HEALTHY])
    everything = [FLOW_HEALTHY, *flows]
    beside = bounded(f"JobFlow, {what}", flows_budget(everything), flows_decide, everything, [POOL_HEALTHY, *pools], wait_s=FLOWS_WAIT_S)
    if beside != alone:
        pytest.fail(f"JobFlow, {what}: the healthy flow's plan changed:\n  alone:  {alone}\n  beside: {beside}")


FLOW_S = spec_schema("jobflows")
POOL_S = spec_schema("flowpools")


@CHEAP
@given(f=drawn(FLOW_S), p=drawn(POOL_S), same_epoch=st.booleans())
def test_a_job_flow_and_pool_cost_the_healthy_namespace_nothing(f, p, same_epoch):
    flow = copy.deepcopy(f)
    for s in flow.get("steps") or []:
        s["pools"] = ["tenant-pool"]  # the administrator's pool for the tenant
        s["jobTemplate"] = STEP_JOB
    if same_epoch:
        flow["epochSeconds"] = EPOCH  # planned together with the healthy flow
    pool = {k: v for k, v in p.items() if k != "cluster"}
    pool["nodeSelector"] = {"pool": "tenant"}
    pool["allowedNamespaces"] = [T]  # shared with the tenant: its flow is planned, not refused
    check_flows("a JobFlow and its FlowPool drawn from their schemas", [flow_body(T, "hx", flow)], [pool_body("tenant-pool", pool)])


# ------------------------------------------------------------------------------------- the issue's table rows

TENANT_FLOW = {"epochSeconds": EPOCH, "utility": 2, "lifespanSeconds": 1200, "steps": [{"runSeconds": 60, "pools": ["tenant-pool"], "jobTemplate": STEP_JOB}]}
TENANT_POOL = [pool_body("tenant-pool", {"capacity": [4], "nodeSelector": {"pool": "tenant"}})]


def _row_clique() -> None:
    check_soda("12 StreamJobs each importing the other 11", [HOLDER], structure("clique", 12), POLICY)


def _row_slot_cpu() -> None:
    check_dispatch("a BatchDispatch with slotCPU 1n on 8 nodes of 4 cores", {**BD_HEALTHY, "slotCPU": "1n"})


def _row_forecast() -> None:
    flow = copy.deepcopy(TENANT_FLOW)
    flow["arrivals"] = {"mode": "forecast", "forecast": [1.0e308]}
    check_flows("a JobFlow with forecast [1e308]", [flow_body(T, "hx", flow)], TENANT_POOL)


def _row_forecast_1e4() -> None:
    """A tenant naming a pool not shared with it (the healthy pool's allowedNamespaces) is refused, naming
    spec.steps[0].pools, and the healthy plan is identical. (Within a pool the administrator shares, competition
    follows the paper: utility first.)"""
    flow = copy.deepcopy(TENANT_FLOW)
    flow["steps"][0]["pools"] = ["healthy-pool"]  # FlowPools are cluster-wide: a tenant's flow may name any
    flow["arrivals"] = {"mode": "external", "forecast": [1.0e4]}
    body = flow_body(T, "hx", flow)
    check_flows("a JobFlow with forecast [1e4] in the healthy flow's pool", [body], [])
    pools = fspec.pools_of([POOL_HEALTHY])
    flows = fspec.flows_of([FLOW_HEALTHY, body])
    planned = fdecide.plan(flows, pools, fspec.epoch_index(NOW_S, EPOCH), {}, NOW_S)
    assert planned.refused.get(f"{T}/hx", ("", ""))[0] == "spec.steps[0].pools", planned.refused
    assert planned.result is not None and {s.flow for s in planned.result.result.flows} == {f"{H}/f"}


def _row_run_seconds() -> None:
    flow = copy.deepcopy(TENANT_FLOW)
    flow["steps"][0]["pools"] = ["healthy-pool"]
    flow["steps"][0]["runSeconds"] = 1.0e7
    flow["arrivals"] = {"mode": "external", "forecast": [1.0]}
    check_flows("a JobFlow with runSeconds 1e7 in the healthy flow's pool", [flow_body(T, "hx", flow)], [])


def _row_policy_deadline() -> None:
    policy = {**POLICY, "spec": {**FAST, "macroWDeadlineSeconds": 1.0e308}}
    got = bounded("SODA under a SchedulingPolicy with macroWDeadlineSeconds 1e308", soda_budget(policy), policy_decide, policy)
    assert not got["blamed"], f"a healthy job is blamed for the policy's macroWDeadlineSeconds 1e308: {got['blamed']}"


ROWS = {"import clique": _row_clique, "slotCPU 1n": _row_slot_cpu, "forecast 1e308": _row_forecast, "forecast 1e4": _row_forecast_1e4,
        "runSeconds 1e7": _row_run_seconds, "policy deadline 1e308": _row_policy_deadline}


@pytest.mark.parametrize("row", list(ROWS))
def test_issue_row(row):
    ROWS[row]()


# ------------------------------------------------------------------------------------------- the generator itself


def test_the_generator_reaches_every_bound_and_the_float_edge():
    """The strategies are not vacuous: each bound of a schema is drawn, an exclusive one a float inside, a number
    without a maximum at the largest finite float, a string at its maxLength, a list of scalars at maxItems, a
    quantity at its CEL bound and at 1n."""
    import math
    import sys

    from hostile_schema import from_schema as gen
    from hypothesis import find as found

    def find(strategy: Any, condition: Callable[[Any], bool]) -> Any:  # the first example that holds, not shrunk
        return found(strategy, condition, settings=settings(phases=(Phase.generate,), database=None, max_examples=2000))

    s = {"type": "number", "exclusiveMinimum": True, "minimum": 0, "maximum": 600}
    assert find(gen(s), lambda v: v == 600) == 600
    assert find(gen(s), lambda v: v == math.nextafter(0, 1)) > 0
    assert find(gen({"type": "number", "minimum": 0}), lambda v: v == sys.float_info.max)
    assert find(gen({"type": "integer", "minimum": 1}), lambda v: v == 2**63 - 1)
    assert len(find(gen({"type": "string", "maxLength": 253}), lambda v: len(v) > 1)) == 253
    assert len(find(gen({"type": "array", "maxItems": 1000, "items": {"type": "number"}}), lambda v: len(v) > 2)) == 1000
    q = {"x-kubernetes-int-or-string": True, "maxLength": 32,
         "x-kubernetes-validations": [{"rule": "quantity(string(self)).compareTo(quantity('100k')) <= 0"}]}
    assert find(gen(q), lambda v: v == "100k") == "100k" and find(gen(q), lambda v: v == "1n") == "1n"
    full = find(gen({"type": "object", "properties": {"a": {"type": "boolean"}, "b": {"type": "boolean"}}}, full=True), lambda v: True)
    assert set(full) == {"a", "b"}
