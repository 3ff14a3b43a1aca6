"""``kubesoda run``: the operator (Kopf) and the extender against the current kubeconfig."""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import errno
import functools
import getpass
import logging
import os
import random
import socket
import ssl
import time
from typing import Any

import kopf
from kubernetes import client, config

from . import dispatch, fair_yield, flows, logs  # noqa: F401  (their Kopf handlers)
from .kube import metrics, periodic, pods, reflector
from .kube.lease import Lease
from .memo import Memo
from .soda import crd, extender, handlers, indexes
from .soda.epochs import Loops
from .soda.observe import Observer

log = logging.getLogger("kubesoda.runner")


def ensure_policy(api: client.ApiClient) -> None:
    custom = client.CustomObjectsApi(api)
    try:
        custom.get_cluster_custom_object(crd.GROUP, crd.VERSION, "schedulingpolicies", "default")
    except client.ApiException as e:
        if e.status != 404:
            raise
        body = {"apiVersion": crd.API_VERSION, "kind": "SchedulingPolicy", "metadata": {"name": "default"}, "spec": {}}
        try:
            custom.create_cluster_custom_object(crd.GROUP, crd.VERSION, "schedulingpolicies", body)
            log.info("created SchedulingPolicy default with the defaults")
        except client.ApiException as e2:
            if e2.status != 409:
                raise


def ensure_peering(api: client.ApiClient, name: str) -> None:
    """Kopf writes keep-alives into an existing ClusterKopfPeering; without the object peering
    would silently not happen and every replica would act, so create it (409 = already there)."""
    custom = client.CustomObjectsApi(api)
    try:
        custom.get_cluster_custom_object("kopf.dev", "v1", "clusterkopfpeerings", name)
        return
    except client.ApiException as e:
        if e.status != 404:
            raise
    body = {"apiVersion": "kopf.dev/v1", "kind": "ClusterKopfPeering", "metadata": {"name": name}}
    try:
        custom.create_cluster_custom_object("kopf.dev", "v1", "clusterkopfpeerings", body)
        log.info("created ClusterKopfPeering %s", name)
    except client.ApiException as e:
        if e.status == 404:
            raise SystemExit(f"error: --peering {name}: the ClusterKopfPeering CRD is not installed (kubectl apply -f crds/)") from None
        if e.status != 409:
            raise


PEERING_LIFETIME_S = 60


def own_identity() -> str:
    """This replica's peering identity, as Kopf would make it (POD_ID, else user@host/time/random),
    made here so that the lease (:mod:`.kube.lease`) renews the record Kopf keeps alive."""
    if os.environ.get("POD_ID"):
        return os.environ["POD_ID"]
    rnd = "".join(random.choices("abcdefhijklmnopqrstuvwxyz0123456789", k=3))
    return f"{getpass.getuser()}@{socket.gethostname()}/{time.strftime('%Y%m%d%H%M%S', time.gmtime())}/{rnd}"
# Kopf re-lists a resource each time its watch ends; the API server ends a watch after this many
# seconds. Ten minutes keeps dead connections from lingering (client_timeout a little above) while a
# 2000-node cluster pays one LIST of nodes and pods per ten minutes, not per minute.
WATCH_SERVER_TIMEOUT_S = 600


@kopf.on.startup()
def _configure(settings: kopf.OperatorSettings, **_: object) -> None:
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = WATCH_SERVER_TIMEOUT_S
    settings.watching.client_timeout = WATCH_SERVER_TIMEOUT_S + 30
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="kubesoda.io")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix="kubesoda.io")
    settings.peering.lifetime = PEERING_LIFETIME_S
    settings.networking.error_backoffs = KOPF_BACKOFFS


# Kopf's retries of a failed request (its watches included): as patient as its default (1, 1, 2, 3, 5, 8,
# 13, 21: 54 s), but never more than 4 s apart, so its watches resume within 4 s of the API server's
# return (with the default, up to 21 s later; issue 46, as the operator's own watches: kube/reflector.py)
KOPF_BACKOFFS = (0.2, 0.4, 0.8, 1.6, 3.2) + (4.0,) * 12


M_ARENA_MAX = -8  # glibc's mallopt parameter (malloc.h)
MALLOC_ARENAS = 2


