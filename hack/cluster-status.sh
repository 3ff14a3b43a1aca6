#!/usr/bin/env bash
# Exit 0 when the local control plane in $KUBESODA_STATE answers /readyz.
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
state="${KUBESODA_STATE:-$(dirname "$here")/.local/cluster}"
[ -f "$state/env" ] || exit 1
# shellcheck disable=SC1091
source "$state/env"
kubectl get --raw /readyz >/dev/null 2>&1
