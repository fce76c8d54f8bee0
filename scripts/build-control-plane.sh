#!/usr/bin/env bash
# Build kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, and the node's
# kubelet and kube-proxy of one pinned Kubernetes release, and etcd, from their published Go
# modules with the ordinary `go` command (module proxy only, no other downloads), and cache
# them outside the checkout for specguard_testkit.LocalCluster and its real nodes
# (docs/local-cluster.md). One build gives every binary of the release; a cache that lacks
# some (one made before the kubelet was added) builds only those, on the warm Go cache.
#
#   bash scripts/build-control-plane.sh          # about 15 minutes on 2 idle cores, once
#   SPECGUARD_KUBE_VERSION=1.36.3 bash scripts/build-control-plane.sh
#
# Idempotent: exits at once when the cached binaries of that version exist.
# Cache: ${SPECGUARD_CACHE_DIR:-~/.cache/specguard}/control-plane/v<version>/bin, plus the Go
# build and module caches (GOCACHE, GOMODCACHE) the go command keeps anyway.
#
# How: k8s.io/kubernetes cannot be built with `go install` directly, because its go.mod
# replaces every k8s.io/* staging module with a local path. A small wrapper module of our own
# requires k8s.io/kubernetes vX.Y.Z and pins each staging module named in that replace block to
# its published v0.Y.Z; the generated OpenAPI code is committed in the module, so no code
# generation is needed. Version variables are set with -ldflags so `--version` is right.
set -euo pipefail

# The newest release whose go.mod asks for a Go the machine has (go 1.26.0 here; 1.37 is the
# newest minor served). Change it together with KUBE_VERSION in testkit/specguard_testkit/_binaries.py.
KUBE_VERSION="${SPECGUARD_KUBE_VERSION:-1.37.2}"

CACHE_DIR="${SPECGUARD_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/specguard}"
ROOT="$CACHE_DIR/control-plane/v$KUBE_VERSION"
BIN_DIR="$ROOT/bin"
KUBE_CMDS=(kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy)
WANT=("${KUBE_CMDS[@]}" etcd)

say() { echo "build-control-plane: $*" >&2; }
die() { say "error: $*"; exit 1; }

have_all() {
  for b in "${WANT[@]}"; do [ -x "$BIN_DIR/$b" ] || return 1; done
}

if have_all; then say "cached binaries in $BIN_DIR: nothing to do"; exit 0; fi
command -v go >/dev/null || die "needs the go command (Go >= 1.26); on Debian: apt-get install golang-go is too old, install Go from the module-proxy toolchain or your distribution"
go_minor=$(go env GOVERSION | sed -E 's/^go1\.([0-9]+).*/\1/')
[ "${go_minor:-0}" -ge 26 ] || die "Kubernetes $KUBE_VERSION needs Go >= 1.26, found $(go env GOVERSION)"

mkdir -p "$ROOT"
# One build at a time (setup.sh and a test run may both ask); re-check once we hold the lock.
exec 9>"$ROOT/.build.lock"
if ! flock -n 9; then say "another build is running; waiting for it"; flock 9; fi
if have_all; then say "built meanwhile by another run: $BIN_DIR"; exit 0; fi

export CGO_ENABLED=0 GOFLAGS=-mod=mod GOTOOLCHAIN=local
MOD="$ROOT/module"
rm -rf "$MOD" && mkdir -p "$MOD" && cd "$MOD"
staging="0.${KUBE_VERSION#1.}"          # 1.37.2 -> staging modules v0.37.2
minor="${staging#0.}"; minor="${minor%%.*}"

say "resolving k8s.io/kubernetes v$KUBE_VERSION through the module proxy"
gomod=$(go mod download -json "k8s.io/kubernetes@v$KUBE_VERSION" | sed -nE 's/^\s*"GoMod": "(.*)",?$/\1/p')
[ -r "$gomod" ] || die "go mod download k8s.io/kubernetes@v$KUBE_VERSION gave no go.mod"
cat >go.mod <<EOF
module specguard.local/control-plane

go $(sed -nE 's/^go ([0-9.]+)$/\1/p' "$gomod")
EOF
# etcd: the server module at the version k8s.io/kubernetes itself requires (its main package
# is etcd's binary), so both come from one consistent module graph.
etcd_version=$(sed -nE 's#^\s*go\.etcd\.io/etcd/server/v3 (v[0-9.]+).*#\1#p' "$gomod")
[ -n "$etcd_version" ] || die "k8s.io/kubernetes v$KUBE_VERSION names no go.etcd.io/etcd/server/v3"
go mod edit -require="k8s.io/kubernetes@v$KUBE_VERSION" -require="go.etcd.io/etcd/server/v3@$etcd_version"
# Every staging module k8s.io/kubernetes replaces with ./staging/... is pinned to v0.Y.Z.
for m in $(sed -nE 's#^\s*(k8s\.io/[A-Za-z0-9._-]+) => \./staging/.*#\1#p' "$gomod"); do
  go mod edit -replace="$m=$m@v$staging"
done
cat >tools.go <<'EOF'
//go:build tools

package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
)
EOF
go mod tidy >tidy.log 2>&1 || { tail -n 30 tidy.log >&2; die "go mod tidy failed (log: $MOD/tidy.log)"; }

ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=v$KUBE_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
  ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done
missing=()
for b in "${KUBE_CMDS[@]}"; do [ -x "$BIN_DIR/$b" ] || missing+=("$b"); done
build_etcd=0; [ -x "$BIN_DIR/etcd" ] || build_etcd=1
say "building ${missing[*]} v$KUBE_VERSION$( [ "$build_etcd" = 1 ] && echo " and etcd $etcd_version") (about 15 minutes on 2 idle cores for all, 3 GB peak; log: $MOD/build.log)"
began=$(date +%s)
mkdir -p out
{
  if [ "${#missing[@]}" -gt 0 ]; then
    go build -trimpath -ldflags "$ldflags" -o out/ "${missing[@]/#/k8s.io/kubernetes/cmd/}"
  fi &&
  if [ "$build_etcd" = 1 ]; then go build -trimpath -ldflags "-s -w" -o out/etcd go.etcd.io/etcd/server/v3; fi
} >build.log 2>&1 || { tail -n 40 build.log >&2; die "go build failed (full log: $MOD/build.log)"; }

# Install through a temporary name so a half-copied binary never looks cached.
mkdir -p "$BIN_DIR"
for b in "${WANT[@]}"; do
  [ -e "out/$b" ] || continue
  case "$b" in
    kubectl) "out/$b" version --client >/dev/null ;;
    *) "out/$b" --version >/dev/null ;;
  esac || die "out/$b does not run"
  cp "out/$b" "$BIN_DIR/.$b.tmp" && mv -f "$BIN_DIR/.$b.tmp" "$BIN_DIR/$b"
done
rm -rf out
say "done in $(( $(date +%s) - began )) s: $BIN_DIR ($("$BIN_DIR/kube-apiserver" --version), etcd $("$BIN_DIR/etcd" --version | sed -n 's/^etcd Version: //p'))"
