#!/usr/bin/env bash
# Build the external tools WeaselDB's tests and benchmarks use (minio, etcd,
# kube-apiserver, kubectl, helm) from source through the Go module proxy, once,
# into ${WEASELDB_TOOLS:-$HOME/.cache/weaseldb/bin}. Versions are pinned in
# hack/tools.env; a tool is rebuilt only when its binary is missing or its
# stamp ($BIN/.<tool>.version) differs from the pinned version.
#
# s3a-jars is not built: it is the S3A connector jar set the compaction job needs
# (hack/s3a/ivy.xml), resolved from Maven Central with the Ivy jar pyspark ships,
# into ${WEASELDB_S3A_JARS:-$HOME/.cache/weaseldb/s3a-jars} (needs java and the venv).
#
#   bash hack/tools.sh                  # all tools
#   bash hack/tools.sh minio etcd       # only these
#   bash hack/tools.sh --force kubectl  # rebuild even if current
#
# See docs/tools.md (build times, the control-plane start recipe).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=hack/tools.env
source "$HERE/tools.env"

BIN="${WEASELDB_TOOLS:-$HOME/.cache/weaseldb/bin}"
WORK="$BIN/.build"
ALL_TOOLS=(minio etcd kube-apiserver kubectl helm s3a-jars)
S3A_JARS="${WEASELDB_S3A_JARS:-$HOME/.cache/weaseldb/s3a-jars}"
PYTHON="${WEASELDB_PYTHON:-$HERE/../.venv/bin/python}"

die() { echo "tools.sh: $*" >&2; exit 1; }

usage() {
  cat <<EOF
usage: bash hack/tools.sh [--force] [TOOL...]
Builds (once) into $BIN: ${ALL_TOOLS[*]}
Pinned versions: hack/tools.env. No TOOL = all.
EOF
}

# --- what "current" means -------------------------------------------------

display_version() {
  case "$1" in
    minio) echo "$MINIO_RELEASE" ;;
    etcd) echo "$ETCD_VERSION" ;;
    kube-apiserver | kubectl) echo "$KUBERNETES_VERSION" ;;
    helm) echo "$HELM_VERSION" ;;
    s3a-jars) echo "$(sha256sum "$HERE/s3a/ivy.xml" | cut -c1-16)" ;;
  esac
}

# The stamp holds everything that selects the source, so editing any pin rebuilds.
stamp_value() {
  case "$1" in
    minio) echo "$MINIO_RELEASE $MINIO_MODULE_VERSION" ;;
    *) display_version "$1" ;;
  esac
}

is_current() {
  local t="$1" have=""
  if [[ "$t" == s3a-jars ]]; then
    [[ -f "$S3A_JARS/.version" ]] || return 1
    read -r have <"$S3A_JARS/.version" || true
    [[ "$have" == "$(stamp_value "$t")" ]]
    return
  fi
  [[ -x "$BIN/$t" && -f "$BIN/.$t.version" ]] || return 1
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
  local dir="$WORK/kubernetes" ready=""
  [[ -f "$dir/.ready" ]] && read -r ready <"$dir/.ready"
  [[ "$ready" == "$KUBERNETES_VERSION" ]] && return 0
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
    echo "	k8s.io/kubernetes/cmd/kube-apiserver"
    echo "	k8s.io/kubernetes/cmd/kubectl"
    echo ")"
  } >"$dir/go.mod"
  grep -q ' => k8s.io/api ' "$dir/go.mod" || { echo "no staging replaces found in $upstream"; return 1; }
  (cd "$dir" && go mod tidy)
  echo "$KUBERNETES_VERSION" >"$dir/.ready"
}

build_kube() { # cmd name: kube-apiserver | kubectl
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

build_one() {
  case "$1" in
    minio) build_minio ;;
    etcd) build_etcd ;;
    kube-apiserver | kubectl) build_kube "$1" ;;
    helm) build_helm ;;
  esac
}

check_args() { # the smoke test run on a freshly built binary
  case "$1" in
    kubectl) echo "version --client" ;;
    helm) echo "version" ;;
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
    *)
      [[ " ${ALL_TOOLS[*]} " == *" $arg "* ]] || die "unknown tool '$arg' (known: ${ALL_TOOLS[*]})"
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
  mv -f "$STAGE/$t" "$BIN/$t"
  stamp_value "$t" >"$BIN/.$t.version"
  echo "$t: built $(display_version "$t") in ${took}s"
done
