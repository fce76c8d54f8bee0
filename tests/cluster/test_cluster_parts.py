"""The local cluster's parts that need no control plane: image mapping, env expansion,
Prometheus targets, loopback addresses, probe budgets, and the orphan reaper (with real
processes)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from specguard_testkit._binaries import (
    KUBE_VERSION,
    MissingBinariesError,
    cache_bin_dir,
    find_binaries,
)
from specguard_testkit._images import HOST_IMAGE, Launch, UnknownImageError, resolve_argv
from specguard_testkit._loopback import LoopbackPool, listening_addresses
from specguard_testkit._podenv import expand
from specguard_testkit._probes import parse_probe
from specguard_testkit._procs import group_members, reap_orphans
from specguard_testkit._prometheus import pod_targets
from specguard_testkit._wait import wait_until

PY = "/opt/python"


def launch(image: str, command: list[str], args: list[str]) -> Launch:
    return Launch(image=image, command=tuple(command), args=tuple(args), pod_ip="127.0.9.3")


def test_vllm_image_runs_the_simulator_with_args_extra_sim_args_and_pod_host() -> None:
    argv = resolve_argv(
        launch("vllm/vllm-openai:v0.33.0", ["vllm", "serve"], ["m", "--port", "8000"]),
        sim_args=("--time-scale", "0.05"),
        python=PY,
    )
    assert argv == [PY, "-m", "specguard", "sim", "m", "--port", "8000",
                    "--time-scale", "0.05", "--host", "127.0.9.3"]  # fmt: skip


def test_vllm_model_in_command_is_kept() -> None:
    argv = resolve_argv(launch("docker.io/vllm/vllm-openai", ["vllm", "serve", "m"], []), python=PY)
    assert argv[:5] == [PY, "-m", "specguard", "sim", "m"]


def test_specguard_image_replaces_the_leading_command() -> None:
    argv = resolve_argv(
        launch("ghcr.io/specguard/specguard:0.1.0", ["specguard", "router"], ["--port", "8080"]),
        python=PY,
    )
    assert argv == [PY, "-m", "specguard", "router", "--port", "8080"]
    entrypoint = resolve_argv(launch("ghcr.io/specguard/specguard:0.1.0", [], ["run"]), python=PY)
    assert entrypoint == [PY, "-m", "specguard", "run"]


def test_host_image_and_table_and_unknown() -> None:
    assert resolve_argv(launch(HOST_IMAGE, ["python3", "x.py"], ["1"]), python=PY) == [
        PY, "x.py", "1",
    ]  # fmt: skip
    table = {"busybox": lambda spec: ["echo", *spec.args]}
    assert resolve_argv(launch("busybox:1.36", [], ["hi"]), images=table) == ["echo", "hi"]
    try:
        resolve_argv(launch("nginx:1.25", [], []))
    except UnknownImageError as exc:
        assert "nginx:1.25" in str(exc)
    else:
        raise AssertionError("an unknown image must not run")


def test_expand_follows_kubernetes_rules() -> None:
    env = {"A": "1", "POD_IP": "127.0.5.2"}
    assert expand("--host=$(POD_IP) $(A)$(B) $$(A)", env) == "--host=127.0.5.2 1$(B) $(A)"


def test_long_probe_periods_are_shortened_keeping_the_budget() -> None:
    probe = parse_probe({"httpGet": {"path": "/health", "port": 8000}, "periodSeconds": 10,
                         "failureThreshold": 120}, max_period=1.0)  # fmt: skip
    assert probe is not None
    assert (probe.period, probe.failure_threshold) == (1.0, 1200)


def test_prometheus_targets_from_running_pods() -> None:
    pod = {
        "metadata": {"name": "p", "namespace": "ns", "labels": {"specguard.io/arm": "baseline"},
                     "annotations": {"prometheus.io/path": "/m"}},
        "spec": {"nodeName": "n", "containers": [
            {"name": "c", "ports": [{"containerPort": 8000, "name": "http"},
                                    {"containerPort": 53, "protocol": "UDP"}]}]},
        "status": {"phase": "Running", "podIP": "127.0.7.2"},
    }  # fmt: skip
    pending = {**pod, "status": {"phase": "Pending", "podIP": "127.0.7.3"}}
    skipped = {**pod, "metadata": {**pod["metadata"],  # type: ignore[dict-item]
                                   "annotations": {"prometheus.io/scrape": "false"}}}  # fmt: skip
    groups = pod_targets([pod, pending, skipped])
    assert [g["targets"] for g in groups] == [["127.0.7.2:8000"]]
    labels = groups[0]["labels"]
    assert labels["namespace"] == "ns" and labels["pod"] == "p" and labels["container"] == "c"
    assert labels["__meta_kubernetes_pod_label_specguard_io_arm"] == "baseline"
    assert labels["__metrics_path__"] == "/m"


def test_loopback_pool_hands_out_distinct_free_addresses() -> None:
    pool = LoopbackPool("127.0.77")
    first, second = pool.allocate(), pool.allocate()
    assert first != second and first.startswith("127.0.77.")
    pool.release(first)
    assert pool.allocate() not in {first, second}  # round robin: no immediate reuse
    assert "127.0.0.1" in listening_addresses() or listening_addresses() is not None


SPAWNER = textwrap.dedent(
    """
    import os, signal, sys, time
    from pathlib import Path
    from specguard_testkit._procs import ProcessGroups, install_exit_handlers
    groups = ProcessGroups(directory=Path(sys.argv[1]))
    install_exit_handlers(groups)
    for n in range(2):
        # each group: a leader that forks a grandchild, like a server with workers
        groups.spawn(["sh", "-c", "sleep 300 & sleep 300"], name=f"g{n}",
                     log_path=Path(sys.argv[1]) / f"g{n}.log")
    print(" ".join(str(g.pgid) for g in groups.groups()), flush=True)
    if sys.argv[2] == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(300)
    """
)


def _spawn_owner(tmp_path: Path, mode: str) -> tuple[subprocess.Popen[str], list[int]]:
    owner = subprocess.Popen(
        [sys.executable, "-c", SPAWNER, str(tmp_path), mode], stdout=subprocess.PIPE, text=True
    )
    assert owner.stdout is not None
    pgids = [int(p) for p in owner.stdout.readline().split()]
    assert len(pgids) == 2
    wait_until(lambda: all(len(group_members(g)) >= 2 for g in pgids), timeout=10,
               what="leaders and grandchildren running")  # fmt: skip
    return owner, pgids


def test_orphans_of_a_killed_owner_are_reaped(tmp_path: Path) -> None:
    owner, pgids = _spawn_owner(tmp_path, "sigkill")
    owner.wait(timeout=10)
    assert owner.returncode == -signal.SIGKILL
    assert all(group_members(g) for g in pgids), "SIGKILL leaves the groups behind"
    reaped = reap_orphans(tmp_path)
    assert sorted(r.pgid for r in reaped) == sorted(pgids)
    wait_until(lambda: not any(group_members(g) for g in pgids), timeout=10,
               what="orphaned groups gone")  # fmt: skip
    assert not list(tmp_path.glob("*.json"))


def test_live_owner_is_left_alone_and_sigterm_kills_its_groups(tmp_path: Path) -> None:
    owner, pgids = _spawn_owner(tmp_path, "wait")
    try:
        assert reap_orphans(tmp_path) == []
        assert all(group_members(g) for g in pgids)
        owner.send_signal(signal.SIGTERM)
        owner.wait(timeout=10)
        wait_until(lambda: not any(group_members(g) for g in pgids), timeout=10,
                   what="groups killed by the SIGTERM handler")  # fmt: skip
    finally:
        if owner.poll() is None:
            owner.kill()
        for pgid in pgids:
            if group_members(pgid):
                os.killpg(pgid, signal.SIGKILL)
    time.sleep(0)


def _fake_binaries(directory: Path, *names: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name in names:
        path = directory / name
        path.write_text("#!/bin/sh\necho Kubernetes v1.30.0\n")
        path.chmod(0o755)


def test_kubebuilder_assets_first_then_cache_for_what_envtest_lacks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assets, cache = tmp_path / "assets", tmp_path / "cache"
    _fake_binaries(assets, "kube-apiserver", "etcd", "kubectl")
    cached = cache / "control-plane" / f"v{KUBE_VERSION}" / "bin"
    _fake_binaries(cached, "kube-apiserver", "kube-controller-manager", "kube-scheduler")
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(assets))
    monkeypatch.setenv("SPECGUARD_CACHE_DIR", str(cache))
    found = find_binaries()
    assert found.kube_apiserver == assets / "kube-apiserver" and found.etcd == assets / "etcd"
    assert found.kube_scheduler == cached / "kube-scheduler"
    assert found.minor_version(found.kube_apiserver) == 30
    (assets / "kube-apiserver").unlink()
    with pytest.raises(MissingBinariesError, match="KUBEBUILDER_ASSETS"):
        find_binaries()


def test_version_skew_between_envtest_and_cached_binaries_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assets = tmp_path / "assets"
    cache = tmp_path / "cache" / "control-plane" / f"v{KUBE_VERSION}" / "bin"
    _fake_binaries(assets, "kube-apiserver", "etcd")  # 1.30
    _fake_binaries(cache, "kube-controller-manager", "kube-scheduler")
    (cache / "kube-scheduler").write_text("#!/bin/sh\necho Kubernetes v1.20.2\n")
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(assets))
    monkeypatch.setenv("SPECGUARD_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(MissingBinariesError, match=r"kube-scheduler 1\.20 .* kube-apiserver 1\.30"):
        find_binaries().checked_minors()
    # One minor older is supported; newer is not.
    (cache / "kube-scheduler").write_text("#!/bin/sh\necho Kubernetes v1.29.1\n")
    assert find_binaries().checked_minors() == (30, 30, 29)
    (cache / "kube-controller-manager").write_text("#!/bin/sh\necho Kubernetes v1.31.0\n")
    with pytest.raises(MissingBinariesError, match=r"kube-controller-manager 1\.31"):
        find_binaries().checked_minors()


def test_missing_binaries_fail_the_cluster_tier_with_a_clear_message(tmp_path: Path) -> None:
    (tmp_path / "test_needs_cluster.py").write_text(
        "def test_it(local_cluster):\n    pass\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "KUBEBUILDER_ASSETS"}
    env["SPECGUARD_CACHE_DIR"] = str(tmp_path / "empty-cache")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "specguard_testkit.pytest_plugin",
         "-p", "no:cacheprovider", "test_needs_cluster.py"],
        check=False, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout
    assert "1 error" in proc.stdout and "skipped" not in proc.stdout
    assert "local control plane unavailable" in proc.stdout
    assert "build-control-plane.sh" in proc.stdout


BUILD_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "build-control-plane.sh"


def _build(cache: Path, *wrapper: str) -> subprocess.CompletedProcess[str]:
    # The script is fed on stdin so that an unprivileged user needs no access to the checkout.
    env = {"PATH": os.environ["PATH"], "SPECGUARD_CACHE_DIR": str(cache)}
    return subprocess.run(
        [*wrapper, "bash", "-s"], input=BUILD_SCRIPT.read_text(), env=env,
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_build_script_is_idempotent_once_binaries_are_cached(tmp_path: Path) -> None:
    _fake_binaries(tmp_path / "control-plane" / f"v{KUBE_VERSION}" / "bin", "kube-apiserver",
                   "kube-controller-manager", "kube-scheduler", "kubectl", "kubelet",
                   "kube-proxy", "etcd")  # fmt: skip
    proc = _build(tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "nothing to do" in proc.stderr
    assert not (tmp_path / "control-plane" / f"v{KUBE_VERSION}" / "module").exists()


def test_build_script_refuses_a_go_older_than_kubernetes_needs(tmp_path: Path) -> None:
    # A `go` that reports 1.19 (Debian 12's golang-go) stands in for an old toolchain.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "go").write_text("#!/bin/sh\necho go1.19.8\n")
    (bin_dir / "go").chmod(0o755)
    for tool in ("sed", "id", "dirname"):
        found = shutil.which(tool)
        assert found is not None
        (bin_dir / tool).symlink_to(found)
    env = {"PATH": str(bin_dir), "SPECGUARD_CACHE_DIR": str(tmp_path / "empty-cache")}
    proc = subprocess.run(
        ["/bin/bash", "-s"], input=BUILD_SCRIPT.read_text(), env=env,
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"build-control-plane: error: Kubernetes {KUBE_VERSION} needs Go >= 1.26, found go1.19.8"
    ]
    assert not (tmp_path / "empty-cache").exists()


def test_build_script_builds_the_version_the_package_looks_for() -> None:
    default = re.search(r'^KUBE_VERSION="\$\{SPECGUARD_KUBE_VERSION:-([0-9.]+)\}"$',
                        BUILD_SCRIPT.read_text(), re.MULTILINE)  # fmt: skip
    assert default is not None and default.group(1) == KUBE_VERSION
    assert cache_bin_dir().parts[-3:] == ("control-plane", f"v{KUBE_VERSION}", "bin")


def test_build_script_builds_the_node_binaries_with_the_control_plane() -> None:
    """One build gives every binary of the release: the kubelet and kube-proxy a real node
    runs are in the wrapper module and in the list the cache is checked against."""
    script = BUILD_SCRIPT.read_text()
    assert re.search(r"^KUBE_CMDS=\(.*\bkubelet\b.*\bkube-proxy\b.*\)$", script, re.MULTILINE)
    for cmd in ("kubelet", "kube-proxy"):
        assert f'_ "k8s.io/kubernetes/cmd/{cmd}"' in script


def test_node_build_script_builds_the_versions_the_package_looks_for() -> None:
    from specguard_testkit._binaries import (
        CNI_PLUGINS,
        CNI_VERSION,
        CONTAINERD_VERSION,
        CRICTL_VERSION,
        IMAGE_SPECGUARD,
        IMAGE_VLLM_SIM,
        IMAGE_VLLM_SIM_FAULTY,
        node_build_script,
        node_cache_dir,
    )

    script = node_build_script().read_text()
    for name, version in (("CONTAINERD_VERSION", CONTAINERD_VERSION),
                          ("CRICTL_VERSION", CRICTL_VERSION), ("CNI_VERSION", CNI_VERSION)):
        assert re.search(rf"^{name}={re.escape(version)}$", script, re.MULTILINE), name
    wanted = re.search(r"^WANT=\((.*)\)$", script, re.MULTILINE)
    assert wanted is not None and set(CNI_PLUGINS) <= set(wanted.group(1).split())
    assert node_cache_dir().name in script.replace("$CONTAINERD_VERSION", CONTAINERD_VERSION)\
        .replace("$CRICTL_VERSION", CRICTL_VERSION).replace("$CNI_VERSION", CNI_VERSION)
    images = node_build_script().with_name("build-image.sh").read_text()
    for image in (IMAGE_SPECGUARD, IMAGE_VLLM_SIM, IMAGE_VLLM_SIM_FAULTY):
        assert f'"{image}:$VERSION"' in images, image
