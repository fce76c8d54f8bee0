"""Where the control-plane binaries come from.

Order:
1. ``KUBEBUILDER_ASSETS`` (setup-envtest layout: kube-apiserver, etcd, kubectl). envtest
   ships no kube-controller-manager or kube-scheduler; those are then taken from the
   cache directory, then from PATH, and must be within the supported version skew
   (``ControlPlaneBinaries.checked_minors``).
2. The cache directory filled by ``scripts/build-control-plane.sh`` from the Go modules:
   ``$SPECGUARD_CACHE_DIR/control-plane/v<KUBE_VERSION>/bin`` (default
   ``~/.cache/specguard``), etcd included.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

KUBE_BINARIES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
# The release scripts/build-control-plane.sh builds (its SPECGUARD_KUBE_VERSION default; a
# test checks the two agree). Supported by specguard: KUBE_MINOR_OLDEST to this one's minor.
KUBE_VERSION = "1.37.2"
KUBE_MINOR_OLDEST = 30


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
    return Path(__file__).resolve().parents[3] / "scripts" / "build-control-plane.sh"


def kubectl_binary() -> Path:
    """kubectl of the cached build (the server's version) when present, else ``kubectl`` on
    PATH."""
    built = _executable(cache_bin_dir() / "kubectl")
    return built or Path(shutil.which("kubectl") or "kubectl")


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


def _on_path(name: str) -> Path | None:
    found = shutil.which(name)
    return Path(found) if found else None


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
            path = _executable(assets / name) or _executable(cache / name) or _on_path(name)
            if path is None:
                raise _missing(name, [str(assets), str(cache), "PATH"])
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
