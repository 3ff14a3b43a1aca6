#!/usr/bin/env bash
# Create a kind cluster with kubesoda's node labels (needs Docker and kind; cannot run on the
# project's Docker-less CI machines, which use hack/cluster-up.sh instead). Then:
#   export KUBECONFIG=$(mktemp); kind get kubeconfig --name kubesoda > $KUBECONFIG; make e2e
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
kind create cluster --name "${KIND_CLUSTER:-kubesoda}" --config "$here/kind-config.yaml" --wait 120s
