"""Where the control-plane binaries come from.

Order:
1. ``KUBEBUILDER_ASSETS`` (setup-envtest layout: kube-apiserver, etcd, kubectl). envtest
   ships no kube-controller-manager or kube-scheduler; those are then taken from the
   cache directory, then from PATH, and must be within the supported version skew
   (``ControlPlaneBinaries.checked_minors``).
2. The cache directory filled by ``scripts/build-control-plane.sh`` from the Go modules:
   ``$SPECGUARD_CACHE_DIR/control-plane/v<KUBE_VERSION>/bin`` (default
   ``~/.cache/specguard``), etcd included.

The command-line tools (kubectl, helm, runc, ...) are found by ``find_tool``: the bin
directory of the Python running this (the project's ``.venv/bin``, where
``scripts/install-kube-tools.sh`` links kubectl and helm), then PATH; kubectl of the control
plane's own build comes first (``kubectl_binary``).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

KUBE_BINARIES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
# The release scripts/build-control-plane.sh builds (its SPECGUARD_KUBE_VERSION default; a
# test checks the two agree). Supported by specguard: KUBE_MINOR_OLDEST to this one's minor.
KUBE_VERSION = "1.37.2"
KUBE_MINOR_OLDEST = 30
# The helm scripts/install-kube-tools.sh builds from its Go module (its HELM_VERSION; a test
# checks the two agree).
HELM_VERSION = "4.3.2"


def cache_dir() -> Path:
    """Same rule as scripts/build-control-plane.sh."""
    if explicit := os.environ.get("SPECGUARD_CACHE_DIR"):
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "specguard"


def cache_bin_dir(version: str | None = None) -> Path:
    """Where the build script puts the binaries of ``version`` (default: KUBE_VERSION, or
    ``$SPECGUARD_KUBE_VERSION`` when set, as the script does)."""
    version = version or os.environ.get("SPECGUARD_KUBE_VERSION") or KUBE_VERSION
    return cache_dir() / "control-plane" / f"v{version}" / "bin"


def build_script() -> Path:
    """scripts/build-control-plane.sh of the checkout this package runs from."""
    return Path(__file__).resolve().parents[2] / "scripts" / "build-control-plane.sh"


def install_tools_script() -> Path:
    """scripts/install-kube-tools.sh: kubectl and helm into the project's .venv/bin."""
    return build_script().with_name("install-kube-tools.sh")


def find_tool(name: str) -> Path | None:
    """A command-line tool (helm, kubectl, runc, ...): in the bin directory of the Python
    running this first (the project's ``.venv/bin``, where scripts/install-kube-tools.sh puts
    kubectl and helm, found whether or not the venv is activated), then on PATH; None when
    neither has it. The directory is not resolved: a venv's python is a link to the
    system's."""
    beside = _executable(Path(sys.executable).parent / name)
    if beside is not None:
        return beside
    found = shutil.which(name)
    return Path(found) if found else None


def kubectl_binary() -> Path:
    """kubectl of the control plane's cached build (the server's version) when present, else
    ``find_tool("kubectl")``; MissingBinariesError saying how to get it when neither."""
    found = _executable(cache_bin_dir() / "kubectl") or find_tool("kubectl")
    if found is None:
        raise MissingBinariesError(
            f"kubectl not found (looked in: {cache_bin_dir()}, {Path(sys.executable).parent}, "
            f"PATH): build it with the control plane, `bash {build_script()}`, and link it with "
            f"`bash {install_tools_script()}`"
        )
    return found


class MissingBinariesError(RuntimeError):
    """A control-plane binary is not where it is looked for; the message says what to do."""


