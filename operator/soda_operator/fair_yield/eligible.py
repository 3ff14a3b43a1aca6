"""The nodes a pod of a YieldGroup may use, from its own constraints (issue 47): its ``nodeSelector``, its
required node affinity (``requiredDuringSchedulingIgnoredDuringExecution``: terms ORed, each term's
``matchExpressions`` and ``matchFields`` ANDed) and the node's taints against its tolerations (``NoSchedule``
and ``NoExecute``; ``PreferNoSchedule`` is a preference). The allocator then keeps every task on its nodes
(:attr:`soda_optimizer.fair_yield.Job.hosts`); a pod no node admits is reported and left gated.

This is the default scheduler's NodeAffinity and TaintToleration filters (k8s.io/component-helpers
``nodeaffinity``, ``v1helper.TolerationsTolerateTaint``) restated, because the scheduler binds a released pod
only where they pass: a plan elsewhere leaves it Pending for good. Cordoned and NotReady nodes are not
offered at all (:func:`.decide.hosts_for`: node loss). Not read: preferred affinity, pod (anti-)affinity and
topology spread, which the scheduler also checks (a pod they keep Pending is detected and re-planned:
:mod:`.decide`).

The requirement kubesoda itself adds when it releases a pod (``matchFields metadata.name In [node]``,
:func:`..kube.pods.pinned_affinity`) is not the pod's own: :func:`constraints` drops it, so a released pod's
constraints are those it was created with.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..kube.pods import FIELD

EFFECTS = ("NoSchedule", "NoExecute")  #: taint effects that keep a pod off a node


@dataclass(frozen=True)
class Constraints:
    """What a pod asks of its node (empty: any node)."""

    selector: Mapping[str, str] = field(default_factory=dict)
    terms: tuple[Mapping[str, Any], ...] | None = None  # required node affinity terms (None: no requirement)
    tolerations: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True)
class NodeFacts:
    """What a node shows a pod: its name, labels and taints."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Mapping[str, Any], ...] = ()


def facts(node: Mapping[str, Any]) -> NodeFacts:
    md, sp = node.get("metadata") or {}, node.get("spec") or {}
    return NodeFacts(md.get("name", ""), dict(md.get("labels") or {}), tuple(t for t in sp.get("taints") or [] if isinstance(t, Mapping)))


def _is_pin(req: Mapping[str, Any], pinned: str | None) -> bool:
    return pinned is not None and req.get("key") == FIELD and req.get("operator") == "In" and list(req.get("values") or []) == [pinned]


def constraints(spec: Mapping[str, Any], pinned: str | None = None) -> Constraints:
    """A pod's constraints from its ``spec``; ``pinned``: the node kubesoda pinned it to (that requirement is
    dropped, and a term that held only it was kubesoda's own)."""
    selector = {str(k): str(v) for k, v in (spec.get("nodeSelector") or {}).items()}
    na = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
    terms: tuple[Mapping[str, Any], ...] | None = None
    if isinstance(na, Mapping):
        own = []
        for t in na.get("nodeSelectorTerms") or []:
            fields = [r for r in t.get("matchFields") or [] if not _is_pin(r, pinned)]
            exprs = list(t.get("matchExpressions") or [])
            dropped = len(fields) != len(t.get("matchFields") or [])
            if exprs or fields or not dropped:
                own.append({"matchExpressions": exprs, "matchFields": fields})
        terms = tuple(own) if own or pinned is None else None
    tolerations = tuple(t for t in spec.get("tolerations") or [] if isinstance(t, Mapping))
    return Constraints(selector, terms, tolerations)


def _requirement(req: Mapping[str, Any], value: str | None) -> bool:
    op, values = req.get("operator"), [str(v) for v in req.get("values") or []]
    if op == "In":
        return value is not None and value in values
    if op == "NotIn":
        return value is None or value not in values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt") and value is not None and len(values) == 1:
        try:
            have, want = int(value), int(values[0])
        except ValueError:
            return False
        return have > want if op == "Gt" else have < want
    return False


def _term(term: Mapping[str, Any], node: NodeFacts) -> bool:
    exprs, fields = term.get("matchExpressions") or [], term.get("matchFields") or []
    if not exprs and not fields:
        return False  # an empty term matches no node
    return all(_requirement(r, node.labels.get(str(r.get("key")))) for r in exprs) and all(
        _requirement(r, node.name if r.get("key") == FIELD else None) for r in fields)


def tolerates(tolerations: Sequence[Mapping[str, Any]], taint: Mapping[str, Any]) -> bool:
    """Some toleration tolerates ``taint`` (the scheduler's rule: an empty key with Exists tolerates every
    taint; an empty effect every effect; operator Equal, the default, compares the value)."""
    for t in tolerations:
        effect = t.get("effect") or ""
        if effect and effect != taint.get("effect"):
            continue
        key, op = t.get("key") or "", t.get("operator") or "Equal"
        if key and key != taint.get("key"):
            continue
        if op == "Exists" or (op == "Equal" and str(t.get("value") or "") == str(taint.get("value") or "")):
            return True
    return False


def why_not(c: Constraints, node: NodeFacts) -> str | None:
    """Why a pod with constraints ``c`` cannot use ``node`` (the scheduler's words), None when it can."""
    for taint in node.taints:
        if taint.get("effect") in EFFECTS and not tolerates(c.tolerations, taint):
            value = f"={taint.get('value')}" if taint.get("value") else ""
            return f"untolerated taint {taint.get('key')}{value}:{taint.get('effect')}"
    if any(node.labels.get(k) != v for k, v in c.selector.items()):
        return "nodeSelector"
    if c.terms is not None and not any(_term(t, node) for t in c.terms):
        return "node affinity"
    return None


def summary(reasons: Mapping[str, str]) -> str:
    """``{node: why}`` as the scheduler says it: ``0/3 nodes: 2 untolerated taint ..., 1 nodeSelector``."""
    counts: dict[str, int] = {}
    for why in reasons.values():
        counts[why] = counts.get(why, 0) + 1
    parts = ", ".join(f"{k} {why}" for why, k in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
    return f"0/{len(reasons)} nodes admit it" + (f": {parts}" if parts else "")
