"""``kubesoda simulate``: the fluid data plane as a process, for clusters whose PE pods run nothing (KWOK).

Every ``--interval`` seconds it lists Nodes, StreamTemplates, StreamJobs, the SchedulingPolicy
``default`` and the PE pods (``app.kubernetes.io/managed-by=kubesoda``), translates them with the
operator's own :mod:`soda_operator.soda.crd` (so the declared resource functions, racks, zones and link
capacities are read exactly as the operator reads them), solves :mod:`.model` for the bound,
Running pods at their actual CPU limits (the container status's, which an in-place resize
updates, else the spec's), and integrates the rates into counters. Prometheus scrapes them on
``127.0.0.1:--port`` (docs/dataplane.md):

- the PE metrics contract (docs/pe-metrics.md): ``kubesoda_pe_{tuples,bytes}_{received,emitted}_total``
  with ``namespace``, ``pod``, ``streamjob``, ``pe``, ``stream``;
- cAdvisor's ``container_cpu_usage_seconds_total{namespace, pod, container="pe"}``;
- ``kubesoda_dataplane_link_utilisation{link}``, ``kubesoda_dataplane_importance{namespace, streamjob}`` and
  ``kubesoda_dataplane_traffic_bytes{namespace, streamjob, scope}`` (scope: node, rack, zone, cross-zone).

Counters are integrated between intervals at the rates of the last solution (a scrape between two
intervals sees them advanced to the scrape's time); a pod that disappears is no longer exported, a
pod that reappears (a new uid) starts from 0.

``--true-functions FILE``: YAML ``{"namespace/job:pe" or "pe": {a, b, noise}}``: the PE's true
resource function differs from the declared one (a, b replaced when given; noise: the relative
standard deviation of a Gaussian factor on its output, drawn per interval from ``--seed``).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import signal
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import yaml
from prometheus_client.core import CollectorRegistry, CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import start_http_server

from soda_optimizer.graph import GluedGraph
from soda_optimizer.model import ResourceFunction, Scenario, split_pe_id

from ..kube.pods import job_of
from ..soda import crd
from ..soda.state import Snapshot
from .model import DataPlane, Instance, solve

log = logging.getLogger("kubesoda.simulate")

MANAGED = "app.kubernetes.io/managed-by=kubesoda"
CONTAINER = "pe"
CONTRACT = (("received", "tuples"), ("received", "bytes"), ("emitted", "tuples"), ("emitted", "bytes"))


# --------------------------------------------------------------------------- true functions


@dataclass(frozen=True)
class TrueFunction:
    a: float | None = None
    b: float | None = None
    noise: float = 0.0


def load_true_functions(path: str | None) -> dict[str, TrueFunction]:
    if not path:
        return {}
    with open(path) as f:
        doc = yaml.safe_load(f) or {}
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: expected a mapping of 'namespace/job:pe' or 'pe' to {{a, b, noise}}")
    out = {}
    for k, v in doc.items():
        v = v or {}
        if not isinstance(v, dict) or set(v) - {"a", "b", "noise"}:
            raise ValueError(f"{path}: {k}: expected {{a, b, noise}}, got {v!r}")
        tf = TrueFunction(a=None if v.get("a") is None else float(v["a"]), b=None if v.get("b") is None else float(v["b"]),
                          noise=float(v.get("noise", 0.0)))
        for x in (tf.a, tf.b):
            if x is not None and not (math.isfinite(x) and x > 0):
                raise ValueError(f"{path}: {k}: a and b must be positive, got {v!r}")
        if not (math.isfinite(tf.noise) and tf.noise >= 0):
            raise ValueError(f"{path}: {k}: noise must be >= 0, got {v!r}")
        out[str(k)] = tf
    return out


def true_rfs(glued: GluedGraph, table: Mapping[str, TrueFunction], rng: np.random.Generator) -> dict[str, ResourceFunction]:
    """pe id -> its true RF this interval (only the PEs the table names)."""
    out = {}
    for p in sorted(glued.graph.nodes):
        tf = table.get(p) or table.get(split_pe_id(p)[1])
        if tf is None:
            continue
        rf = glued.spec(p).rf
        f = max(1.0 + tf.noise * float(rng.standard_normal()), 1e-9) if tf.noise > 0 else 1.0
        out[p] = rf.model_copy(update={"a": (tf.a if tf.a is not None else rf.a) * f, "b": (tf.b if tf.b is not None else rf.b) * f})
    return out


# --------------------------------------------------------------------------- cluster -> model input


def pod_cores(pod: Mapping[str, Any]) -> float | None:
    """The CPU limit of container ``pe``: the container status's (updated by an in-place resize)
    when the kubelet reports one, else the spec's; None without a limit."""
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        if cs.get("name") == CONTAINER:
            q = ((cs.get("resources") or {}).get("limits") or {}).get("cpu")
            if q is not None:
                return crd.cores(q, "status.containerStatuses.resources.limits.cpu")
    for c in (pod.get("spec") or {}).get("containers") or []:
        if c.get("name") == CONTAINER:
            q = ((c.get("resources") or {}).get("limits") or {}).get("cpu")
            return None if q is None else crd.cores(q, "spec.containers.resources.limits.cpu")
    return None


