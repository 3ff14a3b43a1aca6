"""The member clusters: API clients from the FlowPools' kubeconfig Secrets, and a flow's step Jobs read there
(Montana & Zinky, section 2.2: a cluster with its own manager and local scheduler; here another Kubernetes
cluster, reached the way MultiKueue reaches its workers: a kubeconfig in a Secret of the operator's namespace).

Secrets are read only in the operator's namespace and kubeconfigs may hold only inline credentials unless the
operator runs with ``--allow-unsafe-kubeconfigs`` (:mod:`.kubeconfigs`). A member cluster that cannot be reached
does not stop the others: :func:`step_jobs` reports it by pool.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Mapping
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from . import kubeconfigs
from .jobs import LABEL_FLOW, StepJob, step_job_of
from .spec import FlowSpec, PoolSpec


class Members:
    """API clients of the member clusters, from their kubeconfig Secrets (re-read every ``ttl``
    seconds). Secrets are read only in ``namespace`` (the operator's) and kubeconfigs hold only
    inline credentials unless ``allow_unsafe`` (:mod:`.kubeconfigs`)."""

    def __init__(self, core: client.CoreV1Api, ttl: float = 30.0, namespace: str | None = None, allow_unsafe: bool = False):
        self.core = core
        self.ttl = ttl
        self.namespace = kubeconfigs.operator_namespace(namespace)
        self.allow_unsafe = allow_unsafe
        self.cache: dict[tuple[str, str, str], tuple[float, str, client.ApiClient]] = {}
        self.namespaces: set[tuple[str, str]] = set()

    def api(self, ref: tuple[str, str, str]) -> client.ApiClient:
        ns = ref[0] or self.namespace
        if ns != self.namespace:
            raise kubeconfigs.Refused(f"Secret {ns}/{ref[1]}: kubeconfig Secrets are read only from the operator's namespace "
                                      f"{self.namespace} (spec.cluster.kubeconfigSecret.namespace)")
        hit = self.cache.get(ref)
        if hit and time.monotonic() - hit[0] < self.ttl:
            return hit[2]
        sec = self.core.read_namespaced_secret(ref[1], ns)
        raw = (sec.data or {}).get(ref[2])
        if not raw:
            raise ValueError(f"Secret {ns}/{ref[1]} has no key {ref[2]}")
        rv = (sec.metadata.resource_version if sec.metadata else None) or ""
        if hit and hit[1] == rv:
            self.cache[ref] = (time.monotonic(), rv, hit[2])
            return hit[2]
        try:
            api = kubeconfigs.api_client(base64.b64decode(raw), self.allow_unsafe)
        except kubeconfigs.Refused as e:
            raise kubeconfigs.Refused(f"Secret {ns}/{ref[1]} key {ref[2]}: {e}") from e
        self.cache[ref] = (time.monotonic(), rv, api)
        return api

    def batch(self, pool: PoolSpec) -> client.BatchV1Api:
        assert pool.kubeconfig is not None
        return client.BatchV1Api(self.api(pool.kubeconfig))

    def ensure_namespace(self, pool: PoolSpec, ns: str) -> None:
        if (pool.name, ns) in self.namespaces:
            return
        assert pool.kubeconfig is not None
        core = client.CoreV1Api(self.api(pool.kubeconfig))
        try:
            core.create_namespace({"metadata": {"name": ns}})  # type: ignore[arg-type]  # a dict is sent as it is
        except ApiException as e:
            if e.status != 409:
                raise
        self.namespaces.add((pool.name, ns))


def step_jobs(members: Members, flow: FlowSpec, pools: Mapping[str, PoolSpec]) -> tuple[list[StepJob], dict[tuple[str, str], dict[str, Any]], dict[str, str]]:
    """The flow's step Jobs in every member cluster its steps may use; unreachable pools with the reason."""
    steps: list[StepJob] = []
    bodies: dict[tuple[str, str], dict[str, Any]] = {}
    errors: dict[str, str] = {}
    seen: set[tuple[str, str, str]] = set()
    for pname in sorted({p for s in flow.steps for p in s.pools}):
        pool = pools.get(pname)
        if pool is None or pool.kubeconfig is None or pool.kubeconfig in seen:
            continue
        seen.add(pool.kubeconfig)
        try:
            api = members.batch(pool)
            items = api.list_namespaced_job(flow.namespace, label_selector=f"{LABEL_FLOW}={flow.name}").items
        except Exception as e:  # noqa: BLE001  (an unreachable member must not stop the others)
            errors[pname] = str(getattr(e, "reason", None) or e)[:200]
            continue
        for it in items:
            body = api.api_client.sanitize_for_serialization(it)
            sj = step_job_of(body, pool.cluster)
            if sj is not None:
                steps.append(sj)
                bodies[(pool.cluster, sj.name)] = body
    return steps, bodies, errors

