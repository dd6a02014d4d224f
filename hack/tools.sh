#!/usr/bin/env bash
# Build the external tools WeaselDB's tests and benchmarks use (minio, etcd,
# kube-apiserver, kubectl, helm, promtool) from source through the Go module proxy, once,
# into ${WEASELDB_TOOLS:-$HOME/.cache/weaseldb/bin}. The kind end-to-end tier needs
# more (kind, the node's Kubernetes binaries, coredns, containerd, pause and the Spark
# operator): `bash hack/tools.sh e2e` builds those too (hack/e2e-cluster.sh does). Versions are pinned in
# hack/tools.env; a tool is rebuilt only when its binary is missing or its
# stamp ($BIN/.<tool>.version) differs from the pinned version.
#
# s3a-jars is not built: it is the S3A connector jar set the compaction job needs
# (hack/s3a/ivy.xml), resolved from Maven Central with the Ivy jar pyspark ships,
# into ${WEASELDB_S3A_JARS:-$HOME/.cache/weaseldb/s3a-jars} (needs java and the venv).
# chromium is not built either: the headless browser of the /docs test is the Debian
# package, installed system-wide with apt-get when `chromium` is not on PATH.
#
#   bash hack/tools.sh                  # all tools
#   bash hack/tools.sh minio etcd       # only these
#   bash hack/tools.sh --force kubectl  # rebuild even if current
#   bash hack/tools.sh e2e              # the tools of the kind tier (E2E_TOOLS)
#
# See docs/tools.md (build times, the control-plane start recipe).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=hack/tools.env
source "$HERE/tools.env"

BIN="${WEASELDB_TOOLS:-$HOME/.cache/weaseldb/bin}"
WORK="$BIN/.build"
ALL_TOOLS=(minio etcd kube-apiserver kubectl helm promtool s3a-jars chromium)
# Only for the kind tier; never built by a bare `bash hack/tools.sh`.
KUBE_NODE_TOOLS=(kubelet kubeadm kube-controller-manager kube-scheduler kube-proxy)
E2E_TOOLS=(kind "${KUBE_NODE_TOOLS[@]}" coredns containerd runc pause spark-operator)
KNOWN_TOOLS=("${ALL_TOOLS[@]}" "${E2E_TOOLS[@]}")
# Every k8s.io/kubernetes command the wrapper module can build.
KUBE_COMMANDS=(kube-apiserver kubectl "${KUBE_NODE_TOOLS[@]}")
S3A_JARS="${WEASELDB_S3A_JARS:-$HOME/.cache/weaseldb/s3a-jars}"
PYTHON="${WEASELDB_PYTHON:-$HERE/../.venv/bin/python}"

die() { echo "tools.sh: $*" >&2; exit 1; }

usage() {
  cat <<EOF
usage: bash hack/tools.sh [--force] [TOOL...|e2e]
Builds (once) into $BIN: ${ALL_TOOLS[*]}
The kind tier's tools (TOOL "e2e" = all of them): ${E2E_TOOLS[*]}
Pinned versions: hack/tools.env. No TOOL = ${ALL_TOOLS[*]}.
EOF
}

# --- what "current" means -------------------------------------------------

display_version() {
  case "$1" in
    minio) echo "$MINIO_RELEASE" ;;
    etcd) echo "$ETCD_VERSION" ;;
    kube-apiserver | kubectl | kubelet | kubeadm | kube-controller-manager | kube-scheduler | kube-proxy | pause)
      echo "$KUBERNETES_VERSION" ;;
    helm) echo "$HELM_VERSION" ;;
    promtool) echo "$PROMETHEUS_VERSION" ;;
    s3a-jars) echo "$(sha256sum "$HERE/s3a/ivy.xml" | cut -c1-16)" ;;
    kind) echo "$KIND_VERSION" ;;
    coredns) echo "$COREDNS_VERSION" ;;
    containerd) echo "$CONTAINERD_VERSION" ;;
    runc) echo "$RUNC_VERSION" ;;
    spark-operator) echo "$SPARK_OPERATOR_VERSION" ;;
  esac
}

# The stamp holds everything that selects the source, so editing any pin rebuilds.
stamp_value() {
  case "$1" in
    minio) echo "$MINIO_RELEASE $MINIO_MODULE_VERSION" ;;
    promtool) echo "$PROMETHEUS_VERSION $PROMTOOL_TAGS" ;;
    *) display_version "$1" ;;
  esac
}