def instances(pods: Iterable[Mapping[str, Any]]) -> list[tuple[Instance, str]]:
    """(instance, uid) of every bound, Running PE pod with a CPU limit."""
    out = []
    for pod in pods:
        md, sp, st = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
        lab = md.get("labels") or {}
        if not (lab.get(crd.LABEL_JOB) and lab.get(crd.LABEL_PE) and sp.get("nodeName") and st.get("phase") == "Running"):
            continue
        try:
            cores = pod_cores(pod)
        except (crd.TranslationError, ValueError, TypeError):
            cores = None
        if cores is None or cores <= 0:
            continue
        ns = md.get("namespace", "default")
        out.append((Instance(namespace=ns, pod=md.get("name", ""), job=f"{ns}/{job_of(md)}", pe=lab[crd.LABEL_PE],
                             node=sp["nodeName"], cores=cores), str(md.get("uid") or "")))
    return out


def model_input(objs: Snapshot) -> tuple[Scenario, GluedGraph, list[tuple[Instance, str]]]:
    """The Scenario as the operator reads it, the glued graph of the jobs that run (their chosen
    templates), and the running instances."""
    scen, errors = crd.scenario_from_objects(objs.nodes, objs.templates, objs.jobs, objs.policy)
    for e in errors:
        log.debug("ignored: %s", e)
    choice = {j.name: j.chosen_template for j in scen.jobs if j.chosen_template}
    return scen, scen.glued(choice), instances(objs.pods)


class Cluster:
    """Lists what the model needs from the API server (raw JSON, as the operator's handlers see it)."""

    def __init__(self, namespace: str | None = None):
        from kubernetes import client, config

        try:
            config.load_kube_config()
        except Exception:  # noqa: BLE001 - in a pod: the service account
            config.load_incluster_config()
        api = client.ApiClient()
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.namespace = namespace
        self.ApiException = client.exceptions.ApiException

    @staticmethod
    def _items(resp: Any) -> list[dict[str, Any]]:
        return list(json.loads(resp.data).get("items") or [])

    def list(self) -> Snapshot:
        ns = self.namespace
        raw: dict[str, Any] = {"_preload_content": False, "_request_timeout": 10}
        nodes = self._items(self.core.list_node(**raw))
        if ns:
            pods = self._items(self.core.list_namespaced_pod(ns, label_selector=MANAGED, **raw))
            tmpl = self._items(self.custom.list_namespaced_custom_object(crd.GROUP, crd.VERSION, ns, "streamtemplates", **raw))
            jobs = self._items(self.custom.list_namespaced_custom_object(crd.GROUP, crd.VERSION, ns, "streamjobs", **raw))
        else:
            pods = self._items(self.core.list_pod_for_all_namespaces(label_selector=MANAGED, **raw))
            tmpl = self._items(self.custom.list_cluster_custom_object(crd.GROUP, crd.VERSION, "streamtemplates", **raw))
            jobs = self._items(self.custom.list_cluster_custom_object(crd.GROUP, crd.VERSION, "streamjobs", **raw))
        try:
            policy = json.loads(cast(Any, self.custom.get_cluster_custom_object(crd.GROUP, crd.VERSION, "schedulingpolicies", "default", **raw)).data)
        except self.ApiException as e:
            if e.status != 404:
                raise
            policy = None
        return Snapshot(nodes, tmpl, jobs, policy, pods)