def limit_malloc_arenas(n: int = MALLOC_ARENAS) -> bool:
    """Cap glibc's malloc arenas at ``n`` unless ``MALLOC_ARENA_MAX`` says otherwise; True if set.

    The operator runs dozens of threads (Kopf's watchers, the apply workers, the extender's
    server); glibc gives threads up to 8 arenas per core, and memory freed in one arena is not
    reused by another, so a burst of pod writes leaves each arena holding its own high-water mark.
    Two arenas is the usual setting for multi-threaded Python servers; ``MALLOC_ARENA_MAX`` in
    the environment (read by glibc itself) wins. Not glibc (musl, macOS): nothing to do."""
    if os.environ.get("MALLOC_ARENA_MAX"):
        return False
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
        return bool(libc is not None and hasattr(libc, "mallopt") and libc.mallopt(M_ARENA_MAX, n) == 1)
    except OSError:
        return False


def pod_watch(core: client.CoreV1Api, memo: Memo) -> reflector.Reflector:
    """The operator's one watch of pods (not Kopf's, :mod:`.kube.reflector`): the pod indexes of every
    system, and the listeners that mark what changed."""
    return reflector.Reflector(
        core.list_pod_for_all_namespaces,
        {"kubesoda_pods": indexes.kubesoda_pods, "foreign_pods": pods.foreign_pods,
         "yield_pods": fair_yield.handlers.yield_pods, "dispatch_pods": dispatch.handlers.dispatch_pods},
        [indexes.inflight_listener(memo), dispatch.handlers.pod_listener(memo)],
        server_timeout_s=WATCH_SERVER_TIMEOUT_S)


def stream_watches(custom: client.CustomObjectsApi, memo: Memo) -> tuple[reflector.Reflector, reflector.Reflector]:
    """The operator's own watches of StreamJobs and StreamTemplates (not Kopf's: its handling of the
    5,500 job and template events of a 2,000-node apply held about a fifth of the operator's py-spy
    samples, once pods had left Kopf)."""
    def lister(plural: str) -> Any:
        return functools.partial(custom.list_cluster_custom_object, crd.GROUP, crd.VERSION, plural)

    return (reflector.Reflector(lister("streamjobs"), {"kubesoda_jobs": indexes.kubesoda_jobs}, [handlers.job_listener(memo)],
                                server_timeout_s=WATCH_SERVER_TIMEOUT_S, name="streamjobs"),
            reflector.Reflector(lister("streamtemplates"), {"kubesoda_templates": indexes.kubesoda_templates},
                                [handlers.template_listener(memo)], server_timeout_s=WATCH_SERVER_TIMEOUT_S, name="streamtemplates"))


def api_client(workers: int) -> client.ApiClient:
    """An ApiClient for the current kubeconfig whose connection pool fits ``workers`` requests twice
    (an epoch's applies and the Running refresh's status writes run side by side)."""
    cfg = client.Configuration()
    try:
        config.load_kube_config(client_configuration=cfg)
    except config.ConfigException:  # in a pod (the chart): its ServiceAccount, KUBERNETES_SERVICE_HOST/PORT
        config.load_incluster_config(client_configuration=cfg)
    cfg.connection_pool_maxsize = 2 * max(2, workers)
    return client.ApiClient(cfg)


def main(args: argparse.Namespace) -> int:
    logs.setup()
    if limit_malloc_arenas():
        log.info("malloc arenas capped at %d (MALLOC_ARENA_MAX overrides)", MALLOC_ARENAS)
    workers = getattr(args, "workers", 16)
    api = api_client(workers)
    loops = Loops(api, workers, observer=Observer(getattr(args, "prometheus_url", None)))
    # the ports first: a port in use is one error naming the flag, before anything is written to the cluster
    view, srv = listen(args, loops)
    try:
        return _run(args, api, loops)
    finally:
        if srv is not None:
            srv.stop()
        if view is not None:
            view.stop()