is_current() {
  local t="$1" have="" extra
  if [[ "$t" == chromium ]]; then
    command -v chromium >/dev/null
    return
  fi
  if [[ "$t" == s3a-jars ]]; then
    [[ -f "$S3A_JARS/.version" ]] || return 1
    read -r have <"$S3A_JARS/.version" || true
    [[ "$have" == "$(stamp_value "$t")" ]]
    return
  fi
  [[ -x "$BIN/$t" && -f "$BIN/.$t.version" ]] || return 1
  for extra in $(extra_binaries "$t"); do [[ -x "$BIN/$extra" ]] || return 1; done
  read -r have <"$BIN/.$t.version" || true
  [[ "$have" == "$(stamp_value "$t")" ]]
}

# --- build helpers (run in a subshell, output to the tool's log) ----------

# Path of the go.mod of MODULE@VERSION in the module cache (downloads it).
gomod_of() {
  local out
  out="$(go mod download -json "$1")" || { echo "go mod download $1 failed:" >&2; echo "$out" >&2; return 1; }
  sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",*$/\1/p' <<<"$out"
}

# Lines of an upstream go.mod that set the main module's language/GODEBUG
# defaults; copied into our wrapper modules so the binaries behave like upstream's.
go_directives() {
  grep -E '^(go|godebug) ' "$1"
}

