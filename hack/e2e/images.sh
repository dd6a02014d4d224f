# Images of hack/e2e-cluster.sh, built locally where no registry is reachable:
#   python base    mmdebstrap bookworm + python3/venv + this host's CA bundle
#   kind node      mmdebstrap + kind's images/base/files + containerd + node binaries,
#                  with the control-plane images pre-loaded into its containerd
#   control plane  kube-apiserver & co., etcd, coredns, pause: one binary each
#   project        WeaselDB (the project Dockerfile), MinIO, the Spark operator
# Sourced, not run. Every image tag carries a hash of its inputs, so an image is rebuilt
# exactly when an input changed, and kept (in the docker data root) otherwise.

DEBIAN_SUITE=bookworm
# Bump when the assembly below changes in a way the hashed inputs do not show.
NODE_RECIPE=1

# Hash of strings and files (file contents, not names or times).
inputs_hash() {
  local item
  for item in "$@"; do
    if [[ -f $item ]]; then sha256sum <"$item"; else echo "$item"; fi
  done | sha256sum | cut -c1-12
}

image_exists() { docker image inspect "$1" >/dev/null 2>&1; }

# Remove the other tags of REPO (older input hashes), keeping TAG.
prune_repo() {
  local repo="$1" keep="$2" ref
  docker image ls --format '{{.Repository}}:{{.Tag}}' "$repo" | while read -r ref; do
    [[ $ref == "$keep" ]] || docker image rm "$ref" >/dev/null 2>&1 || true
  done
}

