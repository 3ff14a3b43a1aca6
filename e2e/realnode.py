"""Helpers of the real-node e2e tests (e2e/test_realnode.py, e2e/test_chart_realnode.py): which
nodes are real (hack/real-node.sh), and kubesoda's image on them (hack/build-image.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
IMAGE = "ghcr.io/kubesoda/kubesoda:dev"
PE_IMAGE = "ghcr.io/kubesoda/pe-examples:dev"  # examples/pe (hack/build-image.py pe-examples)
BUILD = {IMAGE: "kubesoda", PE_IMAGE: "pe-examples"}
NO_REAL_NODE = ("no real node in the cluster (every node has kwok.x-k8s.io/node=fake): "
                "start one with KUBESODA_REAL_NODES=1 hack/cluster-up.sh")


def real_nodes(kube: Any) -> list:
    """The Ready nodes without the KWOK annotation, by name."""
    nodes = [
        n
        for n in kube.core.list_node().items
        if (n.metadata.annotations or {}).get("kwok.x-k8s.io/node") != "fake"
        and any(c.type == "Ready" and c.status == "True" for c in (n.status.conditions or []))
    ]
    return sorted(nodes, key=lambda n: n.metadata.name)


def has_image(node: Any, image: str = IMAGE) -> bool:
    return any(name.endswith(image) for img in (node.status.images or []) for name in (img.names or []))


def ensure_image(nodes: list, fresh: bool = False, image: str = IMAGE) -> None:
    """Build kubesoda's image (or the example PEs', ``image=PE_IMAGE``) and load it into every real
    node of $KUBESODA_STATE unless each of ``nodes`` has it already (skip when it is missing and
    there is no state dir to load into). ``fresh``: build and load anyway when there is a state
    dir, so the image holds the current sources (hack/build-image.py reuses its archive when they
    have not changed)."""
    if all(has_image(n, image) for n in nodes) and not (fresh and os.environ.get("KUBESODA_STATE")):
        return
    if not os.environ.get("KUBESODA_STATE"):
        pytest.skip(f"{image} is not on every real node and KUBESODA_STATE is unset (load it yourself)")
    subprocess.run([sys.executable, str(REPO / "hack" / "build-image.py"), BUILD[image]], check=True, timeout=900)


def first_real_node(kube: Any, image: str = IMAGE) -> str:
    """The first real node's name, with ``image`` on it (skip the test when there is none)."""
    nodes = real_nodes(kube)
    if not nodes:
        pytest.skip(NO_REAL_NODE)
    ensure_image([nodes[0]], image=image)
    return str(nodes[0].metadata.name)


def cpu_quota_millicores(cgroup: Path | None) -> float | None:
    """The CFS quota of a container's cgroup directory (as e2e/test_realnode.container_cgroup finds
    it) in millicores: cgroup v1's ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` in the ``cpu``
    hierarchy beside ``cpuacct``'s, or v2's ``cpu.max``; None when the cgroup is not on this host or
    has no quota (-1, ``max``)."""
    if cgroup is None:
        return None
    v1 = Path(str(cgroup).replace("/cpuacct/", "/cpu/", 1))
    if (v1 / "cpu.cfs_quota_us").exists():
        quota, period = int((v1 / "cpu.cfs_quota_us").read_text()), int((v1 / "cpu.cfs_period_us").read_text())
    elif (cgroup / "cpu.max").exists():
        q, p = (cgroup / "cpu.max").read_text().split()
        if q == "max":
            return None
        quota, period = int(q), int(p)
    else:
        return None
    return None if quota < 0 else quota / period * 1000
