"""The common entry of the four allocation systems (soda_optimizer.systems) and the name tables behind it
(fair_yield.ALLOCATORS, dispatch.policy): each system decides a small instance through the entry and returns
exactly what its own call returns; unknown names and parameters are refused with the known ones listed."""

from __future__ import annotations

from typing import Any

import pytest

from soda_operator import schema
from soda_operator.dispatch.spec import policy_of
from soda_optimizer import dispatch, fair_yield, flows, pipeline, systems
from soda_optimizer.model import PE, Job, Node, PrimalInput, ResourceFunction, Scenario, Sink, Stream, Template


def _scenario() -> Scenario:
    t = Template(name="ns/t", pes=(PE(name="s", kind="source", rf=ResourceFunction(a=10.0)), PE(name="x", rf=ResourceFunction(a=5e-4, b=0.5)),
                                   PE(name="k", kind="sink", rf=ResourceFunction(a=1.0, b=1.0))),
                 streams=(Stream(src="s", dst="x"), Stream(src="x", dst="k")), sinks=(Sink(pe="k"),),
                 primal_inputs=(PrimalInput(pe="s", rate=100.0),))
    nodes = tuple(Node(name=f"n{i}", mips=4000.0, mips_per_core=1000.0) for i in range(2))
    jobs = (Job(name="ns/a", templates=("ns/t",)), Job(name="ns/b", templates=("ns/t",), rank=2))
    return Scenario(nodes=nodes, templates=(t,), jobs=jobs)


def _plan_view(plan: Any) -> dict[str, Any]:
    d = plan.model_dump()
    d["stages"] = [{k: v for k, v in s.items() if k not in ("seconds", "detail")} for s in d["stages"]]  # times
    return d


def _instance() -> fair_yield.Instance:
    return fair_yield.Instance.sequential([0.6, 0.5, 0.4, 0.3, 0.2], [0.3, 0.4, 0.5, 0.2, 0.3], hosts=3)


def _dispatch_inputs() -> systems.DispatchInputs:
    jobs = [dispatch.JobView("a", 2, 0.0, 50.0, "default", 3, 1, 4.0), dispatch.JobView("b", 1, 1.0, 20.0, "default", 2, 0, 2.0),
            dispatch.JobView("c", 0, 2.0, None, "default", 4, 0, 4.0)]
    workers = [dispatch.WorkerView("w0", "fast", "a"), *(dispatch.WorkerView(f"w{i}", "slow" if i % 2 else "fast") for i in range(1, 6))]
    return systems.DispatchInputs(jobs, workers, now=5.0, speeds=dispatch.SpeedMatrix(table={("default", "fast"): 2.0}))


def _problem() -> flows.Problem:
    lm = flows.LoadMap(points=((0.0, 0.0), (1.0, 1.0), (2.0, 1.0)))
    pools = (flows.Pool(name="p", capacity=(1.0, 1.0), load_map=lm), flows.Pool(name="q", capacity=(0.5, 2.0), load_map=lm))
    fl = (flows.Flow(name="f", steps=(flows.Step(name="s0", run_time=1.0, pools=("p", "q")),), lifespan=90.0, utility=2.0, arrival_rate=(1.5, 0.2)),
          flows.Flow(name="g", steps=(flows.Step(name="s0", run_time=1.0, pools=("q",)), flows.Step(name="s1", run_time=0.5, pools=("p",))),
                     lifespan=200.0, utility=1.0, arrival_rate=(0.5, 0.5)))
    return flows.Problem(pools=pools, flows=fl, epochs=2)


def test_registry_lists_the_four_systems_and_refuses_others() -> None:
    assert systems.names() == ["dispatch", "fair_yield", "flows", "soda"]
    for name in systems.names():
        s = systems.get(name)
        assert isinstance(s, systems.AllocationSystem) and s.name == name and s.algorithms
    assert systems.get("soda").algorithms == ("rand", "rr", "soda", "spread")
    assert systems.get("fair_yield").algorithms == (*fair_yield.ALGORITHMS, "dynamic", "dynamic-milp")
    with pytest.raises(KeyError, match="no allocation system 'sched' .known: dispatch, fair_yield, flows, soda"):
        systems.get("sched")


