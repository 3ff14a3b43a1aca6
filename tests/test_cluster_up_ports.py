"""hack/cluster-up.sh refuses a port base whose ports another process holds, naming the port and the
process, before it starts anything (a killed run's etcd or another checkout's cluster on the same
base would make a component exit on a bind error, or answer in its place). On main it went on to
start etcd and the API server, which failed on the bind later with no word of who held the port."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BASE = 29700  # its ports (29700-29719) are used by nothing else here

pytestmark = pytest.mark.skipif(sys.platform != "linux" or shutil.which("ss") is None, reason="needs Linux and ss (iproute2)")


@pytest.mark.parametrize("offset", [2, 15])  # the API server's port; a real node's kubelet range
def test_a_port_held_by_another_process_is_named_and_nothing_starts(tmp_path: Path, offset: int) -> None:
    state = tmp_path / "cluster"
    with socket.socket() as held:
        held.bind(("127.0.0.1", BASE + offset))
        held.listen()
        env = {**os.environ, "KUBESODA_STATE": str(state), "KUBESODA_PORT_BASE": str(BASE)}
        r = subprocess.run([str(REPO / "hack" / "cluster-up.sh")], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stderr[-2000:]
    assert f"port {BASE + offset}: " in r.stderr and f"pid={os.getpid()}" in r.stderr
    assert "KUBESODA_PORT_BASE" in r.stderr
    assert not (state / "pki").exists(), "nothing was started or generated"
