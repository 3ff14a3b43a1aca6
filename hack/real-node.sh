#!/usr/bin/env bash
# Real nodes beside the KWOK nodes: each one a kubelet with its own containerd, runc and a bridge
# CNI network, all state under $KUBESODA_STATE/realnode-<i>/. Called by cluster-up.sh (after the
# control plane answers) and cluster-down.sh (before it stops); needs root.
#
#   KUBESODA_REAL_NODES=1 hack/real-node.sh up      # start nodes 0..N-1 and wait until Ready
#   hack/real-node.sh down                          # stop every realnode-* of the state dir
#   hack/real-node.sh clear-foreign                 # remove a killed run's links on this port base
#                                                   # (what `up` does first; see below)
#
# Environment: KUBESODA_STATE, KUBESODA_PORT_BASE (as cluster-up.sh), KUBESODA_REAL_NODES (default
# 0: nothing to do), KUBESODA_REAL_NODE_ZONE / _RACK / _MIPS (labels; default zone-0, rack-0-0,
# 1000), KUBESODA_REAL_NODE_RESERVED_CPU (the kubelet's systemReserved cpu, e.g. 800m: the node's
# allocatable CPU, which kubesoda plans with, is then the host's cores minus it; default none).
# Ports: node i uses base+10+3i (kubelet), +11+3i (kubelet healthz, loopback), +12+3i
# (containerd's CRI streaming server for exec/attach, loopback): at most 3 nodes; base+19 is the
# readiness port of CoreDNS, the nodes' cluster DNS (on the host, at 10.<c>.255.254:53, serving
# cluster.local from the API server, so pods resolve Services by name as on any cluster). Names and
# addresses derive from the state dir and the port base, so clusters side by side do not clash.
# See docs/local-control-plane.md, "Real nodes".
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
state="${KUBESODA_STATE:-$repo/.local/cluster}"
state="$(realpath -m "$state")"
base="${KUBESODA_PORT_BASE:-27000}"
n="${KUBESODA_REAL_NODES:-0}"
py="${KUBESODA_PYTHON:-$repo/.venv/bin/python}"; [ -x "$py" ] || py=python3
log() { echo "[real-node] $*" >&2; }

# per state dir: an 8-hex tag for interface/cgroup/network names; per port base: the 10.<c>.0.0/16
# block of node addresses (10.<c>.255.<1+i>) and pod subnets (10.<c>.<i>.0/24), c in 100..199
tag=$(printf '%s' "$state" | sha256sum | cut -c1-8)
c=$(( (base / 100) % 100 + 100 ))
# The node is named by its address: the API server reaches a kubelet (logs, exec, proxy) at the
# node's Hostname address first, which is its name; an address needs no /etc/hosts entry.
node_ip() { echo "10.$c.255.$(( 1 + $1 ))"; }
node_name() { node_ip "$1"; }
dummy_if() { echo "ksd${tag}$1"; }
bridge_if() { echo "ksb${tag}$1"; }
cgroup_root() { echo "kubesoda-${tag}-$1"; }
net_name() { echo "kubesoda-${tag}-$1"; }
dns_ip() { echo "10.$c.255.254"; }
dns_if() { echo "ksn${tag}"; }
cni_bin() { for d in /usr/lib/cni /opt/cni/bin; do [ -x "$d/bridge" ] && { echo "$d"; return; }; done; echo /usr/lib/cni; }
cgroup_dirs() {  # every mounted v1 controller hierarchy (or the v2 root)
  awk '$3 == "cgroup" || $3 == "cgroup2" {print $2}' /proc/mounts | sort -u
}

