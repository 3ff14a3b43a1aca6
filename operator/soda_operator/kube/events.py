"""The one Event path of every system: Events are created through the API, never through Kopf's
poster (``kopf.info``/``kopf.event`` post nothing below the operator's posting level, WARNING in
:mod:`..runner`, so a Normal Event would be lost)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from . import api, clock

log = logging.getLogger("kubesoda.events")
MESSAGE_MAX = 1000  # the API server refuses longer Event messages


def body(obj: Mapping[str, Any], reason: str, message: str, type_: str = "Normal", at: str | None = None) -> dict[str, Any]:
    """An Event about ``obj`` (a plain object with apiVersion, kind and metadata). A cluster-scoped
    object's Events live in namespace ``default``. ``at``: when it happened (an RFC 3339 time, e.g.
    :func:`.clock.now` taken then), for an Event posted later than that; default now."""
    md = obj.get("metadata") or {}
    ns = md.get("namespace") or "default"
    now = at or clock.now()
    return {
        "metadata": {"generateName": f"{md.get('name')}.", "namespace": ns},
        "involvedObject": {"apiVersion": obj.get("apiVersion", api.API_VERSION), "kind": obj.get("kind"),
                           "name": md.get("name"), "namespace": md.get("namespace") or "", "uid": md.get("uid")},
        "reason": reason, "message": message[:MESSAGE_MAX], "type": type_, "source": {"component": "kubesoda"},
        "firstTimestamp": now, "lastTimestamp": now, "count": 1,
    }


def post(core: client.CoreV1Api, obj: Mapping[str, Any], reason: str, message: str, type_: str = "Normal",
         before: Callable[[], None] | None = None, at: str | None = None) -> None:
    """Post one Event; a refusal is logged, never raised (an Event is worth less than the write it
    reports). ``before`` runs first (the SODA loops' fencing check); ``at`` as in :func:`body`."""
    ev = body(obj, reason, message, type_, at)
    if before is not None:
        before()
    try:
        api.raw(core.create_namespaced_event, ev["metadata"]["namespace"], ev)
    except ApiException as e:
        log.warning("event for %s failed: %s", ev["involvedObject"]["name"], e.reason)


def post_all(core: client.CoreV1Api, items: Iterable[tuple[Mapping[str, Any], str, str, str]]) -> None:
    """Post Events given as (object, reason, message, type)."""
    for obj, reason, message, type_ in items:
        post(core, obj, reason, message, type_)
