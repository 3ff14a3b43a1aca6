"""The web view's model: a Scenario and its Plan as one JSON-able dict (no I/O, no Kubernetes).

What the page shows, computed here so that the browser only draws:

- ``zones`` > ``racks`` > ``nodes``: each node's mips, the mips the plan puts on it and its
  utilisation (sum of the fractions f(p, n) of the instances there), and a position ``x``/``y`` on a
  simple grid (zones left to right, racks as columns, a rack's nodes as a small block);
- ``instances``: every PE instance (job, PE, node, fraction, mips = f x node mips, pod name when the
  caller names pods), with its position next to its node;
- ``streams``: every stream between two PEs of the admitted jobs (inter-job imports too) with its
  planned rate (the :class:`~soda_optimizer.importance.Evaluator` on the PEs' planned mips) and
  traffic (rate x bytes per tuple);
- ``links``: the rack and zone uplinks (:mod:`soda_optimizer.topology`) with the planned traffic
  that crosses them (a stream's traffic split over its ends' instances in proportion to their mips)
  and their utilisation;
- ``jobs``: admitted or not, rank, revised rank, template, projected importance, observed
  importance (``None`` when nobody observed it), reason and message when rejected;
- ``waterline``: the worst revised rank macroQ admitted, when the plan's macroQ report names one;
- ``bound``, ``boundProven``, ``gap``: the plan's upper bound of the best importance, whether it is
  proven (False: an estimate, possibly below the best) and the gap, each None when unknown (issue 49:
  every published bound says whether it is proven);
- ``curves``: macroQ's importance curves per weak component, when the policy keeps them;
- ``history``: the last epochs as the caller kept them (:func:`history_entry`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from soda_optimizer.importance import Evaluator
from soda_optimizer.model import Scenario, split_pe_id
from soda_optimizer.plan import Plan
from soda_optimizer.topology import build as build_topology

# geometry of the grid (arbitrary units; the page scales it)
ZONE_GAP = 1.0
RACK_GAP = 0.6
NODE_STEP = 1.0

_WATERLINE = re.compile(r"waterline rank (\d+)")


def _r(x: float, digits: int = 6) -> float:
    return 0.0 if not math.isfinite(x) else round(float(x), digits)


def waterline(plan: Plan) -> int | None:
    """The admission waterline (the worst revised rank admitted among competing jobs) that
    macroQ's report names, or None (another policy, or no level was needed)."""
    for st in plan.stages:
        if st.stage == "macroq":
            m = _WATERLINE.search(st.detail)
            if m:
                return int(m.group(1))
    return None


def history_entry(plan: Plan, epoch: str, time: str, changes: Mapping[str, int] | None = None,
                  observed: float | None = None) -> dict[str, Any]:
    """One epoch of the history the caller keeps (bounded, e.g. a deque)."""
    return {"time": time, "epoch": epoch, "importance": _r(plan.importance, 4),
            "observedImportance": None if observed is None else _r(observed, 4),
            "admitted": sum(d.admitted for d in plan.jobs), "jobs": len(plan.jobs),
            "feasible": plan.feasible, "changes": {k: int(v) for k, v in sorted((changes or {}).items()) if v}}


