"""``kubesoda run``: the operator (Kopf) and the extender against the current kubeconfig."""

from __future__ import annotations

import argparse
import logging
import threading

import kopf
from kubernetes import client, config

from . import crd, extender, handlers
from .epochs import Loops

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


@kopf.on.startup()
def _configure(settings: kopf.OperatorSettings, **_: object) -> None:
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 60
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="kubesoda.io")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix="kubesoda.io")


def main(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format='{"ts":"%(asctime)s","level":"%(levelname)s","logger":"%(name)s","msg":"%(message)s"}')
    config.load_kube_config()
    api = client.ApiClient()
    ensure_policy(api)
    handlers.LOOPS = Loops(api)
    srv = None
    if getattr(args, "extender_port", 0):
        srv = extender.serve(getattr(args, "extender_host", "127.0.0.1"), args.extender_port)
        threading.Thread(target=srv.serve_forever, daemon=True, name="extender").start()
        log.info("extender on %s:%d", *srv.server_address[:2])
    peering = getattr(args, "peering", None)
    try:
        kopf.run(
            clusterwide=True,
            standalone=peering is None,
            peering_name=peering,
            priority=getattr(args, "priority", 0),
            liveness_endpoint=getattr(args, "liveness", None),
        )
    finally:
        if srv is not None:
            srv.shutdown()
    return 0