@dataclass(frozen=True)
class ControlPlaneBinaries:
    etcd: Path
    kube_apiserver: Path
    kube_controller_manager: Path
    kube_scheduler: Path
    origin: str  # where they came from, for logs and error messages

    def minor_version(self, binary: Path) -> int:
        """Kubernetes minor version of ``binary`` (``--version`` prints 'Kubernetes v1.20.2')."""
        out = subprocess.run(
            [str(binary), "--version"], capture_output=True, text=True, timeout=30, check=False
        ).stdout
        match = re.search(r"v1\.(\d+)", out)
        if match is None:
            raise MissingBinariesError(f"{binary}: cannot read its version from {out!r}")
        return int(match.group(1))

    def checked_minors(self) -> tuple[int, int, int]:
        """Minor versions of (apiserver, controller-manager, scheduler), refused outside the
        skew Kubernetes supports: the other two at most one minor older than the apiserver,
        never newer. A 1.30 envtest apiserver with the cached 1.20 scheduler looks healthy
        but never schedules a pod (the 1.20 scheduler waits on APIs 1.25 removed)."""
        apiserver = self.minor_version(self.kube_apiserver)
        if apiserver < KUBE_MINOR_OLDEST:
            raise MissingBinariesError(
                f"kube-apiserver 1.{apiserver} ({self.kube_apiserver}) is older than specguard "
                f"supports (1.{KUBE_MINOR_OLDEST} to 1.{KUBE_VERSION.split('.')[1]}): it has no "
                "CEL validation, Pod Security admission or bound service-account tokens as "
                f"current clusters do. Build {KUBE_VERSION} with `bash {build_script()}` or "
                f"point KUBEBUILDER_ASSETS at envtest 1.{KUBE_MINOR_OLDEST}+ binaries "
                f"({self.origin})."
            )
        controller_manager = self.minor_version(self.kube_controller_manager)
        scheduler = self.minor_version(self.kube_scheduler)
        for name, path, minor in (
            ("kube-controller-manager", self.kube_controller_manager, controller_manager),
            ("kube-scheduler", self.kube_scheduler, scheduler),
        ):
            if not apiserver - 1 <= minor <= apiserver:
                raise MissingBinariesError(
                    f"{name} 1.{minor} ({path}) cannot run with kube-apiserver 1.{apiserver} "
                    f"({self.kube_apiserver}): Kubernetes supports it at most one minor "
                    "version older than the apiserver. Put a matching "
                    f"{name} in KUBEBUILDER_ASSETS or unset it to use the cache ({self.origin})."
                )
        return apiserver, controller_manager, scheduler


def _executable(path: Path) -> Path | None:
    return path if path.is_file() and os.access(path, os.X_OK) else None


def _missing(what: str, looked: list[str]) -> MissingBinariesError:
    return MissingBinariesError(
        f"{what} not found (looked in: {', '.join(looked)}). Build the control plane once with "
        f"`bash {build_script()}` (about 15 minutes on 2 cores; cached in {cache_bin_dir()}), "
        "or point KUBEBUILDER_ASSETS at setup-envtest binaries."
    )


def find_binaries() -> ControlPlaneBinaries:
    """Locate etcd and the three control-plane binaries or raise MissingBinariesError."""
    cache = cache_bin_dir()
    assets_env = os.environ.get("KUBEBUILDER_ASSETS")
    found: dict[str, Path] = {}
    if assets_env:
        assets = Path(assets_env)
        for name in ("kube-apiserver", "etcd"):
            path = _executable(assets / name)
            if path is None:
                raise _missing(name, [f"KUBEBUILDER_ASSETS={assets}"])
            found[name] = path
        for name in ("kube-controller-manager", "kube-scheduler"):
            path = _executable(assets / name) or _executable(cache / name) or find_tool(name)
            if path is None:
                raise _missing(
                    name, [str(assets), str(cache), str(Path(sys.executable).parent), "PATH"]
                )
            found[name] = path
        origin = f"KUBEBUILDER_ASSETS={assets}"
    else:
        for name in KUBE_BINARIES:
            path = _executable(cache / name)
            if path is None:
                raise _missing(name, [str(cache)])
            found[name] = path
        etcd = _executable(cache / "etcd")
        if etcd is None:
            raise _missing("etcd", [str(cache)])
        found["etcd"] = etcd
        origin = str(cache)
    return ControlPlaneBinaries(
        etcd=found["etcd"],
        kube_apiserver=found["kube-apiserver"],
        kube_controller_manager=found["kube-controller-manager"],
        kube_scheduler=found["kube-scheduler"],
        origin=origin,
    )


# ----------------------------------------------------------------------------- real nodes

# What scripts/build-node.sh builds (change together with its CONTAINERD_VERSION,
# CRICTL_VERSION and CNI_VERSION; a test checks they agree).
CONTAINERD_VERSION = "2.4.2"
CRICTL_VERSION = "1.37.0"
CNI_VERSION = "1.10.0"
CNI_PLUGINS = ("bridge", "host-local", "loopback", "portmap")


def node_build_script() -> Path:
    return build_script().with_name("build-node.sh")


def image_build_script() -> Path:
    return build_script().with_name("build-image.sh")


def node_cache_dir() -> Path:
    """Where scripts/build-node.sh puts the runtime binaries and the pause image."""
    name = f"containerd-{CONTAINERD_VERSION}-crictl-{CRICTL_VERSION}-cni-{CNI_VERSION}"
    return cache_dir() / "node" / name


