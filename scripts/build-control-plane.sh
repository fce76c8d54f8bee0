#!/usr/bin/env bash
# Build kube-apiserver, kube-controller-manager and kube-scheduler from Debian's
# `kubernetes` source package (1.20.2) and cache them outside the checkout, for
# specguard.testing.LocalCluster (docs/local-cluster.md).
#
#   bash scripts/build-control-plane.sh     # as root; about 5 minutes on 2 cores, 1.4 GB peak
#
# Idempotent: exits at once when the cached binaries exist (no root needed then).
# Cache: ${SPECGUARD_CACHE_DIR:-~/.cache/specguard}/control-plane/bin (etcd is a link to
# Debian's /usr/bin/etcd). With KUBEBUILDER_ASSETS set, the tests do not need this at all.
# See ../shared/reference/local-cluster.md for why each step is here.
set -euo pipefail

CACHE_DIR="${SPECGUARD_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/specguard}"
BIN_DIR="$CACHE_DIR/control-plane/bin"
WANT=(kube-apiserver kube-controller-manager kube-scheduler)

have_all() {
  for b in "${WANT[@]}"; do [ -x "$BIN_DIR/$b" ] || return 1; done
  [ -x "$BIN_DIR/etcd" ] || command -v etcd >/dev/null
}
say() { echo "build-control-plane: $*" >&2; }
die() { say "error: $*"; exit 1; }

if have_all; then say "cached binaries in $BIN_DIR: nothing to do"; exit 0; fi
[ "$(id -u)" = 0 ] || die "must run as root: it installs Debian packages (golang-go, etcd-server) and fetches a source package"
[ -r /etc/debian_version ] && command -v apt-get >/dev/null \
  || die "needs Debian (apt-get): it builds from Debian's kubernetes source package; elsewhere set KUBEBUILDER_ASSETS"

mkdir -p "$CACHE_DIR/control-plane"
# One build at a time (setup.sh and a test run may both ask); re-check once we hold the lock.
exec 9>"$CACHE_DIR/control-plane/.build.lock"
if ! flock -n 9; then say "another build is running; waiting for it"; flock 9; fi
if have_all; then say "built meanwhile by another run: $BIN_DIR"; exit 0; fi

export DEBIAN_FRONTEND=noninteractive
SRC_LIST=/etc/apt/sources.list.d/specguard-src.sources
if ! grep -rqsE '^(Types:.*deb-src|deb-src )' /etc/apt/sources.list.d/ /etc/apt/sources.list; then
  main_src=/etc/apt/sources.list.d/debian.sources
  [ -r "$main_src" ] || die "no deb-src entry and no $main_src to copy one from; add a deb-src line for your mirror"
  say "enabling Debian source packages ($SRC_LIST, copied from $main_src)"
  awk 'BEGIN{RS=""; ORS="\n\n"} /Types: deb/ && /debian/ {sub(/Types: deb/, "Types: deb-src"); print}' \
    "$main_src" > "$SRC_LIST"
fi
say "installing build dependencies (golang-go, etcd-server, make, rsync, jq, reflect2 1.0.2, dpkg-dev)"
apt-get update -qq
apt-get install -y -qq golang-go etcd-server make rsync jq dpkg-dev \
  golang-github-modern-go-reflect2-dev >/dev/null

WORK="$CACHE_DIR/control-plane/src"
mkdir -p "$WORK"
cd "$WORK"
if ! ls -d kubernetes-1.20*/ >/dev/null 2>&1; then
  say "fetching Debian's kubernetes source package into $WORK"
  apt-get source -qq kubernetes >apt-source.log 2>&1 || { tail -n 20 apt-source.log >&2; die "apt-get source kubernetes failed"; }
fi
TREE=$(ls -d "$WORK"/kubernetes-1.20*/ 2>/dev/null | head -n 1)
[ -n "$TREE" ] || die "no kubernetes-1.20* tree in $WORK (this script expects Debian 12's kubernetes 1.20 source)"
cd "$TREE"
say "replacing vendored reflect2 1.0.1 (crashes under Go >= 1.18) with Debian's 1.0.2"
rm -rf vendor/github.com/modern-go/reflect2
cp -r /usr/share/gocode/src/github.com/modern-go/reflect2 vendor/github.com/modern-go/reflect2
export GOPATH="$PWD/.go" CGO_ENABLED=0
mkdir -p .go/src/k8s.io
ln -sfn ../../.. .go/src/k8s.io/kubernetes
say "building ${WANT[*]} in $TREE (about 5 minutes on 2 cores; log: $TREE/build.log)"
make WHAT="cmd/kube-apiserver cmd/kube-controller-manager cmd/kube-scheduler" >build.log 2>&1 \
  || { tail -n 40 build.log >&2; die "make failed (full log: $TREE/build.log)"; }

# Install through a temporary directory so a half-copied binary never looks cached.
mkdir -p "$BIN_DIR"
for b in "${WANT[@]}"; do
  "_output/bin/$b" --version >/dev/null || die "_output/bin/$b does not run"
  cp "_output/bin/$b" "$BIN_DIR/.$b.tmp" && mv -f "$BIN_DIR/.$b.tmp" "$BIN_DIR/$b"
done
[ -e "$BIN_DIR/etcd" ] || ln -s "$(command -v etcd)" "$BIN_DIR/etcd"
say "done: $BIN_DIR ($("$BIN_DIR/kube-apiserver" --version))"
