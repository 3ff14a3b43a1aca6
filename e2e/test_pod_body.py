"""The PE pod the operator writes (apply.pod_body), against the real API server and kube-scheduler.

Its node affinity names the candidate nodes as ``matchFields metadata.name``, one term per node: the
API server accepts one value per such requirement (a single term with several values is refused
with 422), and the terms are ORed, so the pod may land on any candidate and on nothing else.
"""

from __future__ import annotations

import random

from soda_operator.soda.apply import Instance, pod_body


def _instance(ns: str, job: str, node: str, candidates: tuple[str, ...]) -> Instance:
    return Instance(namespace=ns, job=job, pe="pe", node=node, fraction=0.01, cores=4.0, candidates=candidates,
                    spec={}, owner={})


def test_pod_with_several_candidates_is_valid_and_stays_on_them(kube, namespace, wait_for):
    nodes = sorted(n.metadata.name for n in kube.core.list_node().items if "kwok.x-k8s.io/node" in (n.metadata.annotations or {}))
    assert len(nodes) >= 4, nodes
    rng = random.Random(7)
    placed: dict[str, tuple[str, ...]] = {}
    for i in range(6):
        cands = tuple(sorted(rng.sample(nodes, 3)))
        body = pod_body(_instance(namespace, f"j{i}", cands[0], cands))
        terms = body["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        assert len(terms) == 3
        # the exact body, as the operator sends it: the API server's validation accepts it
        kube.core.create_namespaced_pod(namespace, body, dry_run="All")
        # the same affinity through the plain scheduler (no extender picks the node): only candidates are feasible
        body["spec"]["schedulerName"] = "default-scheduler"
        kube.core.create_namespaced_pod(namespace, body)
        placed[body["metadata"]["name"]] = cands

    def bound() -> dict[str, str] | None:
        got = {p.metadata.name: p.spec.node_name for p in kube.core.list_namespaced_pod(namespace).items}
        return got if len(got) == len(placed) and all(got.values()) else None

    got = wait_for(bound, timeout=60, what="the pods bound")
    assert all(got[name] in cands for name, cands in placed.items()), (got, placed)
