"""A CoreV1Api stand-in that records what a handler writes, for the related systems' handler tests
(tests/*_op/): the pod patches and deletes, and the Events created through :mod:`soda_operator.kube.events`
with the namespace each was created in. The real API server's answers are the e2e suite's part."""

from __future__ import annotations

from typing import Any


class Response:
    """What ``kube.api.raw`` reads back from a write made with ``_preload_content=False``."""

    status = 201

    def read(self) -> bytes:
        return b"{}"

    def release_conn(self) -> None:
        pass


class RecordingCore:
    api_client = None

    def __init__(self) -> None:
        self.patches: list[tuple[str, Any]] = []
        self.deleted: list[str] = []
        self.events: list[tuple[str, dict[str, Any]]] = []  # (namespace it was created in, body)

    def patch_namespaced_pod(self, name: str, namespace: str, body: Any, **_: Any) -> None:
        self.patches.append((name, body))

    def delete_namespaced_pod(self, name: str, namespace: str, **_: Any) -> None:
        self.deleted.append(name)

    def create_namespaced_event(self, namespace: str, body: dict[str, Any], **_: Any) -> Response:
        self.events.append((namespace, body))
        return Response()

    def bodies(self) -> list[dict[str, Any]]:
        """The Events' bodies, each checked to be created in the namespace it names."""
        assert all(ns == body["metadata"]["namespace"] for ns, body in self.events)
        return [body for _, body in self.events]
