#!/usr/bin/env bash
# Install what a real node of the local control plane needs (hack/real-node.sh): containerd, runc
# and the CNI plugins; with --image also debootstrap (hack/build-image.py). Idempotent: apt-get
# runs only when something is missing. Needs root.
#
#   hack/install-node-deps.sh [--image]
#
# On a host without apt, install the equivalents yourself: containerd >= 1.6 (its `containerd` and
# `ctr`), runc, the CNI reference plugins bridge, host-local and loopback (in /usr/lib/cni or
# /opt/cni/bin), iproute2 (`ip`), a C compiler with a static libc (`cc -static`, for the pause
# image) and, for images, debootstrap (Fedora: `dnf install containerd runc containernetworking-plugins
# glibc-static debootstrap`; Arch: `pacman -S containerd runc cni-plugins debootstrap`).
set -euo pipefail
log() { echo "[install-node-deps] $*" >&2; }
pkgs=(containerd runc containernetworking-plugins)
[ "${1:-}" = --image ] && pkgs+=(debootstrap)

cni_dir() { for d in /usr/lib/cni /opt/cni/bin; do [ -x "$d/bridge" ] && { echo "$d"; return 0; }; done; return 1; }
have() {  # package -> 0 when what it provides is present
  case $1 in
    containerd) command -v containerd >/dev/null && command -v ctr >/dev/null ;;
    runc) command -v runc >/dev/null ;;
    containernetworking-plugins) cni_dir >/dev/null ;;
    debootstrap) command -v debootstrap >/dev/null ;;
  esac
}
missing=()
for p in "${pkgs[@]}"; do have "$p" || missing+=("$p"); done
command -v cc >/dev/null || missing+=(gcc libc6-dev)
[ ${#missing[@]} -eq 0 ] && exit 0
if ! command -v apt-get >/dev/null; then
  log "missing: ${missing[*]}; no apt-get here: install them with the host's package manager (see the header of $0)"
  exit 1
fi
[ "$(id -u)" = 0 ] || { log "missing: ${missing[*]}; run as root"; exit 1; }
log "installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get install -y --no-install-recommends "${missing[@]}" >&2 || {
  apt-get update >&2 && apt-get install -y --no-install-recommends "${missing[@]}" >&2; }
# Debian's package enables a system containerd on hosts with systemd; real-node.sh runs its own
# per node and never uses the system one.
for p in "${pkgs[@]}"; do have "$p" || { log "$p still missing after apt-get"; exit 1; }; done
