# Host side of hack/e2e-cluster.sh: Debian packages, the private dockerd, and the ledger
# of every change made to this machine so that `down` undoes exactly those.
# Sourced, not run. Needs: E2E, RUN, LEDGER, BIN (set by e2e-cluster.sh).

# --- the ledger -------------------------------------------------------------
# One change per line, "KIND ARG...", appended when the change is made; `down` walks it
# backwards. A line is never written twice, so rerunning `up` keeps the first record
# (for sysctls: the value before the first `up`).

ledger_has() { [[ -f $LEDGER ]] && grep -qxF -- "$*" "$LEDGER"; }
ledger_add() { ledger_has "$@" || echo "$*" >>"$LEDGER"; }
ledger_has_kind() { [[ -f $LEDGER ]] && grep -q "^$1 " "$LEDGER"; }

# Kernel settings a kind node can change for the whole host (the node is privileged and
# /proc/sys is not per container for these): kubelet's kernel tunables, kube-proxy's
# conntrack table, and forwarding. Their values before the first `up` are recorded.
HOST_SYSCTLS=(
  net.ipv4.ip_forward net.ipv6.conf.all.forwarding
  net.bridge.bridge-nf-call-iptables net.bridge.bridge-nf-call-ip6tables
  vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
  kernel.keys.root_maxkeys kernel.keys.root_maxbytes
  net.netfilter.nf_conntrack_max fs.inotify.max_user_watches fs.inotify.max_user_instances
)

record_sysctls() {
  ledger_has_kind sysctl && return 0
  local key value
  for key in "${HOST_SYSCTLS[@]}"; do
    value="$(sysctl -n "$key" 2>/dev/null)" || continue
    ledger_add sysctl "$key" "$value"
  done
}

# Directories the node's bind mounts would make appear on the host.
record_missing_dirs() {
  local dir
  for dir in "$@"; do
    [[ -e $dir ]] || ledger_add hostdir "$dir"
  done
}

# --- Debian packages ----------------------------------------------------------

# What the private route needs: dockerd (and its containerd/runc), iptables for the
# node's own tables, mmdebstrap for the root filesystems, gcc + libc6-dev for pause and
# (with libseccomp-dev + pkg-config) for the node's runc.
HOST_PACKAGES=(docker.io iptables mmdebstrap gcc libc6-dev libseccomp-dev pkg-config)

