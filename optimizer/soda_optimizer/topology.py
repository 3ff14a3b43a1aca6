"""The network as SODA's macroW sees it (paper section 5.2.1): clusters of PNs and a tree of links.

Nodes are grouped into racks (SODA's clusters of PNs on a fast backbone) and racks into zones.
The network is a tree (networkx): node -> rack switch -> zone switch -> core. Its inter-cluster
links are the rack uplinks (rack switch - zone switch) and the zone uplinks (zone switch - core),
with capacities K_e from ``Policy.links`` (tier defaults, per-rack/zone overrides). Removing a link
splits the racks into two sets k_{e,1} (below the link) and k_{e,2} (the rest); a stream whose ends
sit in racks on different sides of a link uses it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import networkx as nx

from .model import Scenario


@dataclass(frozen=True)
class Link:
    name: str  # "rack:<rack>" or "zone:<zone>"
    capacity: float
    below: frozenset[str]  # k_{e,1}: the racks below the link


@dataclass(frozen=True)
class Topology:
    tree: nx.Graph
    racks: dict[str, tuple[str, ...]]  # rack -> usable node names
    zone_of_rack: dict[str, str]
    links: tuple[Link, ...]
    _crossed: dict[tuple[str, str], tuple[int, ...]] = field(default_factory=dict, compare=False, repr=False)  # memo of crossed()

    def crossed(self, rack_a: str, rack_b: str) -> tuple[int, ...]:
        """Indices of the links a stream between two racks uses (empty inside a rack)."""
        if rack_a == rack_b:
            return ()
        key = (rack_a, rack_b)
        out = self._crossed.get(key)
        if out is None:
            out = self._crossed[key] = tuple(i for i, lk in enumerate(self.links) if (rack_a in lk.below) != (rack_b in lk.below))
        return out

    def link_utilisation(self, rack_of: Mapping[str, str], traffic: Mapping[tuple[str, str], float]) -> list[float]:
        """beta_e for a PE -> rack placement and stream traffic t(p1, p2)."""
        load = [0.0] * len(self.links)
        for (a, b), t in traffic.items():
            if a in rack_of and b in rack_of:
                for i in self.crossed(rack_of[a], rack_of[b]):
                    load[i] += t
        return [x / lk.capacity for x, lk in zip(load, self.links)]


def build(scenario: Scenario) -> Topology:
    caps = scenario.policy.links
    g = nx.Graph()
    g.add_node("core", tier="core")
    racks: dict[str, list[str]] = {}
    zone_of_rack: dict[str, str] = {}
    for n in scenario.usable_nodes():
        racks.setdefault(n.rack, []).append(n.name)
        zone_of_rack.setdefault(n.rack, n.zone)
        g.add_edge(f"zone:{n.zone}", "core")
        g.add_edge(f"rack:{n.rack}", f"zone:{n.zone}")
        g.add_edge(n.name, f"rack:{n.rack}")
    links = []
    zones = sorted(set(zone_of_rack.values()))
    for r in sorted(racks):
        links.append(Link(f"rack:{r}", caps.overrides.get(f"rack:{r}", caps.rack_uplink), frozenset([r])))
    if len(zones) > 1:
        for z in zones:
            below = frozenset(r for r, zz in zone_of_rack.items() if zz == z)
            links.append(Link(f"zone:{z}", caps.overrides.get(f"zone:{z}", caps.zone_uplink), below))
    if len(racks) <= 1:
        links = []
    return Topology(g, {r: tuple(sorted(v)) for r, v in racks.items()}, zone_of_rack, tuple(links))
