"""Deadline- and priority-aware dispatch of batch Jobs on heterogeneous nodes: the Kubernetes side (Lin, "Job
Dispatching and Scheduling under Heterogeneous Clusters", NTU master thesis, 2014, summarised in
papers/heterogeneous-dispatch.txt; the pure policies are :mod:`soda_optimizer.dispatch`; docs/dispatch.md).

Kinds: the namespaced ``BatchDispatch`` (``crds/batchdispatches.yaml``, short name ``bd``) holds the policy and its
parameters, and in its status the speed matrix and each Job's progress; ordinary ``batch/v1`` Jobs opt in with the
scheduling gate ``kubesoda.io/dispatch`` in their pod template and say priority, deadline and work in annotations.
Pods without the gate and without kubesoda's annotation are never touched.

- :mod:`.objects` -- Jobs, pods and Nodes as the paper's jobs, tasks and workers (3.1, 3.4, 3.5.1);
- :mod:`.spec` -- the BatchDispatch's spec, typed and checked, and its policy (3.5.2, 5.1-5.5);
- :mod:`.decide` -- one decision, pure: slots, the speed matrix, the policy's assignment, each Job's progress
  (3.5.2, 4.4);
- :mod:`.apply` -- the writes: release a gated pod onto its node, delete a lost one (3.5.3);
- :mod:`.status` -- the status, its ``Dispatching`` condition and the Events of a decision (3.5.1, 6.3.2);
- :mod:`.handlers` -- the Kopf indexes and the timer that glues the others (4.1).

Importing the package registers the handlers (``kubesoda run`` imports it in :mod:`..runner`).
"""

from . import handlers  # noqa: F401  (the Kopf handlers)
