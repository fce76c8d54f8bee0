#!/usr/bin/env bash
# Build kube-apiserver, kube-controller-manager and kube-scheduler from Debian's
# `kubernetes` source package (1.20.2) and cache them outside the checkout.
# Idempotent: exits at once when the cached binaries exist.
# See ../shared/reference/local-cluster.md for why each step is here.
set -euo pipefail

CACHE_DIR="${SPECGUARD_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/specguard}"
BIN_DIR="$CACHE_DIR/control-plane/bin"
WANT=(kube-apiserver kube-controller-manager kube-scheduler)

have_all() { for b in "${WANT[@]}"; do [ -x "$BIN_DIR/$b" ] || return 1; done; }
say() { echo "build-control-plane: $*" >&2; }

if have_all; then say "cached binaries in $BIN_DIR"; exit 0; fi
if [ "$(id -u)" != 0 ]; then say "must run as root (it installs Debian packages)"; exit 1; fi
if [ ! -r /etc/debian_version ]; then say "needs Debian (it builds from Debian's kubernetes source package)"; exit 1; fi

export DEBIAN_FRONTEND=noninteractive
SRC_LIST=/etc/apt/sources.list.d/specguard-src.sources
if ! grep -rqs '^Types:.*deb-src' /etc/apt/sources.list.d/ /etc/apt/sources.list 2>/dev/null; then
  say "enabling Debian source packages ($SRC_LIST)"
  main_src=$(ls /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
  [ -n "$main_src" ] || { say "no /etc/apt/sources.list.d/debian.sources to copy"; exit 1; }
  awk 'BEGIN{RS=""; ORS="\n\n"} /Types: deb/ && /debian/ {sub(/Types: deb/, "Types: deb-src"); print}' "$main_src" > "$SRC_LIST"
fi
say "installing build dependencies (golang-go, etcd-server, ...)"
apt-get update -qq
apt-get install -y -qq golang-go etcd-server rsync jq golang-github-modern-go-reflect2-dev >/dev/null

WORK="$CACHE_DIR/control-plane/src"
mkdir -p "$WORK"
cd "$WORK"
if ! ls -d kubernetes-1.20*/ >/dev/null 2>&1; then
  say "fetching Debian's kubernetes source package"
  apt-get source -qq kubernetes >/dev/null 2>&1
fi
TREE=$(ls -d "$WORK"/kubernetes-1.20*/ | head -n 1)
cd "$TREE"
say "replacing vendored reflect2 1.0.1 (crashes under Go >= 1.18) with Debian's 1.0.2"
rm -rf vendor/github.com/modern-go/reflect2
cp -r /usr/share/gocode/src/github.com/modern-go/reflect2 vendor/github.com/modern-go/reflect2
export GOPATH="$PWD/.go" CGO_ENABLED=0
mkdir -p .go/src/k8s.io
ln -sfn ../../.. .go/src/k8s.io/kubernetes
say "building ${WANT[*]} (about 5 minutes on 2 cores)"
make WHAT="cmd/kube-apiserver cmd/kube-controller-manager cmd/kube-scheduler" >build.log 2>&1 || { tail -n 40 build.log >&2; exit 1; }
mkdir -p "$BIN_DIR"
for b in "${WANT[@]}"; do cp "_output/bin/$b" "$BIN_DIR/$b"; done
ln -sf "$(command -v etcd)" "$BIN_DIR/etcd" 2>/dev/null || true
say "done: $BIN_DIR"
