#!/usr/bin/env bash
# A two-node kind cluster (control plane + one worker, both schedulable) for the end-to-end
# tier (tests/e2e), on a machine with Docker or on one without a registry (the private
# route, docs/tools.md "kind"):
#
#   hack/e2e-cluster.sh up              # idempotent; the last line is KUBECONFIG=<path>
#   hack/e2e-cluster.sh images [NAME..] # build + load project images; prints NAME=TAG
#   hack/e2e-cluster.sh env             # DOCKER_HOST, NodePort host ports, KUBECONFIG
#   hack/e2e-cluster.sh status
#   hack/e2e-cluster.sh spark-operator-crds  # directory of the pinned Spark operator's CRDs
#   hack/e2e-cluster.sh down [--purge]  # undo every host change `up` recorded
#
# Exit status 3: this machine can run no cluster (no Docker engine answers and not root
# for the private one); the e2e tier skips on that, and fails on any other error.
# Where `docker info` answers, that engine is used; otherwise (as root) a private dockerd
# from Debian's docker.io runs on a socket under /run/weaseldb-e2e. Where no registry is
# reachable, the node image, the control-plane images and a Python base are built here
# from binaries built through the Go module proxy (hack/tools.sh e2e) and Debian packages.
# Everything is cached under ~/.cache/weaseldb (binaries in bin/, the rest in e2e/:
# the docker data root with every image, logs, the kubeconfig and the ledger of host
# changes). `down` undoes the ledger and keeps the caches; `down --purge` also deletes
# the docker data root and removes the Debian packages `up` installed.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(dirname "$HERE")"
# shellcheck source=hack/tools.env
source "$HERE/tools.env"

CACHE="${WEASELDB_CACHE:-$HOME/.cache/weaseldb}"
BIN="${WEASELDB_TOOLS:-$CACHE/bin}"
E2E="${WEASELDB_E2E_DIR:-$CACHE/e2e}"
RUN="${WEASELDB_E2E_RUN:-/run/weaseldb-e2e}" # short: unix socket paths live here
LEDGER="$E2E/host-changes"
CLUSTER="${WEASELDB_E2E_CLUSTER:-weaseldb-e2e}"
NODE="$CLUSTER-control-plane" # publishes the NodePorts below
WORKER="$CLUSTER-worker"
NODES=("$NODE" "$WORKER") # kind names each node's container after the node
# kind's default pod subnet, spelled out: the pod network below routes and masquerades by it.
POD_SUBNET=10.244.0.0/16
# Set on every node at registration (local node source): nothing is scheduled on a node
# before ensure_pod_network has given it its own pod range and routes.
NETWORK_TAINT=weaseldb.io/pod-network-unready
NETWORK="$CLUSTER" # the docker network kind puts the node on (ours alone)
KUBECONFIG_PATH="$E2E/kubeconfig"
# NodePorts kind publishes on 127.0.0.1 (host port picked at creation; `env` shows them):
# a gateway Service and MinIO's S3 port, for host traffic that must cross a Service.
NODE_PORTS=(30080 30900)
START=$SECONDS

log() { echo "[e2e-cluster +$((SECONDS - START))s] $*" >&2; }
die() { echo "e2e-cluster: $*" >&2; exit 1; }

# shellcheck source=hack/e2e/host.sh
source "$HERE/e2e/host.sh"
# shellcheck source=hack/e2e/images.sh
source "$HERE/e2e/images.sh"

export PATH="$BIN:$PATH" KIND_EXPERIMENTAL_DOCKER_NETWORK="$NETWORK"

# --- node source: stock kind images, or assembled here ---------------------------

# "stock" where a Docker engine came with the machine and Docker Hub answers (then kind's
# own node image and the Dockerfile's python base are pulled); "local" otherwise.
node_source() {
  if [[ -f $E2E/node-source ]]; then cat "$E2E/node-source"; return; fi
  local source=local
  case ${WEASELDB_E2E_NODE:-auto} in
    stock | local) source="$WEASELDB_E2E_NODE" ;;
    auto)
      if [[ $(docker_mode) == machine ]] && timeout 120 docker pull -q python:3.11.14-slim-bookworm >/dev/null 2>&1; then
        source=stock
      fi
      ;;
    *) die "WEASELDB_E2E_NODE must be stock, local or auto (got '$WEASELDB_E2E_NODE')" ;;
  esac
  echo "$source" >"$E2E/node-source"
  echo "$source"
}

# --- the cluster ---------------------------------------------------------------------

