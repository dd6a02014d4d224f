#!/usr/bin/env bash
# Start or stop a local Kubernetes control plane (etcd + kube-apiserver on 127.0.0.1, no
# kubelet) with the WeaselDB and SparkApplication CRDs installed.
#   hack/dev-cluster.sh up [DIR]    # last line printed: KUBECONFIG=DIR/kubeconfig
#   hack/dev-cluster.sh down [DIR]
# The control plane is the tests' (tests/support/kube.py), run in the background.
set -euo pipefail
cd "$(dirname "$0")/.."
command=${1:-up}
dir=${2:-$PWD/.dev-cluster}
python=${PYTHON:-.venv/bin/python}

up() {
  if [[ -f $dir/pid ]] && kill -0 "$(cat "$dir/pid")" 2>/dev/null; then
    echo "dev cluster already running (pid $(cat "$dir/pid"))"
    echo "KUBECONFIG=$dir/kubeconfig"
    return
  fi
  rm -rf "$dir" && mkdir -p "$dir"
  nohup "$python" -m tests.support.kube --root "$dir" >"$dir/control-plane.log" 2>&1 &
  echo $! >"$dir/pid"
  for _ in $(seq 1 600); do
    [[ -f $dir/ready ]] && break
    if ! kill -0 "$(cat "$dir/pid")" 2>/dev/null; then
      echo "control plane failed to start:" >&2
      tail -n 40 "$dir/control-plane.log" >&2
      exit 1
    fi
    sleep 0.1
  done
  [[ -f $dir/ready ]] || { echo "control plane not ready after 60s" >&2; exit 1; }
  echo "control plane up (pid $(cat "$dir/pid")); CRDs installed. Run the operator with:"
  echo "  KUBECONFIG=$dir/kubeconfig .venv/bin/weaseldb operator"
  echo "KUBECONFIG=$dir/kubeconfig"
}

down() {
  [[ -f $dir/pid ]] || { echo "no dev cluster in $dir"; return; }
  pid=$(cat "$dir/pid")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid"
    for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  fi
  rm -rf "$dir"
  echo "dev cluster stopped"
}

case $command in
  up) up ;;
  down) down ;;
  *) echo "usage: $0 up|down [DIR]" >&2; exit 2 ;;
esac
