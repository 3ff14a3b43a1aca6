"""The flows' Kubernetes side: routing and backlogging flows of multi-step batch jobs across node pools and member
clusters (Montana & Zinky, "Optimizing Routing and Backlogs for Job Flows in a Distributed Computing Environment";
the pure planner is :mod:`soda_optimizer.flows`; docs/flows.md).

Kinds:

- ``FlowPool`` (cluster-scoped, ``crds/flowpools.yaml``): a cluster of the paper (section 2.2) -- nodes of this
  cluster matching ``spec.nodeSelector``, or a member cluster reached through a kubeconfig Secret
  (``spec.cluster.kubeconfigSecret``, optionally narrowed there by ``spec.nodeSelector``); ``spec.capacity`` per
  epoch (concurrent standard step Jobs, cycled) and ``spec.loadMap`` (normalised load -> throughput);
- ``JobFlow`` (namespaced, ``crds/jobflows.yaml``): a job flow (section 2.1) -- ordered ``spec.steps`` (a
  ``batch/v1`` Job template, a mean run time, the allowed pools), ``utility``, ``lifespanSeconds``, ``arrivals``
  (``forecast``: jobs per epoch, cycled; ``mode: forecast`` makes the operator create the jobs itself, a load
  generator; ``external`` uses the forecast for planning only), ``epochSeconds``, ``horizonEpochs``, ``planner``;
  a ``batch/v1`` Job labelled ``kubesoda.io/flow=<name>`` is an arrival (a request: suspended, its pod template run
  as step 0).

Modules, in the order data flows (objects -> settings -> plan -> actions -> writes, status):

- :mod:`.spec` -- JobFlow and FlowPool as typed, validated settings (field-named errors; the CRDs' defaults only);
- :mod:`.jobs` -- the step Jobs and requests in the clusters, and the flow jobs they add up to;
- :mod:`.decide` -- the planner's Problem from them, the plan, its current entries;
- :mod:`.route` -- one tick's actions by the plan (pure);
- :mod:`.manifests` -- step Jobs as manifests and patches (pure);
- :mod:`.apply` -- the writes, in this cluster and the member clusters, and the Events;
- :mod:`.status` -- JobFlow and FlowPool statuses and conditions, the counters;
- :mod:`.members`, :mod:`.kubeconfigs` -- member-cluster clients from kubeconfig Secrets (inline credentials only);
- :mod:`.handlers` -- the Kopf indexes and timers, the only module with Kopf decorators.

Importing the package registers the handlers (``runner`` imports it for that).
"""

from . import handlers, members  # noqa: F401  (the Kopf handlers register on import; runner builds members.Members)
