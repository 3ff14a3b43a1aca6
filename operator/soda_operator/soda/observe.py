"""Observation: what the PE instances really do, read from Prometheus every micro epoch.

The operator asks a Prometheus server (``kubesoda run --prometheus-url``) three aggregated queries
per micro epoch (five with the learner's two), whatever the cluster's size (docs/pe-metrics.md is the contract the series follow,
from the PE SDK on real pods or from ``kubesoda simulate`` on KWOK):

- tuples/s received and emitted per (namespace, pod, stream), ``rate()`` over the
  SchedulingPolicy's ``observation.windowSeconds`` (default 30);
- CPU cores used per pod (cAdvisor's ``container_cpu_usage_seconds_total``, container ``pe``),
  turned into mips with the pod's node's mips-per-core;
- for the learner (issue 38), per input stream: tuples/s that arrived in the PEs' input queues
  (the rate offered, which exceeds the received rate by the queue's growth) and the share of the
  window the input waited on a full queue (the offered rate then a lower bound). A PE without
  these series (an SDK before them, a simulator) reports none: the learner then falls back.

**Attribution (issue 45).** A series counts for the pod Prometheus scraped it from, never for the
labels the PE put on it: the queries group by ``namespace`` and ``pod`` only, the labels the
scrape attaches from service discovery (the chart's PodMonitor: ``honorLabels: false`` and
relabelings from ``__meta_kubernetes_namespace`` / ``__meta_kubernetes_pod_name``, so a
``namespace`` or ``pod`` label the PE exports itself is renamed ``exported_namespace`` /
``exported_pod`` and summed away), and :func:`pe_observations` maps that (namespace, pod) to its
job and PE through the operator's own pod index (the ``kubesoda.io/job`` / ``kubesoda.io/pe``
labels it set on the pods it created). The ``streamjob`` and ``pe`` labels a PE exports are not
read; a series of a pod that is not a PE pod in the index counts for nobody; the ``stream`` label
names a stream of the pod's own PE only. So a PE can at most misreport its own PE's rates, in its
own namespace: never another namespace's. (The fluid data plane, an administrator's process
scraped with ``honor_labels``, exports the pods' ``namespace`` and ``pod`` labels itself.)

:func:`soda_optimizer.observed.evaluate` then scores them with the plan's own objective, job by
job. Each job's status gets an ``observed`` block (ingest rate, observed next to projected
importance, per-PE rates and mips) and the condition ``MeetsProjection`` (:mod:`.status`). A block
is replaced only when a figure moved by more than ``CHANGE`` or it is older than ``REFRESH_S``, so a
steady cluster costs no status writes per micro epoch. Prometheus away or answering garbage: the
last figures stay, the block says what failed, the epoch goes on (never an error). No
``--prometheus-url``: the block says there is no observation source (today's behaviour).
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Mapping
from typing import Any

import urllib3

from soda_optimizer.graph import glue
from soda_optimizer.model import Scenario, pe_id
from soda_optimizer.observed import JobObservation, PEObservation, evaluate
from soda_optimizer.plan import Plan

from ..kube import metrics
from ..kube.pods import job_of
from . import crd

log = logging.getLogger("kubesoda.observe")

DEFAULT_WINDOW_S = 30
DEFAULT_TOLERANCE = 0.1
CHANGE = 0.05  # a block is rewritten when a figure moved by more than this (relative)
REFRESH_S = 300.0  # ... or when it is older than this
NO_SOURCE = {"source": "none", "message": "no observation source: the operator runs without --prometheus-url (projections only)"}

Q_RECEIVED = "sum by (namespace, pod, stream) (rate(kubesoda_pe_tuples_received_total[{w}s]))"
Q_EMITTED = "sum by (namespace, pod, stream) (rate(kubesoda_pe_tuples_emitted_total[{w}s]))"
Q_ARRIVED = "sum by (namespace, pod, stream) (rate(kubesoda_pe_tuples_arrived_total[{w}s]))"
Q_BLOCKED = "sum by (namespace, pod, stream) (rate(kubesoda_pe_input_blocked_seconds_total[{w}s]))"
Q_CPU = 'sum by (namespace, pod) (rate(container_cpu_usage_seconds_total{{container="pe"}}[{w}s]))'


class ObservationError(RuntimeError):
    pass


class Prometheus:
    """Instant queries against Prometheus's HTTP API (``/api/v1/query``)."""

    def __init__(self, url: str, timeout_s: float = 3.0):
        self.url = url.rstrip("/")
        self.http = urllib3.PoolManager(num_pools=1, maxsize=2, retries=False,
                                        timeout=urllib3.Timeout(connect=timeout_s, read=timeout_s))

    def query(self, promql: str) -> list[tuple[dict[str, str], float]]:
        try:
            r = self.http.request("GET", f"{self.url}/api/v1/query", fields={"query": promql})
        except urllib3.exceptions.HTTPError as e:
            raise ObservationError(f"Prometheus at {self.url} unreachable: {e.__class__.__name__}") from e
        try:
            body = json.loads(r.data)
        except ValueError as e:
            raise ObservationError(f"Prometheus at {self.url}: HTTP {r.status}, not JSON") from e
        if r.status != 200 or not isinstance(body, dict) or body.get("status") != "success":
            err = body.get("error") if isinstance(body, dict) else None
            raise ObservationError(f"Prometheus at {self.url}: HTTP {r.status}: {err or 'query failed'}")
        out = []
        for res in (body.get("data") or {}).get("result") or []:
            try:
                v = float(res["value"][1])
            except (KeyError, IndexError, TypeError, ValueError):
                continue
            if math.isfinite(v):
                out.append(({str(k): str(x) for k, x in (res.get("metric") or {}).items()}, v))
        return out