def test_soda_decides_like_pipeline_run() -> None:
    scen = _scenario()
    d = systems.decide("soda", None, scen, 30.0)  # no deadline bites, however loaded the machine
    assert isinstance(d, systems.Decision) and d.system == "soda" and d.algorithm == "soda"
    assert d.status == "feasible" and d.bound is None and "2/2 jobs admitted" in d.detail
    assert _plan_view(d.result) == _plan_view(pipeline.run(scen, 30.0))
    # a micro epoch: the previous plan given, the entry is pipeline.rerun
    m = systems.decide("soda", systems.SodaSpec(previous=d.result), scen, 30.0)
    assert _plan_view(m.result) == _plan_view(pipeline.rerun(scen, d.result, 30.0))
    # the spec replaces the Scenario's policy: a baseline placement
    rr = scen.policy.model_copy(update={"placement": "rr"})
    d = systems.decide("soda", rr, scen, 30.0)  # the same generous deadline on both sides (the default bit under load)
    assert d.algorithm == "rr" and d.result.policy == "rr"
    assert _plan_view(d.result) == _plan_view(pipeline.run(scen.model_copy(update={"policy": rr}), 30.0))


@pytest.mark.parametrize("algorithm", ["milp", "mcb8", "sgb", "rrnz"])
def test_fair_yield_decides_like_allocate(algorithm: str) -> None:
    inst = _instance()
    d = systems.decide("fair_yield", algorithm, inst, deadline_s=5.0)
    direct = fair_yield.allocate(inst, algorithm, deadline_s=5.0)
    assert d.result.model_dump(exclude={"runtime_s"}) == direct.model_dump(exclude={"runtime_s"})
    assert d.status == direct.status and d.bound == direct.bound and d.algorithm == algorithm
    if algorithm == "milp":
        assert d.status == "optimal" and d.bound == pytest.approx(d.result.min_yield)


@pytest.mark.parametrize("algorithm", ["dynamic", "dynamic-milp"])
def test_fair_yield_reallocates_through_the_entry(algorithm: str) -> None:
    inst = _instance()
    prev = (0, 0, 1, 1, -1)
    spec = systems.FairYieldSpec(algorithm=algorithm, previous=prev, budget=0.5)
    d = systems.get("fair_yield").decide(spec, inst, 5.0)
    method = "milp" if algorithm == "dynamic-milp" else "heuristic"
    direct = fair_yield.reallocate(inst, prev, 0.5, method=method, deadline_s=5.0)
    assert d.result.model_dump(exclude={"runtime_s"}) == direct.model_dump(exclude={"runtime_s"})
    assert d.result.algorithm == algorithm
    with pytest.raises(ValueError, match="give previous and budget"):
        systems.decide("fair_yield", algorithm, inst)


def test_fair_yield_refuses_unknown_algorithms() -> None:
    with pytest.raises(ValueError, match="unknown algorithm 'mcb9'; one of anytime, milp, mcb1, .*, rrnz$"):
        fair_yield.allocate(_instance(), "mcb9")
    with pytest.raises(ValueError, match="unknown algorithm 'best'; one of anytime, milp, .*, rrnz, dynamic, dynamic-milp$"):
        systems.decide("fair_yield", "best", _instance())
    assert fair_yield.allocate(_instance(), "MCB8").algorithm == fair_yield.allocate(_instance(), "mcb8").algorithm


@pytest.mark.parametrize("spec", [None, "edf", "priority(r=0.2)", systems.DispatchSpec(policy="workload", params={"horizon": 3.0}),
                                  dispatch.ProportionPolicy(fill="deadline")])
def test_dispatch_decides_like_decide(spec: Any) -> None:
    inp = _dispatch_inputs()
    d = systems.decide("dispatch", spec, inp)
    pol = (spec if not isinstance(spec, str | systems.DispatchSpec | None) else
           dispatch.policy("deadline") if spec is None else dispatch.policy(spec) if isinstance(spec, str) else dispatch.policy(spec.policy, **spec.params))
    assert d.result == dispatch.decide(pol, inp.jobs, inp.workers, inp.now, inp.speeds)
    assert d.result and d.algorithm == pol.name and d.status == "feasible"


