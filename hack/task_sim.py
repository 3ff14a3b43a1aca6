#!/usr/bin/env python3
"""Task completion on KWOK (e2e only): KWOK plays a pod's start but never its end, so this loop ends batch task
pods as if they had run their *true* duration on the node they landed on.

A pod is a simulated task when it carries the annotation ``kubesoda.io/sim-work`` (seconds of work on a speed-1
node; put it in the Job's pod template). Once KWOK reports the pod Running on node n, the loop patches the pod's
``status`` subresource at ``startedAt + work / speed(n) x noise`` (``startedAt``: the container's running
``startedAt`` that KWOK wrote; noise: uniform in [1 - noise, 1 + noise], fixed per pod UID) to
``phase: Succeeded`` with every container ``terminated`` (exit code 0, reason Completed, ``startedAt`` kept,
``finishedAt`` now). The true speeds are this process's arguments only: the dispatcher never sees them; it sees
the node labels and what it measures.

Why a status patch works on KWOK v0.8.0 (hack/kwok.yaml): the ``kubesoda-pod-running`` stage selects only pods
not yet Running, Succeeded or Failed (and the API server refuses to move a pod out of a terminal phase anyway), so
Succeeded sticks; the resize stage selects Running pods with a new generation, which a status patch does not make.
The Job controller then counts the pod as succeeded.

    hack/task_sim.py --namespace NS --speed node-a=3 --speed node-b=1 [--default-speed 1] [--noise 0.1]
"""

from __future__ import annotations

import argparse
import hashlib
import threading
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

ANN_WORK = "kubesoda.io/sim-work"


def _noise(uid: str, noise: float) -> float:
    h = int(hashlib.sha256(uid.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
    return 1.0 + noise * (2.0 * h - 1.0)


def _started(pod: Any) -> datetime | None:
    starts = [cs.state.running.started_at for cs in pod.status.container_statuses or [] if cs.state and cs.state.running]
    return min(starts) if starts else pod.status.start_time


def true_duration(pod: Any, speeds: Mapping[str, float], default_speed: float, noise: float) -> float | None:
    """Seconds the pod runs on its node: work / speed(node) x noise; None when it is not a simulated task."""
    work = (pod.metadata.annotations or {}).get(ANN_WORK)
    if work is None or not pod.spec.node_name:
        return None
    return float(work) / speeds.get(pod.spec.node_name, default_speed) * _noise(pod.metadata.uid, noise)


def complete(core: client.CoreV1Api, pod: Any, started: datetime, now: datetime) -> None:
    fmt = "%Y-%m-%dT%H:%M:%SZ"
    statuses = [{"name": c.name, "image": c.image, "imageID": "", "ready": False, "started": False, "restartCount": 0,
                 "state": {"running": None, "waiting": None, "terminated": {"exitCode": 0, "reason": "Completed", "startedAt": started.strftime(fmt), "finishedAt": now.strftime(fmt)}}}
                for c in pod.spec.containers]
    conds = [{"type": t, "status": "False", "reason": "PodCompleted", "lastTransitionTime": now.strftime(fmt)} for t in ("Ready", "ContainersReady")]
    core.patch_namespaced_pod_status(pod.metadata.name, pod.metadata.namespace,
                                     {"status": {"phase": "Succeeded", "containerStatuses": statuses, "conditions": conds}})


def step(core: client.CoreV1Api, namespace: str, speeds: Mapping[str, float], default_speed: float, noise: float) -> int:
    """End every simulated task whose true duration is over; returns how many."""
    n = 0
    now = datetime.now(UTC)
    for pod in core.list_namespaced_pod(namespace, field_selector="status.phase=Running").items:
        if pod.metadata.deletion_timestamp:
            continue
        d = true_duration(pod, speeds, default_speed, noise)
        started = _started(pod)
        if d is None or started is None or (now - started).total_seconds() < d:
            continue
        try:
            complete(core, pod, started, now)
            n += 1
        except ApiException as e:
            if e.status not in (404, 409, 422):
                raise
    return n


def run(core: client.CoreV1Api, namespace: str, speeds: Mapping[str, float], default_speed: float = 1.0, noise: float = 0.1,
        stop: threading.Event | None = None, interval: float = 0.25) -> None:
    stop = stop or threading.Event()
    while not stop.is_set():
        try:
            step(core, namespace, speeds, default_speed, noise)
        except ApiException as e:  # the namespace going away at the end of a test
            if e.status != 404:
                print(f"task_sim: {e.status} {e.reason}", flush=True)
        stop.wait(interval)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--namespace", required=True)
    ap.add_argument("--speed", action="append", default=[], metavar="NODE=FACTOR", help="true speed of a node (repeat)")
    ap.add_argument("--default-speed", type=float, default=1.0)
    ap.add_argument("--noise", type=float, default=0.1)
    args = ap.parse_args()
    config.load_kube_config()
    speeds = {k: float(v) for k, v in (s.split("=", 1) for s in args.speed)}
    try:
        run(client.CoreV1Api(), args.namespace, speeds, args.default_speed, args.noise)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
