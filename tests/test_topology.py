"""Topology: the links a stream crosses equal the uplinks on the tree path between its racks
(oracle: networkx shortest path on an independently built tree); capacities and overrides."""

from __future__ import annotations

import networkx as nx
from hypothesis import given, settings
from hypothesis import strategies as st

from soda_optimizer import topology
from soda_optimizer.model import LinkCapacities, Node, Policy, Scenario


@st.composite
def scenarios(draw):
    n = draw(st.integers(2, 10))
    nodes = tuple(
        Node(name=f"n{k}", mips=1000.0, rack=f"r{draw(st.integers(0, 3))}", zone="z?")
        for k in range(n)
    )
    # a rack lives in one zone: derive the zone from the rack
    zone_of = {f"r{i}": f"z{draw(st.integers(0, 1))}" for i in range(4)}
    nodes = tuple(nd.model_copy(update={"zone": zone_of[nd.rack]}) for nd in nodes)
    return Scenario(nodes=nodes, policy=Policy(links=LinkCapacities(rack_uplink=10.0, zone_uplink=40.0, overrides={"rack:r1": 3.0})))


@settings(max_examples=60, deadline=None)
@given(scenarios())
def test_crossed_links_are_the_tree_path(s):
    topo = topology.build(s)
    # independent tree: rack switch -> zone switch -> core
    t = nx.Graph()
    zones = {n.zone for n in s.nodes}
    for n in s.nodes:
        t.add_edge(f"rack:{n.rack}", f"zone:{n.zone}")
        t.add_edge(f"zone:{n.zone}", "core")
    names = [lk.name for lk in topo.links]
    for a in topo.racks:
        for b in topo.racks:
            path = nx.shortest_path(t, f"rack:{a}", f"rack:{b}")
            want = set()
            for x, y in zip(path, path[1:]):
                lower = x if (x.startswith("rack:") or y == "core") else y
                if lower.startswith("zone:") and len(zones) == 1:
                    continue  # one zone: no zone uplinks
                want.add(lower)
            assert {names[i] for i in topo.crossed(a, b)} == want
    for lk in topo.links:
        # k_{e,1} and k_{e,2} partition the racks
        assert lk.below and lk.below <= set(topo.racks)
        if lk.name.startswith("rack:"):
            assert lk.capacity == (3.0 if lk.name == "rack:r1" else 10.0)
        else:
            assert lk.capacity == 40.0


def test_link_utilisation_and_single_rack():
    nodes = (Node(name="a", mips=1e3, rack="r0"), Node(name="b", mips=1e3, rack="r1"), Node(name="c", mips=1e3, rack="r1", ready=False))
    s = Scenario(nodes=nodes, policy=Policy(links=LinkCapacities(rack_uplink=100.0)))
    topo = topology.build(s)
    assert topo.racks == {"r0": ("a",), "r1": ("b",)}  # unusable node c left out
    beta = topo.link_utilisation({"p": "r0", "q": "r1", "x": "r1"}, {("p", "q"): 50.0, ("q", "x"): 70.0})
    assert beta == [0.5, 0.5]
    one = topology.build(Scenario(nodes=(Node(name="a", mips=1e3),)))
    assert one.links == () and one.crossed("default", "default") == ()
