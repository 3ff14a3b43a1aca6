"""Fair-yield groups' Kubernetes side: the virtual-cluster allocator of Stillwell, Schanzenbach,
Vivien & Casanova ("Resource allocation algorithms for virtualized service hosting platforms",
``papers/virtual-clusters-allocation.txt``; the pure part is :mod:`soda_optimizer.fair_yield`) for
ordinary pods, with the platform's own mechanism (docs/yield.md).

CRD kind: ``YieldGroup`` (namespaced, ``crds/yieldgroups.yaml``): the algorithm of the first
allocation, the migration budget, the epoch and the allocator's deadline. A pod of any controller
(or none) opts in with the scheduling gate ``kubesoda.io/yield`` and the label
``kubesoda.io/yield-group: <group>``; pods without the gate and without kubesoda's annotation are
never touched.

- :mod:`.spec` -- the YieldGroup's spec, typed and checked (errors name the field);
- :mod:`.tasks` -- a pod as the allocator's task: the opt-in gate, label and kubesoda's annotations;
- :mod:`.decide` -- the nodes' free capacity and the epoch's decision (calls the optimizer; pure);
- :mod:`.apply` -- the decision written to the pods (place, evict, resize);
- :mod:`.status` -- the group's status, its ``Allocated`` condition and its Events;
- :mod:`.handlers` -- the Kopf index of the groups' pods and the epoch timer.

Departures from the paper: hosts are not identical (each node offers what it has left, in units of
the largest node); a migration is an eviction that the pod's controller undoes gated, and a bare
pod is never moved.
"""

from . import handlers as handlers  # noqa: F401  (registers the Kopf handlers)
