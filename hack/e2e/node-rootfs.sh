#!/usr/bin/env bash
# mmdebstrap customize hook for the kind node's root filesystem (hack/e2e/images.sh).
# Does what kind's images/base/Dockerfile does after installing packages, with the files
# from kind's own module (KIND_FILES) and binaries built through the Go module proxy
# (BIN), plus the Kubernetes node binaries kind's `build node-image` would copy in.
#   node-rootfs.sh ROOTFS   (env: KIND_FILES BIN KUBERNETES_VERSION PAUSE_IMAGE CNI_CONFLIST
#                            CRI_BASE RESTRICT_OOM_SCORE_ADJ)
set -euo pipefail
root="$1"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

# kind's static files, with the modes its Dockerfile gives them (scripts 0755, rest 0644).
install -d -m 0755 "$root/kind" "$root/kind/bin"
install -m 0755 "$KIND_FILES"/usr/local/bin/* "$root/usr/local/bin/"
install -m 0644 "$KIND_FILES"/kind/README.txt "$root/kind/"
install -m 0755 "$KIND_FILES"/kind/bin/* "$root/kind/bin/"
for sub in containerd default sysctl.d systemd/system systemd/system/kubelet.service.d; do
  install -d -m 0755 "$root/etc/$sub"
  find "$KIND_FILES/etc/$sub" -maxdepth 1 -type f -exec install -m 0644 {} "$root/etc/$sub/" \;
done
install -m 0644 "$KIND_FILES"/etc/crictl.yaml "$root/etc/"

# containerd and runc (Go module proxy; /usr/local/sbin comes before Debian's runc in
# PATH); the sandbox image is the pause tag kubeadm asks for, pre-loaded in the node.
install -m 0755 "$BIN/containerd" "$BIN/ctr" "$BIN/containerd-shim-runc-v2" "$root/usr/local/bin/"
install -m 0755 "$BIN/runc" "$root/usr/local/sbin/runc"
install -m 0644 "$CRI_BASE" "$root/etc/containerd/cri-base.json"
sed -i "s#^\(\s*sandbox_image = \).*#\1\"$PAUSE_IMAGE\"#" "$root/etc/containerd/config.toml"
grep -q "sandbox_image = \"$PAUSE_IMAGE\"" "$root/etc/containerd/config.toml"
# cgroupfs, not systemd, as the cgroup driver (kubelet gets the same, see kind_config):
# on cgroup v1 runc's systemd driver freezes a pod's cgroup around every update, and on a
# busy 2-core machine that intermittently fails ("unable to freeze"), killing a container
# start.
sed -i 's/^\(\s*SystemdCgroup = \).*/\1false/' "$root/etc/containerd/config.toml"
if grep -q "SystemdCgroup = true" "$root/etc/containerd/config.toml"; then exit 1; fi
# Where root lacks CAP_SYS_RESOURCE, so does the node, and no process in it may lower an
# oom_score_adj: kubelet asks -998 for critical pods and runc fails ("can't get final
# child's PID from pipe"). containerd then clamps to its own value, as it does rootless.
if [[ ${RESTRICT_OOM_SCORE_ADJ:-0} == 1 ]]; then
  sed -i 's/^\(\s*restrict_oom_score_adj = \).*/\1true/' "$root/etc/containerd/config.toml"
  grep -q "restrict_oom_score_adj = true" "$root/etc/containerd/config.toml"
fi

# CNI: Debian's plugins where containerd looks for them, and a static bridge network.
# kindnetd is not on the module proxy; one node needs no routes, so a bridge + host-local
# conflist baked in here is the whole pod network (the cluster sets disableDefaultCNI).
install -d -m 0755 "$root/opt/cni/bin" "$root/etc/cni/net.d"
for plugin in "$root"/usr/lib/cni/*; do ln -sf "/usr/lib/cni/$(basename "$plugin")" "$root/opt/cni/bin/"; done
install -m 0644 "$CNI_CONFLIST" "$root/etc/cni/net.d/10-weaseldb-bridge.conflist"

# kubelet must not change the host's kernel settings (see that script).
install -m 0755 "$HERE/kubelet-kernel-tunables" "$root/usr/local/bin/weaseldb-kubelet-kernel-tunables"
printf '[Service]\nExecStartPre=/usr/local/bin/weaseldb-kubelet-kernel-tunables\n' \
  >"$root/etc/systemd/system/kubelet.service.d/12-weaseldb.conf"

# The node's Kubernetes binaries, where kind's systemd units expect them.
for b in kubelet kubeadm kubectl; do install -m 0755 "$BIN/$b" "$root/usr/bin/$b"; done
printf '%s' "$KUBERNETES_VERSION" >"$root/kind/version"
install -d -m 0755 "$root/etc/kubernetes/manifests"

# systemd as it runs in a container: only the units kind wants.
find "$root/lib/systemd/system/sysinit.target.wants/" -name "systemd-tmpfiles-setup.service" -delete
rm -f "$root"/lib/systemd/system/multi-user.target.wants/* "$root"/etc/systemd/system/*.wants/* \
  "$root"/lib/systemd/system/local-fs.target.wants/* \
  "$root"/lib/systemd/system/sockets.target.wants/*udev* \
  "$root"/lib/systemd/system/sockets.target.wants/*initctl* \
  "$root"/lib/systemd/system/basic.target.wants/*
echo "ReadKMsg=no" >>"$root/etc/systemd/journald.conf"
ln -sf /lib/systemd/systemd "$root/sbin/init"
chroot "$root" systemctl enable kubelet.service containerd.service undo-mount-hacks.service
chroot "$root" systemctl mask systemd-binfmt.service
