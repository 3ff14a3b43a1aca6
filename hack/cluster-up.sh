#!/usr/bin/env bash
# Start a real Kubernetes control plane on loopback from the cached pinned binaries:
# etcd, kube-apiserver (RBAC), kube-controller-manager, two kube-schedulers (default-scheduler,
# and kubesoda, which calls the kubesoda extender) and the KWOK controller, then create the
# KWOK nodes of a topology file.
#
#   hack/cluster-up.sh [hack/topologies/small.yaml]
#
# State (certs, etcd data, logs, pids, kubeconfig, env) lives in $KUBESODA_STATE (default
# <repo>/.local/cluster). Ports are KUBESODA_PORT_BASE+0..9 (default 27000; +8 Prometheus, +9 the data plane), so a second copy with
# another base and state dir does not clash. `source $KUBESODA_STATE/env` gives KUBECONFIG and
# KUBESODA_EXTENDER_PORT.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
topology="${1:-$here/topologies/small.yaml}"
state="${KUBESODA_STATE:-$repo/.local/cluster}"
base="${KUBESODA_PORT_BASE:-27000}"
py="${KUBESODA_PYTHON:-$repo/.venv/bin/python}"
log() { echo "[cluster-up] $*" >&2; }
# the KWOK nodes' lease duration (see the kwok start below): KWOK renews at a quarter of it, and the
# controller manager marks a node NotReady after 50 s without a renewal
lease="${KUBESODA_KWOK_LEASE_SECONDS:-40}"
if ! [[ "$lease" =~ ^[0-9]+$ ]] || [ "$lease" -lt 1 ] || [ "$lease" -ge 200 ]; then
  log "KUBESODA_KWOK_LEASE_SECONDS=$lease: want whole seconds from 1 to 199 (renewed every quarter, under the 50 s grace period)"; exit 2
fi

if [ -f "$state/env" ] && "$here/cluster-status.sh" >/dev/null 2>&1; then
  log "already running ($state)"; exit 0
fi
"$here/cluster-down.sh" >/dev/null 2>&1 || true
# Every port of this base must be free (base+0..9, and base+10..19 for real nodes): a process of
# another run on it (a killed CI job's etcd, another checkout's cluster) would make a component
# exit on a bind error or, worse, answer in its place. Name the holder instead.
if command -v ss >/dev/null 2>&1; then
  busy=$(ss -Hltnp 2>/dev/null | awk -v lo="$base" -v hi=$((base + 19)) \
    '{n = split($4, a, ":"); p = a[n] + 0; if (p >= lo && p <= hi) { u = $6; sub(/^users:\(\(/, "", u); sub(/\)\)$/, "", u); print "  port " p ": " u }}' | sort -u)
  if [ -n "$busy" ]; then
    log "ports of KUBESODA_PORT_BASE=$base ($base-$((base + 19))) are in use:"
    echo "$busy" >&2
    log "stop what holds them (another cluster: KUBESODA_STATE=<its dir> hack/cluster-down.sh) or choose another KUBESODA_PORT_BASE"
    exit 1
  fi
fi
t0=$(date +%s)
bin="$("$here/build-binaries.sh")"
mkdir -p "$state"/{pki,logs,pids,etcd}
etcd_port=$base; etcd_peer=$((base + 1)); api_port=$((base + 2)); kcm_port=$((base + 3))
kwok_port=$((base + 5)); ext_port=$((base + 6))
# base+8: Prometheus; base+9: the fluid data plane (`kubesoda simulate`) that Prometheus scrapes
prom_port=$((base + 8)); sim_port=$((base + 9))

# ---------------------------------------------------------------- certificates
pki="$state/pki"
if [ ! -f "$pki/admin.crt" ]; then
  log "generating certificates"
  (
    cd "$pki"
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -keyout ca.key -out ca.crt -subj "/CN=kubesoda-local-ca" 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -keyout apiserver.key -out apiserver.csr -subj "/CN=kube-apiserver" 2>/dev/null
    printf "subjectAltName=IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc\n" >san.ext
    openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 -out apiserver.crt -extfile san.ext 2>/dev/null
    client() {  # name CN O
      openssl req -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.csr" -subj "/CN=$2/O=$3" 2>/dev/null
      openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 -out "$1.crt" 2>/dev/null
    }
    client admin kubesoda-admin system:masters
    client controller-manager system:kube-controller-manager system:kube-controller-manager
    client scheduler system:kube-scheduler system:kube-scheduler
    client kwok kwok-controller system:masters
    openssl genrsa -out sa.key 2048 2>/dev/null
    openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
  )
