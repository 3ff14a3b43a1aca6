#!/usr/bin/env bash
# Run a command against a cluster: the one KUBECONFIG names when it is set and answers, else a
# fresh local control plane (hack/cluster-up.sh) that is torn down afterwards, even on failure.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [ -n "${KUBECONFIG:-}" ] && kubectl get --raw /readyz >/dev/null 2>&1; then
  exec "$@"
fi
export KUBESODA_STATE="${KUBESODA_STATE:-$(dirname "$here")/.local/cluster-e2e}"
export KUBESODA_PORT_BASE="${KUBESODA_PORT_BASE:-27100}"
trap '"$here/cluster-down.sh"' EXIT
"$here/cluster-up.sh" "${KUBESODA_TOPOLOGY:-$here/topologies/small.yaml}" || exit 1
# shellcheck disable=SC1091
source "$KUBESODA_STATE/env"
"$@"