# A Debian root filesystem straight into `docker import`: mmdebstrap writes the tar to
# stdout, so nothing but the image is kept.  rootfs_image TAG VARIANT PACKAGES [--change ...] -- [mmdebstrap options]
rootfs_image() {
  local tag="$1" variant="$2" packages="$3" changes=() opts=()
  shift 3
  while (($#)) && [[ $1 != -- ]]; do changes+=("$1"); shift; done
  (($#)) && shift
  opts=("$@")
  log "building $tag (mmdebstrap $DEBIAN_SUITE, $variant)"
  local log_file="$E2E/logs/$(echo "$tag" | tr '/:' '__').log"
  # No documentation in images (man1 stays: some postinst scripts need it).
  if ! mmdebstrap --quiet --variant="$variant" --include="$packages" --aptopt='Acquire::Retries "3"' \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/info/*' \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-include=/usr/share/man/man1' \
    "${opts[@]}" "$DEBIAN_SUITE" - 2>"$log_file" | docker import "${changes[@]}" - "$tag" >/dev/null; then
    tail -n 20 "$log_file" >&2
    die "building $tag failed (log: $log_file)"
  fi
}

# --- the Python base for the project Dockerfile -------------------------------------

# The Dockerfile starts FROM ${PYTHON_IMAGE} (python:3.11-slim on Docker Hub). Where Docker
# Hub is unreachable, this stands in: Debian's python3 with `python` -> python3, and this
# host's CA bundle added to the image's trust store, because pip's TLS goes through the
# same intercepting proxy as the host's. One file per certificate: a JRE installed later
# (the Spark stages) builds its trust store from them, and keytool reads one per file.
python_base_image() {
  local h tag
  h="$(inputs_hash "$DEBIAN_SUITE python3 python3-venv ca-certificates split" /etc/ssl/certs/ca-certificates.crt)"
  tag="weaseldb-e2e/python-base:$DEBIAN_SUITE-$h"
  if ! image_exists "$tag"; then
    rootfs_image "$tag" minbase python3,python3-venv,ca-certificates \
      --change 'ENV LANG=C.UTF-8' --change 'CMD ["python3"]' -- \
      --customize-hook='awk -v d="$1/usr/local/share/ca-certificates" "/BEGIN CERT/ { n++ } { print > (d \"/weaseldb-host-\" n \".crt\") }" /etc/ssl/certs/ca-certificates.crt' \
      --customize-hook='chroot "$1" update-ca-certificates >/dev/null' \
      --customize-hook='ln -sf /usr/bin/python3 "$1/usr/local/bin/python"'
    prune_repo weaseldb-e2e/python-base "$tag"
  fi
  echo "$tag"
}

# --- the kind node -----------------------------------------------------------------

kind_files_dir() {
  local dir
  dir="$(cd "$HERE" && GOFLAGS=-mod=mod go mod download -json "sigs.k8s.io/kind@$KIND_VERSION" |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p')"
  [[ -d $dir/images/base/files ]] || die "kind $KIND_VERSION module has no images/base/files ($dir)"
  echo "$dir/images/base/files"
}

# The images kubeadm pulls for this Kubernetes version, e.g. registry.k8s.io/pause:3.10.1.
kubeadm_images() {
  "$BIN/kubeadm" config images list --kubernetes-version "$KUBERNETES_VERSION" 2>/dev/null
}

# The input hash an image was built from (label weaseldb.e2e.input), empty if none.
image_input() {
  docker image inspect -f '{{index .Config.Labels "weaseldb.e2e.input"}}' "$1" 2>/dev/null || true
}

# An image holding one static binary (and /tmp, /etc/passwd): the control-plane images
# upstream builds FROM distroless, rebuilt from the binaries built here.
binary_image() { # TAG BINARY PATH_IN_IMAGE [ENTRYPOINT_JSON]
  local tag="$1" binary="$2" path="$3" entrypoint="${4:-}" dir input
  input="$(inputs_hash "$binary" "$path" "$entrypoint")"
  [[ "$(image_input "$tag")" == "$input" ]] && return 0
  log "building $tag from $binary"
  dir="$(mktemp -d "$E2E/tmp/image.XXXXXX")"
  install -d -m 1777 "$dir/tmp"
  install -d -m 0755 "$dir/etc" "$dir/$(dirname "$path")"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n' >"$dir/etc/passwd"
  printf 'root:x:0:\nnobody:x:65534:\n' >"$dir/etc/group"
  install -m 0755 "$binary" "$dir/$path"
  local changes=(--change 'ENV PATH=/usr/local/bin:/usr/bin:/bin' --change "LABEL weaseldb.e2e.input=$input")
  [[ -n $entrypoint ]] && changes+=(--change "ENTRYPOINT $entrypoint")
  local before
  before="$(docker image inspect -f '{{.Id}}' "$tag" 2>/dev/null || true)"
  tar -C "$dir" -c . | docker import "${changes[@]}" - "$tag" >/dev/null
  rm -rf "$dir"
  drop_replaced "$tag" "$before"
}

# kube-proxy runs iptables/ip6tables/conntrack, so its image is a small Debian with them.
kube_proxy_image() { # TAG
  local input
  input="$(inputs_hash "$BIN/kube-proxy" "$HERE/e2e/kube-proxy-start" "essential iptables,nftables,conntrack")"
  [[ "$(image_input "$1")" == "$input" ]] && return 0
  rootfs_image "$1" essential iptables,nftables,conntrack \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change "LABEL weaseldb.e2e.input=$input" -- \
    --customize-hook="install -m 0755 '$BIN/kube-proxy' \"\$1/usr/local/bin/kube-proxy.bin\"" \
    --customize-hook="install -m 0755 '$HERE/e2e/kube-proxy-start' \"\$1/usr/local/bin/kube-proxy\""
}

# Every image kubeadm wants, under the name it wants, built from our binaries (etcd: the
# project's etcd build; kubeadm's etcd tag names an older 3.6 patch release).
control_plane_images() {
  local ref name
  for ref in $(kubeadm_images); do
    name="${ref##*/}"
    name="${name%%:*}"
    case $name in
      kube-proxy) kube_proxy_image "$ref" ;;
      coredns) binary_image "$ref" "$BIN/coredns" /coredns '["/coredns"]' ;;
      pause) binary_image "$ref" "$BIN/pause" /pause '["/pause"]' ;;
      *) binary_image "$ref" "$BIN/$name" "/usr/local/bin/$name" ;;
    esac
  done
}

# 1 when this host's bounding set lacks CAP_SYS_RESOURCE (bit 24), as on these CI machines.
restrict_oom_score_adj() {
  local bounding
  bounding="$(sed -n 's/^CapBnd:[[:space:]]*//p' /proc/self/status)"
  echo $(((0x$bounding >> 24 & 1) == 0 ? 1 : 0))
}

