"""Prometheus metrics of the operator and the extender."""

from __future__ import annotations

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    start_http_server,
)

STAGE_SECONDS = Histogram("kubesoda_stage_seconds", "Duration of each optimizer stage", ["stage"], buckets=(0.01, 0.05, 0.1, 0.5, 1, 2, 5, 10, 30))
EPOCH_SECONDS = Histogram("kubesoda_epoch_seconds", "Duration of a macro or micro epoch (snapshot to applied)", ["epoch"], buckets=(0.05, 0.1, 0.5, 1, 2, 5, 10, 30, 60))
IMPORTANCE = Gauge("kubesoda_projected_importance", "Projected importance of the current plan")
IMPORTANCE_BOUND = Gauge("kubesoda_importance_bound", "An upper bound of the best importance any plan could project (macroQ's)")
IMPORTANCE_BOUND_PROVEN = Gauge("kubesoda_importance_bound_proven",
                                "1: kubesoda_importance_bound is proven; 0: an estimate (some curves greedy), possibly below the best")
IMPORTANCE_GAP = Gauge("kubesoda_importance_gap", "(bound - projected importance) / bound: how far the current plan may be from the best")
YIELD_MIN = Gauge("kubesoda_yield_min", "A YieldGroup's minimum yield at its last epoch", ["namespace", "group"])
YIELD_BOUND = Gauge("kubesoda_yield_bound", "A proven upper bound on a YieldGroup's optimal minimum yield (the anytime allocator's; -1: none)", ["namespace", "group"])
YIELD_GAP = Gauge("kubesoda_yield_gap", "(bound - minimum yield) / bound of a YieldGroup's last epoch: how far it may be from the optimum (-1: no bound)", ["namespace", "group"])
YIELD_BLOCKED = Counter("kubesoda_yield_blocked_moves_total", "YieldGroup moves whose eviction the API server refused (a PodDisruptionBudget), retried next epoch", ["namespace", "group"])
FLOWS_GAP = Gauge("kubesoda_flows_gap", "(score - LP bound) / score of the last flow plan of an epoch length (eq. (2) of job-flow routing): how far it may be from the optimum (-1: no bound)", ["epoch_seconds"])
JOBS = Gauge("kubesoda_jobs", "StreamJobs by decision", ["decision"])
WRITES = Counter("kubesoda_writes_total", "Write requests the SODA loops made to the API server, by kind (pod_create, pod_delete, pod_resize, "
                 "pod_annotate, service_create, service_delete, job_status, template_status, policy_status, event)", ["kind"])
POD_CREATES = Counter("kubesoda_pod_creates_total", "Pod create requests the SODA loops sent, by the API server's answer: created, "
                      "exists (409 AlreadyExists: the pod is there, not retried), retried (429/5xx, sent again), failed", ["result"])
PATCHES = Counter("kubesoda_pod_changes_total", "Pod changes applied", ["kind"])  # create, resize, delete
NODES_HELD = Gauge("kubesoda_nodes_held", "NotReady nodes whose PE pods keep their place (within their pods' grace, or in a disrupted zone; issue 46)")
DELETIONS_PAUSED = Gauge("kubesoda_deletions_paused", "1 while a zone is disrupted (no Ready node, or at least 55% NotReady): PE pods on NotReady nodes are never deleted")
RESIZES_REFUSED = Counter("kubesoda_resizes_refused_total", "Pod resizes the API server refused (each retried with a per-pod backoff, 10 s doubling to 300 s)")
RESIZES_NOT_IN_FORCE = Gauge("kubesoda_resizes_not_in_force", "PE pods whose CPU is not what was asked, by reason (Refused, Deferred, Infeasible, InProgress)", ["reason"])
LEADER = Gauge("kubesoda_leader", "1 while this replica runs the SODA loops (it won the peering election, or runs standalone)")
EPOCH_INFEASIBLE = Counter("kubesoda_epoch_infeasible_total", "Macro epochs whose plan was infeasible (the last feasible plan was kept)")
QUARANTINED = Gauge("kubesoda_quarantined_jobs", "StreamJobs the pipeline guard set aside because planning failed with them (status reason Quarantined)")
INVALID_OBJECTS = Gauge("kubesoda_invalid_objects", "Objects the last macro epoch left out of planning, by kind and reason (InvalidSpec, Quarantined)", ["kind", "reason"])
GUARD_RUNS = Counter("kubesoda_guard_runs_total", "Extra planning runs the pipeline guard made to find the jobs a failing plan came from")
EPOCH_FAILURES = Counter("kubesoda_epoch_failures_total", "Epochs that raised (logged and retried at the next tick)")
REFRESH_FAILURES = Counter("kubesoda_refresh_failures_total", "Running refreshes that raised (logged and retried 2 s later)")
SNAPSHOTS = Counter("kubesoda_snapshots_total", "Epoch snapshots, by source: the watch-fed indexes, or lists from the API server", ["source"])
OBSERVED_IMPORTANCE = Gauge("kubesoda_observed_importance", "Importance of the admitted jobs evaluated on the rates observed through Prometheus (0 without --prometheus-url)")
JOB_IMPORTANCE = Gauge("kubesoda_job_importance", "A job's importance, projected by the plan or observed through Prometheus", ["namespace", "streamjob", "kind"])
OBSERVATION_ERRORS = Counter("kubesoda_observation_errors_total", "Micro epochs whose Prometheus queries failed (the last observations were kept)")
EXTENDER_ERRORS = Counter("kubesoda_extender_errors_total", "Extender requests refused, by HTTP status (400 bad body, 404 unknown verb, 408 slow body, 413 too large)", ["code"])
EXTENDER_LATENCY = Histogram("kubesoda_extender_seconds", "Extender request latency", ["verb"], buckets=(0.0005, 0.001, 0.005, 0.01, 0.05, 0.1))


def exposition() -> tuple[bytes, str]:
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST


def serve(host: str, port: int) -> None:
    """Serve /metrics on its own port (the operator without the extender, e.g. in the chart)."""
    start_http_server(port, addr=host)
