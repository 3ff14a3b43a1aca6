"""Deadline dispatch's Kubernetes side (placeholder while the module is split)."""

from . import decide  # noqa: F401  (its Kopf handlers)