build_minio() {
  local t="${MINIO_RELEASE#RELEASE.}" # 2025-09-07T16-13-09Z
  local version="${t%%T*}T$(echo "${t#*T}" | tr - :)"
  local pkg=github.com/minio/minio/cmd
  GOBIN="$STAGE" go install -trimpath -ldflags "-s -w \
    -X $pkg.Version=$version -X $pkg.ReleaseTag=$MINIO_RELEASE \
    -X $pkg.CommitID=$MINIO_COMMIT -X $pkg.ShortCommitID=${MINIO_COMMIT:0:12} \
    -X $pkg.CopyrightYear=${t:0:4}" \
    "github.com/minio/minio@$MINIO_MODULE_VERSION"
}

# go.etcd.io/etcd/server/v3 has relative `replace`s in its go.mod, so
# `go install ...@version` refuses it; build it from a throwaway wrapper module
# instead (the sibling modules come in at the same version via its requires).
build_etcd() {
  local mod="go.etcd.io/etcd/server/v3" dir="$WORK/etcd"
  local upstream
  upstream="$(gomod_of "$mod@$ETCD_VERSION")"
  rm -rf "$dir" && mkdir -p "$dir"
  {
    echo "module weaseldb.local/tools/etcd"
    echo
    go_directives "$upstream"
    echo
    echo "require $mod $ETCD_VERSION"
    echo
    echo "tool $mod"
  } >"$dir/go.mod"
  (cd "$dir" && go mod tidy && go build -trimpath -ldflags "-s -w" -o "$STAGE/etcd" "$mod")
}

# k8s.io/kubernetes replaces every staging module (k8s.io/api, client-go, ...)
# with ./staging/src/...; a wrapper module maps each to its published
# v0.MINOR.PATCH instead (the way envtest/kubebuilder users build it).
prepare_kubernetes() {
  local dir="$WORK/kubernetes" ready="" want="$KUBERNETES_VERSION ${KUBE_COMMANDS[*]}" c
  [[ -f "$dir/.ready" ]] && read -r ready <"$dir/.ready"
  [[ "$ready" == "$want" ]] && return 0
  local staging="v0.${KUBERNETES_VERSION#v1.}" upstream
  upstream="$(gomod_of "k8s.io/kubernetes@$KUBERNETES_VERSION")"
  rm -rf "$dir" && mkdir -p "$dir"
  {
    echo "module weaseldb.local/tools/kubernetes"
    echo
    go_directives "$upstream"
    echo
    echo "require k8s.io/kubernetes $KUBERNETES_VERSION"
    echo
    echo "replace ("
    sed -n "s#^[[:space:]]*\(k8s\.io/[^[:space:]]*\) => \./staging/src/.*#\t\1 => \1 $staging#p" "$upstream"
    echo ")"
    echo
    echo "tool ("
    for c in "${KUBE_COMMANDS[@]}"; do echo "	k8s.io/kubernetes/cmd/$c"; done
    echo ")"
  } >"$dir/go.mod"
  grep -q ' => k8s.io/api ' "$dir/go.mod" || { echo "no staging replaces found in $upstream"; return 1; }
  (cd "$dir" && go mod tidy)
  echo "$want" >"$dir/.ready"
}

build_kube() { # cmd name: one of KUBE_COMMANDS
  prepare_kubernetes
  local v="$KUBERNETES_VERSION" minor ld="-s -w" p
  minor="$(echo "$v" | cut -d. -f2)"
  # What upstream's hack/lib/version.sh stamps into every binary.
  for p in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
    ld+=" -X $p.gitVersion=$v -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
    ld+=" -X $p.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  done
  (cd "$WORK/kubernetes" &&
    go build -trimpath -tags=selinux,notest,grpcnotrace -ldflags "$ld" \
      -o "$STAGE/$1" "k8s.io/kubernetes/cmd/$1")
}

build_helm() {
  local cg minor p ld="-s -w"
  # helm stamps the Kubernetes minor of its client-go into its default capabilities.
  cg="$(awk '$1 == "k8s.io/client-go" { print $2; exit }' "$(gomod_of "helm.sh/helm/v3@$HELM_VERSION")")"
  minor="$(echo "$cg" | cut -d. -f2)"
  ld+=" -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
  ld+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
  for p in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
    ld+=" -X $p.k8sVersionMajor=1 -X $p.k8sVersionMinor=$minor"
  done
  GOBIN="$STAGE" go install -trimpath -ldflags "$ld" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
}

# promtool (`promtool check rules` on the chart's alerts) from github.com/prometheus/prometheus,
# whose module versions are v0.MAJORMINOR.PATCH for release vMAJOR.MINOR.PATCH (v0.316.0 is
# Prometheus 3.16.0). Its go.mod has no replaces, so plain `go install`; the tag and the
# version flags are upstream's .promu.yml (not builtinassets: the server's web UI, not promtool's).
build_promtool() {
  local mod="github.com/prometheus/prometheus" v="${PROMETHEUS_VERSION#v0.}" p
  local release="${v:0:1}.${v:1:2}.${v##*.}" ld="-s -w"
  p=github.com/prometheus/common/version
  ld+=" -X $p.Version=$release -X $p.Branch=HEAD -X $p.BuildUser=weaseldb-tools"
  GOBIN="$STAGE" go install -trimpath -tags "$PROMTOOL_TAGS" -ldflags "$ld" "$mod/cmd/promtool@$PROMETHEUS_VERSION"
}

# Resolve hack/s3a/ivy.xml from Maven Central (hack/s3a/ivysettings.xml) with the Ivy
# jar pyspark bundles, into a fresh directory that replaces $S3A_JARS at the end.
fetch_s3a_jars() {
  command -v java >/dev/null || die "s3a-jars: 'java' not found in PATH (install a JRE 17)"
  local spark ivy stage="$S3A_JARS.stage"
  spark="$("$PYTHON" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')" ||
    die "s3a-jars: pyspark is not installed in $PYTHON (run make install)"
  ivy="$(ls "$spark"/jars/ivy-*.jar | head -n 1)"
  rm -rf "$stage" && mkdir -p "$stage"
  local start=$SECONDS log="$HOME/.cache/weaseldb/s3a-jars.log"
  if ! java -jar "$ivy" -settings "$HERE/s3a/ivysettings.xml" -ivy "$HERE/s3a/ivy.xml" \
    -cache "$HOME/.cache/weaseldb/ivy" -confs default -types jar bundle \
    -retrieve "$stage/[artifact]-[revision](-[classifier]).[ext]" >"$log" 2>&1; then
    tail -n 25 "$log" | sed 's/^/    /' >&2
    die "s3a-jars: resolution failed (log: $log)"
  fi
  stamp_value s3a-jars >"$stage/.version"
  rm -rf "$S3A_JARS" && mv "$stage" "$S3A_JARS"
  echo "s3a-jars: $(ls "$S3A_JARS"/*.jar | wc -l) jars into $S3A_JARS in $((SECONDS - start))s"
}

# Headless Chromium for tests/integration/test_docs_ui.py: Debian's package (whatever
# version the release carries; the test needs any recent one), through apt-get, as root
# or with passwordless sudo.
ensure_chromium() {
  command -v apt-get >/dev/null || die "chromium: not on PATH and no apt-get to install it"
  local sudo=() start=$SECONDS log="$HOME/.cache/weaseldb/chromium.log"
  ((EUID == 0)) || sudo=(sudo -n)
  mkdir -p "$(dirname "$log")"
  if ! { "${sudo[@]}" apt-get update -qq &&
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } >"$log" 2>&1; then
    tail -n 20 "$log" >&2
    die "chromium: apt-get install failed (log: $log)"
  fi
  echo "chromium: installed $(chromium --version 2>/dev/null) in $((SECONDS - start))s"
}

build_kind() {
  GOBIN="$STAGE" go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kind@$KIND_VERSION"
}

build_coredns() {
  GOBIN="$STAGE" go install -trimpath -ldflags "-s -w" "github.com/coredns/coredns@$COREDNS_VERSION"
}

# A throwaway main module that requires MODULE@VERSION and copies the `replace` and
# `exclude` directives of its go.mod: `go install pkg@version` refuses modules that have
# them, and without them the build list would differ from upstream's own build.
#   wrapper_module DIR MODULE VERSION PACKAGE...    (then `go build` in DIR)
wrapper_module() {
  local dir="$1" mod="$2" version="$3" upstream p
  shift 3
  upstream="$(gomod_of "$mod@$version")"
  rm -rf "$dir" && mkdir -p "$dir"
  {
    echo "module weaseldb.local/tools/$(basename "$dir")"
    echo
    go_directives "$upstream"
    echo
    echo "require $mod $version"
    echo
    awk '/^(replace|exclude) \($/ { keep = 1 } keep { print } keep && /^\)$/ { keep = 0 }
         /^(replace|exclude) [^(]/ { print }' "$upstream"
    echo
    for p in "$@"; do echo "tool $p"; done
  } >"$dir/go.mod"
  (cd "$dir" && go mod tidy)
}

# Three binaries under one stamp: the daemon, its CLI (`kind load` uses `ctr`) and the
# runc shim. The build tags leave out snapshotters nobody selects in a kind node (the
# same set kind's base image uses); CGO is off, so they are static.
build_containerd() {
  local mod="github.com/containerd/containerd/v2" dir="$WORK/containerd" c
  local ld="-s -w -X $mod/version.Version=$CONTAINERD_VERSION -X $mod/version.Package=$mod"
  wrapper_module "$dir" "$mod" "$CONTAINERD_VERSION" "$mod/cmd/ctr" "$mod/cmd/containerd-shim-runc-v2" "$mod/cmd/containerd"
  for c in ctr containerd-shim-runc-v2 containerd; do
    (cd "$dir" && go build -trimpath -tags "no_aufs no_zfs no_btrfs no_devmapper" \
      -ldflags "$ld" -o "$STAGE/$c" "$mod/cmd/$c")
  done
}

# runc needs cgo (its nsexec is C) and libseccomp (seccomp profiles, RuntimeDefault):
# linked against this host's glibc and libseccomp2, like the Debian node it runs in.
build_runc() {
  local mod="github.com/opencontainers/runc"
  pkg-config --exists libseccomp || { echo "runc needs libseccomp-dev and pkg-config"; return 1; }
  CGO_ENABLED=1 GOBIN="$STAGE" go install -trimpath -tags "seccomp urfave_cli_no_docs" \
    -ldflags "-s -w -X main.version=${RUNC_VERSION#v}" "$mod@$RUNC_VERSION"
}

# The sandbox ("pause") container's program is 60 lines of C in k8s.io/kubernetes;
# built statically so it runs in an image with nothing else in it.
build_pause() {
  local src tag
  command -v gcc >/dev/null || { echo "pause needs gcc (apt-get install gcc libc6-dev)"; return 1; }
  src="$(go mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p')/build/pause"
  tag="$(sed -n 's/^TAG ?= //p' "$src/Makefile")"
  gcc -Os -Wall -Werror -static -DVERSION="v$tag-$KUBERNETES_VERSION" -o "$STAGE/pause" "$src/linux/pause.c"
}

# github.com/kubeflow/spark-operator/v2 pins its k8s.io modules with `replace`.
build_spark_operator() {
  local mod="github.com/kubeflow/spark-operator/v2" dir="$WORK/spark-operator"
  wrapper_module "$dir" "$mod" "$SPARK_OPERATOR_VERSION" "$mod/cmd/operator"
  (cd "$dir" && go build -trimpath \
    -ldflags "-s -w -X $mod/pkg/version.version=$SPARK_OPERATOR_VERSION" \
    -o "$STAGE/spark-operator" "$mod/cmd/operator")
}

build_one() {
  case "$1" in
    minio) build_minio ;;
    etcd) build_etcd ;;
    kube-apiserver | kubectl | kubelet | kubeadm | kube-controller-manager | kube-scheduler | kube-proxy)
      build_kube "$1" ;;
    helm) build_helm ;;
    promtool) build_promtool ;;
    kind) build_kind ;;
    coredns) build_coredns ;;
    containerd) build_containerd ;;
    runc) build_runc ;;
    pause) build_pause ;;
    spark-operator) build_spark_operator ;;
  esac
}