# ------------------------------------------------------------------------------------------ down
down_one() {  # dir
  local d=$1 i name sock pid
  i="${d##*/realnode-}"; name=$(node_name "$i"); sock="$d/containerd.sock"
  # 1. the kubelet first, so it restarts nothing
  if [ -f "$d/pids/kubelet" ]; then
    pid=$(cat "$d/pids/kubelet"); kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  # 2. every container (pods and their sandboxes): kill the tasks through containerd; note the
  #    sandboxes' network namespaces (CRI creates them under /run/netns)
  local netns=() ids=""
  if [ -S "$sock" ] && [ -f "$d/pids/containerd" ] && kill -0 "$(cat "$d/pids/containerd")" 2>/dev/null; then
    ids=$(timeout 10 ctr --address "$sock" -n k8s.io containers list -q 2>/dev/null || true)
    for id in $ids; do
      mapfile -t -O "${#netns[@]}" netns < <(timeout 5 ctr --address "$sock" -n k8s.io containers info "$id" 2>/dev/null \
        | "$py" -c 'import json,sys
for ns in json.load(sys.stdin).get("Spec",{}).get("linux",{}).get("namespaces",[]):
    if ns.get("type")=="network" and ns.get("path"): print(ns["path"])' 2>/dev/null || true)
      timeout 5 ctr --address "$sock" -n k8s.io tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true
    done
    for id in $ids; do
      for _ in $(seq 1 20); do
        timeout 5 ctr --address "$sock" -n k8s.io tasks delete "$id" >/dev/null 2>&1 && break
        timeout 5 ctr --address "$sock" -n k8s.io tasks list -q 2>/dev/null | grep -qx "$id" || break
        sleep 0.2
      done
    done
  fi
  # 3. containerd, then any shim of ours still alive (their command line names our socket)
  if [ -f "$d/pids/containerd" ]; then
    pid=$(cat "$d/pids/containerd"); kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  local p
  for p in /proc/[0-9]*; do
    if tr '\0' ' ' <"$p/cmdline" 2>/dev/null | grep -qF -- "-address $sock "; then
      log "killing leftover shim ${p#/proc/}"; kill -9 "${p#/proc/}" 2>/dev/null || true
    fi
  done
  # 4. network namespaces, mounts under the node dir (container rootfs, shm, pod volumes), links
  local ns
  for ns in "${netns[@]}"; do
    [ -e "$ns" ] || continue
    umount "$ns" 2>/dev/null || umount -l "$ns" 2>/dev/null || true
    rm -f "$ns"
  done
  local m
  for _ in 1 2 3; do
    m=$(awk -v d="$d/" 'index($2, d) == 1 {print $2}' /proc/mounts | sort -r)
    [ -z "$m" ] && break
    for x in $m; do umount "$x" 2>/dev/null || umount -l "$x" 2>/dev/null || true; done
  done
  ip link del "$(bridge_if "$i")" 2>/dev/null || true
  ip link del "$(dummy_if "$i")" 2>/dev/null || true
  # libcni's result cache (/var/lib/cni/results/<network>-<container>-<if>), ours by container id
  rm -f /var/lib/cni/results/"$(net_name "$i")"-* 2>/dev/null || true
  for id in $ids; do rm -f /var/lib/cni/results/*-"$id"-* 2>/dev/null || true; done
  # 5. the kubelet's cgroup root (pods' cgroups beneath it), deepest first
  local cg
  for cg in $(cgroup_dirs); do
    [ -d "$cg/$(cgroup_root "$i")" ] || continue
    find "$cg/$(cgroup_root "$i")" -depth -type d -exec rmdir {} \; 2>/dev/null || true
  done
  # 6. the Node object, when the API server still answers
  if [ -f "$state/kubeconfig" ]; then
    KUBECONFIG="$state/kubeconfig" timeout 10 kubectl delete node "$name" --ignore-not-found >/dev/null 2>&1 || true
  fi
  rm -rf "$d"
  log "stopped $name"
}

dns_down() {
  local pid
  if [ -f "$state/pids/coredns" ]; then
    pid=$(cat "$state/pids/coredns"); kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$state/pids/coredns"
  fi
  ip link del "$(dns_if)" 2>/dev/null || true
  rm -rf "$state/coredns"
}

down() {
  local d
  for d in "$state"/realnode-*; do [ -d "$d" ] && down_one "$d"; done
  dns_down
  rm -f "$registry/$tag"
  # directories containerd, the runc shim and CNI create on first use, removed when empty (that
  # is, when no other containerd on the host uses them)
  rmdir /run/containerd/s /run/containerd/runc/k8s.io /run/containerd/runc /run/containerd /run/netns \
    /var/lib/cni/results /var/lib/cni 2>/dev/null || true
  return 0
}

# ----------------------------------------------------------------------- another run's leftovers
# The links of a run of another state dir (another tag) on this port base's addresses: a run killed
# before its `down` (a CI job cut short, a session's end) leaves its interfaces behind, and their
# routes to 10.<c>.<i>.0/24 take this run's pod traffic: pods start but never reach each other or
# CoreDNS (stop 57's CI: "timed out waiting for tuples"). Each `up` records its state dir under
# $registry; a leftover's owner is found there (or from the mounts it left), a live owner is an
# error that names it, a dead one's leftovers are removed.
registry=/run/kubesoda/real-nodes
owner_of() {  # tag -> the state dir it is the tag of, when known
  local t=$1 s
  if [ -f "$registry/$t" ]; then cat "$registry/$t"; return 0; fi
  while read -r s; do
    [ "$(printf '%s' "$s" | sha256sum | cut -c1-8)" = "$t" ] && { echo "$s"; return 0; }
  done < <(awk '{print $2}' /proc/mounts | sed -n 's#^\(/.*\)/realnode-[0-9][0-9]*/.*#\1#p' | sort -u)
  return 0
}
runs_under() {  # state dir: 0 when one of its kubelets, containerds or CoreDNS still runs
  local f pid
  for f in "$1"/pids/coredns "$1"/realnode-*/pids/kubelet "$1"/realnode-*/pids/containerd; do
    [ -f "$f" ] || continue
    pid=$(cat "$f")
    # the pid file may outlive its process and the pid be reused: the process must name the dir
    tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline" | grep -qF -- "$1/" && return 0
  done
  return 1
}
foreign_links() {  # our port base's addresses held by links of another tag: "link tag" lines
  ip -o -4 addr show | awk -v pre="10.$c." '{split($4, a, "/"); if (index(a[1], pre) == 1) print $2}' | sort -u |
    while read -r l; do
      case "$l" in
        ks[bdn]*) local t=${l:3:8}; if [[ "$t" =~ ^[0-9a-f]{8}$ && "$t" != "$tag" ]]; then echo "$l $t"; fi ;;
      esac
    done
}
clear_foreign() {
  local found t s l ns
  found=$(foreign_links)
  [ -n "$found" ] || return 0
  for t in $(awk '{print $2}' <<<"$found" | sort -u); do
    s=$(owner_of "$t")
    if [ -n "$s" ] && runs_under "$s"; then
      log "10.$c.0.0/16 (port base $base) is in use by the real nodes of $s, which still run:"
      log "  stop them (KUBESODA_STATE=$s hack/cluster-down.sh) or give this cluster another KUBESODA_PORT_BASE"
      exit 1
    fi
    log "removing the leftovers of a run that was not stopped (tag $t${s:+, $s}): $(awk -v t="$t" '$2 == t {printf "%s ", $1}' <<<"$found")"
    # its pods' network namespaces (their veths hang on its bridges), then its own teardown when its
    # state dir is still there (mounts, cgroups, CNI cache), else its links one by one
    for l in $(awk -v t="$t" '$2 == t {print $1}' <<<"$found"); do
      for ns in $(ip -o link show master "$l" 2>/dev/null | sed -n 's/.* link-netns \([^ ]*\).*/\1/p'); do
        ip netns del "$ns" 2>/dev/null || true
      done
    done
    if [ -n "$s" ] && [ -d "$s" ]; then
      KUBESODA_STATE="$s" KUBESODA_PORT_BASE="$base" KUBESODA_PYTHON="$py" "$0" down || true
    fi
    for l in $(awk -v t="$t" '$2 == t {print $1}' <<<"$found"); do ip link del "$l" 2>/dev/null || true; done
    rm -f "$registry/$t" /var/lib/cni/results/kubesoda-"$t"-* 2>/dev/null || true
  done
  [ -z "$(foreign_links)" ] || { log "links of another run still hold 10.$c.0.0/16: $(foreign_links | tr '\n' ' ')"; exit 1; }
}

