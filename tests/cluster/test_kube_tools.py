"""kubectl and helm: where specguard finds them (find_tool, kubectl_binary) and how
scripts/install-kube-tools.sh puts them in .venv/bin (with fakes: no build, no cluster)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from specguard.demo import _stage as stage
from specguard_testkit import MissingBinariesError, find_tool, kubectl_binary
from specguard_testkit._binaries import HELM_VERSION, KUBE_VERSION, install_tools_script

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "install-kube-tools.sh"


def _tool(directory: Path, name: str, says: str = "") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(f"#!/bin/sh\necho {says or name}\n")
    path.chmod(0o755)
    return path


@pytest.fixture
def venv_bin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A venv's bin directory as the running Python's, and a PATH of one other directory."""
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    monkeypatch.setattr(sys, "executable", str(bin_dir / "python"))
    monkeypatch.setenv("PATH", str(tmp_path / "path"))
    monkeypatch.setenv("SPECGUARD_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("KUBEBUILDER_ASSETS", raising=False)
    return bin_dir


def test_find_tool_looks_beside_the_running_python_first_then_on_path(
    tmp_path: Path, venv_bin: Path
) -> None:
    on_path = _tool(tmp_path / "path", "helm")
    beside = _tool(venv_bin, "helm")
    assert find_tool("helm") == beside  # the venv's, though it is not on PATH
    beside.chmod(0o644)  # not executable: not a tool
    assert find_tool("helm") == on_path
    on_path.unlink()
    assert find_tool("helm") is None
    # A link into a cache that is not built yet is not a tool either.
    beside.unlink()
    beside.symlink_to(tmp_path / "cache" / "not-built" / "helm")
    assert find_tool("helm") is None


def test_kubectl_is_the_control_planes_build_then_find_tools(
    tmp_path: Path, venv_bin: Path
) -> None:
    with pytest.raises(MissingBinariesError, match=r"kubectl not found .*install-kube-tools\.sh"):
        kubectl_binary()
    on_path = _tool(tmp_path / "path", "kubectl")
    assert kubectl_binary() == on_path
    beside = _tool(venv_bin, "kubectl")
    assert kubectl_binary() == beside
    built = _tool(tmp_path / "cache" / "control-plane" / f"v{KUBE_VERSION}" / "bin", "kubectl")
    assert kubectl_binary() == built


def test_the_demo_finds_helm_in_the_venv_and_names_the_script_without_it(
    tmp_path: Path, venv_bin: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(stage.DemoError) as missing:
        stage.check_tools()
    assert str(missing.value) == (
        f"needs helm (looked in {venv_bin} and PATH): run `bash {install_tools_script()}`"
    )
    helm = _tool(venv_bin, "helm")
    assert stage.check_tools() == str(helm)  # kubectl comes with the control plane's build
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(tmp_path / "assets"))
    with pytest.raises(stage.DemoError, match="kubectl not found"):
        stage.check_tools()


def test_the_script_pins_the_versions_the_package_looks_for() -> None:
    script = SCRIPT.read_text()
    helm = re.search(r"^HELM_VERSION=([0-9.]+)$", script, re.MULTILINE)
    kube = re.search(r'^KUBE_VERSION="\$\{SPECGUARD_KUBE_VERSION:-([0-9.]+)\}"$', script,
                     re.MULTILINE)  # fmt: skip
    assert helm is not None and helm.group(1) == HELM_VERSION
    assert kube is not None and kube.group(1) == KUBE_VERSION
    assert install_tools_script() == SCRIPT


def _install(tmp_path: Path) -> subprocess.CompletedProcess[str]:
    # No go on PATH: a cached helm must not be rebuilt.
    bin_dir = tmp_path / "tools"
    bin_dir.mkdir(exist_ok=True)
    for tool in ("bash", "dirname", "mkdir", "ln"):
        found = shutil.which(tool)
        assert found is not None
        if not (bin_dir / tool).exists():
            (bin_dir / tool).symlink_to(found)
    env = {"PATH": str(bin_dir), "SPECGUARD_CACHE_DIR": str(tmp_path / "cache"),
           "VENV_BIN": str(tmp_path / "venv" / "bin")}  # fmt: skip
    return subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip


def test_the_script_links_the_cached_builds_into_the_venv(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    helm = _tool(cache / "helm" / f"v{HELM_VERSION}" / "bin", "helm", f"v{HELM_VERSION}")
    kubectl = cache / "control-plane" / f"v{KUBE_VERSION}" / "bin" / "kubectl"
    venv = tmp_path / "venv" / "bin"
    # Before the control plane is built: helm linked, kubectl linked to where it will be.
    proc = _install(tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (venv / "helm").resolve() == helm and os.readlink(venv / "kubectl") == str(kubectl)
    assert "there once scripts/build-control-plane.sh has run" in proc.stderr
    _tool(kubectl.parent, "kubectl", f"v{KUBE_VERSION}")
    for _ in range(2):  # idempotent
        proc = _install(tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert proc.stderr.splitlines() == [
            f"install-kube-tools: {venv}: helm v{HELM_VERSION}, kubectl v{KUBE_VERSION} "
            "(the control plane's)"
        ]
    ran = subprocess.run([str(venv / "kubectl")], capture_output=True, text=True, check=True)
    assert ran.stdout.strip() == f"v{KUBE_VERSION}"


def test_without_a_cached_helm_or_go_the_script_says_what_it_needs(tmp_path: Path) -> None:
    proc = _install(tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [
        f"install-kube-tools: error: needs the go command (Go >= 1.26) to build helm "
        f"v{HELM_VERSION}"
    ]
    assert not (tmp_path / "venv").exists()