def test_flows_decides_like_plan_flows() -> None:
    prob = _problem()
    params = flows.PlannerParams(evaluations=10, seed=3)
    d = systems.decide("flows", params, prob)
    direct = flows.plan_flows(prob, params)
    assert d.result.model_dump(exclude={"elapsed_s", "first_answer_s"}) == direct.model_dump(exclude={"elapsed_s", "first_answer_s"})
    assert d.status == "feasible" and d.algorithm == "ga"
    assert d.result.result.score <= d.result.first_score
    # the LP's proven lower bound on eq. (2) comes through the common entry, never above the plan's cost
    assert d.bound is not None and d.bound == direct.bound and d.bound <= d.result.result.score + 1e-9


# --------------------------------------------------------------------------- dispatch policies by name


def test_paper_policies_are_built_from_the_table() -> None:
    paper = dispatch.paper_policies()
    assert list(paper) == ["priority(r=0)", "priority(r=0.2)", "proportion", "workload(h=1)+fill-priority", "deadline",
                           "deadline+fill-priority", "deadline+fill-deadline", "edf"]
    assert paper["priority(r=0.2)"] == dispatch.PriorityPolicy(reservation=0.2)
    assert paper["deadline"] == dispatch.DeadlinePolicy(fill=None)
    for name, pol in paper.items():
        if name not in dispatch.registry.FAMILIES:
            assert dispatch.policy(name) == pol
    # a family's name means the family's default: the paper's "deadline" has no fill, the family's fills by deadline
    assert dispatch.policy("deadline") == dispatch.DeadlinePolicy(fill="deadline") != paper["deadline"]
    assert dispatch.policy("deadline", fill=None) == paper["deadline"]
    assert dispatch.policy("proportion") == paper["proportion"] and dispatch.policy("edf") == paper["edf"]
    assert dispatch.names() == ["priority", "proportion", "workload", "deadline", "edf", "priority(r=0)", "priority(r=0.2)",
                                "workload(h=1)+fill-priority", "deadline+fill-priority", "deadline+fill-deadline",
                                "priority[alg1](r=0.2)", "proportion[alg2]", "deadline[text]+fill-priority",
                                "deadline[text]+fill-deadline"]
    assert dispatch.policy("deadline[text]+fill-deadline") == dispatch.DeadlinePolicy("deadline", reading="text")


@pytest.mark.parametrize("spec", [
    {}, {"policy": "deadline"}, {"policy": "deadline", "fill": "none"}, {"policy": "deadline", "fill": "priority"},
    {"policy": "priority"}, {"policy": "priority", "reservation": 0.25, "fill": "deadline"}, {"policy": "priority", "reservation": 0.5},
    {"policy": "proportion"}, {"policy": "proportion", "fill": "priority"},
    {"policy": "workload"}, {"policy": "workload", "horizon": 30, "fill": "none"}, {"policy": "edf"},
])
def test_policy_by_name_matches_the_operators_policy_of(spec: dict[str, Any]) -> None:
    name = spec.get("policy", "deadline")
    params = {k: v for k, v in spec.items() if k in dispatch.registry.parameters(name)}
    assert dispatch.policy(name, **params) == policy_of(schema.with_defaults({"kind": "BatchDispatch", "spec": spec})["spec"])


def test_policy_by_name_refuses_bad_names_and_parameters() -> None:
    with pytest.raises(ValueError, match="unknown policy 'fifo' .known: priority, proportion, workload, deadline, edf, priority.r=0."):
        dispatch.policy("fifo")
    with pytest.raises(ValueError, match="'priority': unknown parameter horizon .accepts: reservation, fill"):
        dispatch.policy("priority", horizon=2.0)
    with pytest.raises(ValueError, match="'edf': unknown parameter fill .accepts: none"):
        dispatch.policy("edf", fill="deadline")
    with pytest.raises(ValueError, match="'priority': parameters: Value error, reservation rate must be in"):
        dispatch.policy("priority", reservation=1.5)
    with pytest.raises(ValueError, match="'workload': horizon: Input should be a valid number"):
        dispatch.policy("workload", horizon="soon")
    with pytest.raises(ValueError, match="'deadline': fill: Input should be 'priority' or 'deadline'"):
        dispatch.policy("deadline", fill="random")
    with pytest.raises(ValueError, match="takes no parameters .got reservation"):
        dispatch.policy("priority(r=0.2)", reservation=0.3)
