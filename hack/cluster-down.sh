#!/usr/bin/env bash
# Stop the local control plane started by cluster-up.sh and delete its state (idempotent).
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
state="${KUBESODA_STATE:-$(dirname "$here")/.local/cluster}"
[ -d "$state/pids" ] || exit 0
KUBESODA_STATE="$state" "$here/real-node.sh" down  # real nodes first: their pods, mounts, links, cgroups
for c in operator prometheus kwok kubesoda-scheduler default-scheduler kube-controller-manager kube-apiserver etcd; do
  f="$state/pids/$c"
  [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null
done
for c in operator prometheus kwok kubesoda-scheduler default-scheduler kube-controller-manager kube-apiserver etcd; do
  f="$state/pids/$c"
  if [ -f "$f" ]; then
    pid=$(cat "$f")
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null
  fi
done
rm -rf "$state"
echo "[cluster-down] stopped ($state)" >&2
