"""Resizes that are refused or pending are known (issue 46).

A PE instance's CPU changes in place through the pod ``resize`` subresource. The API server may
refuse the request (an admission policy on ``pods/resize``, a quota: 4xx), and a kubelet may accept it
and not do it yet (the pod condition ``PodResizePending``, reason ``Deferred`` while the node lacks
room, ``Infeasible`` when it never will; ``PodResizeInProgress`` while it is being done). Before,
a refused resize was sent again every micro epoch forever (96 requests answered 422 in 45 s for 6
pods), each logged at ERROR with the whole body, and the job's status claimed the fractions planned.

- :class:`Backoff`: per pod, a refused resize to a given CPU waits 10 s, then 20, 40 ... at most
  300 s before it is sent again (a new target is sent at once); the first refusal of a target is
  logged once and posted as a Warning Event ``ResizeRefused`` on the job;
- :func:`in_force`: the CPU limit a pod holds, from its container status when the kubelet reports
  one (``status.containerStatuses[].resources``), else from its spec (a refused resize left it as it
  was); :func:`.crd.previous_from` reads the fraction in force from it, so the planner counts what
  the pod holds, not what it asked for;
- :func:`with_resizes`: the job's status lists each instance with the fraction in force and gets a
  condition ``Resized`` (False, reason ``ResizeRefused`` or ``ResizePending``, naming the pods) while
  any instance's CPU is not what the plan says; True (``AsPlanned``) once it is again.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..kube import metrics, quantities
from ..kube.pods import LABEL_JOB

BASE_S = 10.0
CAP_S = 300.0
CONDITION = "Resized"
PENDING = ("PodResizePending", "PodResizeInProgress")


@dataclass
class Refusal:
    job: str  # namespace/name
    target_m: int  # the CPU limit asked for, millicores
    attempts: int
    until: float  # not sent again before (monotonic)
    message: str


class Backoff:
    """Refused resizes per pod (namespace, name); thread-safe (the apply workers record)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, base_s: float = BASE_S, cap_s: float = CAP_S):
        self.clock, self.base_s, self.cap_s = clock, base_s, cap_s
        self._lock = threading.Lock()
        self.refused: dict[tuple[str, str], Refusal] = {}

    def due(self, key: tuple[str, str], target_m: int) -> bool:
        """Whether a resize of ``key`` to ``target_m`` may be sent now."""
        r = self.refused.get(key)
        return r is None or r.target_m != target_m or self.clock() >= r.until

    def refuse(self, key: tuple[str, str], job: str, target_m: int, message: str) -> bool:
        """Record a refusal; True when it is the first of this target (worth a log line and an Event)."""
        with self._lock:
            r = self.refused.get(key)
            n = r.attempts + 1 if r is not None and r.target_m == target_m else 1
            self.refused[key] = Refusal(job, target_m, n, self.clock() + min(self.cap_s, self.base_s * 2 ** (n - 1)), message)
            return n == 1

    def done(self, key: tuple[str, str]) -> None:
        if key in self.refused:
            with self._lock:
                self.refused.pop(key, None)

    def keep_only(self, keys: Iterable[tuple[str, str]]) -> None:
        """Forget the pods that are gone."""
        live = set(keys)
        with self._lock:
            for k in [k for k in self.refused if k not in live]:
                del self.refused[k]


def message_of(body: Any, status: int | None, reason: str | None) -> str:
    """The API server's ``message`` of a refusal (a Status object), not the whole body."""
    import json

    try:
        msg = json.loads(body).get("message") if body else None
    except (TypeError, ValueError, AttributeError):
        msg = None
    return f"{status} {reason}: {msg or body or ''}"[:500]


def in_force(pod: Mapping[str, Any]) -> int | None:
    """Millicores of CPU limit the pod's (first) container holds: the kubelet's report when there is
    one, else the spec's."""
    cs = ((pod.get("status") or {}).get("containerStatuses") or [{}])[0] or {}
    actual = ((cs.get("resources") or {}).get("limits") or {}).get("cpu")
    if actual is None:
        containers = (pod.get("spec") or {}).get("containers") or [{}]
        actual = (((containers[0] or {}).get("resources") or {}).get("limits") or {}).get("cpu")
    try:
        return quantities.millicores(actual) if actual is not None else None
    except (TypeError, ValueError, ArithmeticError):
        return None


