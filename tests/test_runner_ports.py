"""``kubesoda run`` on a port another process holds (issue 48, item 4): one line naming the flag, raised before
anything is written to the cluster (``runner.listen`` runs first); the live check, with the ClusterKopfPeering
that is not created, is hack/readme-check.sh."""

from __future__ import annotations

import argparse
import socket

import pytest

from soda_operator import runner


@pytest.mark.parametrize("flag", ["extender_port", "metrics_port"])
def test_a_busy_port_is_one_error_naming_the_flag(flag):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        args = argparse.Namespace(**{flag: port})
        with pytest.raises(SystemExit) as e:
            runner.listen(args, loops=None)  # type: ignore[arg-type]  # no web view asked for
    msg = str(e.value.code)
    assert msg.startswith(f"error: --{flag.replace('_', '-')} {port}: ") and "address already in use" in msg.lower(), msg
    assert "\n" not in msg