node_image_tag() {
  local h
  h="$(inputs_hash "recipe $NODE_RECIPE" "restrict-oom $(restrict_oom_score_adj)" "$KUBERNETES_VERSION $KIND_VERSION $CONTAINERD_VERSION $COREDNS_VERSION $ETCD_VERSION" \
    "$HERE/e2e/node-rootfs.sh" "$HERE/e2e/10-weaseldb-bridge.conflist" "$HERE/e2e/kube-proxy-start" \
    "$HERE/e2e/kubelet-kernel-tunables" \
    "$BIN/kubelet" "$BIN/kubeadm" "$BIN/containerd" "$BIN/runc" "$BIN/etcd" "$BIN/kube-apiserver" "$BIN/coredns")"
  echo "weaseldb-e2e/kind-node:$KUBERNETES_VERSION-$h"
}

# kind's own `build node-image` downloads; this does its assembly with what is here:
# 1. root filesystem: Debian packages kind's base image installs (+ runc and CNI plugins
#    from Debian), kind's files, containerd, kubelet/kubeadm/kubectl;
# 2. run it, start containerd, import the control-plane images, commit.
node_image() {
  local tag files pause cri_base build
  tag="$(node_image_tag)"
  if image_exists "$tag"; then echo "$tag"; return 0; fi
  files="$(kind_files_dir)"
  pause="$(kubeadm_images | grep '/pause:')"
  cri_base="$E2E/tmp/cri-base.json"
  # The base OCI spec containerd's CRI starts from: kind's (createContainer hook that
  # mounts the product files, no default rlimits).
  "$BIN/ctr" oci spec | python3 -c '
import json, sys
spec = json.load(sys.stdin)
spec.setdefault("hooks", {}).setdefault("createContainer", []).append({"path": "/kind/bin/mount-product-files.sh"})
spec["process"].pop("rlimits", None)
json.dump(spec, sys.stdout, indent=2)' >"$cri_base"

  local base="weaseldb-e2e/kind-base:${tag##*:}"
  if ! image_exists "$base"; then
    KIND_FILES="$files" BIN="$BIN" KUBERNETES_VERSION="$KUBERNETES_VERSION" PAUSE_IMAGE="$pause" \
      RESTRICT_OOM_SCORE_ADJ="$(restrict_oom_score_adj)" CNI_CONFLIST="$HERE/e2e/10-weaseldb-bridge.conflist" CRI_BASE="$cri_base" \
      rootfs_image "$base" minbase \
      systemd,conntrack,iptables,nftables,iproute2,ethtool,util-linux,mount,kmod,libseccomp2,pigz,bash,ca-certificates,curl,jq,procps,runc,containernetworking-plugins \
      --change 'ENV container=docker' \
      --change 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' -- \
      --customize-hook="bash '$HERE/e2e/node-rootfs.sh' \"\$1\""
  fi

  control_plane_images
  log "assembling $tag (control-plane images into the node's containerd)"
  build="weaseldb-e2e-node-build-$$"
  docker run -d --name "$build" --entrypoint sleep --security-opt seccomp=unconfined "$base" infinity >/dev/null
  # shellcheck disable=SC2064 # expand now: the name is fixed
  trap "docker rm -f '$build' >/dev/null 2>&1 || true" RETURN
  docker exec "$build" bash -c 'nohup containerd >/tmp/containerd.log 2>&1 &
    for i in $(seq 1 100); do [ -S /run/containerd/containerd.sock ] && ctr version >/dev/null 2>&1 && exit 0; sleep 0.1; done
    cat /tmp/containerd.log; exit 1' || die "containerd did not start in the node build container"
  # --no-unpack: layers are unpacked by the node's containerd when a pod first uses them.
  # pinned: kubelet's image garbage collection never removes them.
  mapfile -t refs < <(kubeadm_images)
  docker save "${refs[@]}" | docker exec -i "$build" ctr --namespace=k8s.io images import \
    --label=io.cri-containerd.pinned=pinned --all-platforms --no-unpack --digests - >/dev/null ||
    die "importing the control-plane images into the node failed"
  docker exec "$build" bash -c 'pkill containerd; for i in $(seq 1 100); do pgrep containerd >/dev/null || exit 0; sleep 0.1; done'
  docker commit --change 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' "$build" "$tag" >/dev/null
  # systemd stops on SIGRTMIN+3 (SIGTERM makes it re-execute); import and commit cannot
  # set a stop signal, a one-line build can.
  printf 'FROM %s\nSTOPSIGNAL SIGRTMIN+3\n' "$tag" | docker build -q -t "$tag" - >/dev/null
  prune_repo weaseldb-e2e/kind-node "$tag"
  prune_repo weaseldb-e2e/kind-base "$base"
  echo "$tag"
}

