#!/usr/bin/env bash
# Build the specguard image from the Dockerfile at the top of the repository, with no
# registry: the Python base is a Debian root filesystem made here by mmdebstrap and the
# Dockerfile's PYTHON_IMAGE points at it; buildah builds (chroot isolation, no daemon).
# Then the vLLM stand-ins the real local node runs for vLLM images: the same image with a
# `vllm` command that runs the simulator (scripts/images/vllm-sim/), healthy and with a
# failing drafter arm. Each image is saved as an OCI archive for containerd to import.
#
#   bash scripts/build-image.sh        # about 3 minutes the first time (network bound)
#
# Cached under ${SPECGUARD_CACHE_DIR:-~/.cache/specguard}/image, keyed on what goes into
# each: the base on its package list, the image on the base, the Dockerfile and the build
# context (pyproject.toml, README.md, operator/), the stand-ins on the image. A changed
# operator/ rebuilds the image (about a minute) but not the base. Prints the archive paths.
#
# The build's RUN steps fetch wheels from PyPI. Where the machine reaches it through a
# TLS-intercepting proxy, its CA is in the host's trust bundle, not in the base image: the
# host bundle is bind-mounted over the base's for the RUN steps only (never in a layer).
# A machine without such a proxy mounts its ordinary bundle, which changes nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib-buildah.sh

CACHE_DIR="${SPECGUARD_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/specguard}"
OUT="$CACHE_DIR/image"
SUITE=bookworm                      # Debian 12: Python 3.11, as the python:3.11 images
MIRROR="${SPECGUARD_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
SECURITY_MIRROR="${SPECGUARD_DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}"
# One base for both stages: the Dockerfile builds on PYTHON_IMAGE with `python -m pip`, as
# the python: images allow. python-is-python3 gives `python`; python3-venv gives the venv.
PACKAGES=python3,python3-venv,python3-pip,python-is-python3,ca-certificates
VERSION=$(sed -nE 's/^version = "(.*)"$/\1/p' pyproject.toml)
IMAGE="ghcr.io/specguard/specguard:$VERSION"      # the chart's default image
VLLM_SIM="specguard.local/vllm-sim:$VERSION"
VLLM_SIM_FAULTY="specguard.local/vllm-sim-faulty-drafter:$VERSION"
FAULTY_DRAFTER_ERROR_RATE=0.6
# The stand-ins' simulator runs 20x faster than the profile's real time and starts at once.
STANDIN_SIM_ARGS="--time-scale 0.05 --startup-delay 0"

say() { echo "build-image: $*" >&2; }
die() { say "error: $*"; exit 1; }
key() { sha256sum | cut -c1-16; }

bash scripts/install-node-packages.sh
mkdir -p "$OUT"
exec 9>"$OUT/.build.lock"
if ! flock -n 9; then say "another image build is running; waiting for it"; flock 9; fi
buildah_env "$CACHE_DIR"
began=$(date +%s)