kind_config() { # the node image ("" = kind's default)
  local local_cni=0
  [[ $(node_source) == local ]] && local_cni=1
  cat <<EOF
# Written by hack/e2e-cluster.sh.
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
networking:
  apiServerAddress: 127.0.0.1
  podSubnet: $POD_SUBNET
EOF
  # The locally assembled node has no kindnetd (not on the module proxy); ensure_pod_network
  # does its part: a bridge conflist per node and routes between the nodes.
  ((local_cni)) && echo "  disableDefaultCNI: true"
  echo "nodes:"
  echo "  - role: control-plane"
  [[ -n $1 ]] && echo "    image: $1"
  echo "    extraPortMappings:"
  local port
  for port in "${NODE_PORTS[@]}"; do
    echo "      - {containerPort: $port, hostPort: 0, listenAddress: 127.0.0.1}"
  done
  # Registration taints replace kubeadm's default control-plane NoSchedule, so the control
  # plane takes pods too. Locally, the network taint holds pods off a node until it has
  # its own pod range (NETWORK_TAINT).
  node_registration InitConfiguration "$local_cni"
  echo "  - role: worker"
  [[ -n $1 ]] && echo "    image: $1"
  node_registration JoinConfiguration "$local_cni"
  # kubelet >= 1.35 refuses cgroup v1 unless told otherwise; these machines have v1.
  cat <<EOF
kubeadmConfigPatches:
  - |
    kind: KubeletConfiguration
    failCgroupV1: false
EOF
  # The assembled node's containerd uses cgroupfs (hack/e2e/node-rootfs.sh says why).
  ((local_cni)) && echo "    cgroupDriver: cgroupfs"
  return 0
}

node_registration() { # KUBEADM_KIND NETWORK_TAINT(0|1): one node's kubeadmConfigPatches
  cat <<EOF
    kubeadmConfigPatches:
      - |
        kind: $1
        nodeRegistration:
EOF
  if (($2)); then
    echo "          taints: [{key: $NETWORK_TAINT, effect: NoSchedule}]"
  else
    echo "          taints: []"
  fi
}

cluster_healthy() {
  local node
  for node in "${NODES[@]}"; do
    [[ "$(docker inspect -f '{{.State.Running}}' "$node" 2>/dev/null)" == true ]] || return 1
  done
  [[ -f $KUBECONFIG_PATH ]] &&
    timeout 20 kubectl --kubeconfig "$KUBECONFIG_PATH" get --raw /readyz >/dev/null 2>&1 &&
    # A cluster made before it had a worker (or one that lost a node) is recreated.
    [[ "$(kctl get nodes -o name 2>/dev/null | wc -l)" == "${#NODES[@]}" ]]
}

kctl() { timeout 60 kubectl --kubeconfig "$KUBECONFIG_PATH" "$@"; }

# --- the pod network without kindnetd (local node source) ------------------------------

