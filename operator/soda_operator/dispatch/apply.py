"""The dispatcher's writes (Lin 2014, 3.5.3 "Dispatcher": the workers run the jobs the decision maker's plan
gives them; 4.4: a failed worker's task is redone): a decision's releases and deletions (docs/dispatch.md,
"Release" and "Failures"). Its Events go through :mod:`..kube.events` (:mod:`.handlers`).

- release: ``nodeSelector kubernetes.io/hostname: <node>`` and the annotations ``kubesoda.io/dispatch-node`` and
  ``-class`` are set while the pod is gated (a merge patch), then the gate is removed (a JSON patch of the gate
  list), so the default scheduler binds the pod there;
- redispatch: a released task on a failed node is deleted (grace 0); its Job recreates it, gated.

A pod gone meanwhile (404) is skipped; any other refusal is logged and the next decision tries again.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from .decide import Decision
from .objects import ANN_CLASS, ANN_NODE, GATE

log = logging.getLogger("kubesoda.dispatch")
HOSTNAME = "kubernetes.io/hostname"


def release(pod: Mapping[str, Any], node: str, node_class: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The two patches that release a gated pod onto ``node``: the merge patch (node selector, annotations), then
    the JSON patch of its gates without kubesoda's."""
    spec = pod.get("spec") or {}
    gates = [g for g in spec.get("schedulingGates") or [] if g.get("name") != GATE]
    body = {"metadata": {"annotations": {ANN_NODE: node, ANN_CLASS: node_class}},
            "spec": {"nodeSelector": {**(spec.get("nodeSelector") or {}), HOSTNAME: node}}}
    return body, [{"op": "replace", "path": "/spec/schedulingGates", "value": gates}]


def apply(core: client.CoreV1Api, namespace: str, decision: Decision, pods: Mapping[str, Mapping[str, Any]],
          classes: Mapping[str, str]) -> dict[str, int]:
    """Write a decision: release (nodeSelector + annotations while gated, then the gate removed), delete lost."""
    done = {"placed": 0, "deleted": 0}
    for name, node in decision.place.items():
        merge, gates = release(pods[name], node, classes.get(node, "default"))
        try:
            core.patch_namespaced_pod(name, namespace, merge)
            core.patch_namespaced_pod(name, namespace, gates)
            done["placed"] += 1
        except ApiException as e:
            if e.status != 404:
                log.error("releasing %s/%s onto %s failed: %s", namespace, name, node, e.reason)
    for name in decision.delete:
        try:
            core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
            done["deleted"] += 1
        except ApiException as e:
            if e.status != 404:
                log.error("deleting %s/%s failed: %s", namespace, name, e.reason)
    return done

