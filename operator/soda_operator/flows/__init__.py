"""Flows: routing and backlogging flows of multi-step batch jobs across node pools and member clusters."""

from . import handlers  # noqa: F401  (the Kopf handlers register on import)
