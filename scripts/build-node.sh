#!/usr/bin/env bash
# Build the container runtime of a real local node for specguard_testkit's RealNode
# (docs/local-cluster.md): containerd, its runc shim and ctr, crictl, the CNI plugins
# (bridge, host-local, loopback, portmap), all from their Go modules through the module
# proxy, and the pause image compiled from Kubernetes' own pause.c. runc comes from
# Debian (a Go-built runc needs cgo and libseccomp; Debian's works on cgroup v1 hybrid
# hosts, where crun refuses). The kubelet and kube-proxy come from
# scripts/build-control-plane.sh (same release as the control plane).
#
#   bash scripts/build-node.sh        # about 4 minutes on 2 cores the first time, then instant
#
# Idempotent: exits at once when the cached binaries of these versions exist.
# Cache: ${SPECGUARD_CACHE_DIR:-~/.cache/specguard}/node/<versions>/{bin,pause.oci.tar}.
set -euo pipefail
cd "$(dirname "$0")/.."

# Change together with NODE_VERSIONS in testkit/specguard_testkit/_binaries.py.
CONTAINERD_VERSION=2.4.2
CRICTL_VERSION=1.37.0
CNI_VERSION=1.10.0
KUBE_VERSION="${SPECGUARD_KUBE_VERSION:-1.37.2}"   # pause.c comes from this release

CACHE_DIR="${SPECGUARD_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/specguard}"
ROOT="$CACHE_DIR/node/containerd-$CONTAINERD_VERSION-crictl-$CRICTL_VERSION-cni-$CNI_VERSION"
BIN_DIR="$ROOT/bin"
WANT=(containerd containerd-shim-runc-v2 ctr crictl bridge host-local loopback portmap)

say() { echo "build-node: $*" >&2; }
die() { say "error: $*"; exit 1; }

have_all() {
  for b in "${WANT[@]}"; do [ -x "$BIN_DIR/$b" ] || return 1; done
  [ -s "$ROOT/pause.oci.tar" ]
}

bash scripts/install-node-packages.sh
if have_all; then say "cached in $ROOT: nothing to do"; exit 0; fi
command -v go >/dev/null || die "needs the go command (Go >= 1.26)"

mkdir -p "$ROOT"
exec 9>"$ROOT/.build.lock"
if ! flock -n 9; then say "another build is running; waiting for it"; flock 9; fi
if have_all; then say "built meanwhile by another run: $ROOT"; exit 0; fi

export CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-trimpath
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
began=$(date +%s)
say "building containerd $CONTAINERD_VERSION (+ shim, ctr), crictl $CRICTL_VERSION and the CNI plugins $CNI_VERSION from the Go modules (about 4 minutes on 2 cores; log: $ROOT/build.log)"
{
  GOBIN="$work/bin" go install -ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=v$CONTAINERD_VERSION" \
    -tags "no_btrfs no_devmapper no_zfs no_aufs urfave_cli_no_docs" \
    "github.com/containerd/containerd/v2/cmd/containerd@v$CONTAINERD_VERSION" \
    "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@v$CONTAINERD_VERSION" \
    "github.com/containerd/containerd/v2/cmd/ctr@v$CONTAINERD_VERSION" &&
  GOBIN="$work/bin" go install -ldflags "-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=v$CRICTL_VERSION" \
    "sigs.k8s.io/cri-tools/cmd/crictl@v$CRICTL_VERSION" &&
  GOBIN="$work/bin" go install -ldflags "-s -w" \
    "github.com/containernetworking/plugins/plugins/main/bridge@v$CNI_VERSION" \
    "github.com/containernetworking/plugins/plugins/main/loopback@v$CNI_VERSION" \
    "github.com/containernetworking/plugins/plugins/ipam/host-local@v$CNI_VERSION" \
    "github.com/containernetworking/plugins/plugins/meta/portmap@v$CNI_VERSION"
} >"$ROOT/build.log" 2>&1 || { tail -n 30 "$ROOT/build.log" >&2; die "go install failed (log: $ROOT/build.log)"; }
go_seconds=$(( $(date +%s) - began ))

# The pause image (the pod sandbox): Kubernetes' pause.c, static, in an image of its own.
pause_src=$(go mod download -json "k8s.io/kubernetes@v$KUBE_VERSION" | sed -nE 's/^\s*"Dir": "(.*)",?$/\1/p')/build/pause/linux/pause.c
[ -r "$pause_src" ] || die "no pause.c in k8s.io/kubernetes@v$KUBE_VERSION ($pause_src)"
mkdir -p "$work/pause"
gcc -Os -static -o "$work/pause/pause" "$pause_src" -DVERSION="v$KUBE_VERSION" \
  || die "gcc -static pause.c failed (needs gcc and libc6-dev)"
strip "$work/pause/pause"
source scripts/lib-buildah.sh
buildah_env "$CACHE_DIR"
ctr_id=$(buildah from scratch)
buildah copy "$ctr_id" "$work/pause/pause" /pause >/dev/null
buildah config --entrypoint '["/pause"]' --user 65535:65535 "$ctr_id"
buildah commit -q --rm "$ctr_id" "$PAUSE_IMAGE" >/dev/null
rm -f "$work/pause.oci.tar"
buildah push -q "$PAUSE_IMAGE" "oci-archive:$work/pause.oci.tar:$PAUSE_IMAGE"

# Install through temporary names so a half-copied file never looks cached.
mkdir -p "$BIN_DIR"
for b in "${WANT[@]}"; do
  cp "$work/bin/$b" "$BIN_DIR/.$b.tmp" && mv -f "$BIN_DIR/.$b.tmp" "$BIN_DIR/$b"
done
"$BIN_DIR/containerd" --version >/dev/null || die "the built containerd does not run"
cp "$work/pause.oci.tar" "$ROOT/.pause.tmp" && mv -f "$ROOT/.pause.tmp" "$ROOT/pause.oci.tar"
say "done in $(( $(date +%s) - began )) s (Go builds $go_seconds s): $ROOT ($("$BIN_DIR/containerd" --version | awk '{print $3}'), runc $(runc --version | awk 'NR==1{print $3}'))"