ensure_packages() {
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  ((${#missing[@]})) || return 0
  if [[ $(id -u) != 0 ]]; then
    echo "e2e-cluster: no root: cannot install ${missing[*]} from Debian" >&2
    exit 3
  fi
  command -v apt-get >/dev/null || die "missing packages (${missing[*]}) and no apt-get to install them"
  log "installing from Debian: ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y \
    --no-install-recommends "${missing[@]}" >"$E2E/apt.log" 2>&1 ||
    { tail -n 20 "$E2E/apt.log" >&2; die "apt-get install ${missing[*]} failed (log: $E2E/apt.log)"; }
  for p in "${missing[@]}"; do ledger_add package "$p"; done
}

# --- which Docker ---------------------------------------------------------------

# "machine": a Docker engine that answers without us (DOCKER_HOST or the default socket);
# "private": our own dockerd, on a socket under $RUN. Decided once per cluster and kept
# in $E2E/docker-mode, so `down` and the tests talk to the same engine as `up` did.
docker_mode() {
  if [[ -f $E2E/docker-mode ]]; then
    cat "$E2E/docker-mode"
  elif [[ ${WEASELDB_E2E_DOCKER:-auto} != private ]] && command -v docker >/dev/null &&
    timeout 20 docker info >/dev/null 2>&1; then
    echo machine
  else
    echo private
  fi
}

use_docker() { # export what docker, kind and the tests need for the chosen engine
  local mode="$1"
  if [[ $mode == private ]]; then
    export DOCKER_HOST="unix://$RUN/docker.sock"
    # No buildx here: Debian packages no BuildKit front end, so use the classic builder.
    export DOCKER_BUILDKIT=0
    # The classic builder's deprecation notice is noise in logs.
    export DOCKER_CLI_HINTS=false
  fi
}

private_dockerd_pid() {
  local pid
  [[ -f $RUN/dockerd.pid ]] || return 1
  pid="$(cat "$RUN/dockerd.pid")" # (no trailing newline: `read` would report EOF)
  [[ -n $pid && -d /proc/$pid && "$(readlink "/proc/$pid/exe")" == */dockerd ]] || return 1
  echo "$pid"
}

# dockerd flags, each for a reason:
# - own --data-root/--exec-root/--pidfile/-H: nothing shared with a system Docker; the
#   data root keeps images between runs (cache), the exec root is runtime state.
# - --iptables=false --ip-forward=false --ip-masq=false --bridge=none: no host firewall
#   rules, no docker0, forwarding left alone. kind's network is a plain bridge; the host
#   reaches the node directly and published ports go through docker-proxy on 127.0.0.1.
#   Nothing in the cluster needs the internet (image builds use --network host).
# - the default runtime is runc behind runc-drop-missing-caps (see that file).
start_private_dockerd() {
  if [[ $(id -u) != 0 ]]; then
    echo "e2e-cluster: no root: cannot start the private dockerd (and no Docker engine answers 'docker info')" >&2
    exit 3
  fi
  ensure_packages "${HOST_PACKAGES[@]}"
  local pid
  if pid="$(private_dockerd_pid)" && timeout 10 docker info >/dev/null 2>&1; then
    ledger_add rundir "$RUN" # (no-ops when already recorded: only ours live there)
    ledger_add dockerd "$pid"
    return 0
  fi
  [[ -d $RUN ]] || { mkdir -p "$RUN" && ledger_add rundir "$RUN"; }
  install -m 0755 "$HERE/e2e/runc-drop-missing-caps" "$E2E/bin/runc-drop-missing-caps"
  record_sysctls
  log "starting the private dockerd (data root $E2E/docker)"
  # setsid: the daemon must outlive this script and the make/pytest that ran it;
  # 8>&-: it must not inherit (and hold forever) the lock this script holds on fd 8;
  # the system PATH: $BIN holds the node's containerd, shim and runc (2.2 / 1.2), which
  # Debian's dockerd would otherwise pick up, in part, next to its own containerd 1.6.
  PATH=/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin setsid nohup dockerd \
    --data-root "$E2E/docker" --exec-root "$RUN/exec" --pidfile "$RUN/dockerd.pid" \
    -H "unix://$RUN/docker.sock" --storage-driver overlay2 \
    --iptables=false --ip-forward=false --ip-masq=false --bridge=none \
    --add-runtime "weaseldb-runc=$E2E/bin/runc-drop-missing-caps" --default-runtime weaseldb-runc \
    </dev/null >>"$E2E/dockerd.log" 2>&1 8>&- &
  local i
  for i in $(seq 1 150); do
    if pid="$(private_dockerd_pid)" && timeout 5 docker info >/dev/null 2>&1; then
      ledger_add dockerd "$pid"
      return 0
    fi
    sleep 0.2
  done
  tail -n 20 "$E2E/dockerd.log" >&2
  die "the private dockerd did not answer within 30s (log: $E2E/dockerd.log)"
}

stop_private_dockerd() { # $1: the pid recorded in the ledger
  local pid="$1" i
  [[ -d /proc/$pid && "$(readlink "/proc/$pid/exe")" == */dockerd ]] || return 0
  log "stopping the private dockerd (pid $pid)"
  kill -TERM "$pid"
  for i in $(seq 1 300); do [[ -d /proc/$pid ]] || return 0; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
}

# Mount points dockerd leaves under its exec root (network namespaces), deepest first.
unmount_under() {
  local target targets
  targets="$(findmnt -rn -o TARGET | grep "^$1/" | sort -r || true)"
  for target in $targets; do umount -l "$target" 2>/dev/null || true; done
}

# --- undo ---------------------------------------------------------------------------

# Undoes the ledger kind by kind, in an order that works whatever order the changes were
# recorded in (the cluster before its network, the network before its bridge, dockerd
# before its run dir); within a kind, newest first. Package removal only with --purge
# (ordinary Debian packages; a later `up` would install them again). A step that fails
# is reported and the rest still runs.
UNDO_ORDER=(cluster network link dockerd rundir hostdir sysctl package)

undo_ledger() {
  local purge="$1" line kind lines=() kept=()
  [[ -f $LEDGER ]] || { log "nothing recorded in $LEDGER: no host changes to undo"; return 0; }
  mapfile -t lines < <(tac "$LEDGER")
  for kind in "${UNDO_ORDER[@]}"; do
    for line in "${lines[@]}"; do
      [[ $line == "$kind "* ]] || continue
      if [[ $kind == package && $purge != 1 ]]; then
        log "kept Debian package ${line#package } (installed by up; down --purge removes it)"
        kept+=("$line")
        continue
      fi
      # shellcheck disable=SC2086 # the line is "KIND ARG [VALUE]", split on purpose
      undo_one $line || log "warning: could not undo '$line'"
    done
  done
  rm -f "$LEDGER" "$E2E/docker-mode"
  # Packages stay recorded, so a later `down --purge` still knows they were ours.
  local k
  for k in "${kept[@]}"; do echo "$k" >>"$LEDGER"; done
}

undo_one() { # KIND ARG [VALUE]
  case $1 in
    cluster) delete_cluster "$2" ;;
    network) if docker network inspect "$2" >/dev/null 2>&1; then docker network rm "$2" >/dev/null && log "removed docker network $2"; fi ;;
    link) if ip link show "$2" >/dev/null 2>&1; then ip link delete "$2" && log "deleted link $2"; fi ;;
    dockerd) stop_private_dockerd "$2" ;;
    rundir) unmount_under "$2" && rm -rf "$2" && log "removed $2" ;;
    hostdir) if rmdir "$2" 2>/dev/null; then log "removed $2 (created by the node's bind mount)"; fi ;;
    sysctl) if [[ "$(sysctl -n "$2" 2>/dev/null)" != "$3" ]]; then sysctl -qw "$2=$3" && log "restored $2 = $3"; fi ;;
    package) DEBIAN_FRONTEND=noninteractive apt-get -y -qq purge "$2" >/dev/null && log "purged package $2" ;;
    *) log "unknown ledger line: $*" ;;
  esac
}