def listen(args: argparse.Namespace, loops: Loops) -> tuple[Any, Any]:
    """Bind the metrics, web and extender ports; a port that cannot be bound (in use, not permitted) or TLS
    files that cannot be read end the command with one line naming the flag (issue 48: it was a traceback,
    after a ClusterKopfPeering had been created)."""
    what = ""
    view = srv = None
    try:
        if getattr(args, "metrics_port", 0):
            what = f"--metrics-port {args.metrics_port}"
            metrics.serve(getattr(args, "metrics_host", "127.0.0.1"), args.metrics_port)
            log.info("metrics on %s:%d", getattr(args, "metrics_host", "127.0.0.1"), args.metrics_port)
        if getattr(args, "web_port", 0):
            from .web import server as web

            what = f"--web-port {args.web_port}"
            view = web.serve_live(loops, getattr(args, "web_host", "127.0.0.1"), args.web_port, getattr(args, "web_allowed_host", None) or ())
            log.info("web view on %s", view.url)
        if getattr(args, "extender_port", 0):
            what = f"--extender-port {args.extender_port}" + (f" / --health-port {args.health_port}" if getattr(args, "health_port", 0) else "")
            srv = extender.serve(getattr(args, "extender_host", "127.0.0.1"), args.extender_port, extender.tls_from_args(args),
                                 max_body=getattr(args, "max_body_bytes", extender.MAX_BODY), health_port=getattr(args, "health_port", 0) or None)
            log.info("extender on %s%s", srv.url, f", /healthz and /metrics also on http port {srv.health_port}" if srv.health_port else "")
    except (OSError, ValueError, ssl.SSLError) as e:
        if view is not None:
            view.stop()
        hint = " (another kubesoda run? give each replica its own port, or 0 for none)" if getattr(e, "errno", None) == errno.EADDRINUSE else ""
        raise SystemExit(f"error: {what}: {getattr(e, 'strerror', None) or e}{hint}") from None
    return view, srv


def _run(args: argparse.Namespace, api: client.ApiClient, loops: Loops) -> int:
    global PEERING_LIFETIME_S
    ensure_policy(api)
    if getattr(args, "prometheus_url", None):
        log.info("observing through Prometheus at %s", args.prometheus_url)
    grace = 0.0
    lease: Lease | None = None
    identity: str | None = None
    peering = getattr(args, "peering", None)
    priority = getattr(args, "priority", None)
    if peering:
        ensure_peering(api, peering)
        PEERING_LIFETIME_S = getattr(args, "peering_lifetime", 60)
        # Wait for the peers' keep-alives before acting: a replica that starts next to a leader
        # sees it within this time and pauses before its first write.
        grace = 3.0
        if priority is None:
            priority = random.SystemRandom().randint(1, 2**31 - 1)
        identity = own_identity()
        try:
            lease = Lease(loops.custom, peering, identity, priority, PEERING_LIFETIME_S, getattr(args, "peering_margin", None))
        except ValueError as e:
            raise SystemExit(f"error: --peering-margin: {e}") from None
        log.info("peering %s as %s, priority %d, lifetime %ds, fenced %gs before it (renewed every %gs)", peering, identity, priority,
                 PEERING_LIFETIME_S, lease.margin_s, lease.renew_s)
        api.user_agent = f"kubesoda/{identity}"  # the API server's audit log names the replica behind each write
    memo = handlers.memo(loops, grace, getattr(args, "snapshots", "index"))
    memo.lease = lease
    if lease is not None:
        lease.renew()  # held from the start (the daemon waits the startup grace anyway)
        lease.start()
    memo.pods = pod_watch(loops.core, memo)
    memo.jobs, memo.templates = stream_watches(loops.custom, memo)
    # the periodic handlers and the SODA loops: on the replica Kopf's peering elects, with no finalizer (issue 48)
    acting = periodic.Acting(peering or None, identity, priority or 0, loops.custom)  # its watch starts with the operator
    memo.ticker = periodic.Ticker(loops.custom, acting, grace_s=grace)
    # member clusters' kubeconfigs: Secrets of the operator's namespace only, inline credentials only
    memo.flows.members = flows.members.Members(loops.core, namespace=getattr(args, "secrets_namespace", None),
                                               allow_unsafe=getattr(args, "allow_unsafe_kubeconfigs", False))
    log.info("kubeconfig Secrets read from namespace %s%s", memo.flows.members.namespace,
             " (exec, auth providers and file paths allowed)" if memo.flows.members.allow_unsafe else "")
    try:
        kopf.run(
            clusterwide=True,
            standalone=not peering,
            peering_name=peering or None,
            priority=priority or 0,
            identity=identity,  # type: ignore[arg-type]  # Kopf's Identity is a NewType of str
            liveness_endpoint=getattr(args, "liveness", None),
            memo=memo,
        )
    finally:
        if lease is not None:
            lease.stop()
    return 0