# --------------------------------------------------------------------------- integration and export


@dataclass
class PodCounters:
    instance: Instance
    uid: str
    counts: dict[tuple[str, str, str], float] = field(default_factory=dict)  # (direction, unit, stream) -> total
    cpu_seconds: float = 0.0
    rates: dict[tuple[str, str, str], float] = field(default_factory=dict)  # per second, since ``at``
    cpu_cores: float = 0.0


@dataclass(frozen=True)
class View:
    """What a scrape reads: counters as of ``at`` and the rates they grow at since then."""

    at: float
    pods: tuple[PodCounters, ...]
    links: dict[str, float]
    importance: dict[str, float]
    traffic: dict[tuple[str, str], float] = field(default_factory=dict)  # (job, scope) -> bytes/s


class Simulator:
    """The counters of every running pod, advanced one interval at a time by :meth:`step`.

    The time of an integration step and of a scrape are read under one lock, so a scrape never
    sees a counter the next step would have to take back (counters are monotone)."""

    def __init__(self, true_functions: Mapping[str, TrueFunction] | None = None, seed: int = 0, clock: Any = time.monotonic):
        self.table = dict(true_functions or {})
        self.rng = np.random.default_rng(seed)
        self.clock = clock
        self.pods: dict[tuple[str, str], PodCounters] = {}
        self.at: float | None = None
        self.last: DataPlane | None = None
        self._view = View(0.0, (), {}, {})
        self._lock = threading.Lock()

    def solve(self, objs: Snapshot) -> tuple[DataPlane, list[tuple[Instance, str]]]:
        scen, glued, found = model_input(objs)
        nodes = {n.name: n for n in scen.nodes}
        dp = solve(glued, [i for i, _ in found], nodes, scen.policy.links, true_rfs(glued, self.table, self.rng))
        return dp, found

    def _advance(self, now: float) -> None:
        if self.at is not None and now > self.at:
            dt = now - self.at
            for pc in self.pods.values():
                for k, r in pc.rates.items():
                    pc.counts[k] = pc.counts.get(k, 0.0) + r * dt
                pc.cpu_seconds += pc.cpu_cores * dt
        self.at = now if self.at is None else max(self.at, now)

    def tick(self) -> None:
        """Integrate the current rates up to now (the cluster could not be read: PEs go on)."""
        with self._lock:
            self._advance(self.clock())
            self._publish()

    def step(self, objs: Snapshot) -> DataPlane:
        """Counters integrated up to now at the old rates; from now on, the new solution's rates."""
        dp, found = self.solve(objs)
        uid = {(i.namespace, i.pod): u for i, u in found}
        flows = {(f.instance.namespace, f.instance.pod): f for f in dp.pods}
        with self._lock:
            self._advance(self.clock())
            for key in list(self.pods):
                if key not in flows or self.pods[key].uid != uid.get(key):
                    del self.pods[key]  # gone (or replaced by a new pod of the same name: it starts from 0)
            for key, f in flows.items():
                pc = self.pods.get(key)
                if pc is None:
                    pc = self.pods[key] = PodCounters(f.instance, uid.get(key, ""))
                pc.instance = f.instance
                pc.rates = {}
                for direction, unit in CONTRACT:
                    src = getattr(f, direction if unit == "tuples" else f"{direction}_bytes")
                    for stream, r in src.items():
                        pc.rates[(direction, unit, stream)] = max(float(r), 0.0)
                        pc.counts.setdefault((direction, unit, stream), 0.0)
                pc.cpu_cores = max(f.cpu_cores, 0.0)
            self.last = dp
            self._publish()
        return dp

    def _publish(self) -> None:
        dp = self.last
        snap = tuple(PodCounters(pc.instance, pc.uid, dict(pc.counts), pc.cpu_seconds, dict(pc.rates), pc.cpu_cores)
                     for pc in self.pods.values())
        self._view = View(self.at or 0.0, snap, {k: lk.utilisation for k, lk in dp.links.items()} if dp else {},
                          dict(dp.job_importance) if dp else {}, dict(dp.traffic) if dp else {})

    def read(self) -> tuple[View, float]:
        """The published view and the time of this read."""
        with self._lock:
            return self._view, self.clock()


