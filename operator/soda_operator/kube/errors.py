"""The one error of an object's translation: names the field (as the CRD spells it) and says why."""

from __future__ import annotations


class TranslationError(ValueError):
    """A field of a Kubernetes object that cannot be taken: ``field`` names it as the CRD spells it
    (``spec.pes[0].minCpu``), ``message`` says why, ``reason`` is the CamelCase reason of the
    object's condition and Event."""

    def __init__(self, field: str, message: str, reason: str = "InvalidSpec"):
        super().__init__(message)
        self.field = field
        self.message = message
        self.reason = reason
