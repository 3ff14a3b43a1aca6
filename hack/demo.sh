#!/usr/bin/env bash
# make demo: the whole story on the local control plane, non-interactive.
#  1. start the control plane with a labelled topology and show the nodes (rack, zone, mips);
#  2. show offline what SODA would do (kubesoda plan);
#  3. install the CRDs, start the operator and the extender (kubesoda run), apply the examples
#     with kubectl and watch admission and placement (printer columns, pods on planned nodes);
#     the fluid data plane (kubesoda simulate) plays the PEs and the local Prometheus scrapes it,
#     so each job shows its observed importance next to the projected one;
#  3c. with a real node (KUBESODA_REAL_NODES, default 1 when run as root): a real pipeline of the
#     example PEs whose transform's tuple rate changes when kubesoda resizes its CPU in place;
#  4. remove 6 of the 8 nodes and watch the plan move: the rank-2 job is rejected at the waterline,
#     the required job keeps running (the same jobs on 2 nodes, offline: kubesoda plan says so too);
#  5. stop the operator; the cluster stays up (make cluster-down stops it).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
state="${KUBESODA_STATE:-$repo/.local/cluster}"
kubesoda="$repo/.venv/bin/kubesoda"
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

if [ -z "${KUBESODA_REAL_NODES:-}" ]; then
  if [ "$(id -u)" = 0 ]; then export KUBESODA_REAL_NODES=1; else
    echo "(not root: no real node, step 3c is skipped; KUBESODA_REAL_NODES=0 silences this)"; fi
fi
"$here/cluster-up.sh" "${TOPOLOGY:-$here/topologies/small.yaml}"
# shellcheck disable=SC1091
source "$state/env"

say "1. nodes of the local control plane (KWOK), with their SODA labels"
kubectl get nodes -o custom-columns='NAME:.metadata.name,ZONE:.metadata.labels.topology\.kubernetes\.io/zone,RACK:.metadata.labels.kubesoda\.io/rack,MIPS/CORE:.metadata.labels.kubesoda\.io/mips-per-core,CPU:.status.allocatable.cpu,READY:.status.conditions[?(@.type=="Ready")].status'

say "2. offline: kubesoda plan -f examples/nodes/small-8.yaml -f examples/alternatives"
"$kubesoda" plan -f "$repo/examples/nodes/small-8.yaml" -f "$repo/examples/alternatives" --deadline-scale 0.2

say "3. install the CRDs and a SchedulingPolicy with short epochs, start the operator + extender"
kubectl apply -f "$repo/crds" >/dev/null
kubectl wait --for=condition=Established crd --all --timeout=60s >/dev/null
kubectl apply -f - >/dev/null <<'YAML'
apiVersion: kubesoda.io/v1alpha1
kind: SchedulingPolicy
metadata: {name: default}
spec: {macroEpochSeconds: 8, microEpochSeconds: 2, macroQDeadlineSeconds: 1, macroWDeadlineSeconds: 1, observation: {windowSeconds: 6}}
YAML
observe=()
sim=""
if [ -n "${KUBESODA_PROMETHEUS_URL:-}" ]; then
  "$kubesoda" simulate --port "$KUBESODA_SIMULATOR_PORT" >"$state/logs/simulate.log" 2>&1 &
  sim=$!
  observe=(--prometheus-url "$KUBESODA_PROMETHEUS_URL")
fi
health="http://127.0.0.1:$((KUBESODA_API_PORT + 18))/healthz"  # base+20: free in the plane's port range
"$kubesoda" run --extender-port "$KUBESODA_EXTENDER_PORT" --liveness "$health" "${observe[@]}" >"$state/logs/operator.log" 2>&1 &
op=$!
echo "$op" >"$state/pids/operator"
trap 'kill $op $sim 2>/dev/null || true' EXIT
wait_for() {  # seconds what command...: poll until the command succeeds
  local deadline=$((SECONDS + $1)) what=$2; shift 2
  until "$@" >/dev/null 2>&1; do
    if [ $SECONDS -ge $deadline ]; then echo "demo: timed out waiting for $what (operator log: $state/logs/operator.log)" >&2; exit 1; fi
    sleep 1
  done
}
healthy() { curl -sf "$health"; }
wait_for 60 "the operator's /healthz" healthy
kubectl create namespace demo --dry-run=client -o yaml | kubectl apply -f - >/dev/null
kubectl apply -n demo -f "$repo/examples/small-pipeline" -f "$repo/examples/alternatives" -f "$repo/examples/glued"
echo "-- as soon as the first macro epoch has decided (a phase on every job):"
phases() { [ "$(kubectl get streamjobs -n demo -o jsonpath='{range .items[*]}{.status.phase}{"\n"}{end}' | grep -c .)" -eq 4 ]; }
wait_for 60 "a phase on every StreamJob" phases
kubectl get streamjobs -n demo
echo "-- once every job's pods run on their planned nodes:"
kubectl wait -n demo --for=jsonpath='{.status.phase}'=Running streamjob --all --timeout=120s >/dev/null
kubectl get streamjobs -n demo
echo
kubectl get pods -n demo --sort-by=.metadata.name -o custom-columns='POD:.metadata.name,PE:.metadata.labels.kubesoda\.io/pe,PLANNED:.metadata.annotations.kubesoda\.io/node,NODE:.spec.nodeName,FRACTION:.metadata.annotations.kubesoda\.io/fraction,CPU:.spec.containers[0].resources.limits.cpu,STATUS:.status.phase'
if [ -n "$sim" ]; then
  say "3b. observed (through Prometheus, from the fluid data plane) next to projected importance"
  # warm-up: the simulator starts a PE's counters when its pod runs, Prometheus scrapes every few
  # seconds, and the operator evaluates a job once its observation window (windowSeconds: 6 here)
  # holds two samples of every PE; until then OBSERVED is empty rather than 0
  observed() { [ "$(kubectl get streamjobs -n demo -o jsonpath='{range .items[*]}{.status.observed.importance}{"\n"}{end}' | grep -c .)" -eq 4 ]; }
  wait_for 90 "an observed importance on every job" observed
  # then the first windows that see the steady rates: MeetsProjection turns True (60 s at most; the
  # table below says what it is either way)
  kubectl wait -n demo --for=condition=MeetsProjection streamjob/clicks streamjob/video streamjob/alerts --timeout=60s >/dev/null 2>&1 || true
  kubectl get streamjobs -n demo -o custom-columns='JOB:.metadata.name,PHASE:.status.phase,PROJECTED:.status.importance,OBSERVED:.status.observed.importance,INGEST/S:.status.observed.ingestRate,MEETS:.status.conditions[?(@.type=="MeetsProjection")].status'
