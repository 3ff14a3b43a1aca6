"""SODA's Kubernetes side (the SODA paper, section 2's architecture, on Kubernetes): StreamJobs and
StreamTemplates in, PE pods, Services, resizes and statuses out.

- :mod:`.crd` -- objects <-> the optimizer's Scenario (the only place that knows both);
- :mod:`.indexes`, :mod:`.state` -- the watch-fed view an epoch plans from (:class:`~.state.Snapshot`);
- :mod:`.learning`, :mod:`.observe` -- the RFL's samples and Prometheus's rates (the learner runs
  before the managers and the policy, :func:`soda_optimizer.steps.prepare`);
- :mod:`.epochs`, :mod:`.loop` -- the macro and micro epochs and their timing;
- :mod:`.desired`, :mod:`.apply` -- Plan -> the objects that should exist -> writes;
- :mod:`.status` -- StreamJob statuses and their Events;
- :mod:`.handlers` -- Kopf handlers that wake the loops;
- :mod:`.extender` -- the kube-scheduler extender that binds each PE instance to its planned node.
"""
