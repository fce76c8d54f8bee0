#!/usr/bin/env bash
# Put kubectl and helm into the project's virtual environment (.venv/bin), where every
# specguard command, test and the demo looks first (specguard_testkit.find_tool: the bin
# directory of the Python that runs them, then PATH), activated or not. Nothing is written
# into system directories.
#   kubectl  the one scripts/build-control-plane.sh builds with the control plane: the same
#            release as the local cluster's server (no version skew). Linked to its cached
#            path, which exists once that build has run (`specguard demo` runs it on first
#            use; scripts/setup.sh --cluster runs it).
#   helm     built from its Go module (helm.sh/helm/v4, module proxy only) with the ordinary
#            go command (Go >= 1.26) and cached outside the checkout.
#
#   bash scripts/install-kube-tools.sh   # about 3 CPU-minutes the first time (helm), then < 1 s
#
# Idempotent. Cache: ${SPECGUARD_CACHE_DIR:-~/.cache/specguard}/helm/v<version>/bin/helm
# (log: .../helm/v<version>/build.log). VENV_BIN picks another directory to link into.
set -euo pipefail
cd "$(dirname "$0")/.."

# Change together with HELM_VERSION in testkit/specguard_testkit/_binaries.py.
HELM_VERSION=4.3.2
# The control plane's release: scripts/build-control-plane.sh's default (a test checks they agree).
KUBE_VERSION="${SPECGUARD_KUBE_VERSION:-1.37.2}"

CACHE_DIR="${SPECGUARD_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/specguard}"
HELM_ROOT="$CACHE_DIR/helm/v$HELM_VERSION"
HELM="$HELM_ROOT/bin/helm"
KUBECTL="$CACHE_DIR/control-plane/v$KUBE_VERSION/bin/kubectl"
VENV_BIN="${VENV_BIN:-.venv/bin}"

say() { echo "install-kube-tools: $*" >&2; }
die() { say "error: $*"; exit 1; }

build_helm() {
  command -v go >/dev/null || die "needs the go command (Go >= 1.26) to build helm v$HELM_VERSION"
  local go_minor
  go_minor=$(go env GOVERSION | sed -E 's/^go1\.([0-9]+).*/\1/')
  [ "${go_minor:-0}" -ge 26 ] || die "helm v$HELM_VERSION needs Go >= 1.26, found $(go env GOVERSION)"
  mkdir -p "$HELM_ROOT"
  # One build at a time (setup.sh run twice); re-check once we hold the lock.
  exec 9>"$HELM_ROOT/.build.lock"
  if ! flock -n 9; then say "another helm build is running; waiting for it"; flock 9; fi
  [ -x "$HELM" ] && return 0
  local work began
  work=$(mktemp -d)
  # shellcheck disable=SC2064  # expand now: $work is local
  trap "rm -rf '$work'" EXIT
  began=$(date +%s)
  say "building helm v$HELM_VERSION from the Go module helm.sh/helm/v4 (about 3 CPU-minutes, once; log: $HELM_ROOT/build.log)"
  # Same flags as the control-plane build (CGO off, -trimpath): what both build at the same
  # versions (the module graphs differ) comes from the Go build cache.
  CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-trimpath GOBIN="$work" go install \
    -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=v$HELM_VERSION -X helm.sh/helm/v4/internal/version.gitTreeState=clean" \
    "helm.sh/helm/v4/cmd/helm@v$HELM_VERSION" >"$HELM_ROOT/build.log" 2>&1 \
    || { tail -n 30 "$HELM_ROOT/build.log" >&2; die "go install failed (log: $HELM_ROOT/build.log)"; }
  local built
  built=$("$work/helm" version --template '{{.Version}}') || die "the built helm does not run"
  [ "$built" = "v$HELM_VERSION" ] || die "the built helm says $built, not v$HELM_VERSION"
  # Install through a temporary name so a half-copied binary never looks cached.
  mkdir -p "$HELM_ROOT/bin"
  cp "$work/helm" "$HELM_ROOT/bin/.helm.tmp" && mv -f "$HELM_ROOT/bin/.helm.tmp" "$HELM"
  say "helm v$HELM_VERSION built in $(( $(date +%s) - began )) s: $HELM"
}

[ -x "$HELM" ] || build_helm
mkdir -p "$VENV_BIN"
ln -sfn "$HELM" "$VENV_BIN/helm"
ln -sfn "$KUBECTL" "$VENV_BIN/kubectl"
if [ -x "$KUBECTL" ]; then
  say "$VENV_BIN: helm v$HELM_VERSION, kubectl v$KUBE_VERSION (the control plane's)"
else
  say "$VENV_BIN: helm v$HELM_VERSION; kubectl links to the control plane's build ($KUBECTL), there once scripts/build-control-plane.sh has run (the demo runs it on first use)"
fi