@dataclass(frozen=True)
class NodeBinaries:
    """What a real node runs: the kubelet and kube-proxy of the control plane's release,
    containerd with its runc shim, ctr and crictl, the CNI plugins, runc, the pause image."""

    kubelet: Path
    kube_proxy: Path
    containerd: Path
    containerd_shim: Path
    ctr: Path
    crictl: Path
    cni_bin_dir: Path
    runc: Path
    pause_archive: Path


def find_node_binaries() -> NodeBinaries:
    """Locate a real node's binaries or raise MissingBinariesError saying how to build them."""
    kube = cache_bin_dir()
    node = node_cache_dir()
    found: dict[str, Path] = {}
    for name, directory, script in (
        ("kubelet", kube, build_script()),
        ("kube-proxy", kube, build_script()),
        ("containerd", node / "bin", node_build_script()),
        ("containerd-shim-runc-v2", node / "bin", node_build_script()),
        ("ctr", node / "bin", node_build_script()),
        ("crictl", node / "bin", node_build_script()),
        *((plugin, node / "bin", node_build_script()) for plugin in CNI_PLUGINS),
    ):
        path = _executable(directory / name)
        if path is None:
            raise MissingBinariesError(
                f"{name} not found in {directory}: build it with `bash {script}` "
                "(or `bash scripts/setup.sh --cluster`, which runs both build scripts)"
            )
        found[name] = path
    runc = find_tool("runc")
    if runc is None:
        raise MissingBinariesError("runc not found on PATH: `apt-get install runc` (Debian)")
    pause = node / "pause.oci.tar"
    if not pause.is_file():
        raise MissingBinariesError(f"{pause} not found: build it with `bash {node_build_script()}`")
    return NodeBinaries(
        kubelet=found["kubelet"],
        kube_proxy=found["kube-proxy"],
        containerd=found["containerd"],
        containerd_shim=found["containerd-shim-runc-v2"],
        ctr=found["ctr"],
        crictl=found["crictl"],
        cni_bin_dir=node / "bin",
        runc=runc,
        pause_archive=pause,
    )


# The names scripts/build-image.sh gives its images (a test checks they agree): the chart's
# default image, and the vLLM stand-ins (scripts/images/vllm-sim: `vllm serve` runs the
# simulator), healthy and with a drafter arm that fails requests.
IMAGE_SPECGUARD = "ghcr.io/specguard/specguard"
IMAGE_VLLM_SIM = "specguard.local/vllm-sim"
IMAGE_VLLM_SIM_FAULTY = "specguard.local/vllm-sim-faulty-drafter"


@dataclass(frozen=True)
class ImageArchives:
    """The images scripts/build-image.sh built from this checkout, as OCI archives (named
    ``IMAGE_*:<version>`` inside)."""

    specguard: Path  # ghcr.io/specguard/specguard:<version>, the chart's default image
    vllm_sim: Path  # specguard.local/vllm-sim:<version>, the simulator as `vllm serve`
    vllm_sim_faulty: Path  # the same with a drafter arm that fails requests

    def all(self) -> tuple[Path, ...]:
        return (self.specguard, self.vllm_sim, self.vllm_sim_faulty)


def build_images(timeout: float = 1800.0) -> ImageArchives:
    """Run scripts/build-image.sh (a second or two when this checkout's image is cached,
    about a minute after a change under operator/, a few minutes on a fresh machine) and
    return its archives. The image is always the one of the code that runs the tests."""
    done = subprocess.run(
        ["bash", str(image_build_script())], capture_output=True, text=True,
        timeout=timeout, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise MissingBinariesError(
            f"{image_build_script()} failed ({done.returncode}):\n{done.stderr[-3000:]}"
        )
    paths = [Path(line) for line in done.stdout.split()]
    if len(paths) != 3 or not all(path.is_file() for path in paths):
        raise MissingBinariesError(f"{image_build_script()} printed {done.stdout!r}")
    return ImageArchives(*paths)


def containers_env() -> dict[str, str]:
    """Environment for podman and buildah on the image store scripts/build-image.sh uses
    (its own storage, runc, rlimits within the host's: scripts/lib-buildah.sh)."""
    conf = cache_dir() / "image" / "containers"
    return {
        **os.environ,
        "CONTAINERS_STORAGE_CONF": str(conf / "storage.conf"),
        "CONTAINERS_CONF": str(conf / "containers.conf"),
        "CONTAINERS_REGISTRIES_CONF": str(conf / "registries.conf"),
    }
