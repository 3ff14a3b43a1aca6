"""What every allocation system's Kubernetes side shares, owned once.

- :mod:`.api` -- the API group, retried writes, raw writes and JSON lists;
- :mod:`.errors` -- :class:`~.errors.TranslationError`, the one error that names an object's field;
- :mod:`.events` -- the one Event path (always posted through the API: Kopf's poster drops Normal
  Events below the operator's posting level);
- :mod:`.quantities` -- CPU and memory quantities, checked and lenient;
- :mod:`.clock` -- timestamps from and to the API's RFC 3339 strings;
- :mod:`.conditions` -- ``status.conditions`` as the API conventions write them;
- :mod:`.pods` -- trimmed copies for indexes, what a pod holds on its node, the pod index every
  system subtracts from the nodes;
- :mod:`.metrics` -- the Prometheus registry's metrics.

Nothing here knows an allocation system: each system's package (:mod:`..soda`, :mod:`..fair_yield`,
:mod:`..dispatch`, :mod:`..flows`) imports from here, never from a sibling.
"""
