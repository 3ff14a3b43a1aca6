#!/usr/bin/env bash
# Crash and restart one process of the local control plane (fault tests, e2e/test_faults.py):
#   hack/restart.sh COMPONENT [SECONDS_DOWN]
# COMPONENT is one of etcd, kube-apiserver, kube-controller-manager, default-scheduler,
# kubesoda-scheduler, kwok. The process gets SIGKILL (no chance to clean up), stays down for
# SECONDS_DOWN (default 0) and is started again with the command line cluster-up.sh used; the
# script returns once etcd or the API server answers again.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
state="${KUBESODA_STATE:-$(dirname "$here")/.local/cluster}"
name="${1:?component}"; down="${2:-0}"
[ -f "$state/cmd/$name" ] || { echo "[restart] no $name in $state (was it started by cluster-up.sh?)" >&2; exit 2; }
pid="$(cat "$state/pids/$name")"
kill -9 "$pid" 2>/dev/null || true
for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
sleep "$down"
mapfile -d '' args <"$state/cmd/$name"
nohup "${args[@]}" >>"$state/logs/$name.log" 2>&1 &
echo $! >"$state/pids/$name"
pki="$state/pki"
etcd_url=""
for ((i = 0; i < ${#args[@]} - 1; i++)); do
  [ "${args[$i]}" = --listen-client-urls ] && etcd_url="${args[$((i + 1))]}"
done
for _ in $(seq 1 450); do
  case "$name" in
    etcd) curl -sf "${etcd_url}/health" >/dev/null 2>&1 && break ;;
    kube-apiserver) curl -sf --cacert "$pki/ca.crt" --cert "$pki/admin.crt" --key "$pki/admin.key" \
          "$(sed -n 's/.*server: "\(https[^"]*\)".*/\1/p' "$state/admin.kubeconfig")/readyz" >/dev/null 2>&1 && break ;;
    *) break ;;
  esac
  sleep 0.2
done
echo "[restart] $name restarted (pid $(cat "$state/pids/$name"))" >&2
