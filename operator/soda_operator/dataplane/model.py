"""The fluid data plane model: per-pod stream rates, CPU use and link traffic of running PE instances.

Pure: no Kubernetes import, no I/O. :func:`solve` takes the glued data-flow graph of the running jobs
(:func:`soda_optimizer.graph.glue`: PEs, streams with selectivity and bytes per tuple, primal rates,
sinks, imports), the PEs' TRUE resource functions (the declared ones unless overridden), the
running instances (pod, job, PE, node, CPU limit in cores), the nodes (mips per core, rack, zone)
and the link capacities, and returns what every pod receives and emits per stream, the CPU it uses,
the traffic on every rack/zone uplink and the true importance. docs/dataplane.md states the model
and where it departs from a real data plane; in short:

- a PE's mips m = sum over its instances of limit cores x node mips-per-core; its output rate is its
  resource function of its input rate, as in :class:`soda_optimizer.importance.Evaluator`
  (source: ``min(a m, primal)``; otherwise ``min(a r_i m, b r_i)``, r_i the sum/min/max of the
  rates it receives on its input streams, plus its primal inputs);
- an instance's share s = its mips / its PE's mips; it emits s x the PE's output on every output
  stream; a stream's tuples go to every (producer, consumer) instance pair in proportion
  s_producer x s_consumer;
- a pair whose nodes sit in different racks crosses both rack uplinks, and both zone uplinks when
  the zones differ. Every link e scales all traffic crossing it by one factor lambda_e <= 1 so that
  what it delivers is at most its capacity; a pair delivers offered x the product of the lambdas of
  its links. The lost tuples are lost: the consumer receives less, so it emits less, and so on
  downstream (rates and lambdas are iterated to a joint fixed point);
- CPU: a PE uses m_used = min(m, b/a) mips when it receives anything (min(m, primal/a) for a
  source): all its mips when CPU-bound, what its input needs when input-bound; a pod uses its share
  of m_used, in cores of its node.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import networkx as nx
import numpy as np

from soda_optimizer.graph import GluedGraph
from soda_optimizer.importance import value
from soda_optimizer.model import LinkCapacities, Node, ResourceFunction, pe_id
from soda_optimizer.observed import PRIMAL, SINK, stream_label

PRIMAL_BYTES_PER_TUPLE = 1.0  # a primal input and a sink's output name no tuple size: one byte per tuple
SINK_BYTES_PER_TUPLE = 1.0


@dataclass(frozen=True)
class Instance:
    """One running PE instance (a pod bound to a node)."""

    namespace: str
    pod: str
    job: str  # the Scenario's job name, "namespace/name"
    pe: str  # the PE's name in the job's template
    node: str
    cores: float  # its CPU limit

    @property
    def pe_id(self) -> str:
        return pe_id(self.job, self.pe)


@dataclass
class PodFlow:
    """What one pod does, per stream label (tuples/s and bytes/s), and the CPU it uses (cores)."""

    instance: Instance
    mips: float
    share: float
    received: dict[str, float] = field(default_factory=dict)
    received_bytes: dict[str, float] = field(default_factory=dict)
    emitted: dict[str, float] = field(default_factory=dict)
    emitted_bytes: dict[str, float] = field(default_factory=dict)
    cpu_cores: float = 0.0


@dataclass(frozen=True)
class LinkFlow:
    name: str  # "rack:<rack>" or "zone:<zone>"
    capacity: float  # bytes/s
    offered: float  # bytes/s the pairs crossing it would send (after losses on their other links)
    traffic: float  # bytes/s it delivers (<= capacity)
    scale: float  # lambda: the share of the offered traffic it lets through

    @property
    def utilisation(self) -> float:
        return self.traffic / self.capacity


@dataclass
class DataPlane:
    pods: list[PodFlow]
    pe_mips: dict[str, float]  # pe id -> mips of its instances
    pe_mips_used: dict[str, float]
    pe_input: dict[str, float]  # pe id -> r_i (combined input rate, primal included)
    pe_output: dict[str, float]  # pe id -> r_o
    streams: dict[tuple[str, str], float]  # edge (u, v) of the glued graph -> tuples/s its consumer receives
    sinks: dict[str, float]  # pe id with valued sinks -> its output rate
    links: dict[str, LinkFlow]
    job_importance: dict[str, float]  # a stream's value to its consumer's job, a sink's to its PE's job
    # bytes/s delivered between instances, per (consumer's job, scope): "node" (both on one node),
    # "rack", "zone" (one rack or zone, not one node or rack) or "cross-zone": stream affinity (7.2)
    traffic: dict[tuple[str, str], float] = field(default_factory=dict)
    iterations: int = 0
    converged: bool = True

    @property
    def importance(self) -> float:
        return float(sum(self.job_importance.values()))

    def pod(self, namespace: str, name: str) -> PodFlow:
        for p in self.pods:
            if p.instance.namespace == namespace and p.instance.pod == name:
                return p
        raise KeyError(f"{namespace}/{name}")


def link_capacity(links: LinkCapacities, name: str) -> float:
    if name in links.overrides:
        return float(links.overrides[name])
    return float(links.rack_uplink if name.startswith("rack:") else links.zone_uplink)


def crossed_links(a: Node, b: Node) -> tuple[str, ...]:
    """The uplinks a pair of instances on nodes ``a`` and ``b`` crosses (none inside a rack)."""
    if a.rack == b.rack:
        return ()
    out: tuple[str, ...] = (f"rack:{a.rack}", f"rack:{b.rack}")
    if a.zone != b.zone:
        out += (f"zone:{a.zone}", f"zone:{b.zone}")
    return out


def solve(glued: GluedGraph, instances: Sequence[Instance], nodes: Mapping[str, Node], links: LinkCapacities | None = None,
          rf: Mapping[str, ResourceFunction] | None = None, max_iter: int = 200, tol: float = 1e-10) -> DataPlane:
    """The data plane's steady state. ``rf`` overrides a PE's resource function (pe id -> its true
    RF); instances of PEs that are not in ``glued`` or on nodes not in ``nodes`` are ignored."""
    caps = links or LinkCapacities()
    g = glued.graph
    pes = sorted(g.nodes)
    index = {p: k for k, p in enumerate(pes)}
    P = len(pes)
    cyclic = not nx.is_directed_acyclic_graph(g)
    order = [index[p] for p in (pes if cyclic else nx.topological_sort(g))]
    rfs = [(rf or {}).get(p) or g.nodes[p]["spec"].rf for p in pes]
    a = np.array([r.a for r in rfs], dtype=float)
    b = np.array([r.b for r in rfs], dtype=float)
    primal = np.array([float(g.nodes[p]["primal_rate"]) for p in pes])

    # instances, mips and shares
    inst = [i for i in instances if i.pe_id in index and i.node in nodes]
    inst_pe = np.array([index[i.pe_id] for i in inst], dtype=int)
    inst_mips = np.array([max(i.cores, 0.0) * nodes[i.node].mips_per_core for i in inst], dtype=float)
    m = np.bincount(inst_pe, weights=inst_mips, minlength=P) if inst else np.zeros(P)
    share = np.divide(inst_mips, m[inst_pe], out=np.zeros_like(inst_mips), where=m[inst_pe] > 0) if inst else np.zeros(0)
    by_pe: list[list[int]] = [[] for _ in pes]
    for k, pk in enumerate(inst_pe):
        by_pe[int(pk)].append(k)

    # edges, and the (producer, consumer) instance pairs of each
    edges = list(g.edges(data=True))
    E = len(edges)
    e_src = np.array([index[u] for u, _, _ in edges], dtype=int)
    e_sel = np.array([float(d["selectivity"]) for _, _, d in edges])
    e_bpt = np.array([float(d["bytes_per_tuple"]) for _, _, d in edges])
    ins: list[list[int]] = [[] for _ in pes]  # edge indices into each PE
    for k, (_, v, _) in enumerate(edges):
        ins[index[v]].append(k)
    link_names: list[str] = sorted({f"rack:{n.rack}" for n in nodes.values()}) if nodes else []
    zones = sorted({n.zone for n in nodes.values()})
    if len(zones) > 1:
        link_names += [f"zone:{z}" for z in zones]
    link_ix = {n: k for k, n in enumerate(link_names)}
    pr_edge: list[int] = []
    pr_prod: list[int] = []
    pr_cons: list[int] = []
    pr_frac: list[float] = []
    inc_pair, inc_link = [], []  # incidence pair -> link
    for k, (u, v, _) in enumerate(edges):
        for i in by_pe[index[u]]:
            for j in by_pe[index[v]]:
                q = len(pr_edge)
                pr_edge.append(k)
                pr_prod.append(i)
                pr_cons.append(j)
                pr_frac.append(share[i] * share[j])
                for name in crossed_links(nodes[inst[i].node], nodes[inst[j].node]):
                    if name not in link_ix:  # a zone link with one zone only cannot be crossed; kept for safety
                        link_ix[name] = len(link_names)
                        link_names.append(name)
                    inc_pair.append(q)
                    inc_link.append(link_ix[name])
    Q, L = len(pr_edge), len(link_names)
    p_edge = np.array(pr_edge, dtype=int)
    p_cons = np.array(pr_cons, dtype=int)
    p_prod = np.array(pr_prod, dtype=int)
    p_frac = np.array(pr_frac, dtype=float)
    i_pair = np.array(inc_pair, dtype=int)
    i_link = np.array(inc_link, dtype=int)
    cap = np.array([link_capacity(caps, n) for n in link_names], dtype=float)

    def rates(delivered: np.ndarray, out: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(r_i, r_o) of every PE given each edge's delivered fraction: one pass in topological
        order, or passes to the least fixed point from ``out`` when the graph has cycles."""
        r_in = np.zeros(P)
        out = out.copy()
        for _ in range(max_iter if cyclic else 1):
            prev = out.copy()
            for p in order:
                if not ins[p]:
                    r_in[p] = primal[p]
                    out[p] = min(a[p] * m[p], primal[p])
                    continue
                got = [out[e_src[k]] * e_sel[k] * delivered[k] for k in ins[p]]
                c = rfs[p].combine
                r = sum(got) if c == "sum" else min(got) if c == "min" else max(got)
                r_in[p] = r + primal[p]
                out[p] = min(a[p] * r_in[p] * m[p], b[p] * r_in[p])
            if not cyclic or np.max(np.abs(out - prev), initial=0.0) <= tol * max(1.0, float(np.max(out, initial=0.0))):
                break
        return r_in, out

    def pair_delivery(lam: np.ndarray) -> np.ndarray:
        """delta per pair: the product of the scales of the links it crosses."""
        if not len(i_pair):
            return np.ones(Q)
        return np.exp(np.bincount(i_pair, weights=np.log(lam[i_link]), minlength=Q))

    # lambda_e <- lambda_e^(1-w) x min(1, lambda_e K_e / delivered_e)^w: in log space the undamped
    # map's Jacobian has eigenvalues in [-(k-1), 1] for pairs crossing up to k links; w = 1/k keeps
    # it a contraction on the directions that matter (the +1 ones are the ties between links)
    k_max = int(np.max(np.bincount(i_pair, minlength=Q))) if len(i_pair) else 1
    omega = 1.0 / max(k_max, 2)
    def scales(offered: np.ndarray, lam: np.ndarray) -> np.ndarray:
        """The links' lambdas for this offered traffic per pair (warm-started from ``lam``)."""
        for _ in range(4000):
            dl = np.bincount(i_link, weights=(offered * pair_delivery(lam))[i_pair], minlength=L)
            with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
                target = np.where(dl > 0, np.minimum(1.0, lam * cap / np.maximum(dl, 1e-300)), 1.0)
            new = lam ** (1.0 - omega) * target**omega
            if np.max(np.abs(new - lam)) <= tol * 0.1:
                return new
            lam = new
        return lam

    # outer loop: rates given the delivered fractions, lambdas given the rates. The delivered
    # fraction falls as rates rise (more traffic, more loss): an antitone map, iterated with a
    # damping step that halves whenever the residual stops halving
    lam = np.ones(L)
    delta = np.ones(Q)
    full = np.bincount(p_edge, weights=p_frac, minlength=E) if Q else np.zeros(E)
    edge_delivered = full.copy()
    out = np.zeros(P)
    converged = not len(i_pair)
    step, last = 1.0, float("inf")
    it = 0
    if len(i_pair):
        for it in range(1, max_iter + 1):
            _, out = rates(edge_delivered, out)
            offered = out[e_src[p_edge]] * e_sel[p_edge] * p_frac * e_bpt[p_edge]
            lam = scales(offered, lam)
            delta = pair_delivery(lam)
            target = np.bincount(p_edge, weights=p_frac * delta, minlength=E)
            res = float(np.max(np.abs(target - edge_delivered), initial=0.0))
            if res <= tol:
                converged = True
                break
            if res > 0.5 * last:
                step = max(step / 2, 1 / 256)
            last = res
            edge_delivered = (1 - step) * edge_delivered + step * target
    r_in, out = rates(edge_delivered, out)

    # CPU used
    src = np.array([not x for x in ins], dtype=bool)
    need = np.where(src, primal / a, b / a)
    m_used = np.where(r_in > 0, np.minimum(m, need), 0.0)

    # pods
    flows = [PodFlow(instance=i, mips=float(inst_mips[k]), share=float(share[k]),
                     cpu_cores=float(share[k] * m_used[inst_pe[k]] / nodes[i.node].mips_per_core)) for k, i in enumerate(inst)]
    labels = [stream_label(glued, u, v) for u, v, _ in edges]

    def add(d: dict[str, float], key: str, x: float) -> None:
        d[key] = d.get(key, 0.0) + float(x)

    for k, f in enumerate(flows):
        p = int(inst_pe[k])
        s = share[k]
        if primal[p] > 0:
            got = s * (out[p] if src[p] else primal[p])  # a source takes in what it can process
            add(f.received, PRIMAL, got)
            add(f.received_bytes, PRIMAL, got * PRIMAL_BYTES_PER_TUPLE)
        for e in ins[p]:  # every input stream appears, even at 0
            add(f.received, labels[e], 0.0)
            add(f.received_bytes, labels[e], 0.0)
        if g.nodes[pes[p]]["sinks"]:
            add(f.emitted, SINK, s * out[p])
            add(f.emitted_bytes, SINK, s * out[p] * SINK_BYTES_PER_TUPLE)
    for k, (u, _, _) in enumerate(edges):
        for i in by_pe[index[u]]:
            t = share[i] * out[e_src[k]] * e_sel[k]
            add(flows[i].emitted, labels[k], t)
            add(flows[i].emitted_bytes, labels[k], t * e_bpt[k])
    if Q:
        got = out[e_src[p_edge]] * e_sel[p_edge] * p_frac * delta
        for q in range(Q):
            f = flows[int(p_cons[q])]
            e = int(p_edge[q])
            add(f.received, labels[e], got[q])
            add(f.received_bytes, labels[e], got[q] * e_bpt[e])

    # traffic by scope (stream affinity)
    traffic: dict[tuple[str, str], float] = {}
    if Q:
        for q in range(Q):
            a_n, b_n = nodes[inst[int(p_prod[q])].node], nodes[inst[int(p_cons[q])].node]
            scope = ("node" if a_n.name == b_n.name else "rack" if a_n.rack == b_n.rack else "zone" if a_n.zone == b_n.zone
                     else "cross-zone")
            key = (g.nodes[edges[int(p_edge[q])][1]]["job"], scope)
            traffic[key] = traffic.get(key, 0.0) + float(got[q] * e_bpt[int(p_edge[q])])

    # links
    offered = out[e_src[p_edge]] * e_sel[p_edge] * p_frac * e_bpt[p_edge] if Q else np.zeros(0)
    if len(i_pair):
        dlv = np.bincount(i_link, weights=(offered * delta)[i_pair], minlength=L)
        seen = dlv / lam
    else:
        dlv = seen = np.zeros(L, dtype=float)
    link_out = {n: LinkFlow(n, float(cap[k]), float(seen[k]), float(dlv[k]), float(lam[k])) for k, n in enumerate(link_names)}

    # streams, sinks, importance
    stream_rates = {(u, v): float(out[e_src[k]] * e_sel[k] * edge_delivered[k]) for k, (u, v, _) in enumerate(edges)}
    sinks = {p: float(out[index[p]]) for p in pes if g.nodes[p]["sinks"]}
    imp: dict[str, float] = {j: 0.0 for j in glued.choice}
    for u, v, d in edges:
        if d["weight"] > 0 and d["value"].kind != "zero":
            j = g.nodes[v]["job"]
            imp[j] = imp.get(j, 0.0) + float(d["weight"] * value(d["value"], np.array([stream_rates[(u, v)]]))[0])
    for p, r in sinks.items():
        j = g.nodes[p]["job"]
        for w, vf in g.nodes[p]["sinks"]:
            if w > 0:
                imp[j] = imp.get(j, 0.0) + float(w * value(vf, np.array([r]))[0])
    return DataPlane(
        pods=flows,
        pe_mips={p: float(m[k]) for k, p in enumerate(pes)},
        pe_mips_used={p: float(m_used[k]) for k, p in enumerate(pes)},
        pe_input={p: float(r_in[k]) for k, p in enumerate(pes)},
        pe_output={p: float(out[k]) for k, p in enumerate(pes)},
        streams=stream_rates,
        sinks=sinks,
        links=link_out,
        job_importance=imp,
        traffic=traffic,
        iterations=it,
        converged=converged,
    )
