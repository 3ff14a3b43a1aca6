"""The cluster as one epoch sees it: a consistent snapshot of the objects kubesoda reads.

A macro or micro epoch starts from a :class:`Snapshot` (nodes, templates, jobs, the policy, PE
pods and Services), translated by :mod:`.crd` into the optimizer's Scenario. The loop timing reads
the policy's epochs through :func:`epochs`, which never fails (a bad policy: the defaults).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Protocol, cast

from kubernetes import client

from ..kube.api import list_json
from ..kube.pods import TERMINAL, requests
from . import crd, disruption

MIN_EPOCH_S = 1.0  # no policy makes an epoch shorter: it would only load the API server


@dataclass
class Snapshot:
    nodes: list[dict[str, Any]]
    templates: list[dict[str, Any]]
    jobs: list[dict[str, Any]]
    policy: dict[str, Any] | None
    pods: list[dict[str, Any]]
    # kubesoda's Services (labelled with a job, owned by a StreamJob): (namespace, name) -> the job label
    services: dict[tuple[str, str], str] = field(default_factory=dict)
    # node -> (pod, CPU cores, memory bytes) requested by the other workloads' pods bound to it
    foreign: dict[str, list[tuple[str, float, float]]] = field(default_factory=dict)
    _disruption: disruption.Disruption | None = field(default=None, init=False, repr=False, compare=False)

    def disruption(self) -> disruption.Disruption:
        """Which NotReady nodes keep their PE pods and which zones are disrupted (:mod:`.disruption`),
        judged once per snapshot, at the time it is first asked."""
        if self._disruption is None:
            self._disruption = disruption.judge(self.nodes, self.pods, datetime.now(UTC))
        return self._disruption

    def scenario(self, source: dict[str, str] | None = None, quarantined: dict[str, str] | None = None
                 ) -> tuple[Any, list[crd.ObjectError]]:
        """The Scenario of this snapshot (:func:`.crd.scenario_from_objects`), without the jobs the
        pipeline guard set aside (``quarantined``: job -> why), its held nodes keeping their PE pods."""
        return crd.scenario_from_objects(self.nodes, self.templates, self.jobs, self.policy, self.pods, source, self.foreign,
                                         now=datetime.now(UTC), quarantined=quarantined, held_nodes=self.disruption().held)


def merge_patch(old: Any, patch: Any) -> Any:
    """``patch`` applied to ``old`` as a JSON merge patch (RFC 7386) applies it: what the API server
    makes of a status written with one."""
    if not isinstance(patch, Mapping):
        return patch
    out = dict(old) if isinstance(old, Mapping) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


class Pending(Protocol):
    def pending(self, indexed: Any = None) -> dict[tuple[str, str], Any]: ...


def with_own_writes(snap: Snapshot, pods: Pending, services: Pending, written: Mapping[tuple[str, str, str], dict[str, Any]]) -> Snapshot:
    """``snap`` with what this replica wrote and the watches may not show yet: each pod whose create
    is in flight (``pods.pending``: those not in ``snap.pods``) as a pending pod, each Service
    likewise (``services``), and each job's status as this replica last wrote it (``written``, keyed
    by namespace, name and UID) merged onto the one the snapshot holds. The snapshot's objects are
    the indexes' own: new ones are made, none is changed."""
    indexed = {((p.get("metadata") or {}).get("namespace", ""), (p.get("metadata") or {}).get("name", "")) for p in snap.pods}
    extra = list(pods.pending(indexed).values())
    more_services = services.pending(snap.services)
    jobs = snap.jobs
    if written:
        jobs = []
        for j in snap.jobs:
            md = j.get("metadata") or {}
            mine = written.get((md.get("namespace", ""), md.get("name", ""), md.get("uid", "")))
            jobs.append(j if mine is None else {**j, "status": merge_patch(j.get("status"), mine)})
    if not extra and not more_services and jobs is snap.jobs:
        return snap
    return replace(snap, pods=snap.pods + extra if extra else snap.pods, jobs=jobs,
                   services={**snap.services, **more_services} if more_services else snap.services)


def owned_by_job(owner_references: Any) -> bool:
    """Whether a StreamJob is among an object's ``metadata.ownerReferences`` (kubesoda made it:
    it may delete it)."""
    return any(isinstance(r, Mapping) and r.get("kind") == "StreamJob" and str(r.get("apiVersion", "")).startswith(f"{crd.GROUP}/")
               for r in owner_references or [])


def foreign_requests(pods: list[dict[str, Any]]) -> dict[str, list[tuple[str, float, float]]]:
    """node -> (pod, cores, bytes) of the bound, unfinished pods that kubesoda does not manage."""

    out: dict[str, list[tuple[str, float, float]]] = {}
    for p in pods:
        md, sp = p.get("metadata") or {}, p.get("spec") or {}
        if crd.LABEL_JOB in (md.get("labels") or {}) or not sp.get("nodeName") or (p.get("status") or {}).get("phase") in TERMINAL:
            continue
        try:
            cpu, mem = requests(p)
        except (ValueError, TypeError):
            continue
        out.setdefault(sp["nodeName"], []).append((f"{md.get('namespace')}/{md.get('name')}", cpu, mem))
    return out


def get_policy(custom: client.CustomObjectsApi) -> dict[str, Any] | None:
    try:
        return cast(dict[str, Any], custom.get_cluster_custom_object(crd.GROUP, crd.VERSION, "schedulingpolicies", "default"))
    except client.ApiException as e:
        if e.status != 404:
            raise
        return None


def take(core: client.CoreV1Api, custom: client.CustomObjectsApi) -> Snapshot:
    """A snapshot by listing (``kubesoda status``, tests, an operator without its indexes): the
    operator's epochs read the watch-fed indexes instead (:mod:`.indexes`)."""
    nodes = list_json(core.list_node)
    templates = cast(dict[str, Any], custom.list_cluster_custom_object(crd.GROUP, crd.VERSION, "streamtemplates"))["items"]
    jobs = cast(dict[str, Any], custom.list_cluster_custom_object(crd.GROUP, crd.VERSION, "streamjobs"))["items"]
    policy = get_policy(custom)
    pods = list_json(core.list_pod_for_all_namespaces, label_selector=crd.LABEL_JOB)
    services = {(v["metadata"]["namespace"], v["metadata"]["name"]): v["metadata"]["labels"][crd.LABEL_JOB]
                for v in list_json(core.list_service_for_all_namespaces, label_selector=crd.LABEL_JOB) if owned_by_job(v["metadata"].get("ownerReferences"))}
    others = list_json(core.list_pod_for_all_namespaces, label_selector=f"!{crd.LABEL_JOB}",
                       field_selector="spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed")
    return Snapshot(nodes, templates, jobs, policy, pods, services, foreign_requests(others))


def epochs(policy: dict[str, Any] | None) -> tuple[float, float]:
    """(macro, micro) epoch seconds of a SchedulingPolicy object, at least MIN_EPOCH_S each."""
    try:
        pol, _ = crd.policy_from_object(policy)
    except crd.TranslationError:
        pol, _ = crd.policy_from_object(None)  # reported by the epoch's translation; the loop keeps the defaults
    return max(pol.macro_epoch_s, MIN_EPOCH_S), max(pol.micro_epoch_s, MIN_EPOCH_S)
