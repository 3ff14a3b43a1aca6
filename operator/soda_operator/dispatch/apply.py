"""The dispatcher's writes (Lin 2014, 3.5.3 "Dispatcher": the workers run the jobs the decision maker's plan
gives them; 4.4: a failed worker's task is redone, and "kill some low priority running tasks"): a decision's
evictions, releases and deletions (docs/dispatch.md, "Release", "Preemption" and "Failures"). Its Events go
through :mod:`..kube.events` (:mod:`.handlers`).

- evict (``spec.preemption`` only): a running task whose slot the plan gives to another Job is evicted through the
  Eviction API, so PodDisruptionBudgets hold; its Job recreates it gated. A refusal (429: a budget allows no
  disruption now) is reported (``blocked``) and the next decision plans again with the pod where it is;
- release: a required node affinity on the Node's name (``matchFields metadata.name In [node]``, added to each of
  the pod's own required terms if it has some, the one change the API server allows to a gated pod's scheduling
  constraints; ``kubernetes.io/hostname`` need not equal the Node's name) and the annotations
  ``kubesoda.io/dispatch-node`` and ``-class`` are set while the pod is gated (a merge patch), then the gate is
  removed (a JSON patch of the gate list), so the default scheduler binds the pod there;
- redispatch: a released task on a failed node is deleted (grace 0); its Job recreates it, gated.

A pod gone meanwhile (404) is skipped; any other refusal is logged and the next decision tries again.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from ..kube.pods import evict, pinned_affinity
from .decide import Decision
from .objects import ANN_CLASS, ANN_NODE, GATE

log = logging.getLogger("kubesoda.dispatch")


def release(pod: Mapping[str, Any], node: str, node_class: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The two patches that release a gated pod onto ``node``: the merge patch (node affinity by name,
    annotations), then the JSON patch of its gates without kubesoda's."""
    spec = pod.get("spec") or {}
    gates = [g for g in spec.get("schedulingGates") or [] if g.get("name") != GATE]
    body = {"metadata": {"annotations": {ANN_NODE: node, ANN_CLASS: node_class}},
            "spec": {"affinity": pinned_affinity(dict(pod), node)}}
    return body, [{"op": "replace", "path": "/spec/schedulingGates", "value": gates}]


def apply(core: client.CoreV1Api, namespace: str, decision: Decision, pods: Mapping[str, Mapping[str, Any]],
          classes: Mapping[str, str]) -> dict[str, Any]:
    """Write a decision: evict (Eviction API), release (node affinity + annotations while gated, then the gate
    removed), delete the lost. Returns the counts placed, evicted and deleted, the pods released (``released``: pod
    -> node) and the evictions refused (``blocked``: pod -> why)."""
    done: dict[str, Any] = {"placed": 0, "evicted": 0, "deleted": 0, "released": {}, "blocked": {}}
    for name in decision.evict:
        evicted, why = evict(core, namespace, name)
        done["evicted"] += evicted
        if why is not None:
            done["blocked"][name] = why
    for name, node in decision.place.items():
        merge, gates = release(pods[name], node, classes.get(node, "default"))
        try:
            core.patch_namespaced_pod(name, namespace, merge)
            core.patch_namespaced_pod(name, namespace, gates)
            done["placed"] += 1
            done["released"][name] = node
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
