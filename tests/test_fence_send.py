"""The fence at the client's send (issue 46): a write checks the fence at the last moment before its
request is built, so a thread that passed the applier's own check just before the process stalled
sends nothing once the stall has made the lease lapse. Against a port with nothing listening: a
request that got past the fence fails to connect (urllib3's error), one that did not raises Fenced."""

from __future__ import annotations

import socket
import threading

import pytest
import urllib3
from kubernetes import client

from soda_operator.kube.api import Fenced, fenced


def _api() -> client.CoreV1Api:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    cfg = client.Configuration()
    cfg.host = f"http://127.0.0.1:{port}"
    cfg.retries = 0
    return client.CoreV1Api(client.ApiClient(cfg))


POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}
SENT = (urllib3.exceptions.HTTPError, OSError)  # what a request that was sent meets here


def test_a_write_is_fenced_at_the_send_and_a_read_is_not():
    api = _api()
    with fenced(lambda: True):
        with pytest.raises(Fenced, match="POST .*/api/v1/namespaces/ns/pods: this replica"):
            api.create_namespaced_pod("ns", POD)
        with pytest.raises(Fenced):
            api.delete_namespaced_pod("p", "ns")
        with pytest.raises(SENT):
            api.read_namespaced_pod("p", "ns")  # reads are never fenced
    with pytest.raises(SENT):
        api.create_namespaced_pod("ns", POD)  # outside the block: sent


def test_the_fence_is_read_when_the_request_is_sent_not_when_the_call_began():
    """The applier's own check passed; the lease lapses while the call is on its way (the body being
    serialised, a retry's sleep, a stall): the send checks again and sends nothing."""
    api = _api()
    lapsed = threading.Event()
    real = client.ApiClient.sanitize_for_serialization

    def slow(self, obj):  # the lease lapses during the client's own work, after the call began
        lapsed.set()
        return real(self, obj)

    client.ApiClient.sanitize_for_serialization = slow  # type: ignore[method-assign]
    try:
        with fenced(lapsed.is_set):
            assert not lapsed.is_set()  # the first check would pass
            with pytest.raises(Fenced):
                api.create_namespaced_pod("ns", POD)
    finally:
        client.ApiClient.sanitize_for_serialization = real  # type: ignore[method-assign]


def test_only_the_threads_in_the_block_are_fenced():
    api = _api()
    seen: dict[str, BaseException] = {}

    def other() -> None:
        try:
            api.create_namespaced_pod("ns", POD)
        except BaseException as e:  # noqa: BLE001 - what it met is the result
            seen["other"] = e

    with fenced(lambda: True):
        t = threading.Thread(target=other)
        t.start()
        t.join(30)
    assert isinstance(seen["other"], SENT) and not isinstance(seen["other"], Fenced)