def settings(policy: Mapping[str, Any] | None) -> tuple[int, float]:
    """(window seconds, tolerance) from the SchedulingPolicy's ``spec.observation``."""
    ob = ((policy or {}).get("spec") or {}).get("observation") or {}
    try:
        window = int(ob.get("windowSeconds", DEFAULT_WINDOW_S))
        tol = float(ob.get("tolerance", DEFAULT_TOLERANCE))
    except (TypeError, ValueError):
        return DEFAULT_WINDOW_S, DEFAULT_TOLERANCE
    return max(4, window), min(max(tol, 0.0), 1.0)


def pe_observations(received: list[tuple[dict[str, str], float]], emitted: list[tuple[dict[str, str], float]],
                    cpu: list[tuple[dict[str, str], float]], pods: list[dict[str, Any]],
                    mips_per_core: Mapping[str, float], arrived: list[tuple[dict[str, str], float]] | None = None,
                    blocked: list[tuple[dict[str, str], float]] | None = None) -> dict[str, PEObservation]:
    """Per global PE id (``namespace/job:pe``): rates per stream and the mips its pods used; with
    ``arrived`` and ``blocked`` (the input queue series) the offered rate per input stream and the
    share of the window it waited on a full queue.

    Every row is attributed by its ``namespace`` and ``pod`` labels (the scraped target's) to the
    PE whose pod that is in ``pods`` (the operator's index: its labels ``kubesoda.io/job`` and
    ``kubesoda.io/pe``, the pod's own namespace): a row of any other pod counts for nobody, and the
    ``streamjob``/``pe`` labels a PE exports are never read (issue 45)."""
    where: dict[tuple[str, str], tuple[str, str]] = {}  # (ns, pod) -> (pe id, node)
    for pod in pods:
        md = pod.get("metadata") or {}
        lab = md.get("labels") or {}
        if lab.get(crd.LABEL_JOB) and lab.get(crd.LABEL_PE) and md.get("namespace") and md.get("name"):
            where[(md["namespace"], md["name"])] = (
                pe_id(f"{md['namespace']}/{job_of(md)}", lab[crd.LABEL_PE]), (pod.get("spec") or {}).get("nodeName") or "")
    rec: dict[str, dict[str, float]] = {}
    emi: dict[str, dict[str, float]] = {}
    arr: dict[str, dict[str, float]] = {}
    blk: dict[str, dict[str, float]] = {}
    for rows, into in ((received, rec), (emitted, emi), (arrived or [], arr), (blocked or [], blk)):
        for lab, v in rows:
            w = where.get((lab.get("namespace", ""), lab.get("pod", "")))
            stream = lab.get("stream")
            if w is None or not stream:
                continue
            mine = into.setdefault(w[0], {})
            mine[stream] = mine.get(stream, 0.0) + v
    used: dict[str, float] = {}
    for lab, cores in cpu:
        w = where.get((lab.get("namespace", ""), lab.get("pod", "")))
        if w is None:
            continue
        used[w[0]] = used.get(w[0], 0.0) + cores * mips_per_core.get(w[1], 1000.0)
    return {p: PEObservation(received=rec.get(p, {}), emitted=emi.get(p, {}), mips=used.get(p), offered=arr.get(p, {}),
                             blocked=blk.get(p, {}))
            for p in set(rec) | set(emi) | set(used)}