class DataPlaneCollector:
    """A prometheus_client collector over a :class:`Simulator`'s published view."""

    def __init__(self, sim: Simulator):
        self.sim = sim

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        v, now = self.sim.read()
        dt = max(now - v.at, 0.0) if v.pods else 0.0
        fams = {
            (d, u): CounterMetricFamily(f"kubesoda_pe_{u}_{d}_total", f"{u.capitalize()} the PE {d}, per stream (fluid data plane)",
                                        labels=["namespace", "pod", "streamjob", "pe", "stream"])
            for d, u in CONTRACT
        }
        cpu = CounterMetricFamily("container_cpu_usage_seconds_total", "Cumulative CPU time consumed, in core-seconds (fluid data plane)",
                                  labels=["namespace", "pod", "container"])
        for pc in v.pods:
            i = pc.instance
            job = i.job.split("/", 1)[1]
            for (d, u, stream), c in sorted(pc.counts.items()):
                fams[(d, u)].add_metric([i.namespace, i.pod, job, i.pe, stream], c + pc.rates.get((d, u, stream), 0.0) * dt)
            cpu.add_metric([i.namespace, i.pod, CONTAINER], pc.cpu_seconds + pc.cpu_cores * dt)
        yield from fams.values()
        yield cpu
        links = GaugeMetricFamily("kubesoda_dataplane_link_utilisation", "Traffic a rack/zone uplink delivers / its capacity",
                                  labels=["link"])
        for name, used in sorted(v.links.items()):
            links.add_metric([name], used)
        yield links
        imp = GaugeMetricFamily("kubesoda_dataplane_importance", "True importance of a job (weight x value of the rates its "
                                "streams and sinks really carry)", labels=["namespace", "streamjob"])
        for job, x in sorted(v.importance.items()):
            ns, _, name = job.partition("/")
            imp.add_metric([ns, name], x)
        yield imp
        tr = GaugeMetricFamily("kubesoda_dataplane_traffic_bytes", "Stream bytes/s delivered between instances, by where producer and "
                               "consumer sit: node, rack, zone, cross-zone (stream affinity)", labels=["namespace", "streamjob", "scope"])
        for (job, scope), x in sorted(v.traffic.items()):
            ns, _, name = job.partition("/")
            tr.add_metric([ns, name, scope], x)
        yield tr


# --------------------------------------------------------------------------- the process


def main(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        table = load_true_functions(args.true_functions)
    except (OSError, ValueError, yaml.YAMLError) as e:
        log.error("--true-functions: %s", e)
        return 2
    sim = Simulator(table, args.seed)
    cluster = Cluster(args.namespace)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DataPlaneCollector(sim))  # type: ignore[arg-type]
    server, thread = start_http_server(args.port, addr=args.host, registry=registry)
    log.info("fluid data plane on http://%s:%d/metrics, every %.1fs", args.host, args.port, args.interval)
    stop = threading.Event()
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, lambda *_: stop.set())
    failing = False
    while not stop.is_set():
        t0 = time.monotonic()
        try:
            objs = cluster.list()
        except Exception as e:  # noqa: BLE001 - the API away: the PEs keep running at the last rates
            if not failing:
                log.warning("cannot list the cluster (%s: %s); counters go on at the last rates", type(e).__name__, e)
            failing = True
            sim.tick()
        else:
            failing = False
            try:
                dp = sim.step(objs)
                log.debug("%d pods, importance %.4g, %d iterations", len(dp.pods), dp.importance, dp.iterations)
            except Exception:  # noqa: BLE001 - never die on one bad snapshot
                log.exception("data plane step failed")
        stop.wait(max(args.interval - (time.monotonic() - t0), 0.05))
    server.shutdown()
    thread.join(5)
    return 0
