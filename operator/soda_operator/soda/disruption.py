"""Disruption is not intent (issue 46): which NotReady nodes keep their PE pods, and when deletions pause.

A node whose ``Ready`` condition is not ``True`` may be gone, or may only look gone: when the API
server is down for 30 s, the node lifecycle controller marks every node NotReady once it is back
(their leases went stale meanwhile), and a plan that took that as intent deleted 139 of ~170 PE
pods. Kubernetes itself waits: the taint manager evicts a pod from a NotReady (Unknown) node only
after the pod's toleration of ``node.kubernetes.io/not-ready`` (``unreachable``) has run out, 300 s
by default (the DefaultTolerationSeconds admission plugin gives every pod that does not say
otherwise those two tolerations; kubesoda's PE pods name none, so they get 300 s each), and stops
evicting when a zone looks disrupted as a whole. This module applies the same two rules to the plan:

- **grace**: a NotReady node is *held* while the Ready condition's ``lastTransitionTime`` is younger
  than the longest toleration of its PE pods for the taint that matches (``not-ready`` when Ready is
  False, ``unreachable`` when Unknown; NoExecute or any effect; no ``tolerationSeconds``: forever);
  a pod that names no such toleration counts the admission plugin's 300 s;
- **disruption**: a zone is disrupted as kube-controller-manager's ``ComputeZoneState`` judges it:
  no Ready node left (``FullDisruption``), or more than 2 NotReady and at least
  ``--unhealthy-zone-threshold`` (0.55) of them (``PartialDisruption``). While a zone is disrupted,
  its NotReady nodes are held however long they have been (deletions there are paused) and the
  operator says so: a condition ``NodesDisrupted`` on the SchedulingPolicy, an Event on it when it
  starts and ends, the metrics ``kubesoda_nodes_held`` and ``kubesoda_deletions_paused``.

What *held* means for the plan (:func:`.crd.node_from_object`'s ``pinned_memory``): the node counts
as ready, so the PE instances on it keep their fractions, but it offers only the memory its PE pods
already hold, so microW (which never puts an instance on a node without its memory) and macroW place
no new instance there. A node with no PE pod has nothing to keep and is unusable at once, as before.
The epochs never delete a PE pod on a held node, whatever the plan says (:func:`keep`).

Departure: Kubernetes judges a toleration per pod; a node is held here while any of its PE pods'
grace lasts (they all carry the same defaults unless a template says otherwise). A resize planned on
a held node is still sent (its kubelet applies it when it returns).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ..kube import conditions, metrics
from ..kube.pods import TERMINAL, requests
from . import crd

log = logging.getLogger("kubesoda.disruption")
DEFAULT_TOLERATION_S = 300.0  # the DefaultTolerationSeconds admission plugin's default
UNHEALTHY_ZONE_THRESHOLD = 0.55  # kube-controller-manager --unhealthy-zone-threshold (default)
TAINT = {"False": "node.kubernetes.io/not-ready", "Unknown": "node.kubernetes.io/unreachable"}
CONDITION = "NodesDisrupted"


@dataclass(frozen=True)
class Disruption:
    """What one snapshot's nodes say: ``held`` node -> the memory bytes its PE pods hold (they keep
    them), ``not_ready`` nodes, and the disrupted zones, zone -> ``FullDisruption`` or
    ``PartialDisruption`` with its (NotReady, all) node counts."""

    held: dict[str, float] = field(default_factory=dict)
    not_ready: frozenset[str] = frozenset()
    zones: dict[str, tuple[str, int, int]] = field(default_factory=dict)

    @property
    def paused(self) -> bool:
        """Deletions on NotReady nodes are paused: some zone is disrupted."""
        return bool(self.zones)

    def message(self) -> str:
        if not self.zones:
            return ""
        parts = [f"zone {z}: {state} ({bad} of {n} nodes NotReady)" for z, (state, bad, n) in sorted(self.zones.items())]
        return (f"{'; '.join(parts)}: PE pods on NotReady nodes are kept and no pod there is deleted until the zone recovers "
                f"({len(self.held)} node(s) held)")


def ready_status(node: Mapping[str, Any]) -> tuple[str, str | None]:
    """(the Ready condition's status, its lastTransitionTime); ("True", None) for a node without
    conditions (a manifest without status: offline planning)."""
    conds = (node.get("status") or {}).get("conditions") or []
    if not conds:
        return "True", None
    for c in conds:
        if isinstance(c, Mapping) and c.get("type") == "Ready":
            return str(c.get("status") or "Unknown"), c.get("lastTransitionTime")
    return "Unknown", None


def zone_state(ready: int, not_ready: int, threshold: float = UNHEALTHY_ZONE_THRESHOLD) -> str:
    """kube-controller-manager's ``ComputeZoneState`` (pkg/controller/nodelifecycle)."""
    if ready == 0 and not_ready > 0:
        return "FullDisruption"
    if not_ready > 2 and not_ready / (not_ready + ready) >= threshold:
        return "PartialDisruption"
    return "Normal"


def toleration_s(pod: Mapping[str, Any], taint: str) -> float:
    """How long ``pod`` tolerates the NoExecute ``taint`` (inf: forever); a pod that names no
    matching toleration counts the admission plugin's default."""
    best: float | None = None
    for t in (pod.get("spec") or {}).get("tolerations") or []:
        if not isinstance(t, Mapping) or t.get("effect") not in (None, "", "NoExecute"):
            continue
        if t.get("key") not in (None, "") and t.get("key") != taint:
            continue
        if t.get("key") in (None, "") and t.get("operator") != "Exists":
            continue
        secs = t.get("tolerationSeconds")
        try:
            s = math.inf if secs is None else max(float(secs), 0.0)
        except (TypeError, ValueError):
            continue
        best = s if best is None else max(best, s)
    return DEFAULT_TOLERATION_S if best is None else best


def _since(ts: str | None, now: datetime) -> float | None:
    if not ts:
        return None
    try:
        return (now - datetime.fromisoformat(ts.replace("Z", "+00:00"))).total_seconds()
    except (TypeError, ValueError):
        return None


def _pe_pods_by_node(pods: Iterable[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    """node -> its live PE pods (bound there, or planned there by their annotation)."""
    out: dict[str, list[Mapping[str, Any]]] = {}
    for p in pods:
        md = p.get("metadata") or {}
        if crd.LABEL_JOB not in (md.get("labels") or {}) or md.get("deletionTimestamp") or (p.get("status") or {}).get("phase") in TERMINAL:
            continue
        node = (p.get("spec") or {}).get("nodeName") or (md.get("annotations") or {}).get(crd.ANN_NODE)
        if node:
            out.setdefault(node, []).append(p)
    return out


def judge(nodes: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]], now: datetime) -> Disruption:
    """Which NotReady nodes are held at ``now`` and which zones are disrupted (module docstring)."""
    nodes = list(nodes)
    by_node = _pe_pods_by_node(pods)
    counts: dict[str, list[int]] = {}  # zone -> [ready, not ready]
    status: dict[str, tuple[str, str | None]] = {}
    for n in nodes:
        md = n.get("metadata") or {}
        name = md.get("name")
        if not name:
            continue
        st = status[name] = ready_status(n)
        zone = (md.get("labels") or {}).get(crd.ZONE_LABEL, "default")
        counts.setdefault(zone, [0, 0])[0 if st[0] == "True" else 1] += 1
    zones = {z: (s, bad, ok + bad) for z, (ok, bad) in counts.items() if (s := zone_state(ok, bad)) != "Normal"}
    held: dict[str, float] = {}
    for n in nodes:
        md = n.get("metadata") or {}
        name, zone = md.get("name"), (md.get("labels") or {}).get(crd.ZONE_LABEL, "default")
        if not name or status[name][0] == "True" or not by_node.get(name):
            continue
        mine = by_node[name]
        age = _since(status[name][1], now)
        grace = max(toleration_s(p, TAINT.get(status[name][0], TAINT["Unknown"])) for p in mine)
        if zone in zones or (age is not None and age < grace):
            mem = 0.0
            for p in mine:
                try:
                    mem += requests(dict(p))[1]
                except (ValueError, TypeError, ArithmeticError):
                    continue
            held[name] = mem
    return Disruption(held, frozenset(k for k, v in status.items() if v[0] != "True"), zones)


def keep(pods: list[dict[str, Any]], held: Mapping[str, float], wanted: set[tuple[str, str]]) -> list[dict[str, Any]]:
    """``pods`` without the PE pods on held nodes that are not ``wanted`` ((namespace, name)): what
    the applier may delete from. A pod left out is neither deleted nor created; it stays as it is."""
    if not held:
        return pods
    out = []
    for p in pods:
        md = p.get("metadata") or {}
        node = (p.get("spec") or {}).get("nodeName") or (md.get("annotations") or {}).get(crd.ANN_NODE)
        if node in held and (md.get("namespace"), md.get("name")) not in wanted:
            continue
        out.append(p)
    return out


def report(applier: Any, policy: Mapping[str, Any] | None, dis: Disruption, was_paused: bool) -> bool:
    """Say what ``dis`` means: the metrics, the SchedulingPolicy's ``NodesDisrupted`` condition
    (written when it changes; the other conditions kept), and an Event on the policy when deletions
    pause (Warning ``DeletionsPaused``) or resume (Normal ``DeletionsResumed``). Returns whether
    they are paused now (the next call's ``was_paused``)."""
    metrics.NODES_HELD.set(len(dis.held))
    metrics.DELETIONS_PAUSED.set(1 if dis.paused else 0)
    if dis.paused != was_paused:
        log.warning("deletions paused: %s", dis.message()) if dis.paused else log.info("deletions resumed: no zone is disrupted")
    if policy is None:
        return dis.paused
    md, old = policy.get("metadata") or {}, policy.get("status") or {}
    old_conds = [c for c in old.get("conditions") or [] if isinstance(c, Mapping)]
    mine = [c for c in old_conds if c.get("type") == CONDITION]
    if dis.paused or mine:  # a policy that never saw a disruption gets no condition (no write for nothing)
        cond = conditions.condition(CONDITION, dis.paused, "DeletionsPaused" if dis.paused else "NoDisruption",
                                    dis.message() or "no zone is disrupted: NotReady nodes keep their PE pods for their grace only",
                                    md.get("generation"), mine)
        if not conditions.same(mine, [cond]):
            applier.policy_status({"conditions": [c for c in old_conds if c.get("type") != CONDITION] + [cond]})
    if dis.paused != was_paused:
        obj = {"apiVersion": crd.API_VERSION, "kind": "SchedulingPolicy", "metadata": md}
        if dis.paused:
            applier.event(obj, "DeletionsPaused", dis.message(), "Warning")
        else:
            applier.event(obj, "DeletionsResumed", "no zone is disrupted any more: deletions on NotReady nodes resume after their grace", "Normal")
    return dis.paused