def _r(x: float) -> float:
    """Four significant digits: what a status shows, and what keeps it from changing on noise."""
    return float(f"{x:.4g}")


def block(o: JobObservation, pes: Mapping[str, PEObservation], window: int, tolerance: float, now: str) -> dict[str, Any]:
    ratio = o.ratio
    out: dict[str, Any] = {
        "source": "prometheus", "windowSeconds": window, "time": now,
        "ingestRate": _r(o.ingest), "importance": _r(o.importance), "projectedImportance": _r(o.projected),
        "observedPEs": o.observed_pes, "tolerance": tolerance,
        "pes": [{"name": name, **({"mips": _r(ob.mips)} if ob.mips is not None else {}),
                 "received": {k: _r(v) for k, v in sorted(ob.received.items())},
                 "emitted": {k: _r(v) for k, v in sorted(ob.emitted.items())}}
                for name, ob in sorted(pes.items())],
    }
    if ratio is not None:
        out["ratio"] = round(ratio, 4)
    return out


def moved(old: Mapping[str, Any] | None, new: Mapping[str, Any], age_s: float) -> bool:
    """Whether ``new`` should replace ``old`` in the status."""
    if not old or old.get("source") != new.get("source") or old.get("error") != new.get("error") or age_s > REFRESH_S:
        return True
    if old.get("observedPEs") != new.get("observedPEs"):
        return True
    for k in ("importance", "ingestRate", "projectedImportance"):
        a, b = float(old.get(k, 0.0)), float(new.get(k, 0.0))
        if abs(a - b) > CHANGE * max(abs(a), abs(b), 1e-9):
            return True
    return False


class Observer:
    """Keeps the last ``observed`` block per job; :meth:`observe` refreshes them from Prometheus."""

    def __init__(self, url: str | None, timeout_s: float = 3.0):
        self.prom = Prometheus(url, timeout_s) if url else None
        self.blocks: dict[str, dict[str, Any]] = {}  # job key -> block in the status
        self.at: dict[str, float] = {}  # job key -> monotonic time of its block
        self.last: dict[str, PEObservation] = {}  # the last micro epoch's pe_observations (the learner's input); {} after a failure

    def block(self, job: str) -> dict[str, Any]:
        return self.blocks.get(job, NO_SOURCE if self.prom is None else {"source": "prometheus", "message": "no observation yet"})

    def observe(self, scen: Scenario, plan: Plan, pods: list[dict[str, Any]], policy: Mapping[str, Any] | None) -> None:
        if self.prom is None:
            return
        window, tol = settings(policy)
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        admitted = {d.job: d.template for d in plan.jobs if d.admitted and d.template}
        try:
            rows = [self.prom.query(q.format(w=window)) for q in (Q_RECEIVED, Q_EMITTED, Q_CPU, Q_ARRIVED, Q_BLOCKED)]
        except ObservationError as e:
            metrics.OBSERVATION_ERRORS.inc()
            log.warning("observation failed: %s", e)
            self.last = {}
            for job in admitted:
                old = self.blocks.get(job) or {"source": "prometheus"}
                self.blocks[job] = {**old, "error": str(e)}
            return
        mpc = {n.name: n.mips_per_core for n in scen.nodes}
        received, emitted, cpu, arrived, blocked = rows
        pes = pe_observations(received, emitted, cpu, pods, mpc, arrived, blocked)
        self.last = pes
        choice = {j: t for j, t in admitted.items() if any(x.name == j for x in scen.jobs)}
        glued = glue(scen, choice)
        scored = evaluate(glued, pes, {d.job: d.importance for d in plan.jobs})
        t = time.monotonic()
        metrics.JOB_IMPORTANCE.clear()
        for job, o in scored.items():
            ns, name = job.split("/", 1)
            metrics.JOB_IMPORTANCE.labels(ns, name, "projected").set(o.projected)
            metrics.JOB_IMPORTANCE.labels(ns, name, "observed").set(o.importance)
            mine = {glued.graph.nodes[p]["name"]: pes[p] for p in glued.pes_of(job) if p in pes}
            new = block(o, mine, window, tol, now)
            if moved(self.blocks.get(job), new, t - self.at.get(job, t)):
                self.blocks[job] = new
                self.at[job] = t
        metrics.OBSERVED_IMPORTANCE.set(sum(o.importance for o in scored.values()))
        for job in set(self.blocks) - set(scored):
            del self.blocks[job]
            self.at.pop(job, None)
