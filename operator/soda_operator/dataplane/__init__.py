"""The fluid data plane: what PE instances would do on a real cluster, computed instead of run.

:mod:`.model` is pure (no Kubernetes, no I/O); :mod:`.simulate` (``kubesoda simulate``) reads the
cluster, recomputes the model every interval and exports the PE metrics contract to Prometheus.
See docs/dataplane.md.
"""
