# Sourced by build-image.sh and build-node.sh: buildah and podman with a storage of their own
# under the specguard cache (never the machine's /var/lib/containers), runc as the runtime,
# and rlimits within the host's (no CAP_SYS_RESOURCE is needed to stay below them).
PAUSE_IMAGE=specguard.local/pause:3.10

buildah_env() {
  local dir="$1/image/containers"
  local run="/run/specguard-containers-$(printf %s "$dir" | sha256sum | cut -c1-12)"
  local nofile nproc
  nofile=$(ulimit -Hn); [ "$nofile" = unlimited ] && nofile=1048576
  nproc=$(ulimit -Hu); [ "$nproc" = unlimited ] && nproc=32768
  [ "$nproc" -gt 32768 ] && nproc=32768
  mkdir -p "$dir/storage" "$run"
  cat >"$dir/storage.conf" <<CONF
[storage]
driver = "overlay"
graphroot = "$dir/storage"
runroot = "$run"
CONF
  cat >"$dir/containers.conf" <<CONF
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=$nproc:$nproc"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
CONF
  cat >"$dir/registries.conf" <<CONF
unqualified-search-registries = []
CONF
  export CONTAINERS_STORAGE_CONF="$dir/storage.conf" CONTAINERS_CONF="$dir/containers.conf" \
    CONTAINERS_REGISTRIES_CONF="$dir/registries.conf" BUILDAH_ISOLATION=chroot
}