# Binaries a tool installs besides the one named after it.
extra_binaries() {
  case "$1" in
    containerd) echo "ctr containerd-shim-runc-v2" ;;
  esac
}

check_args() { # the smoke test run on a freshly built binary
  case "$1" in
    kubectl) echo "version --client" ;;
    helm | kubeadm | kind | spark-operator) echo "version" ;;
    coredns) echo "-version" ;;
    pause) echo "-v" ;;
    *) echo "--version" ;;
  esac
}

# --- main -----------------------------------------------------------------

force=0
tools=()
for arg in "$@"; do
  case "$arg" in
    -h | --help) usage; exit 0 ;;
    -f | --force) force=1 ;;
    -*) usage >&2; die "unknown option: $arg" ;;
    e2e) tools+=("${E2E_TOOLS[@]}") ;;
    *)
      [[ " ${KNOWN_TOOLS[*]} " == *" $arg "* ]] || die "unknown tool '$arg' (known: ${KNOWN_TOOLS[*]})"
      tools+=("$arg")
      ;;
  esac
done
((${#tools[@]})) || tools=("${ALL_TOOLS[@]}")

mkdir -p "$BIN"
locked=0
for t in "${tools[@]}"; do
  if ((!force)) && is_current "$t"; then
    echo "$t: ok (cached)"
    continue
  fi
  if [[ "$t" == s3a-jars ]]; then
    mkdir -p "$(dirname "$S3A_JARS")"
    fetch_s3a_jars
    continue
  fi
  if [[ "$t" == chromium ]]; then
    ensure_chromium
    continue
  fi

  if ((!locked)); then
    command -v go >/dev/null || die "$t: 'go' not found in PATH (needed to build it)"
    mkdir -p "$WORK"
    # One build at a time, also across concurrent invocations (make + pytest).
    if command -v flock >/dev/null; then
      exec 9>"$BIN/.lock"
      flock 9
    fi
    locked=1
    # Never download another toolchain; build with the installed Go.
    export GOTOOLCHAIN=local GOWORK=off GO111MODULE=on CGO_ENABLED=0
    # Another invocation may have built it while we waited for the lock.
    if ((!force)) && is_current "$t"; then
      echo "$t: ok (cached)"
      continue
    fi
  fi

  STAGE="$WORK/stage"
  log="$WORK/$t.log"
  rm -rf "$STAGE" && mkdir -p "$STAGE"
  start=$SECONDS
  set +e
  (
    set -euo pipefail
    build_one "$t"
    test -x "$STAGE/$t"
  ) >"$log" 2>&1
  rc=$?
  set -e
  took=$((SECONDS - start))
  if ((rc != 0)); then
    echo "$t: BUILD FAILED after ${took}s (with $(go env GOVERSION)); last lines of $log:" >&2
    tail -n 25 "$log" | sed 's/^/    /' >&2
    die "$t: build failed"
  fi
  read -ra check <<<"$(check_args "$t")"
  if ! check_out="$(timeout 60 "$STAGE/$t" "${check[@]}" 2>&1)"; then
    echo "$check_out" | sed 's/^/    /' >&2
    die "$t: built, but its smoke test '$t ${check[*]}' failed"
  fi
  echo "$check_out" >>"$log"
  for extra in $(extra_binaries "$t"); do mv -f "$STAGE/$extra" "$BIN/$extra"; done
  mv -f "$STAGE/$t" "$BIN/$t"
  stamp_value "$t" >"$BIN/.$t.version"
  echo "$t: built $(display_version "$t") in ${took}s"
done