def _curves(plan: Plan) -> list[dict[str, Any]]:
    """macroQ's component curves when the plan's (opaque) state carries them (SODA does)."""
    out: list[dict[str, Any]] = []
    state = plan.state if isinstance(plan.state, tuple) else (plan.state,)
    for part in state:
        for c in getattr(part, "components", ()) or ():
            mips, imp = np.asarray(getattr(c, "mips", ())), np.asarray(getattr(c, "importance", ()))
            if len(mips) != len(imp) or not len(mips):
                continue
            step = max(1, len(mips) // 200)  # at most ~200 points per curve
            jobs = sorted({split_pe_id(p)[0] for p in getattr(c, "pes", ())})
            out.append({"jobs": jobs, "pes": len(getattr(c, "pes", ())),
                        "mips": [_r(x, 2) for x in mips[::step]], "importance": [_r(x, 4) for x in imp[::step]]})
        if out:
            break
    return out


def build(scenario: Scenario, plan: Plan, *, observed: Mapping[str, float] | None = None,
          history: Iterable[Mapping[str, Any]] = (), source: str = "offline",
          pod_name: Callable[[str, str, str], str] | None = None, time: str = "") -> dict[str, Any]:
    """The view of ``plan`` made for ``scenario``.

    ``observed``: job -> observed importance (jobs missing get None); ``pod_name(job, pe, node)``
    names an instance's pod (None: no pod names); ``history``: the caller's epochs, oldest first.
    """
    observed = observed or {}
    nodes = {n.name: n for n in scenario.nodes}
    decisions = {d.job: d for d in plan.jobs}
    admitted = {d.job for d in plan.jobs if d.admitted}

    # ------------------------------------------------------------- instances and PE mips
    instances: list[dict[str, Any]] = []
    pe_mips: dict[str, float] = {}
    share: dict[str, dict[str, float]] = {}  # pe -> node -> mips there
    node_used: dict[str, float] = {}
    node_frac: dict[str, float] = {}
    pes_out: list[dict[str, Any]] = []
    for p in plan.pes:
        if p.job not in admitted:
            continue
        placed = {n: f for n, f in sorted(p.fractions.items()) if f > 0 and n in nodes}
        mips = {n: f * nodes[n].mips for n, f in placed.items()}
        pe_mips[p.pe] = sum(mips.values()) if placed else p.goal_mips
        share[p.pe] = mips
        for n, f in placed.items():
            node_used[n] = node_used.get(n, 0.0) + mips[n]
            node_frac[n] = node_frac.get(n, 0.0) + f
            inst = {"job": p.job, "pe": p.name, "peId": p.pe, "node": n, "fraction": _r(f), "mips": _r(mips[n], 3)}
            if pod_name is not None:
                inst["pod"] = pod_name(p.job, p.name, n)
            instances.append(inst)
        pes_out.append({"id": p.pe, "job": p.job, "name": p.name, "goalMips": _r(p.goal_mips, 3), "mips": _r(pe_mips[p.pe], 3),
                        "candidates": list(p.candidates), "nodes": list(placed)})

    # ------------------------------------------------------------- streams: rates from mips
    streams: list[dict[str, Any]] = []
    choice = {d.job: d.template for d in plan.jobs if d.admitted and d.template}
    try:
        glued = scenario.glued({j: t for j, t in choice.items() if j in {x.name for x in scenario.jobs}})
    except (KeyError, ValueError):
        glued = None
    out_rate: dict[str, float] = {}
    if glued is not None and glued.graph.number_of_nodes():
        ev = Evaluator(glued)
        alloc = np.array([[pe_mips.get(p, 0.0) for p in ev.pes]])
        outs = ev.outputs(alloc)[0]
        out_rate = {p: float(outs[i]) for i, p in enumerate(ev.pes)}
        rates = ev.stream_rates(alloc)[0] if ev.edge_keys else []
        for (u, v), r in zip(ev.edge_keys, rates):
            d = glued.graph.edges[u, v]
            streams.append({"src": u, "dst": v, "rate": _r(r, 4), "traffic": _r(r * d["bytes_per_tuple"], 2),
                            "interJob": bool(d.get("inter_job")), "weight": _r(d["weight"], 4)})
    for pe in pes_out:
        pe["outputRate"] = _r(out_rate.get(pe["id"], 0.0), 4)

    # ------------------------------------------------------------- links: traffic over the uplinks
    topo = build_topology(scenario)
    load = [0.0] * len(topo.links)

    def racks_of(pe: str) -> dict[str, float]:
        tot = sum(share.get(pe, {}).values())
        out: dict[str, float] = {}
        for n, m in share.get(pe, {}).items():
            if tot > 0:
                out[nodes[n].rack] = out.get(nodes[n].rack, 0.0) + m / tot
        return out

    rack_share = {pe: racks_of(pe) for pe in share}
    for s in streams:
        a, b = rack_share.get(s["src"], {}), rack_share.get(s["dst"], {})
        for ra, wa in a.items():
            for rb, wb in b.items():
                for i in topo.crossed(ra, rb):
                    load[i] += s["traffic"] * wa * wb
    links = [{"name": lk.name, "capacity": _r(lk.capacity, 1), "traffic": _r(t, 2), "utilisation": _r(t / lk.capacity)}
             for lk, t in zip(topo.links, load)]
    link_by_name = {lk["name"]: lk for lk in links}

    # ------------------------------------------------------------- topology with a grid layout
    by_zone: dict[str, dict[str, list[str]]] = {}
    for node in scenario.nodes:
        by_zone.setdefault(node.zone, {}).setdefault(node.rack, []).append(node.name)
    per_node: dict[str, list[dict[str, Any]]] = {}
    for placed_inst in instances:
        per_node.setdefault(str(placed_inst["node"]), []).append(placed_inst)
    zones = []
    x0 = 0.0
    for z in sorted(by_zone):
        racks = []
        zx = x0
        for r in sorted(by_zone[z]):
            names = sorted(by_zone[z][r])
            cols = max(1, math.ceil(math.sqrt(len(names) / 4)))  # a rack is a tall block
            out_nodes: list[dict[str, Any]] = []
            for k, name in enumerate(names):
                node = nodes[name]
                x, y = x0 + (k % cols) * NODE_STEP, -(k // cols) * NODE_STEP
                used = node_used.get(name, 0.0)
                out_nodes.append({"name": name, "mips": _r(node.mips, 3), "cores": _r(node.cores, 3), "usedMips": _r(used, 3),
                                  "utilisation": _r(node_frac.get(name, 0.0)), "usable": node.usable, "ready": node.ready,
                                  "instances": len(per_node.get(name, ())), "x": _r(x, 3), "y": _r(y, 3)})
                # instances around their node: a small ring
                mine = per_node.get(name, [])
                for i, inst in enumerate(mine):
                    ang = 2 * math.pi * i / max(1, len(mine))
                    rad = 0.28 if len(mine) > 1 else 0.0
                    inst["x"], inst["y"] = _r(x + rad * math.cos(ang), 3), _r(y + 0.05 + rad * math.sin(ang), 3)
            rack_used = sum(nd["usedMips"] for nd in out_nodes)
            rack_mips = sum(nd["mips"] for nd in out_nodes if nd["usable"])
            racks.append({"name": r, "nodes": out_nodes, "mips": _r(rack_mips, 3), "usedMips": _r(rack_used, 3),
                          "utilisation": _r(rack_used / rack_mips) if rack_mips else 0.0,
                          "uplink": link_by_name.get(f"rack:{r}"),
                          "x0": _r(x0 - 0.5, 3), "x1": _r(x0 + (cols - 1) * NODE_STEP + 0.5, 3),
                          "y0": _r(-((len(names) - 1) // cols) * NODE_STEP - 0.5, 3), "y1": 0.5})
            x0 += cols * NODE_STEP + RACK_GAP
        zones.append({"name": z, "racks": racks, "uplink": link_by_name.get(f"zone:{z}"),
                      "x0": _r(zx - 0.7, 3), "x1": _r(x0 - RACK_GAP + 0.7 - NODE_STEP, 3)})
        x0 += ZONE_GAP

    # ------------------------------------------------------------- jobs
    jobs = []
    job_order = [j.name for j in scenario.jobs] + [d.job for d in plan.jobs if d.job not in {j.name for j in scenario.jobs}]
    for name in job_order:
        d = decisions.get(name)
        if d is None:
            continue
        jobs.append({"name": name, "admitted": d.admitted, "rank": d.rank, "revisedRank": d.revised_rank,
                     "template": d.template, "importance": _r(d.importance, 4), "mips": _r(d.mips, 3),
                     "observedImportance": None if observed.get(name) is None else _r(float(observed[name]), 4),
                     "reason": d.reason if not d.admitted else "", "message": d.message if not d.admitted else "",
                     "instances": sum(1 for i in instances if i["job"] == name)})

    obs_total = sum(float(v) for j, v in observed.items() if j in admitted and v is not None) if observed else None
    cap = scenario.capacity_mips
    return {
        "apiVersion": "kubesoda.io/web/v1alpha1",
        "source": source,
        "time": time,
        "policy": plan.policy,
        "feasible": plan.feasible,
        "message": plan.message,
        "importance": _r(plan.importance, 4),
        "observedImportance": None if obs_total is None else _r(obs_total, 4),
        "waterline": waterline(plan),
        "bound": None if plan.bound is None else _r(plan.bound, 4),
        "boundProven": bool(plan.bound_proven) if plan.bound is not None else None,
        "gap": None if plan.gap is None else _r(plan.gap, 6),
        "capacityMips": _r(cap, 3),
        "usedMips": _r(sum(node_used.values()), 3),
        "zones": zones,
        "links": links,
        "instances": instances,
        "pes": pes_out,
        "streams": streams,
        "jobs": jobs,
        "stages": [{"stage": s.stage, "status": s.status, "seconds": _r(s.seconds, 4), "detail": s.detail} for s in plan.stages],
        "curves": _curves(plan),
        "history": [dict(h) for h in history],
    }