# What kindnetd would do, once per `up` (every step is idempotent): each node gets the
# baked bridge conflist with the pod range the controller-manager gave it (host-local
# hands out addresses from it), a route to every other node's range via that node's IP
# (the nodes share one docker bridge), and a masquerade for traffic leaving the pod
# subnet (the bridge plugin's own ipMasq would also rewrite pod-to-pod traffic between
# nodes). Then the network taint comes off and pods are scheduled.
ensure_pod_network() {
  local lines=() line name cidr ip node other i
  # A node that just joined may not have its range or address yet.
  for i in $(seq 1 60); do
    mapfile -t lines < <(kctl get nodes -o jsonpath='{range .items[*]}{.metadata.name} {.spec.podCIDR} {.status.addresses[?(@.type=="InternalIP")].address}{"\n"}{end}')
    ((${#lines[@]} == ${#NODES[@]})) && ! printf '%s\n' "${lines[@]}" | awk 'NF != 3 { bad = 1 } END { exit !bad }' && break
    ((i < 60)) || die "expected ${#NODES[@]} nodes, each with a pod range and an address; the API server lists: ${lines[*]}"
    sleep 1
  done
  for line in "${lines[@]}"; do
    read -r name cidr ip <<<"$line"
    node_conflist "$cidr" | docker exec -i "$name" sh -c 'f=/etc/cni/net.d/10-weaseldb-bridge.conflist
      cat >"$f.new" && if cmp -s "$f.new" "$f"; then rm "$f.new"; else mv "$f.new" "$f"; fi' ||
      die "writing the CNI config of $name failed"
    docker exec "$name" sh -c "iptables -t nat -C POSTROUTING -s $cidr ! -d $POD_SUBNET -j MASQUERADE 2>/dev/null ||
      iptables -t nat -A POSTROUTING -s $cidr ! -d $POD_SUBNET -j MASQUERADE" ||
      die "adding the pod masquerade on $name failed"
    for other in "${lines[@]}"; do
      [[ $other == "$line" ]] && continue
      read -r node cidr ip <<<"$other"
      docker exec "$name" ip route replace "$cidr" via "$ip" || die "routing $cidr via $node on $name failed"
    done
  done
  for node in $(kctl get nodes -o jsonpath='{range .items[*]}{.metadata.name} {.spec.taints[*].key}{"\n"}{end}' |
    awk -v t="$NETWORK_TAINT" '{ for (i = 2; i <= NF; i++) if ($i == t) print $1 }'); do
    log "pod network set up: scheduling on $node"
    kctl taint nodes "$node" "$NETWORK_TAINT:NoSchedule-" >/dev/null
  done
}

# The baked conflist (hack/e2e/10-weaseldb-bridge.conflist) for one node's pod range.
node_conflist() { # CIDR
  python3 -c '
import json, sys
conf = json.load(open(sys.argv[1]))
bridge = conf["plugins"][0]
bridge["ipam"]["ranges"] = [[{"subnet": sys.argv[2]}]]
bridge["ipMasq"] = False  # ensure_pod_network masquerades, sparing pod-to-pod traffic
json.dump(conf, sys.stdout, indent=2)
print()' "$HERE/e2e/10-weaseldb-bridge.conflist" "$1"
}

# Every node schedulable: a cluster whose control plane still has kubeadm's default taint
# (made by an older config) gets it removed.
ensure_schedulable() {
  if kctl get node "$NODE" -o jsonpath='{.spec.taints[*].key}' | grep -qw node-role.kubernetes.io/control-plane; then
    kctl taint nodes "$NODE" node-role.kubernetes.io/control-plane:NoSchedule- >/dev/null
  fi
  [[ $(node_source) == local ]] && ensure_pod_network
  log "waiting for ${#NODES[@]} Ready nodes"
  kctl wait --for=condition=Ready nodes --all --timeout=120s >&2 || die "the nodes did not become Ready"
}

delete_cluster() { # NAME
  docker info >/dev/null 2>&1 || { log "no Docker engine answers: cluster $1 not deleted"; return 0; }
  if kind get clusters 2>/dev/null | grep -qx "$1"; then
    log "deleting kind cluster $1"
    kind delete cluster --name "$1" --kubeconfig "$KUBECONFIG_PATH" >&2
  fi
  rm -f "$KUBECONFIG_PATH"
}

# What the nodes show when they did not come up, so a failed `up` explains itself.
node_diagnostics() {
  local node
  for node in "${NODES[@]}"; do
    echo "--- docker logs $node (last 30 lines)" >&2
    docker logs "$node" 2>&1 | tail -n 30 >&2 || true
    echo "--- kubelet journal of $node (last 40 lines)" >&2
    docker exec "$node" journalctl -u kubelet --no-pager 2>/dev/null | tail -n 40 >&2 || true
    echo "--- containers in $node" >&2
    docker exec "$node" ctr -n k8s.io containers ls 2>/dev/null | tail -n 20 >&2 || true
  done
}

create_cluster() {
  local image=""
  if [[ $(node_source) == local ]]; then image="$(node_image)"; fi
  kind_config "$image" >"$E2E/kind-config.yaml"
  record_missing_dirs /lib/modules # kind bind-mounts it; docker creates it if missing
  local had_network=0
  docker network inspect "$NETWORK" >/dev/null 2>&1 && had_network=1
  ledger_add cluster "$CLUSTER"
  log "creating kind cluster $CLUSTER${image:+ on $image}"
  local ok=1
  kind create cluster --name "$CLUSTER" --config "$E2E/kind-config.yaml" \
    --kubeconfig "$KUBECONFIG_PATH" --wait 4m --retain >"$E2E/logs/kind-create.log" 2>&1 || ok=0
  # The network kind made is ours (on the private dockerd, every network is).
  if ((!had_network)) || [[ $(docker_mode) == private ]]; then record_network; fi
  if ((!ok)); then
    cat "$E2E/logs/kind-create.log" >&2
    node_diagnostics
    die "kind create cluster failed (log: $E2E/logs/kind-create.log); \`$0 down\` cleans up"
  fi
}

# The docker network and its bridge link on the host (recorded link first, so `down`
# removes the network through docker, then the link if docker left it).
record_network() {
  local id
  id="$(docker network inspect -f '{{.Id}}' "$NETWORK" 2>/dev/null)" || return 0
  ledger_add link "br-${id:0:12}"
  ledger_add network "$NETWORK"
}

# Add-ons the tests rely on: cluster DNS (Service names in WeaselDB's store endpoint).
wait_for_addons() {
  log "waiting for CoreDNS"
  if ! kubectl --kubeconfig "$KUBECONFIG_PATH" -n kube-system rollout status deployment/coredns \
    --timeout=180s >&2; then
    kubectl --kubeconfig "$KUBECONFIG_PATH" -n kube-system get pods -o wide >&2 || true
    kubectl --kubeconfig "$KUBECONFIG_PATH" -n kube-system describe pods -l k8s-app=kube-dns >&2 || true
    die "CoreDNS did not become available"
  fi
}

host_port() { # NODE_PORT -> the 127.0.0.1 port kind published it on
  docker port "$NODE" "$1/tcp" 2>/dev/null | sed -n 's/^127\.0\.0\.1:\([0-9]*\)$/\1/p' | head -n1
}

# --- commands -------------------------------------------------------------------------

ensure_tools() {
  local tools=(kind kubectl helm minio spark-operator)
  [[ $(node_source) == local ]] && tools=(minio etcd kube-apiserver kubectl helm e2e)
  WEASELDB_TOOLS="$BIN" bash "$HERE/tools.sh" "${tools[@]}" >&2 || die "building the tools failed"
}

cmd_up() {
  mkdir -p "$E2E/bin" "$E2E/logs" "$E2E/tmp"
  local mode
  mode="$(docker_mode)"
  use_docker "$mode"
  if [[ $mode == private ]]; then
    start_private_dockerd
    record_network # (from an earlier run: dockerd recreated its bridge at start)
  else
    log "using the machine's Docker engine"
  fi
  echo "$mode" >"$E2E/docker-mode"
  [[ $(node_source) == local ]] && ensure_packages mmdebstrap gcc libc6-dev libseccomp-dev pkg-config
  ensure_tools
  if cluster_healthy; then
    log "kind cluster $CLUSTER is already up"
  else
    if docker inspect "$NODE" >/dev/null 2>&1; then
      log "kind cluster $CLUSTER exists but does not answer or is not ${#NODES[@]} nodes: recreating it"
      delete_cluster "$CLUSTER"
    fi
    create_cluster
  fi
  ensure_schedulable
  wait_for_addons
  log "up in $((SECONDS - START))s"
  cmd_env
}

cmd_env() {
  use_docker "$(docker_mode)"
  [[ -n ${DOCKER_HOST:-} ]] && echo "DOCKER_HOST=$DOCKER_HOST"
  local port
  for port in "${NODE_PORTS[@]}"; do echo "NODE_PORT_$port=$(host_port "$port")"; done
  echo "NODE=$NODE"
  echo "NODES=$(IFS=,; echo "${NODES[*]}")"
  echo "KUBECONFIG=$KUBECONFIG_PATH"
}

# images [NAME...]: build project images and load them into the node. NAME is
#   weaseldb        the Dockerfile's final stage         -> weaseldb:dev (examples/values-dev.yaml)
#   minio           MinIO from $BIN/minio                -> weaseldb-e2e/minio:e2e
#   spark-operator  the Spark operator controller        -> weaseldb-e2e/spark-operator:e2e
#   anything else   that Dockerfile target (e.g. spark)  -> weaseldb-NAME:dev
cmd_images() {
  use_docker "$(docker_mode)"
  cluster_healthy || die "the kind cluster is not up: run \`$0 up\` first"
  mkdir -p "$E2E/logs" "$E2E/tmp"
  (($#)) || set -- weaseldb minio spark-operator
  local name tag tags=()
  for name in "$@"; do
    case $name in
      weaseldb) tag=weaseldb:dev; build_project_image "$tag" ;;
      minio) tag=weaseldb-e2e/minio:e2e; minio_image "$tag" ;;
      spark-operator) tag=weaseldb-e2e/spark-operator:e2e; spark_operator_image "$tag" ;;
      *) tag="weaseldb-$name:dev"; build_project_image "$tag" "$name" ;;
    esac
    tags+=("$tag")
    echo "$name=$tag"
  done
  load_images "${tags[@]}"
}

# kind load, skipping images every node already has (same docker image id). kind's own
# check needs crictl, which the module proxy does not have, so it would reload every time.
# One `kind load` for the images missing anywhere, into the nodes missing any (one
# `docker save` for both nodes in the usual case: a new image, or a new cluster).
load_images() {
  local node tag id stamp ids=() todo=() nodes=()
  for node in "${NODES[@]}"; do ids+=("$(docker inspect -f '{{.Id}}' "$node")"); done
  local dir i missing
  for dir in "$E2E/loaded"/*; do # stamps of nodes that are gone
    if [[ -d $dir && " ${ids[*]} " != *" ${dir##*/} "* ]]; then rm -rf "$dir"; fi
  done
  for i in "${!NODES[@]}"; do
    mkdir -p "$E2E/loaded/${ids[$i]}"
    missing=0
    for tag in "$@"; do
      id="$(docker image inspect -f '{{.Id}}' "$tag")"
      stamp="$E2E/loaded/${ids[$i]}/$(echo "$tag" | tr '/:' '__')"
      [[ -f $stamp && "$(cat "$stamp")" == "$id" ]] && continue
      missing=1
      [[ " ${todo[*]} " == *" $tag "* ]] || todo+=("$tag")
    done
    ((missing)) && nodes+=("${NODES[$i]}")
  done
  ((${#todo[@]})) || return 0
  log "loading into ${nodes[*]}: ${todo[*]}"
  kind load docker-image --name "$CLUSTER" --nodes "$(IFS=,; echo "${nodes[*]}")" "${todo[@]}" \
    >"$E2E/logs/kind-load.log" 2>&1 || { cat "$E2E/logs/kind-load.log" >&2; die "kind load failed"; }
  for i in "${!NODES[@]}"; do
    [[ " ${nodes[*]} " == *" ${NODES[$i]} "* ]] || continue
    for tag in "${todo[@]}"; do
      docker image inspect -f '{{.Id}}' "$tag" >"$E2E/loaded/${ids[$i]}/$(echo "$tag" | tr '/:' '__')"
    done
  done
}

cmd_status() {
  local mode
  mode="$(docker_mode)"
  use_docker "$mode"
  echo "docker: $mode${DOCKER_HOST:+ ($DOCKER_HOST)}"
  [[ $mode == private ]] && echo "private dockerd: $(private_dockerd_pid || echo 'not running')"
  echo "node source: $(cat "$E2E/node-source" 2>/dev/null || echo 'not decided yet')"
  if cluster_healthy; then echo "cluster $CLUSTER: up"; else echo "cluster $CLUSTER: not up"; fi
  echo "host changes recorded in $LEDGER:"
  if [[ -f $LEDGER ]]; then sed 's/^/  /' "$LEDGER"; else echo "  (none)"; fi
  echo "cache: $(du -sh "$E2E" 2>/dev/null | cut -f1) in $E2E, $(du -sh "$BIN" 2>/dev/null | cut -f1) in $BIN"
}

cmd_down() {
  local purge=0
  [[ ${1:-} == --purge ]] && purge=1
  local mode
  mode="$(docker_mode)"
  use_docker "$mode"
  undo_ledger "$purge"
  if ((purge)); then
    log "removing the docker data root and the image caches in $E2E"
    unmount_under "$E2E/docker"
    rm -rf "$E2E/docker" "$E2E/loaded" "$E2E/node-source" "$E2E/tmp"
  fi
  log "down"
}

cmd_spark_operator_crds() {
  local dir
  dir="$(cd "$HERE" && GOFLAGS=-mod=mod GOTOOLCHAIN=local go mod download -json \
    "github.com/kubeflow/spark-operator/v2@$SPARK_OPERATOR_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p')"
  [[ -d $dir/config/crd/bases ]] || die "no CRDs in the spark-operator $SPARK_OPERATOR_VERSION module ($dir)"
  echo "$dir/config/crd/bases"
}

# One command at a time per cache directory (make and a pytest fixture may overlap).
mkdir -p "$E2E"
exec 8>"$E2E/.lock"
flock 8

case ${1:-} in
  up) cmd_up ;;
  down) shift; cmd_down "$@" ;;
  status) cmd_status ;;
  env) cmd_env ;;
  images) shift; cmd_images "$@" ;;
  spark-operator-crds) cmd_spark_operator_crds ;;
  *) sed -n '2,/^set -euo/p' "$0" | sed -n 's/^# \{0,1\}//p' >&2; exit 2 ;;
esac