# -------------------------------------------------------------------------------------------- up
pause_archive() {
  # shellcheck source=versions.env
  source "$here/versions.env"
  local out="${KUBESODA_CACHE:-$HOME/.cache/kubesoda}/images/pause-3.10.1-k8s-$K8S_VERSION.oci.tar"
  [ -f "$out" ] || "$py" "$here/build-image.py" pause --out "$out" >/dev/null
  echo "$out"
}

dns_up() {  # bin
  # CoreDNS on the host: the kubernetes plugin reads Services and EndpointSlices with the cluster's
  # admin kubeconfig (a local development cluster); pods reach 10.<c>.255.254 through their bridge's
  # gateway, the host. Names outside cluster.local are not served (nothing upstream is reachable).
  local bin=$1 ip cdns ready_port=$((base + 19))
  # shellcheck source=versions.env
  source "$here/versions.env"
  cdns="$bin/coredns-$COREDNS_VERSION"; ip=$(dns_ip)
  [ -x "$cdns" ] || { log "no $cdns: hack/build-binaries.sh builds it (unless SKIP_COREDNS=1)"; exit 1; }
  if [ -f "$state/pids/coredns" ] && kill -0 "$(cat "$state/pids/coredns")" 2>/dev/null; then return 0; fi
  ip link show "$(dns_if)" >/dev/null 2>&1 || ip link add "$(dns_if)" type dummy 2>/dev/null || ip link add "$(dns_if)" type bridge
  ip addr replace "$ip/32" dev "$(dns_if)"
  ip link set "$(dns_if)" up
  mkdir -p "$state/coredns" "$state/pids" "$state/logs"
  cat >"$state/coredns/Corefile" <<COREFILE
.:53 {
    bind $ip
    errors
    ready 127.0.0.1:$ready_port
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig $state/kubeconfig
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 5
    }
    cache 5
}
COREFILE
  nohup "$cdns" -conf "$state/coredns/Corefile" >"$state/logs/coredns.log" 2>&1 &
  echo $! >"$state/pids/coredns"
  for _ in $(seq 1 60); do
    curl -sf "http://127.0.0.1:$ready_port/ready" >/dev/null 2>&1 && { log "CoreDNS ready at $ip:53"; return 0; }
    kill -0 "$(cat "$state/pids/coredns")" 2>/dev/null || { log "coredns exited:"; tail -20 "$state/logs/coredns.log" >&2; exit 1; }
    sleep 0.5
  done
  log "CoreDNS not ready after 30s; see $state/logs/coredns.log"; exit 1
}

