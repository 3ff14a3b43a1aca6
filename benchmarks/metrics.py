"""Placement quality metrics of SODA paper 7.2: stream affinity and link utilisation."""

from __future__ import annotations

from soda_optimizer import topology
from soda_optimizer.model import Scenario


def shares(fr: dict[str, float], H: dict[str, float]) -> dict[str, float]:
    tot = sum(f * H[n] for n, f in fr.items())
    return {n: f * H[n] / tot for n, f in fr.items()} if tot > 0 else {}


def placement_metrics(s: Scenario, fractions: dict[str, dict[str, float]], traffic: dict[tuple[str, str], float]) -> dict[str, float]:
    """intra_node_traffic: share of stream traffic whose tuples stay on a node (instances send to
    the consumer's instances in proportion to their mips); colocated_streams: share of streams
    with both ends on one node; max_link_util: the busiest rack/zone uplink."""
    H = {n.name: n.mips for n in s.nodes}
    rack = {n.name: n.rack for n in s.nodes}
    topo = topology.build(s)
    sh = {p: shares(fr, H) for p, fr in fractions.items()}
    tot = intra = 0.0
    co = n_streams = 0
    link = [0.0] * len(topo.links)
    for (a, b), t in traffic.items():
        if a not in sh or b not in sh or not sh[a] or not sh[b]:
            continue
        n_streams += 1
        tot += t
        intra += t * sum(sh[a][n] * sh[b].get(n, 0.0) for n in sh[a])
        co += bool(set(sh[a]) & set(sh[b]))
        for na, xa in sh[a].items():
            for nb, xb in sh[b].items():
                for e in topo.crossed(rack[na], rack[nb]):
                    link[e] += t * xa * xb
    util = [x / lk.capacity for x, lk in zip(link, topo.links)]
    return {
        "intra_node_traffic": intra / tot if tot else 0.0,
        "colocated_streams": co / n_streams if n_streams else 0.0,
        "max_link_util": max(util, default=0.0),
    }
