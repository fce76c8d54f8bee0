#!/usr/bin/env bash
# Debian packages a real local node and the image build need: mmdebstrap (the base image's
# root filesystem), buildah (builds the Dockerfile; podman imports and runs images), runc
# (the OCI runtime containerd starts; crun refuses cgroup v1 hybrid hosts), iptables
# (kube-proxy), gcc and libc6-dev (the static pause binary). Installs only what is missing.
set -euo pipefail
need=()
for pair in mmdebstrap:mmdebstrap buildah:buildah podman:podman runc:runc iptables:iptables \
            gcc:gcc nsenter:util-linux; do
  command -v "${pair%%:*}" >/dev/null 2>&1 || need+=("${pair#*:}")
done
[ -e /usr/lib/x86_64-linux-gnu/libc.a ] || [ -e /usr/lib/libc.a ] || need+=(libc6-dev)
[ "${#need[@]}" -eq 0 ] && exit 0
[ "$(id -u)" = 0 ] || { echo "install-node-packages: needs root for apt-get install ${need[*]}" >&2; exit 1; }
echo "install-node-packages: apt-get install ${need[*]}" >&2
# One apt at a time on this machine (setup.sh may run several scripts at once).
exec 8>/var/lock/specguard-apt.lock
flock 8
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}" uidmap conmon >/dev/null
