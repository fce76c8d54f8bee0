"""``python -m specguard_testkit``: what it needs is checked before anything starts, and
every failure is one line on stderr, never a traceback after "cluster up"."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

PROG = "python -m specguard_testkit"


def run(env: dict[str, str], *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specguard_testkit", *args],
        capture_output=True, text=True, env={**os.environ, **env}, timeout=timeout, check=False,
    )  # fmt: skip


def fake_binaries(where: Path) -> Path:
    """Executables named like the control plane's: enough to pass the preflight, which only
    looks for them (nothing is started when Prometheus is missing)."""
    where.mkdir()
    for name in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"):
        path = where / name
        path.write_text("#!/bin/sh\nexit 1\n")
        path.chmod(0o755)
    return where


def test_without_prometheus_one_line_before_anything_starts(tmp_path: Path) -> None:
    env = {
        "KUBEBUILDER_ASSETS": str(fake_binaries(tmp_path / "bin")),
        "SPECGUARD_PROMETHEUS": str(tmp_path / "no-such-prometheus"),
    }
    proc = run(env, "--nodes", "1")
    assert proc.returncode == 1, proc
    assert proc.stdout == ""  # no "cluster up": nothing was started
    assert proc.stderr.splitlines() == [
        f"{PROG}: prometheus not found: `apt-get install prometheus` (Debian) or set "
        "SPECGUARD_PROMETHEUS to the binary, or pass --no-prometheus"
    ]


def test_without_control_plane_binaries_one_line(tmp_path: Path) -> None:
    proc = run({"KUBEBUILDER_ASSETS": str(tmp_path)}, "--no-prometheus")
    assert proc.returncode == 1 and proc.stdout == ""
    (line,) = proc.stderr.splitlines()
    assert line.startswith(f"{PROG}: kube-apiserver not found (looked in: KUBEBUILDER_ASSETS=")


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--nodes", "-1"], "--nodes and --gpus: must not be negative, got -1, 8"),
        (["--sim-args", "'unclosed"], "--sim-args: No closing quotation"),
        (["--nodes", "x"], "argument --nodes: invalid int value: 'x'"),
    ],
)
def test_bad_flags_one_line(args: list[str], expected: str) -> None:
    proc = run({}, *args)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [f"{PROG}: {expected}"]


@pytest.mark.cluster
def test_a_prometheus_that_fails_to_start_is_one_line_and_the_cluster_is_torn_down(
    tmp_path: Path,
) -> None:
    broken = tmp_path / "prometheus"
    broken.write_text("#!/bin/sh\necho 'bad flag' >&2\nexit 3\n")
    broken.chmod(0o755)
    proc = run({"SPECGUARD_PROMETHEUS": str(broken)}, "--nodes", "1", "--gpus", "1")
    assert proc.returncode == 1, proc
    assert "cluster up" not in proc.stdout and "Traceback" not in proc.stderr
    (line,) = proc.stderr.splitlines()
    assert line.startswith(f"{PROG}: prometheus exited; see ") and "prometheus.log" in line
