"""Where the control-plane binaries come from.

Order:
1. ``KUBEBUILDER_ASSETS`` (setup-envtest layout: kube-apiserver, etcd, kubectl). envtest
   ships no kube-controller-manager or kube-scheduler; those are then taken from the
   cache directory, then from PATH, and must be within the supported version skew
   (``ControlPlaneBinaries.checked_minors``).
2. The cache directory filled by ``scripts/build-control-plane.sh``:
   ``$SPECGUARD_CACHE_DIR/control-plane/bin`` (default ``~/.cache/specguard``); etcd from
   there or from PATH (Debian's ``etcd-server``).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

KUBE_BINARIES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")


def cache_dir() -> Path:
    """Same rule as scripts/build-control-plane.sh."""
    if explicit := os.environ.get("SPECGUARD_CACHE_DIR"):
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "specguard"


def cache_bin_dir() -> Path:
    return cache_dir() / "control-plane" / "bin"


def build_script() -> Path:
    """scripts/build-control-plane.sh of the checkout this package runs from."""
    return Path(__file__).resolve().parents[3] / "scripts" / "build-control-plane.sh"


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
        f"`sudo bash {build_script()}` (about 5 minutes; cached in {cache_bin_dir()}), "
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
        etcd = _executable(cache / "etcd") or _on_path("etcd")
        if etcd is None:
            raise _missing("etcd", [str(cache), "PATH (Debian package etcd-server)"])
        found["etcd"] = etcd
        origin = str(cache)
    return ControlPlaneBinaries(
        etcd=found["etcd"],
        kube_apiserver=found["kube-apiserver"],
        kube_controller_manager=found["kube-controller-manager"],
        kube_scheduler=found["kube-scheduler"],
        origin=origin,
    )