up_one() {  # index bin pause-archive
  local i=$1 bin=$2 pause=$3
  local d="$state/realnode-$i" name ip kport hport sport api_port pki="$state/pki"
  name=$(node_name "$i"); ip=$(node_ip "$i")
  kport=$((base + 10 + 3 * i)); hport=$((kport + 1)); sport=$((kport + 2)); api_port=$((base + 2))
  mkdir -p "$d"/{pids,logs,containerd/root,containerd/state,cni/net.d,cni/networks,kubelet,pod-logs,pki}
  chmod 711 "$d"

  # client certificate system:node:<name> (group system:nodes), signed by the cluster CA
  if [ ! -f "$d/pki/kubelet.crt" ]; then
    openssl req -newkey rsa:2048 -nodes -keyout "$d/pki/kubelet.key" -out "$d/pki/kubelet.csr" \
      -subj "/CN=system:node:$name/O=system:nodes" 2>/dev/null
    openssl x509 -req -in "$d/pki/kubelet.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
      -days 3650 -out "$d/pki/kubelet.crt" 2>/dev/null
  fi
  cat >"$d/kubelet.kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters:
- name: kubesoda-local
  cluster: {server: "https://127.0.0.1:$api_port", certificate-authority: "$pki/ca.crt"}
users:
- name: $name
  user: {client-certificate: "$d/pki/kubelet.crt", client-key: "$d/pki/kubelet.key"}
contexts:
- name: kubesoda-local
  context: {cluster: kubesoda-local, user: $name}
current-context: kubesoda-local
KC

  # the node address: a dummy interface, so that the API server reaches the kubelet (logs, exec)
  local dif; dif=$(dummy_if "$i")
  # (kernels without CONFIG_DUMMY, like this project's VMs: a bridge without ports serves the same)
  ip link show "$dif" >/dev/null 2>&1 || ip link add "$dif" type dummy 2>/dev/null || ip link add "$dif" type bridge
  ip addr replace "$ip/32" dev "$dif"
  ip link set "$dif" up

  # CNI: one bridge per node, host-local addresses kept in the node dir, no masquerade
  cat >"$d/cni/net.d/10-kubesoda.conflist" <<CNI
{
  "cniVersion": "1.0.0",
  "name": "$(net_name "$i")",
  "plugins": [
    {"type": "bridge", "bridge": "$(bridge_if "$i")", "isGateway": true, "ipMasq": false, "hairpinMode": true,
     "ipam": {"type": "host-local", "dataDir": "$d/cni/networks",
              "ranges": [[{"subnet": "10.$c.$i.0/24"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "loopback"}
  ]
}
CNI

  cat >"$d/containerd.toml" <<TOML
version = 2
root = "$d/containerd/root"
state = "$d/containerd/state"
oom_score = 0
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
                    "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
                    "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = "$d/containerd.sock"
[ttrpc]
  address = "$d/containerd.sock.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "$d/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "localhost/kubesoda/pause:3.10.1"
  stream_server_address = "127.0.0.1"
  stream_server_port = "$sport"
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$d/containerd/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$(cni_bin)"
    conf_dir = "$d/cni/net.d"
    max_conf_num = 1
TOML

  # the kubelet's cgroup root must exist in every hierarchy before it starts
  local cg
  for cg in $(cgroup_dirs); do mkdir -p "$cg/$(cgroup_root "$i")"; done
  # a real node's pods own their CPU: on a busy shared host, the default weight (that of one
  # process) would let every other process crowd out a pod below its limit
  [ -f "/sys/fs/cgroup/cpu/$(cgroup_root "$i")/cpu.shares" ] && echo 8192 >"/sys/fs/cgroup/cpu/$(cgroup_root "$i")/cpu.shares"
  [ -f "/sys/fs/cgroup/$(cgroup_root "$i")/cpu.weight" ] && echo 800 >"/sys/fs/cgroup/$(cgroup_root "$i")/cpu.weight"

  cat >"$d/kubelet.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $ip
port: $kport
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $hport
containerRuntimeEndpoint: unix://$d/containerd.sock
cgroupDriver: cgroupfs
cgroupRoot: /$(cgroup_root "$i")
failCgroupV1: false
failSwapOn: false
makeIPTablesUtilChains: false
podLogsDir: $d/pod-logs
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
  x509: {clientCAFile: $pki/ca.crt}
authorization: {mode: AlwaysAllow}
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "100Mi", nodefs.available: "2%", imagefs.available: "2%"}
maxPods: 110
${KUBESODA_REAL_NODE_RESERVED_CPU:+systemReserved: {cpu: "$KUBESODA_REAL_NODE_RESERVED_CPU"\}}
clusterDNS: [$(dns_ip)]
clusterDomain: cluster.local
resolvConf: $d/resolv.conf
YAML
  echo "nameserver $(dns_ip)" >"$d/resolv.conf"

  log "starting containerd and kubelet for $name ($ip, kubelet :$kport)"
  nohup containerd --config "$d/containerd.toml" >"$d/logs/containerd.log" 2>&1 &
  echo $! >"$d/pids/containerd"
  for _ in $(seq 1 100); do ctr --address "$d/containerd.sock" version >/dev/null 2>&1 && break; sleep 0.1; done
  ctr --address "$d/containerd.sock" -n k8s.io images import "$pause" >/dev/null
  # the same pause image under the name a StreamTemplate's PEs default to, so that placeholder PEs
  # placed on a real node run (nothing is pulled: no registry is reachable)
  ctr --address "$d/containerd.sock" -n k8s.io images tag --force localhost/kubesoda/pause:3.10.1 registry.k8s.io/pause:3.10 >/dev/null

  local labels="type=real,kubernetes.io/os=linux,topology.kubernetes.io/zone=${KUBESODA_REAL_NODE_ZONE:-zone-0}"
  labels+=",kubesoda.io/rack=${KUBESODA_REAL_NODE_RACK:-rack-0-0},kubesoda.io/mips-per-core=${KUBESODA_REAL_NODE_MIPS:-1000}"
  nohup "$bin/kubelet" --config "$d/kubelet.yaml" --kubeconfig "$d/kubelet.kubeconfig" \
    --hostname-override "$name" --node-ip "$ip" --node-labels "$labels" \
    --root-dir "$d/kubelet" --cert-dir "$d/pki" --v=1 >"$d/logs/kubelet.log" 2>&1 &
  echo $! >"$d/pids/kubelet"
}

up() {
  [ "$n" -gt 0 ] || return 0
  [ "$n" -le 3 ] || { log "KUBESODA_REAL_NODES=$n: at most 3 (ports base+10..+19)"; exit 1; }
  [ "$(id -u)" = 0 ] || { log "real nodes need root"; exit 1; }
  [ -f "$state/pki/ca.key" ] || { log "no cluster CA in $state/pki: run hack/cluster-up.sh"; exit 1; }
  "$here/install-node-deps.sh"
  clear_foreign
  mkdir -p "$registry" && printf '%s' "$state" >"$registry/$tag"
  local bin pause i
  bin="$("$here/build-binaries.sh")"
  [ -x "$bin/kubelet" ] || { log "no kubelet in $bin"; exit 1; }
  pause=$(pause_archive)
  dns_up "$bin"
  for i in $(seq 0 $((n - 1))); do
    if [ -f "$state/realnode-$i/pids/kubelet" ] && kill -0 "$(cat "$state/realnode-$i/pids/kubelet")" 2>/dev/null; then
      continue
    fi
    [ -d "$state/realnode-$i" ] && down_one "$state/realnode-$i"
    up_one "$i" "$bin" "$pause"
  done
  local names=() t0=$SECONDS
  for i in $(seq 0 $((n - 1))); do names+=("node/$(node_name "$i")"); done
  for _ in $(seq 1 120); do
    KUBECONFIG="$state/kubeconfig" kubectl wait --for=condition=Ready "${names[@]}" --timeout=1s >/dev/null 2>&1 && {
      log "$n real node(s) Ready in $((SECONDS - t0))s"; return 0; }
    for i in $(seq 0 $((n - 1))); do
      for c in containerd kubelet; do
        kill -0 "$(cat "$state/realnode-$i/pids/$c")" 2>/dev/null || {
          log "$c of realnode-$i exited:"; tail -20 "$state/realnode-$i/logs/$c.log" >&2; exit 1; }
      done
    done
    sleep 1
  done
  log "real nodes not Ready after 240s; see $state/realnode-*/logs"; exit 1
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  clear-foreign) clear_foreign ;;  # what `up` does first (tests/test_real_node_leftovers.py)
  *) echo "usage: $0 up|down|clear-foreign" >&2; exit 2 ;;
esac
