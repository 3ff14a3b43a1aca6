#!/usr/bin/env bash
# Build the pinned upstream control-plane binaries from Go modules into a cache outside the repo.
#
#   hack/build-binaries.sh            # build what is missing, print the bin directory
#
# Versions are pinned in hack/versions.env. The cache key is the version set, so a second run
# (or a second checkout) reuses the binaries and starts in seconds. Nothing is written inside the
# repository: the wrapper Go modules live in the cache too.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
source "$here/versions.env"

cache="${KUBESODA_CACHE:-$HOME/.cache/kubesoda}"
bin="$cache/bin/k8s-${K8S_VERSION}_etcd-${ETCD_VERSION}_kwok-${KWOK_VERSION}_helm-${HELM_VERSION}"
# binaries added later (Prometheus) live beside the others; their names carry their versions
mkdir -p "$bin"
export CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -mod=mod" GOTOOLCHAIN=local
log() { echo "[build-binaries] $*" >&2; }

build_k8s() {
  local mod="$cache/src/k8s-$K8S_VERSION" minor staging
  minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"
  local sv="v0.${K8S_VERSION#v1.}"
  mkdir -p "$mod"
  # Every staging module of k8s.io/kubernetes is replaced by its v0.X.Y tag (its go.mod points
  # them at ./staging, which does not exist in the module zip).
  staging=$(curl -fsSL "${GOPROXY_URL:-https://proxy.golang.org}/k8s.io/kubernetes/@v/$K8S_VERSION.mod" \
    | awk '/=> .\/staging\/src\// {print $1}' | sort -u)
  {
    echo "module kubesoda.local/k8sbins"
    echo
    echo "go 1.25"
    echo
    echo "require k8s.io/kubernetes $K8S_VERSION"
    echo
    echo "replace ("
    for m in $staging; do echo "	$m => $m $sv"; done
    echo ")"
  } >"$mod/go.mod"
  cat >"$mod/tools.go" <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
GO
  local ld="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/client-go/pkg/version.gitVersion=$K8S_VERSION"
  (cd "$mod" && go mod tidy -e >/dev/null 2>&1 || true
   cd "$mod" && for c in "$@"; do
     log "building $c $K8S_VERSION"
     go build -trimpath -ldflags "$ld" -o "$bin/$c.tmp" "k8s.io/kubernetes/cmd/$c" && mv "$bin/$c.tmp" "$bin/$c"
   done)
}

build_etcd() {
  local mod="$cache/src/etcd-$ETCD_VERSION"
  mkdir -p "$mod"
  cat >"$mod/go.mod" <<GOMOD
module kubesoda.local/etcdbin

go 1.25

require go.etcd.io/etcd/server/v3 $ETCD_VERSION

replace (
	go.etcd.io/etcd/api/v3 => go.etcd.io/etcd/api/v3 $ETCD_VERSION
	go.etcd.io/etcd/client/pkg/v3 => go.etcd.io/etcd/client/pkg/v3 $ETCD_VERSION
	go.etcd.io/etcd/client/v3 => go.etcd.io/etcd/client/v3 $ETCD_VERSION
	go.etcd.io/etcd/pkg/v3 => go.etcd.io/etcd/pkg/v3 $ETCD_VERSION
)
GOMOD
  cat >"$mod/tools.go" <<'GO'
//go:build tools

package tools

import _ "go.etcd.io/etcd/server/v3"
GO
  log "building etcd $ETCD_VERSION"
  (cd "$mod" && go mod tidy -e >/dev/null 2>&1 || true
   cd "$mod" && go build -trimpath -ldflags "-s -w" -o "$bin/etcd.tmp" go.etcd.io/etcd/server/v3 && mv "$bin/etcd.tmp" "$bin/etcd")
}

build_gobin() {  # name module-path version
  log "building $1 $3"
  GOBIN="$bin" go install -trimpath -ldflags "-s -w" "$2@$3"
}

need=()
for c in kube-apiserver kube-scheduler kube-controller-manager kubelet; do [ -x "$bin/$c" ] || need+=("$c"); done
[ ${#need[@]} -eq 0 ] || build_k8s "${need[@]}"
[ -x "$bin/etcd" ] || build_etcd
[ -x "$bin/kwok" ] || build_gobin kwok sigs.k8s.io/kwok/cmd/kwok "$KWOK_VERSION"
if [ -z "${SKIP_HELM:-}" ] && [ ! -x "$bin/helm" ]; then
  build_gobin helm "helm.sh/helm/v3/cmd/helm" "$HELM_VERSION"
fi
# Prometheus: the API and TSDB only (its web UI's assets need an npm build; the operator and the
# tests use the HTTP query API). Skipped with SKIP_PROMETHEUS=1.
if [ -z "${SKIP_PROMETHEUS:-}" ] && [ ! -x "$bin/prometheus-$PROMETHEUS_VERSION" ]; then
  log "building prometheus $PROMETHEUS_VERSION"
  tmp="$cache/src/prometheus-gobin"; mkdir -p "$tmp"
  # remove_all_sd: no service discovery (the local plane scrapes static targets); drops the cloud
  # SDKs, about a third of Prometheus's packages (1,517 -> 1,043 by go list -deps), from a cold build
  GOBIN="$tmp" go install -trimpath -tags remove_all_sd -ldflags "-s -w" "github.com/prometheus/prometheus/cmd/prometheus@$PROMETHEUS_VERSION"
  mv "$tmp/prometheus" "$bin/prometheus-$PROMETHEUS_VERSION"
fi
# CoreDNS: the real nodes' cluster DNS (hack/real-node.sh). Skipped with SKIP_COREDNS=1.
if [ -z "${SKIP_COREDNS:-}" ] && [ ! -x "$bin/coredns-$COREDNS_VERSION" ]; then
  # with only the plugins hack/real-node.sh's Corefile uses (and log, health, forward to debug it):
  # CoreDNS's own way to choose plugins at compile time is a main that imports them; all of them
  # would pull in every cloud DNS SDK (1,405 packages by go list -deps, 795 with these)
  log "building coredns $COREDNS_VERSION (plugins: bind errors log health ready kubernetes cache forward)"
  local_mod="$cache/src/coredns-$COREDNS_VERSION-min"; mkdir -p "$local_mod"
  printf 'module kubesoda.local/coredns\n\ngo 1.24\n\nrequire github.com/coredns/coredns %s\n' "$COREDNS_VERSION" >"$local_mod/go.mod"
  {
    echo "package main"; echo; echo "import ("
    echo '	"github.com/coredns/coredns/coremain"'
    for p in bind errors log health ready kubernetes cache forward; do echo "	_ \"github.com/coredns/coredns/plugin/$p\""; done
    echo ")"; echo; echo "func main() { coremain.Run() }"
  } >"$local_mod/main.go"
  (cd "$local_mod" && go mod tidy >/dev/null && go build -trimpath -ldflags "-s -w" -o "$bin/coredns-$COREDNS_VERSION.tmp" . \
     && mv "$bin/coredns-$COREDNS_VERSION.tmp" "$bin/coredns-$COREDNS_VERSION")
fi
for c in kube-apiserver kube-scheduler kube-controller-manager etcd kwok; do
  [ -x "$bin/$c" ] || { log "missing $bin/$c after build"; exit 1; }
done
echo "$bin"