# ------------------------------------------------------------------ the base
base_key=$(printf '%s\n' "$SUITE" "$MIRROR" "$PACKAGES" "minbase-v1" | key)
BASE="specguard.local/debian-python:$SUITE-$base_key"
if ! buildah inspect --type image "$BASE" >/dev/null 2>&1; then
  say "making the Debian $SUITE base ($PACKAGES) with mmdebstrap (about 1.5 minutes)"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  nice -n 10 mmdebstrap --quiet --variant=minbase --include="$PACKAGES" \
    --aptopt='Acquire::Languages "none"' --aptopt='APT::Install-Recommends "false"' \
    --dpkgopt='force-unsafe-io' \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' --dpkgopt='path-exclude=/usr/share/locale/*' \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*' \
    "$SUITE" "$tmp/rootfs.tar" \
    "deb $MIRROR $SUITE main" "deb $MIRROR $SUITE-updates main" \
    "deb $SECURITY_MIRROR $SUITE-security main" >"$OUT/mmdebstrap.log" 2>&1 \
    || { tail -n 20 "$OUT/mmdebstrap.log" >&2; die "mmdebstrap failed (log: $OUT/mmdebstrap.log)"; }
  podman import --quiet --change 'CMD ["/bin/bash"]' "$tmp/rootfs.tar" "$BASE" >/dev/null
  rm -rf "$tmp"
  trap - EXIT
  say "base $BASE made in $(( $(date +%s) - began )) s"
fi

# ------------------------------------------------------------------ the image
# The build context as .dockerignore lets it through, without what a local install adds
# (bytecode, egg-info); hashed as a normalised tar so the key is what goes into the image.
context=$(mktemp -d)
trap 'rm -rf "$context"' EXIT
tar --exclude='__pycache__' --exclude='*.pyc' --exclude='*.egg-info' \
  -cf - pyproject.toml README.md operator Dockerfile .dockerignore | tar -xf - -C "$context"
image_key=$( { echo "$BASE"; tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner \
  -C "$context" -cf - . ; } | key)
archive="$OUT/specguard-$VERSION-$image_key.oci.tar"
KEYED="specguard.local/specguard:$image_key"    # the stand-ins build on this exact image
if ! buildah inspect --type image "$KEYED" >/dev/null 2>&1; then
  if [ -s "$archive" ]; then
    buildah tag "$(buildah pull --quiet "oci-archive:$archive")" "$KEYED"
  else
    say "building $IMAGE from the Dockerfile on $BASE (about a minute; log: $OUT/build.log)"
    mounts=()
    for bundle in "${SSL_CERT_FILE:-}" /etc/ssl/certs/ca-certificates.crt /etc/pki/tls/certs/ca-bundle.crt; do
      if [ -n "$bundle" ] && [ -s "$bundle" ]; then
        mounts=(-v "$bundle:/etc/ssl/certs/ca-certificates.crt:ro"); break
      fi
    done
    started=$(date +%s)
    nice -n 10 buildah bud --isolation chroot --pull=false --layers=false \
      "${mounts[@]}" --build-arg "PYTHON_IMAGE=$BASE" \
      -t "$KEYED" -f "$context/Dockerfile" "$context" >"$OUT/build.log" 2>&1 \
      || { tail -n 30 "$OUT/build.log" >&2; die "buildah bud failed (log: $OUT/build.log)"; }
    say "built $IMAGE in $(( $(date +%s) - started )) s"
  fi
fi
buildah tag "$KEYED" "$IMAGE"
rm -rf "$context"
trap - EXIT
export_archive() {  # image archive: an OCI archive of one image, named as the pods name it
  [ -s "$2" ] && return 0
  rm -f "$2.tmp"
  buildah push --quiet "$1" "oci-archive:$2.tmp:$3" >/dev/null
  mv -f "$2.tmp" "$2"
}
export_archive "$KEYED" "$archive" "$IMAGE"

# ------------------------------------------------------------------ vLLM stand-ins
standin_key=$(cat <(echo "$image_key $STANDIN_SIM_ARGS $FAULTY_DRAFTER_ERROR_RATE") \
  scripts/images/vllm-sim/* | key)
standins=()
for variant in healthy faulty; do
  if [ "$variant" = healthy ]; then name=$VLLM_SIM rate=""; else name=$VLLM_SIM_FAULTY rate=$FAULTY_DRAFTER_ERROR_RATE; fi
  path="$OUT/${name#specguard.local/}"; path="${path%%:*}-$VERSION-$standin_key.oci.tar"
  keyed="specguard.local/vllm-sim-build:$variant-$standin_key"
  if [ ! -s "$path" ]; then
    buildah inspect --type image "$keyed" >/dev/null 2>&1 ||
      buildah bud --quiet --isolation chroot --pull=false --layers=false \
        --build-arg "SPECGUARD_IMAGE=$KEYED" --build-arg "SIM_ARGS=$STANDIN_SIM_ARGS" \
        --build-arg "DRAFTER_ERROR_RATE=$rate" -t "$keyed" scripts/images/vllm-sim \
        >>"$OUT/build.log" 2>&1 || { tail -n 20 "$OUT/build.log" >&2; die "the vLLM stand-in build failed"; }
    export_archive "$keyed" "$path" "$name"
  fi
  standins+=("$path")
done
# Archives of older keys go after an hour (another checkout may still be using them: it
# re-imports its archive, or rebuilds); images of older keys leave the store at once.
keep=("$archive" "${standins[@]}")
for old in "$OUT"/*.oci.tar; do
  [[ " ${keep[*]} " == *" $old "* ]] || find "$old" -mmin +60 -delete
done
for old in $(buildah images --noheading --format '{{.Name}}:{{.Tag}}' \
               | grep -E '^specguard\.local/(specguard|vllm-sim-build):' || true); do
  case "$old" in
    "$KEYED"|specguard.local/vllm-sim-build:*-"$standin_key") ;;
    *) buildah rmi "$old" >/dev/null 2>&1 || true ;;
  esac
done
buildah rmi --prune >/dev/null 2>&1 || true
say "ready in $(( $(date +%s) - began )) s"
printf "%s\n" "$archive" "${standins[@]}"
