"""Fair-yield groups' Kubernetes side (moved from ``yield_groups``; split below)."""

from . import handlers as handlers  # noqa: F401  (registers the Kopf handlers)