fi

if kubectl get nodes -l type=real -o name | grep -q .; then
  say "3c. a real pipeline on the real node (examples/real-pipeline): its rate follows the CPU kubesoda gives it"
  "$repo/.venv/bin/python" "$here/build-image.py" pe-examples >/dev/null 2>&1
  kubectl apply -n demo -f "$repo/examples/real-pipeline/pipeline.yaml"
  mid() { kubectl get pod -n demo -l kubesoda.io/job=pipe,kubesoda.io/pe=mid -o jsonpath="$1" 2>/dev/null; }
  rate() {  # tuples/s the transform receives over 6 s, from its own /metrics
    "$repo/.venv/bin/python" - "$(mid '{.items[0].status.podIP}')" <<'PY'
import sys, time, urllib.request
from prometheus_client.parser import text_string_to_metric_families
def n():
    text = urllib.request.urlopen(f"http://{sys.argv[1]}:9100/metrics", timeout=5).read().decode()
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == "kubesoda_pe_tuples_received_total")
a, t = n(), time.monotonic(); time.sleep(6); print(f"{(n() - a) / (time.monotonic() - t):.1f}")
PY
  }
  for _ in $(seq 1 60); do r=$(rate 2>/dev/null || true); [ -n "$r" ] && [ "${r%.*}" -gt 0 ] && break; sleep 2; done
  sleep 5  # past the start-up
  echo "transform alone:        CPU limit $(mid '{.items[0].status.containerStatuses[0].resources.limits.cpu}'), $(rate) tuples/s"
  kubectl apply -n demo -f "$repo/examples/real-pipeline/rival.yaml"
  before=$(mid '{.items[0].spec.containers[0].resources.limits.cpu}')
  for _ in $(seq 1 60); do [ "$(mid '{.items[0].status.containerStatuses[0].resources.limits.cpu}')" != "$before" ] && break; sleep 1; done
  sleep 2
  echo "with a rival worth 100x: CPU limit $(mid '{.items[0].status.containerStatuses[0].resources.limits.cpu}'), $(rate) tuples/s (restarts: $(mid '{.items[0].status.containerStatuses[0].restartCount}'))"
  kubectl delete -n demo -f "$repo/examples/real-pipeline" --wait=false >/dev/null
fi

say "4. lose 6 of the 8 nodes: the plan moves; video (rank 2) is rejected, clicks (required) stays"
# the real node (3c) is cordoned meanwhile, so 2 nodes of 4 cores are left as in `kubesoda plan` with
# 2 nodes (the planner leaves cordoned nodes out); step 5 uncordons it
kubectl cordon -l type=real >/dev/null 2>&1 || true  # none without a real node
kubectl get nodes -l type!=real -o name | sort | tail -6 | xargs kubectl delete --wait=false
kubectl wait -n demo --for=jsonpath='{.status.phase}'=Rejected streamjob/video --timeout=120s >/dev/null
kubectl wait -n demo --for=jsonpath='{.status.phase}'=Running streamjob/clicks --timeout=120s >/dev/null
kubectl get streamjobs -n demo
kubectl get pods -n demo --sort-by=.metadata.name -o custom-columns='POD:.metadata.name,NODE:.spec.nodeName,CPU:.spec.containers[0].resources.limits.cpu,STATUS:.status.phase'
echo
kubectl get events -n demo --field-selector involvedObject.kind=StreamJob --sort-by=.lastTimestamp \
  -o custom-columns='JOB:.involvedObject.name,REASON:.reason,MESSAGE:.message' | tail -8

say "5. restoring the nodes; the operator stops here (kubesoda run to start it again)"
"$repo/.venv/bin/python" "$here/nodes.py" "${TOPOLOGY:-$here/topologies/small.yaml}"
kubectl uncordon -l type=real >/dev/null 2>&1 || true
echo "The cluster keeps running: export KUBECONFIG=$state/kubeconfig ; stop it with: make cluster-down"
