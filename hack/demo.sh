#!/usr/bin/env bash
# make demo: start the local control plane with a labelled topology, show the nodes, then show
# what the SODA scheduler would do with the example workload (kubesoda plan, offline).
# The cluster stays up; stop it with `make cluster-down`.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
state="${KUBESODA_STATE:-$repo/.local/cluster}"
"$here/cluster-up.sh" "${TOPOLOGY:-$here/topologies/small.yaml}"
# shellcheck disable=SC1091
source "$state/env"
echo
echo "== nodes of the local control plane (KWOK), with their SODA labels"
kubectl get nodes -L topology.kubernetes.io/zone,kubesoda.io/rack,kubesoda.io/mips-per-core \
  -o custom-columns='NAME:.metadata.name,ZONE:.metadata.labels.topology\.kubernetes\.io/zone,RACK:.metadata.labels.kubesoda\.io/rack,MIPS/CORE:.metadata.labels.kubesoda\.io/mips-per-core,CPU:.status.allocatable.cpu,READY:.status.conditions[?(@.type=="Ready")].status'
if [ -d "$repo/examples" ] && [ -x "$repo/.venv/bin/kubesoda" ]; then
  for ex in "$repo"/examples/small-pipeline "$repo"/examples/alternatives; do
    [ -d "$ex" ] || continue
    echo
    echo "== kubesoda plan -f $(basename "$ex") (offline: what the scheduler would do)"
    "$repo/.venv/bin/kubesoda" plan -f "$ex" || true
  done
fi
echo
echo "The cluster keeps running: export KUBECONFIG=$state/kubeconfig ; stop it with: make cluster-down"