fi
if [ ! -f "$pki/extender.crt" ]; then
  # the kubesoda extender serves HTTPS with this certificate; kube-scheduler checks it against the
  # CA and presents its own client certificate (scheduler.crt), which the extender requires
  (
    cd "$pki"
    openssl req -newkey rsa:2048 -nodes -keyout extender.key -out extender.csr -subj "/CN=kubesoda-extender" 2>/dev/null
    printf "subjectAltName=IP:127.0.0.1,DNS:localhost\n" >extender-san.ext
    openssl x509 -req -in extender.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 -out extender.crt -extfile extender-san.ext 2>/dev/null
  )
fi
kubeconfig() {  # name
  cat >"$state/$1.kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters:
- name: kubesoda-local
  cluster: {server: "https://127.0.0.1:$api_port", certificate-authority: "$pki/ca.crt"}
users:
- name: $1
  user: {client-certificate: "$pki/$1.crt", client-key: "$pki/$1.key"}
contexts:
- name: kubesoda-local
  context: {cluster: kubesoda-local, user: $1}
current-context: kubesoda-local
KC
}
for n in admin controller-manager scheduler kwok; do kubeconfig "$n"; done
cp "$state/admin.kubeconfig" "$state/kubeconfig"

start() {  # name args...  (the command line is kept for hack/restart.sh)
  local name=$1; shift
  mkdir -p "$state/cmd"
  printf '%s\0' "$@" >"$state/cmd/$name"
  nohup "$@" >"$state/logs/$name.log" 2>&1 &
  echo $! >"$state/pids/$name"
}
wait_for() {  # description seconds command...
  local what=$1 secs=$2; shift 2
  for _ in $(seq 1 $((secs * 5))); do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; done
  log "timed out waiting for $what; see $state/logs"; tail -20 "$state"/logs/*.log >&2; exit 1
}

# ---------------------------------------------------------------- etcd + apiserver
# the audit log of the admin user's writes (the operator's, the tests'), at Metadata level: who wrote
# what when (e2e/test_leader.py reads it per replica, by user agent; KWOK's and the controllers' writes
# are not logged)
cat >"$state/audit-policy.yaml" <<'YAML'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  users: [kubesoda-admin]
  verbs: [create, update, patch, delete, deletecollection]
- level: None
YAML
start etcd "$bin/etcd" --name kubesoda --data-dir "$state/etcd" \
  --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
  --listen-peer-urls "http://127.0.0.1:$etcd_peer" --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer" \
  --initial-cluster "kubesoda=http://127.0.0.1:$etcd_peer" --quota-backend-bytes 4294967296 \
  --listen-metrics-urls "" --log-level warn
wait_for etcd 30 curl -sf "http://127.0.0.1:$etcd_port/health"

start kube-apiserver "$bin/kube-apiserver" \
  --etcd-servers "http://127.0.0.1:$etcd_port" \
  --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$api_port" \
  --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
  --client-ca-file "$pki/ca.crt" \
  --service-account-issuer https://kubernetes.default.svc.cluster.local \
  --service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key" \
  --service-cluster-ip-range 10.96.0.0/16 \
  --authorization-mode Node,RBAC \
  --enable-admission-plugins NamespaceLifecycle,ServiceAccount,DefaultTolerationSeconds,ResourceQuota,LimitRanger \
  --max-requests-inflight 1000 --max-mutating-requests-inflight 500 \
  --watch-cache=true --profiling="${KUBESODA_APISERVER_PROFILING:-false}" --v=1 \
  --audit-policy-file "$state/audit-policy.yaml" --audit-log-path "$state/logs/audit.log" \
  --audit-log-maxsize 200 --audit-log-maxbackup 1
wait_for kube-apiserver 90 curl -sf --cacert "$pki/ca.crt" --cert "$pki/admin.crt" --key "$pki/admin.key" "https://127.0.0.1:$api_port/readyz"

# ---------------------------------------------------------------- controller manager, scheduler, kwok
start kube-controller-manager "$bin/kube-controller-manager" \
  --kubeconfig "$state/controller-manager.kubeconfig" \
  --authentication-kubeconfig "$state/controller-manager.kubeconfig" \
  --authorization-kubeconfig "$state/controller-manager.kubeconfig" \
  --bind-address 127.0.0.1 --secure-port "$kcm_port" --leader-elect=false \
  --service-account-private-key-file "$pki/sa.key" --root-ca-file "$pki/ca.crt" \
  --use-service-account-credentials=true \
  --controllers '*,-nodeipam,-service-lb-controller,-cloud-node-lifecycle' \
  --kube-api-qps 200 --kube-api-burst 400 --v=1

for s in default-scheduler kubesoda-scheduler; do
  tmpl="$here/scheduler-config.yaml.tmpl"; port=$((base + 4))
  [ "$s" = default-scheduler ] && { tmpl="$here/default-scheduler-config.yaml.tmpl"; port=$((base + 7)); }
  sed -e "s#@KUBECONFIG@#$state/scheduler.kubeconfig#" -e "s#@EXTENDER_PORT@#$ext_port#" -e "s#@PKI@#$pki#g" "$tmpl" >"$state/$s.yaml"
  start "$s" "$bin/kube-scheduler" --config "$state/$s.yaml" \
    --authentication-kubeconfig "$state/scheduler.kubeconfig" \
    --authorization-kubeconfig "$state/scheduler.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$port" --v=1
done

# KUBESODA_KWOK_LEASE_SECONDS: the fake nodes' lease duration (KWOK renews at a quarter of it). The
# default, 40 s, is the kubelet's: 2,000 nodes then renew 200 leases a second, on the same cores as the
# API server here; the scale benchmark can state a longer one (it must stay under the controller
# manager's node-monitor grace period, 50 s, times 4).
start kwok "$bin/kwok" --kubeconfig "$state/kwok.kubeconfig" \
  --node-lease-duration-seconds "$lease" \
  --manage-nodes-with-annotation-selector kwok.x-k8s.io/node=fake \
  --server-address "127.0.0.1:$kwok_port" --config "$here/kwok.yaml"
sleep 1
for c in kwok kube-controller-manager default-scheduler kubesoda-scheduler; do
  kill -0 "$(cat "$state/pids/$c")" 2>/dev/null || { log "$c exited:"; tail -5 "$state/logs/$c.log" >&2; exit 1; }
done

# ---------------------------------------------------------------- prometheus
# A real Prometheus server: it scrapes the fluid data plane (`kubesoda simulate`, started by the e2e
# suite and the demo on $sim_port, labels kept as exported) every 2 s, so the operator's queries
# are the same on KWOK and on a real cluster. SKIP_PROMETHEUS=1 leaves it out.
if [ -z "${SKIP_PROMETHEUS:-}" ]; then
  source "$here/versions.env"
  mkdir -p "$state/prometheus"
  cat >"$state/prometheus.yml" <<PROM
global: {scrape_interval: 2s, scrape_timeout: 2s, evaluation_interval: 2s}
scrape_configs:
- job_name: kubesoda-dataplane
  honor_labels: true
  static_configs: [{targets: ["127.0.0.1:$sim_port"]}]
- job_name: prometheus
  static_configs: [{targets: ["127.0.0.1:$prom_port"]}]
PROM
  start prometheus "$bin/prometheus-$PROMETHEUS_VERSION" --config.file "$state/prometheus.yml" \
    --storage.tsdb.path "$state/prometheus" --storage.tsdb.retention.time 6h \
    --web.listen-address "127.0.0.1:$prom_port" --log.level warn
  wait_for prometheus 60 curl -sf "http://127.0.0.1:$prom_port/-/ready"
fi

cat >"$state/env" <<ENV
export KUBECONFIG=$state/kubeconfig
export KUBESODA_EXTENDER_PORT=$ext_port
export KUBESODA_API_PORT=$api_port
export KUBESODA_STATE=$state
export KUBESODA_EXTENDER_TLS_CERT=$pki/extender.crt
export KUBESODA_EXTENDER_TLS_KEY=$pki/extender.key
export KUBESODA_EXTENDER_TLS_CLIENT_CA=$pki/ca.crt
export KUBESODA_SIMULATOR_PORT=$sim_port
ENV
[ -n "${SKIP_PROMETHEUS:-}" ] || echo "export KUBESODA_PROMETHEUS_URL=http://127.0.0.1:$prom_port" >>"$state/env"
export KUBECONFIG="$state/kubeconfig"
wait_for "default service account" 60 kubectl get serviceaccount default -n default
"$py" "$here/nodes.py" --timeout "${KUBESODA_NODES_TIMEOUT:-180}" "$topology"
KUBESODA_STATE="$state" KUBESODA_PORT_BASE="$base" KUBESODA_PYTHON="$py" "$here/real-node.sh" up  # KUBESODA_REAL_NODES kubelets with containerd
log "up in $(( $(date +%s) - t0 ))s: export KUBECONFIG=$state/kubeconfig  (or: source $state/env)"
