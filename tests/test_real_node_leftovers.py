"""hack/real-node.sh's first step, ``clear-foreign``, on the host's real network stack (root).

Stop 57's CI failed because an earlier run, killed before its ``down``, left its bridges and
dummy links on the port base's addresses (10.<c>.0.0/16): their routes to the pod subnets took the
next run's pod traffic, so its pods ran but never reached each other or CoreDNS. ``up`` now clears
such leftovers of a dead run and refuses to start beside a live one, naming it. These tests build
the leftovers with ``ip link`` at port base 29900 (10.199.0.0/16, used by nothing else here) and run
the script itself; on main the subcommand does not exist and ``up`` never looked.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "hack" / "real-node.sh"
BASE = 29900
C = (BASE // 100) % 100 + 100
REGISTRY = Path("/run/kubesoda/real-nodes")

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or os.geteuid() != 0 or shutil.which("ip") is None,
    reason="needs root and iproute2 (links on the host)")


def tag_of(state: Path) -> str:
    return hashlib.sha256(str(state).encode()).hexdigest()[:8]


def links() -> set[str]:
    out = subprocess.run(["ip", "-o", "link", "show"], check=True, capture_output=True, text=True).stdout
    return {line.split(":")[1].strip().split("@")[0] for line in out.splitlines()}


def add_link(name: str, cidr: str) -> None:
    # a bridge without ports, as real-node.sh makes where the kernel has no dummy links
    subprocess.run(["ip", "link", "add", name, "type", "bridge"], check=True)
    subprocess.run(["ip", "addr", "add", cidr, "dev", name], check=True)


def clear_foreign(own_state: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KUBESODA_STATE": str(own_state), "KUBESODA_PORT_BASE": str(BASE),
           "KUBESODA_PYTHON": sys.executable}
    return subprocess.run([str(SCRIPT), "clear-foreign"], env=env, capture_output=True, text=True, timeout=60)


@pytest.fixture
def leftovers(tmp_path: Path) -> Iterator[tuple[Path, list[str]]]:
    """The links a killed run of the state dir ``tmp_path/other`` leaves: node 0's bridge (its pod
    subnet), its node address, the DNS address. Removed afterwards whatever the test did."""
    other = tmp_path / "other"
    t = tag_of(other)
    made = [f"ksb{t}0", f"ksd{t}0", f"ksn{t}"]
    add_link(made[0], f"10.{C}.0.1/24")
    add_link(made[1], f"10.{C}.255.1/32")
    add_link(made[2], f"10.{C}.255.254/32")
    try:
        yield other, made
    finally:
        for name in made:
            subprocess.run(["ip", "link", "del", name], capture_output=True)
        (REGISTRY / t).unlink(missing_ok=True)


def test_a_dead_runs_links_on_the_port_base_are_removed(tmp_path: Path, leftovers: tuple[Path, list[str]]) -> None:
    other, made = leftovers
    assert set(made) <= links()
    r = clear_foreign(tmp_path / "own")
    assert r.returncode == 0, r.stderr
    assert not set(made) & links()
    assert "leftovers of a run that was not stopped" in r.stderr


def test_a_dead_runs_own_teardown_runs_when_its_state_dir_is_known(tmp_path: Path,
                                                                  leftovers: tuple[Path, list[str]]) -> None:
    other, made = leftovers
    node = other / "realnode-0"
    (node / "pids").mkdir(parents=True)
    dead = subprocess.Popen(["true"])
    dead.wait()
    (node / "pids" / "kubelet").write_text(str(dead.pid))  # a pid file its process outlived
    REGISTRY.mkdir(parents=True, exist_ok=True)
    (REGISTRY / tag_of(other)).write_text(str(other))
    r = clear_foreign(tmp_path / "own")
    assert r.returncode == 0, r.stderr
    assert not set(made) & links()
    assert not node.exists(), "its own `down` removes the node dir"
    assert not (REGISTRY / tag_of(other)).exists()


def test_a_live_run_on_the_same_port_base_is_an_error_that_names_it(tmp_path: Path,
                                                                    leftovers: tuple[Path, list[str]]) -> None:
    other, made = leftovers
    (other / "pids").mkdir(parents=True)
    # a process whose command line names the state dir, as a running CoreDNS's does
    live = subprocess.Popen(["sh", "-c", "sleep 60", f"{other}/coredns/Corefile"])
    try:
        (other / "pids" / "coredns").write_text(str(live.pid))
        REGISTRY.mkdir(parents=True, exist_ok=True)
        (REGISTRY / tag_of(other)).write_text(str(other))
        r = clear_foreign(tmp_path / "own")
        assert r.returncode == 1
        assert str(other) in r.stderr and "KUBESODA_PORT_BASE" in r.stderr
        assert set(made) <= links(), "a live run's links are left alone"
    finally:
        live.kill()
        live.wait()


def test_links_of_its_own_state_dir_and_of_other_port_bases_are_not_touched(tmp_path: Path) -> None:
    own = tmp_path / "own"
    mine = f"ksb{tag_of(own)}0"
    elsewhere = f"ksb{uuid.uuid4().hex[:8]}0"
    add_link(mine, f"10.{C}.0.1/24")
    add_link(elsewhere, f"10.{C - 1}.0.1/24")  # another port base's block
    try:
        r = clear_foreign(own)
        assert r.returncode == 0, r.stderr
        assert {mine, elsewhere} <= links()
    finally:
        for name in (mine, elsewhere):
            subprocess.run(["ip", "link", "del", name], capture_output=True)
