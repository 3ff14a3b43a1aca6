"""soda_optimizer: the SODA scheduler's mathematics (macroQ, macroW, microQ, microW), pure Python.

No Kubernetes import and no I/O anywhere in this package: it takes a :class:`~.model.Scenario`
and returns a :class:`~.plan.Plan`.
"""

from .model import Scenario
from .plan import Plan

__all__ = ["Plan", "Scenario"]
