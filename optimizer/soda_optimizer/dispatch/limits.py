"""The range of every number a BatchDispatch holds, and the work caps of one decision derived from them (issue 45:
every tenant-writable number bounded in the schema; every decision bounded in work and time). One table for the
CRD's ``minimum``/``maximum`` (``crds/batchdispatches.yaml``; tests/dispatch_op/test_bd_bounds.py holds them
equal), the operator's own check of objects stored before the bounds (``soda_operator.dispatch.spec``) and the
caps of :mod:`..dispatch` decisions. Pure: no Kubernetes, no I/O.

The paper (Lin 2014) states no bounds. The trip counts of a decision are slots x Jobs: a slot of ``slotCPU`` on a
node of C cores gives C / slotCPU workers (3.4), so ``slotCPU: 1n`` on a 4-core node was 4e9 workers. Bounded here:

- ``slotCPU`` >= :data:`MIN_SLOT_CPU` (10m, refused below by the API server and by the operator), and a node offers
  at most as many slots as it can hold pods (its allocatable ``pods``), never more than :data:`MAX_SLOTS_PER_NODE`;
- one decision plans at most :data:`MAX_WORKERS` slots (the nodes in name order; the rest are reported capped);
- the policies stop at the decision's deadline (:data:`DEADLINE_S`, :func:`.base.budget`) before their next Job
  and return what they assigned so far.
"""

from __future__ import annotations

from ..bounds import MAX_CORES

MIN_SLOT_CPU = 0.01  #: cores (``10m``): the smallest slot
MAX_SLOT_CPU = MAX_CORES  #: cores: no slot is larger than the largest node
MAX_SLOTS_PER_NODE = 256  #: slots of one node, whatever its CPU (kubelet's default is 110 pods)
MAX_WORKERS = 8192  #: slots in one decision
DEADLINE_S = 1.0  #: seconds: one decision's budget (the policies stop before their next Job once it passed)

#: spec field (as the CRD spells it) -> (minimum, maximum); ``exclusiveMinimum`` where the CRD says so
RANGES: dict[str, tuple[float, float]] = {
    "reservation": (0.0, 1.0),
    "horizon": (0.0, 1e6),  # exclusive minimum: seconds of throughput
    "priorThroughput": (0.0, 1e9),  # exclusive minimum: work units per second of one slot
    "window": (1, 1000),  # observed task times kept per (kind, class)
    "intervalSeconds": (1.0, 86400.0),
}
EXCLUSIVE_MINIMUM = frozenset({"horizon", "priorThroughput"})

#: ``nodeSelector``: at most this many labels, each value at most a label value's length (Kubernetes': 63)
MAX_SELECTOR_LABELS = 64
MAX_LABEL_VALUE = 63

#: a Job annotation's number (priority, deadline, penalty, task work) beyond this magnitude is read as absent
MAX_ANNOTATION = 1e12
