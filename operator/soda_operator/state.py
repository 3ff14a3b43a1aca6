"""The cluster as one epoch sees it: a consistent snapshot of the objects kubesoda reads.

A macro or micro epoch starts from a :class:`Snapshot` (nodes, templates, jobs, the policy, PE
pods and Services), translated by :mod:`.crd` into the optimizer's Scenario. The loop timing reads
the policy's epochs through :func:`epochs`, which never fails (a bad policy: the defaults).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kubernetes import client

from . import crd
from .apply import list_json

MIN_EPOCH_S = 1.0  # no policy makes an epoch shorter: it would only load the API server


@dataclass
class Snapshot:
    nodes: list[dict[str, Any]]
    templates: list[dict[str, Any]]
    jobs: list[dict[str, Any]]
    policy: dict[str, Any] | None
    pods: list[dict[str, Any]]
    services: set[tuple[str, str]] = field(default_factory=set)  # (namespace, name) of kubesoda's Services


def get_policy(custom: client.CustomObjectsApi) -> dict[str, Any] | None:
    try:
        return custom.get_cluster_custom_object(crd.GROUP, crd.VERSION, "schedulingpolicies", "default")  # type: ignore[no-any-return]
    except client.ApiException as e:
        if e.status != 404:
            raise
        return None


def take(core: client.CoreV1Api, custom: client.CustomObjectsApi) -> Snapshot:
    nodes = list_json(core.list_node)
    templates = custom.list_cluster_custom_object(crd.GROUP, crd.VERSION, "streamtemplates")["items"]
    jobs = custom.list_cluster_custom_object(crd.GROUP, crd.VERSION, "streamjobs")["items"]
    policy = get_policy(custom)
    pods = list_json(core.list_pod_for_all_namespaces, label_selector=crd.LABEL_JOB)
    services = {(v["metadata"]["namespace"], v["metadata"]["name"])
                for v in list_json(core.list_service_for_all_namespaces, label_selector=crd.LABEL_JOB)}
    return Snapshot(nodes, templates, jobs, policy, pods, services)


def epochs(policy: dict[str, Any] | None) -> tuple[float, float]:
    """(macro, micro) epoch seconds of a SchedulingPolicy object, at least MIN_EPOCH_S each."""
    try:
        pol, _ = crd.policy_from_object(policy)
    except crd.TranslationError:
        pol, _ = crd.policy_from_object(None)  # reported by the epoch's translation; the loop keeps the defaults
    return max(pol.macro_epoch_s, MIN_EPOCH_S), max(pol.micro_epoch_s, MIN_EPOCH_S)
