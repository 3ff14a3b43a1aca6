"""The fluid data plane model (operator/soda_operator/dataplane/model.py): hand-computed cases and
a property test against soda_optimizer.importance.Evaluator."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from soda_operator.dataplane.model import Instance, solve
from soda_optimizer.graph import glue
from soda_optimizer.importance import Evaluator
from soda_optimizer.model import (
    PE,
    Export,
    Import,
    Job,
    LinkCapacities,
    Node,
    PrimalInput,
    ResourceFunction,
    Scenario,
    Sink,
    Stream,
    Template,
)

NS = "ns"
JOB = "ns/j"
UNLIMITED = LinkCapacities(rack_uplink=1e15, zone_uplink=1e15)  # no link binds (the model takes finite capacities)


def node(name: str, rack: str = "r0", zone: str = "z0", mpc: float = 1000.0, cores: float = 8.0) -> Node:
    return Node(name=name, mips=cores * mpc, mips_per_core=mpc, rack=rack, zone=zone)


def chain(primal: float = 1000.0, sel: float = 1.0, bpt: float = 1000.0) -> Scenario:
    """src -> mid -> snk, the sink valued 2 x rate."""
    t = Template(
        name="ns/t",
        pes=(PE(name="src", kind="source", rf=ResourceFunction(a=0.1)),
             PE(name="mid", rf=ResourceFunction(a=0.001, b=1.0)),
             PE(name="snk", kind="sink", rf=ResourceFunction(a=0.0005, b=1.0))),
        streams=(Stream(src="src", dst="mid", selectivity=sel, bytes_per_tuple=bpt), Stream(src="mid", dst="snk", bytes_per_tuple=500)),
        sinks=(Sink(pe="snk", weight=2.0),),
        primal_inputs=(PrimalInput(pe="src", rate=primal),),
    )
    return Scenario(templates=(t,), jobs=(Job(name=JOB, templates=("ns/t",)),))


def inst(pe: str, nd: str, cores: float, pod: str | None = None) -> Instance:
    return Instance(namespace=NS, pod=pod or f"j-{pe}-{nd}", job=JOB, pe=pe, node=nd, cores=cores)


def test_chain_cpu_bound():
    g = glue(chain(), {JOB: "ns/t"})
    nodes = {"n0": node("n0")}
    dp = solve(g, [inst("src", "n0", 1.0), inst("mid", "n0", 0.5), inst("snk", "n0", 0.5)], nodes)
    # src: min(0.1 x 1000, 1000) = 100; mid: min(0.001 x 100 x 500, 100) = 50; snk: min(0.0005 x 50 x 500, 50) = 12.5
    assert dp.pe_output == pytest.approx({"ns/j:src": 100.0, "ns/j:mid": 50.0, "ns/j:snk": 12.5})
    assert dp.sinks == pytest.approx({"ns/j:snk": 12.5})
    assert dp.importance == pytest.approx(25.0)
    # CPU-bound everywhere: every pod uses its whole limit
    assert {p.instance.pe: p.cpu_cores for p in dp.pods} == pytest.approx({"src": 1.0, "mid": 0.5, "snk": 0.5})
    src, mid, snk = (dp.pod(NS, f"j-{x}-n0") for x in ("src", "mid", "snk"))
    assert src.received == pytest.approx({"primal": 100.0})  # a source takes in what it processes
    assert src.emitted == pytest.approx({"src->mid": 100.0}) and src.emitted_bytes == pytest.approx({"src->mid": 100_000.0})
    assert mid.received == pytest.approx({"src->mid": 100.0}) and mid.emitted == pytest.approx({"mid->snk": 50.0})
    assert snk.received == pytest.approx({"mid->snk": 50.0}) and snk.received_bytes == pytest.approx({"mid->snk": 25_000.0})
    assert snk.emitted == pytest.approx({"sink": 12.5})
    assert dp.converged


def test_chain_input_bound_and_selectivity():
    g = glue(chain(primal=50.0, sel=0.5), {JOB: "ns/t"})
    nodes = {"n0": node("n0")}
    dp = solve(g, [inst("src", "n0", 1.0), inst("mid", "n0", 2.0), inst("snk", "n0", 3.0)], nodes)
    # src: min(100, 50) = 50; mid gets 25: min(0.001 x 25 x 2000, 25) = 25; snk: min(0.0005 x 25 x 3000, 25) = 25
    assert dp.pe_output == pytest.approx({"ns/j:src": 50.0, "ns/j:mid": 25.0, "ns/j:snk": 25.0})
    # input-bound: src uses primal/a = 500 mips, mid b/a = 1000, snk b/a = 2000 (all below their limits)
    assert {p.instance.pe: p.cpu_cores for p in dp.pods} == pytest.approx({"src": 0.5, "mid": 1.0, "snk": 2.0})
    assert dp.pe_mips_used == pytest.approx({"ns/j:src": 500.0, "ns/j:mid": 1000.0, "ns/j:snk": 2000.0})


def test_source_primal_cap_split_over_nodes_of_different_speed():
    t = Template(name="ns/t", pes=(PE(name="src", kind="source", rf=ResourceFunction(a=0.1)),),
                 sinks=(Sink(pe="src"),), primal_inputs=(PrimalInput(pe="src", rate=60.0),))
    g = glue(Scenario(templates=(t,), jobs=(Job(name=JOB, templates=("ns/t",)),)), {JOB: "ns/t"})
    nodes = {"n0": node("n0", mpc=1000.0), "n1": node("n1", rack="r1", mpc=2000.0)}
    dp = solve(g, [inst("src", "n0", 1.0), inst("src", "n1", 0.5)], nodes)
    # 1000 + 1000 mips, shares 1/2; min(0.1 x 2000, 60) = 60; m_used = min(2000, 60/0.1) = 600 mips
    assert dp.pe_output["ns/j:src"] == pytest.approx(60.0)
    p0, p1 = dp.pod(NS, "j-src-n0"), dp.pod(NS, "j-src-n1")
    assert p0.share == pytest.approx(0.5) and p1.share == pytest.approx(0.5)
    assert p0.received == pytest.approx({"primal": 30.0}) and p1.emitted == pytest.approx({"sink": 30.0})
    assert p0.cpu_cores == pytest.approx(0.3)  # 300 mips at 1000 mips/core
    assert p1.cpu_cores == pytest.approx(0.15)  # 300 mips at 2000 mips/core
    # CPU-bound when primal is plenty: 200 tuples/s, the whole limits
    t2 = t.model_copy(update={"primal_inputs": (PrimalInput(pe="src", rate=1e6),)})
    g2 = glue(Scenario(templates=(t2,), jobs=(Job(name=JOB, templates=("ns/t",)),)), {JOB: "ns/t"})
    dp2 = solve(g2, [inst("src", "n0", 1.0), inst("src", "n1", 0.5)], nodes)
    assert dp2.pe_output["ns/j:src"] == pytest.approx(200.0)
    assert [p.cpu_cores for p in dp2.pods] == pytest.approx([1.0, 0.5])


def two_pe(bpt: float = 1000.0) -> Scenario:
    t = Template(
        name="ns/t",
        pes=(PE(name="src", kind="source", rf=ResourceFunction(a=1.0)), PE(name="snk", kind="sink", rf=ResourceFunction(a=1.0, b=1.0))),
        streams=(Stream(src="src", dst="snk", bytes_per_tuple=bpt),),
        sinks=(Sink(pe="snk"),),
        primal_inputs=(PrimalInput(pe="src", rate=100.0),),
    )
    return Scenario(templates=(t,), jobs=(Job(name=JOB, templates=("ns/t",)),))


def test_narrow_rack_uplink_scales_the_cross_rack_half():
    g = glue(two_pe(), {JOB: "ns/t"})
    nodes = {"n0": node("n0", rack="r0"), "n1": node("n1", rack="r1")}
    ins = [inst("src", "n0", 1.0), inst("snk", "n0", 1.0), inst("snk", "n1", 1.0)]
    wide = solve(g, ins, nodes)
    assert wide.sinks["ns/j:snk"] == pytest.approx(100.0)
    assert wide.links["rack:r1"].traffic == pytest.approx(50_000.0)  # half of 100 tuples/s x 1000 B
    # rack r1's uplink carries 20 kB/s: the cross-rack half (50 tuples/s, 50 kB/s) is scaled by 0.4
    narrow = solve(g, ins, nodes, LinkCapacities(overrides={"rack:r1": 20_000.0}))
    assert narrow.links["rack:r1"].scale == pytest.approx(0.4)
    assert narrow.links["rack:r1"].traffic == pytest.approx(20_000.0) and narrow.links["rack:r1"].utilisation == pytest.approx(1.0)
    assert narrow.links["rack:r1"].offered == pytest.approx(50_000.0)
    assert narrow.links["rack:r0"].traffic == pytest.approx(20_000.0)  # what got through crossed both uplinks
    assert narrow.pod(NS, "j-snk-n0").received == pytest.approx({"src->snk": 50.0})
    assert narrow.pod(NS, "j-snk-n1").received == pytest.approx({"src->snk": 20.0})
    assert narrow.pod(NS, "j-src-n0").emitted == pytest.approx({"src->snk": 100.0})  # the producer sent everything
    # the sink is input-bound (b = 1): 70 instead of 100, exactly the 30 lost; its pods emit by share
    assert narrow.sinks["ns/j:snk"] == pytest.approx(70.0)
    assert wide.sinks["ns/j:snk"] - narrow.sinks["ns/j:snk"] == pytest.approx(30.0)
    assert [p.emitted["sink"] for p in narrow.pods if p.instance.pe == "snk"] == pytest.approx([35.0, 35.0])
    assert narrow.streams[("ns/j:src", "ns/j:snk")] == pytest.approx(70.0)
    assert narrow.importance == pytest.approx(70.0)
    # stream affinity: 50 kB/s delivered inside n0, 20 kB/s across zone-less racks (one zone: "zone")
    assert wide.traffic == pytest.approx({(JOB, "node"): 50_000.0, (JOB, "zone"): 50_000.0})
    assert narrow.traffic == pytest.approx({(JOB, "node"): 50_000.0, (JOB, "zone"): 20_000.0})


def test_loss_propagates_downstream_and_zone_uplinks():
    g = glue(chain(primal=100.0), {JOB: "ns/t"})
    nodes = {"n0": node("n0", rack="r0", zone="z0"), "n1": node("n1", rack="r1", zone="z1")}
    # src on r0/z0; mid and snk on r1/z1 with plenty of CPU (input-bound, b = 1)
    ins = [inst("src", "n0", 2.0), inst("mid", "n1", 4.0), inst("snk", "n1", 4.0)]
    dp = solve(g, ins, nodes, LinkCapacities(zone_uplink=30_000.0))
    # src: min(0.1 x 2000, 100) = 100 tuples/s x 1000 B = 100 kB/s over rack r0, zone z0, zone z1, rack r1;
    # both zone uplinks carry 30 kB/s: lambda_z0 x lambda_z1 ... each link delivers at most 30 kB/s
    assert set(dp.links) == {"rack:r0", "rack:r1", "zone:z0", "zone:z1"}
    got = dp.pe_input["ns/j:mid"]
    assert got == pytest.approx(30.0, rel=1e-6)  # 30 kB/s of 1000-byte tuples
    assert max(lk.traffic for lk in dp.links.values()) == pytest.approx(30_000.0)
    assert dp.pe_output["ns/j:mid"] == pytest.approx(30.0, rel=1e-6)
    assert dp.sinks["ns/j:snk"] == pytest.approx(30.0, rel=1e-6)  # instead of 100: the loss went downstream
    assert dp.pod(NS, "j-snk-n1").emitted["sink"] == pytest.approx(30.0, rel=1e-6)
    # the input-bound PEs use what their input needs: 30 tuples/s x ... b/a mips (not rate-dependent here)
    assert dp.pe_mips_used["ns/j:mid"] == pytest.approx(1000.0)


def test_true_resource_function_override():
    g = glue(chain(), {JOB: "ns/t"})
    nodes = {"n0": node("n0")}
    ins = [inst("src", "n0", 1.0), inst("mid", "n0", 0.5), inst("snk", "n0", 0.5)]
    dp = solve(g, ins, nodes, rf={"ns/j:mid": ResourceFunction(a=0.0005, b=1.0)})
    # mid: min(0.0005 x 100 x 500, 100) = 25; snk: min(0.0005 x 25 x 500, 25) = 6.25
    assert dp.pe_output["ns/j:mid"] == pytest.approx(25.0) and dp.sinks["ns/j:snk"] == pytest.approx(6.25)


def test_import_label_and_no_instances():
    ta = Template(name="ns/ta", pes=(PE(name="s", kind="source", rf=ResourceFunction(a=1.0)),),
                  primal_inputs=(PrimalInput(pe="s", rate=10.0),), exports=(Export(name="out", pe="s"),))
    tb = Template(name="ns/tb", pes=(PE(name="k", kind="sink", rf=ResourceFunction(a=1.0, b=2.0)),), sinks=(Sink(pe="k"),))
    scen = Scenario(templates=(ta, tb), jobs=(Job(name="ns/a", templates=("ns/ta",)),
                                               Job(name="ns/b", templates=("ns/tb",), imports=(Import(job="ns/a", export="out", pe="k"),))))
    g = glue(scen, {"ns/a": "ns/ta", "ns/b": "ns/tb"})
    nodes = {"n0": node("n0")}
    a = Instance(NS, "a-s", "ns/a", "s", "n0", 1.0)
    b = Instance(NS, "b-k", "ns/b", "k", "n0", 1.0)
    dp = solve(g, [a, b], nodes)
    assert dp.pod(NS, "a-s").emitted == pytest.approx({"import:ns/a/out": 10.0})
    assert dp.pod(NS, "b-k").received == pytest.approx({"import:ns/a/out": 10.0})
    assert dp.pod(NS, "b-k").emitted == pytest.approx({"sink": 20.0})
    assert dp.job_importance == pytest.approx({"ns/a": 0.0, "ns/b": 20.0})
    # the importer without instances: nothing received, nothing emitted, no CPU
    dp2 = solve(g, [a, Instance(NS, "gone", "ns/b", "k", "elsewhere", 1.0)], nodes)
    assert [p.instance.pod for p in dp2.pods] == ["a-s"]
    assert dp2.sinks["ns/b:k"] == 0.0 and dp2.importance == 0.0


# --------------------------------------------------------------------------- property


@st.composite
def scenarios(draw):
    n = draw(st.integers(2, 6))
    names = [f"p{k}" for k in range(n)]
    edges = sorted({(i, j) for j in range(1, n) for i in draw(st.sets(st.integers(0, j - 1), max_size=2))})
    has_in = {j for _, j in edges}
    rate = st.floats(0.01, 50.0)
    pes = []
    for k, nm in enumerate(names):
        rf = ResourceFunction(a=draw(st.floats(1e-4, 0.5)), b=draw(st.floats(0.1, 3.0)), combine=draw(st.sampled_from(["sum", "min", "max"])))
        pes.append(PE(name=nm, kind="transform" if k in has_in else "source", rf=rf))
    streams = tuple(Stream(src=names[i], dst=names[j], selectivity=draw(st.floats(0.0, 2.0)), bytes_per_tuple=draw(st.floats(1.0, 1e4)))
                    for i, j in edges)
    primal = tuple(PrimalInput(pe=nm, rate=draw(rate)) for k, nm in enumerate(names) if k not in has_in or draw(st.booleans()))
    sinks = tuple(Sink(pe=nm, weight=draw(st.floats(0.0, 3.0))) for nm in names if draw(st.booleans()))
    t = Template(name="ns/t", pes=tuple(pes), streams=streams, primal_inputs=primal, sinks=sinks)
    nodes = [node(f"n{k}", rack=f"r{k % 3}", zone=f"z{k % 2}", mpc=draw(st.sampled_from([500.0, 1000.0, 2500.0]))) for k in range(4)]
    ins = []
    for nm in names:
        for k in draw(st.sets(st.integers(0, 3), max_size=3)):
            ins.append(inst(nm, f"n{k}", draw(st.floats(0.01, 4.0))))
    return Scenario(nodes=tuple(nodes), templates=(t,), jobs=(Job(name=JOB, templates=("ns/t",)),)), ins


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_unlimited_links_match_the_evaluator(case):
    scen, ins = case
    g = glue(scen, {JOB: "ns/t"})
    nodes = {n.name: n for n in scen.nodes}
    dp = solve(g, ins, nodes, UNLIMITED)
    ev = Evaluator(g)
    alloc = np.array([sum(i.cores * nodes[i.node].mips_per_core for i in ins if i.pe_id == p) for p in ev.pes])
    want = ev.outputs(alloc)[0]
    got = np.array([dp.pe_output[p] for p in ev.pes])
    assert got == pytest.approx(want, rel=1e-9, abs=1e-9)
    assert dp.pe_mips == pytest.approx(dict(zip(ev.pes, alloc)))
    for p, r in zip(ev.pes, want):
        mine = [f for f in dp.pods if f.instance.pe_id == p]
        if not mine:
            continue
        if g.graph.nodes[p]["sinks"]:
            assert sum(f.emitted["sink"] for f in mine) == pytest.approx(r, rel=1e-9, abs=1e-9)
        for _, v, d in g.graph.out_edges(p, data=True):
            lab = f"{p.split(':')[1]}->{v.split(':')[1]}"
            assert sum(f.emitted[lab] for f in mine) == pytest.approx(r * d["selectivity"], rel=1e-9, abs=1e-9)
            cons = [f for f in dp.pods if f.instance.pe_id == v]
            if cons:  # nothing is lost: the consumers receive all of it
                assert sum(f.received[lab] for f in cons) == pytest.approx(r * d["selectivity"], rel=1e-9, abs=1e-9)
    # the true importance is the Evaluator's when every PE has an instance
    if all(any(i.pe_id == p for i in ins) for p in ev.pes):
        assert dp.importance == pytest.approx(float(ev.importance(alloc)[0]), rel=1e-9, abs=1e-9)
    # CPU used never exceeds a pod's limit
    assert all(f.cpu_cores <= f.instance.cores * (1 + 1e-9) for f in dp.pods)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.floats(1.0, 1e6))
def test_links_never_carry_more_than_their_capacity(case, cap):
    scen, ins = case
    g = glue(scen, {JOB: "ns/t"})
    nodes = {n.name: n for n in scen.nodes}
    dp = solve(g, ins, nodes, LinkCapacities(rack_uplink=cap, zone_uplink=cap * 2))
    free = solve(g, ins, nodes, UNLIMITED)
    assert dp.converged
    for lk in dp.links.values():
        assert lk.traffic <= lk.capacity * (1 + 1e-6)
    # losses only ever lower rates
    for p, r in dp.pe_output.items():
        assert r <= free.pe_output[p] * (1 + 1e-9) + 1e-9


# --------------------------------------------------------------------------- the process, without a cluster

TEMPLATE = {"apiVersion": "kubesoda.io/v1alpha1", "kind": "StreamTemplate", "metadata": {"name": "t", "namespace": NS},
            "spec": {"pes": [{"name": "src", "kind": "source", "resourceFunction": {"a": 0.1}},
                             {"name": "snk", "kind": "sink", "resourceFunction": {"a": 0.001, "b": 1.0}}],
                     "streams": [{"from": "src", "to": "snk", "bytesPerTuple": 100}],
                     "sinks": [{"pe": "snk", "weight": 2, "value": {"kind": "linear", "slope": 1}}],
                     "primalInputs": [{"pe": "src", "rate": 1000}]}}
JOBOBJ = {"apiVersion": "kubesoda.io/v1alpha1", "kind": "StreamJob", "metadata": {"name": "j", "namespace": NS},
          "spec": {"templates": ["t"]}, "status": {"phase": "Running", "chosenTemplate": "t"}}


def node_obj(name: str, rack: str) -> dict:
    return {"metadata": {"name": name, "labels": {"kubesoda.io/rack": rack, "topology.kubernetes.io/zone": "z0",
                                                  "kubesoda.io/mips-per-core": "1000"}},
            "status": {"allocatable": {"cpu": "4"}, "conditions": [{"type": "Ready", "status": "True"}]}}


def pod_obj(pe: str, node_name: str, cpu: str, uid: str = "u1", status_cpu: str | None = None, phase: str = "Running") -> dict:
    st: dict = {"phase": phase}
    if status_cpu:
        st["containerStatuses"] = [{"name": "pe", "resources": {"limits": {"cpu": status_cpu}}}]
    return {"metadata": {"name": f"j-{pe}", "namespace": NS, "uid": uid,
                         "labels": {"kubesoda.io/job": "j", "kubesoda.io/pe": pe, "app.kubernetes.io/managed-by": "kubesoda"}},
            "spec": {"nodeName": node_name, "containers": [{"name": "pe", "resources": {"limits": {"cpu": cpu}}}]},
            "status": st}


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def scrape(sim) -> dict[tuple[str, tuple], float]:
    from soda_operator.dataplane.simulate import DataPlaneCollector

    out = {}
    for fam in DataPlaneCollector(sim).collect():
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def series(m: dict, name: str, **labels: str) -> float:
    hits = [v for (n, lab), v in m.items() if n == name and all((k, x) in lab for k, x in labels.items())]
    assert len(hits) == 1, (name, labels, hits)
    return hits[0]


def test_simulator_counters_resize_and_reappearance(tmp_path):
    from soda_operator.dataplane.simulate import Simulator, load_true_functions
    from soda_operator.soda.state import Snapshot

    clock = Clock()
    sim = Simulator(clock=clock)
    nodes = [node_obj("n0", "r0"), node_obj("n1", "r1")]
    pods = [pod_obj("src", "n0", "500m"), pod_obj("snk", "n1", "250m")]
    sim.step(Snapshot(nodes, [TEMPLATE], [JOBOBJ], None, pods))
    m = scrape(sim)
    assert series(m, "kubesoda_pe_tuples_emitted_total", pod="j-src", stream="src->snk") == 0.0
    clock.t += 2.0  # a scrape between two steps sees the counters advanced to its time
    m = scrape(sim)
    # src: min(0.1 x 500, 1000) = 50/s; snk: min(0.001 x 50 x 250, 50) = 12.5/s
    assert series(m, "kubesoda_pe_tuples_emitted_total", pod="j-src", streamjob="j", pe="src", stream="src->snk") == pytest.approx(100.0)
    assert series(m, "kubesoda_pe_bytes_received_total", pod="j-snk", stream="src->snk") == pytest.approx(10_000.0)
    assert series(m, "kubesoda_pe_tuples_received_total", pod="j-src", stream="primal") == pytest.approx(100.0)
    assert series(m, "kubesoda_pe_tuples_emitted_total", pod="j-snk", stream="sink") == pytest.approx(25.0)
    assert series(m, "container_cpu_usage_seconds_total", pod="j-src", container="pe") == pytest.approx(1.0)
    assert series(m, "kubesoda_dataplane_importance", namespace=NS, streamjob="j") == pytest.approx(25.0)
    assert series(m, "kubesoda_dataplane_link_utilisation", link="rack:r1") == pytest.approx(50 * 100 / 1.25e9)
    # an in-place resize: the container status's limit wins over the spec's, from the next step on
    sim.step(Snapshot(nodes, [TEMPLATE], [JOBOBJ], None, [pods[0], pod_obj("snk", "n1", "250m", status_cpu="500m")]))
    clock.t += 1.0
    m2 = scrape(sim)
    assert series(m2, "kubesoda_pe_tuples_emitted_total", pod="j-snk", stream="sink") == pytest.approx(25.0 + 25.0)
    assert all(v >= m[k] for k, v in m2.items() if k[0].endswith("_total") and k in m)
    # gone: not exported; back with a new uid: from 0
    sim.step(Snapshot(nodes, [TEMPLATE], [JOBOBJ], None, [pods[0]]))
    assert not [k for k in scrape(sim) if ("pod", "j-snk") in k[1]]
    sim.step(Snapshot(nodes, [TEMPLATE], [JOBOBJ], None, [pods[0], pod_obj("snk", "n1", "250m", uid="u2")]))
    clock.t += 1.0
    assert series(scrape(sim), "kubesoda_pe_tuples_emitted_total", pod="j-snk", stream="sink") == pytest.approx(12.5)
    # a pending pod is not played
    sim.step(Snapshot(nodes, [TEMPLATE], [JOBOBJ], None, [pods[0], pod_obj("snk", "n1", "250m", phase="Pending")]))
    assert not [k for k in scrape(sim) if ("pod", "j-snk") in k[1]]

    # true functions: the sink is twice as fast as declared, with noise drawn per step
    f = tmp_path / "true.yaml"
    f.write_text("ns/j:snk: {a: 0.002}\nsrc: {noise: 0.1}\n")
    table = load_true_functions(str(f))
    sim2 = Simulator(table, seed=1, clock=clock)
    dp = sim2.step(Snapshot(nodes, [TEMPLATE], [JOBOBJ], None, pods))
    src = dp.pe_output["ns/j:src"]
    assert src != pytest.approx(50.0) and src == pytest.approx(50.0, rel=0.5)
    assert dp.pe_output["ns/j:snk"] == pytest.approx(0.002 * src * 250)
    f.write_text("snk: {a: -1}\n")
    with pytest.raises(ValueError):
        load_true_functions(str(f))