# --- project images -----------------------------------------------------------------

# build_project_image TAG [TARGET]: the project's Dockerfile, unchanged; TARGET selects a
# stage (e.g. `spark`), empty = the final stage. --network host: the private dockerd has
# no bridge for build containers, and pip needs PyPI.
build_project_image() {
  local tag="$1" target="${2:-}" args=(--network host -t "$tag" -f "$REPO/Dockerfile")
  [[ -n $target ]] && args+=(--target "$target")
  local base
  base="$(python_base_for_builds)"
  [[ -n $base ]] && args+=(--build-arg "PYTHON_IMAGE=$base")
  log "building $tag${target:+ (target $target)} from Dockerfile${base:+ on $base}"
  local log_file="$E2E/logs/$(echo "$tag" | tr '/:' '__').log" before
  before="$(docker image inspect -f '{{.Id}}' "$tag" 2>/dev/null || true)"
  docker build "${args[@]}" "$REPO" >"$log_file" 2>&1 ||
    { tail -n 30 "$log_file" >&2; die "docker build of $tag failed (log: $log_file)"; }
  drop_replaced "$tag" "$before"
}

# The image a rebuild replaced, untagged now. Only that one: the untagged results of
# earlier build stages are the classic builder's cache (pruning them re-runs pip)...
drop_replaced() { # TAG OLD_ID
  [[ -n $2 && "$(docker image inspect -f '{{.Id}}' "$1")" != "$2" ]] || return 0
  docker image rm "$2" >/dev/null 2>&1 || true
  prune_when_disk_low
}

# ...unless the disk runs low: every source change leaves a generation of those stage
# results behind (about 1 GB each), and a full disk fails the whole tier. Below
# E2E_MIN_FREE_GB free on the docker data root, the dangling ones go (the next build
# re-runs pip once).
E2E_MIN_FREE_GB="${E2E_MIN_FREE_GB:-30}"
prune_when_disk_low() {
  local free_gb
  free_gb="$(df --output=avail -BG "$E2E/docker" 2>/dev/null | tail -n 1 | tr -dc 0-9)"
  [[ -n $free_gb ]] && ((free_gb < E2E_MIN_FREE_GB)) || return 0
  log "only ${free_gb} GB free under $E2E/docker: removing dangling images"
  docker image prune -f >/dev/null 2>&1 || true
}

# Empty where the Dockerfile's default base (Docker Hub) can be pulled.
python_base_for_builds() {
  if [[ $(node_source) == stock ]]; then echo ""; else python_base_image; fi
}

# MinIO in the cluster runs the binary `make tools` built.
minio_image() { # TAG
  binary_image "$1" "$BIN/minio" /usr/local/bin/minio '["minio"]'
}

# The Spark operator controller: its binary, tini, a JRE 17 from Debian and pyspark's
# install dir as SPARK_HOME (the controller runs $SPARK_HOME/bin/spark-submit).
spark_operator_image() { # TAG
  local ctx
  ctx="$(mktemp -d "$E2E/tmp/spark-operator.XXXXXX")"
  install -m 0755 "$BIN/spark-operator" "$ctx/spark-operator"
  cp "$HERE/e2e/spark-operator.Dockerfile" "$ctx/Dockerfile"
  local base args=(--network host -t "$1" --build-arg "PYSPARK_VERSION=$PYSPARK_VERSION")
  base="$(python_base_for_builds)"
  [[ -n $base ]] && args+=(--build-arg "PYTHON_IMAGE=$base")
  log "building $1 (spark-operator $SPARK_OPERATOR_VERSION, pyspark $PYSPARK_VERSION)"
  local log_file="$E2E/logs/spark-operator-image.log" before
  before="$(docker image inspect -f '{{.Id}}' "$1" 2>/dev/null || true)"
  docker build "${args[@]}" "$ctx" >"$log_file" 2>&1 ||
    { tail -n 30 "$log_file" >&2; rm -rf "$ctx"; die "docker build of $1 failed (log: $log_file)"; }
  rm -rf "$ctx"
  drop_replaced "$1" "$before"
}
