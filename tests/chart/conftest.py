"""The chart under test and the real helm binary.

helm is built from its Go module by scripts/install-kube-tools.sh (run by scripts/setup.sh
--demo and --cluster) into .venv/bin, where specguard_testkit.find_tool looks first; without
it these tests fail and say so (they never skip).
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from specguard_testkit import find_tool, install_tools_script

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "specguard"
# The Kubernetes versions the project supports (minor versions; tests/chart validates every
# rendered object against each of them).
SUPPORTED_KUBE_VERSIONS = tuple(f"1.{minor}" for minor in range(30, 38))
# Every optional object on, for the validation and security scans.
EVERYTHING_ON: dict[str, Any] = {
    "monitoring": {
        "operator": {"serviceMonitor": True},
        "routers": {"podMonitor": True},
        "vllm": {"podMonitor": True},
        "prometheusRule": {"enabled": True},
    },
    "grafanaDashboard": {"enabled": True},
    "networkPolicy": {"enabled": True, "metricsFrom": [{"namespaceSelector": {}}]},
}


def helm_binary() -> str:
    found = find_tool("helm")
    if found is None:
        pytest.fail(f"helm is in neither .venv/bin nor PATH: run `bash {install_tools_script()}`")
    return str(found)


def run_helm(*args: str, values: dict[str, Any] | None = None, tmp: Path | None = None,
             check: bool = True) -> subprocess.CompletedProcess[str]:  # fmt: skip
    argv = [helm_binary(), *args]
    if values is not None:
        assert tmp is not None, "values need a tmp directory"
        path = tmp / f"values-{len(list(tmp.glob('values-*.yaml')))}.yaml"
        path.write_text(yaml.safe_dump(values))
        argv += ["-f", str(path)]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    if check and result.returncode != 0:
        pytest.fail(f"{' '.join(argv)} failed:\n{result.stderr}")
    return result


def helm_template(
    tmp: Path,
    values: dict[str, Any] | None = None,
    *,
    kube_version: str = "1.33",
    namespace: str = "specguard",
    release: str = "specguard",
) -> list[dict[str, Any]]:
    """The chart's objects as `helm template` renders them for a server of ``kube_version``."""
    out = run_helm(
        "template", release, str(CHART), "--namespace", namespace,
        "--kube-version", kube_version, values=values or {}, tmp=tmp,
    ).stdout  # fmt: skip
    return [doc for doc in yaml.safe_load_all(out) if doc]


def by_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [obj for obj in objects if obj["kind"] == kind]