def asked(pod: Mapping[str, Any]) -> int | None:
    """Millicores of CPU limit the pod's spec asks for."""
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    cpu = (((containers[0] or {}).get("resources") or {}).get("limits") or {}).get("cpu")
    try:
        return quantities.millicores(cpu) if cpu is not None else None
    except (TypeError, ValueError, ArithmeticError):
        return None


def pending(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    """(reason, message) of a resize the kubelet has not done: ``PodResizePending`` (its reason,
    Deferred or Infeasible) or ``PodResizeInProgress``; None when none is pending."""
    for c in (pod.get("status") or {}).get("conditions") or []:
        if isinstance(c, Mapping) and c.get("type") in PENDING and c.get("status") == "True":
            return (str(c.get("reason") or ("InProgress" if c["type"] == "PodResizeInProgress" else "Pending")), str(c.get("message") or ""))
    return None


def problems(backoff: Backoff, pods: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """job (namespace/name) -> pod -> {reason, message, inForce (millicores)} for every PE pod whose
    CPU is not what was asked: a refused resize (the backoff's record) or one pending on the node."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    seen = []
    for p in pods:
        md = p.get("metadata") or {}
        job = (md.get("labels") or {}).get(LABEL_JOB)
        if job is None or md.get("deletionTimestamp"):
            continue
        key = (md.get("namespace", ""), md.get("name", ""))
        seen.append(key)
        jk = f"{key[0]}/{job}"
        r = backoff.refused.get(key)
        if r is not None:
            out.setdefault(jk, {})[key[1]] = {"reason": "Refused", "message": r.message, "inForce": in_force(p), "asked": r.target_m}
            continue
        why = pending(p)
        if why is not None:
            out.setdefault(jk, {})[key[1]] = {"reason": why[0], "message": why[1], "inForce": in_force(p), "asked": asked(p)}
    backoff.keep_only(seen)
    return out


def with_resizes(status: dict[str, Any], old: Mapping[str, Any] | None, mine: Mapping[str, Mapping[str, Any]] | None,
                 cores: Mapping[str, float], generation: int | None) -> dict[str, Any]:
    """``status`` with each instance's fraction in force (``mine``: pod -> problem, :func:`problems`)
    and the ``Resized`` condition: False while a resize is refused or pending, True once none is (only
    for a job that had the condition: nothing is added to a job that never had a problem)."""
    had = any(c.get("type") == CONDITION for c in (old or {}).get("conditions") or [] if isinstance(c, Mapping))
    if not mine and not had:
        return status
    names = []
    for pe in status.get("pes") or []:
        for inst in pe.get("instances") or []:
            prob = (mine or {}).get(inst.get("pod", ""))
            if prob is None:
                continue
            names.append(f"{inst['pod']} ({prob['reason']}{': ' + prob['message'][:120] if prob['message'] else ''})")
            c = cores.get(inst.get("node", ""), 0.0)
            if prob.get("inForce") is not None and c > 0:
                inst["fraction"] = round(prob["inForce"] / (c * 1000), 6)
    refused = any(p["reason"] == "Refused" for p in (mine or {}).values())
    cond: dict[str, Any] = {"type": CONDITION, "status": "False" if names else "True",
                            "reason": ("ResizeRefused" if refused else "ResizePending") if names else "AsPlanned",
                            "message": ("CPU not as planned, the fractions in force are listed: " + "; ".join(sorted(names)))[:1000] if names else ""}
    if generation is not None:
        cond["observedGeneration"] = generation
    status["conditions"] = [c for c in status.get("conditions") or [] if c.get("type") != CONDITION] + [cond]
    return status


def count(found: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> None:
    """``kubesoda_resizes_not_in_force{reason}`` of :func:`problems`' answer."""
    by: dict[str, int] = {}
    for pods in found.values():
        for p in pods.values():
            by[p["reason"]] = by.get(p["reason"], 0) + 1
    metrics.RESIZES_NOT_IN_FORCE.clear()
    for reason, n in by.items():
        metrics.RESIZES_NOT_IN_FORCE.labels(reason).set(n)
