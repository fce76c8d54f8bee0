"""`specguard demo` before any cluster: its flags, what it says when something it needs is
missing, the build's progress line, the resource and the simulator it runs, the client's
records."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest
import yaml

from specguard.api._resource import parse_resource
from specguard.demo import _stage as stage
from specguard.demo._command import Console, Demo, _check, build_parser, main
from specguard.demo._load import read_records, record_line
from specguard_testkit import find_tool
from specguard_testkit._images import Launch
from specguard_testkit._loadclient import StreamRecord


def _demo(argv: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specguard", "demo", *argv], capture_output=True, text=True,
        timeout=120, check=False, env=env,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--window", "5"], "--window: must be 10..3600 seconds, got 5"),
        (["--time-scale", "0"], "--time-scale: must be 0.01..100, got 0"),
        (["--consecutive-windows", "0"], "--consecutive-windows: must be 1..100, got 0"),
        (["--schedule", "math:4:40,"], "--schedule: phase 2 '': expected DOMAIN:PER_POD:SECONDS"),
        (
            ["--profile", "gpt-9"],
            "--profile: unknown profile 'gpt-9'; one of kimi-k3, deepseek-v4, kimi-k3-published, "
            "kimi-k3-tails",
        ),
    ],
)
def test_bad_values_are_one_line_naming_the_flag(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err == f"specguard demo: {message}\n"


def test_without_matplotlib_it_names_the_extra() -> None:
    code = (
        "import sys; sys.modules['matplotlib'] = None\n"
        "from specguard.cli import main; raise SystemExit(main(['demo']))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False, timeout=120)  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr == (
        "specguard demo: needs matplotlib, which comes with the 'evaluate' extra: "
        "pip install 'specguard[evaluate]'\n"
    )


def _path_without_go(tmp_path: Path) -> str:
    """A PATH holding helm (the demo checks it first) and bash but no go."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("helm", "bash"):
        found = find_tool(tool)
        if found is not None:
            (bin_dir / tool).symlink_to(found)
    return str(bin_dir)


def test_missing_binaries_without_go_is_one_line_saying_what_it_needs(tmp_path: Path) -> None:
    env = {**os.environ, "SPECGUARD_CACHE_DIR": str(tmp_path / "cache"),
           "PATH": _path_without_go(tmp_path)}  # fmt: skip
    env.pop("KUBEBUILDER_ASSETS", None)
    proc = _demo(["--out", str(tmp_path / "out")], env)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("specguard demo: needs the go command (Go >= 1.26)")
    assert "KUBEBUILDER_ASSETS" in proc.stderr


def test_no_build_says_where_it_looked(tmp_path: Path) -> None:
    env = {**os.environ, "SPECGUARD_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("KUBEBUILDER_ASSETS", None)
    proc = _demo(["--no-build", "--out", str(tmp_path / "out")], env)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("specguard demo: kube-apiserver not found")
    assert "build-control-plane.sh" in proc.stderr


def test_the_build_progress_line_is_honest_about_what_it_knows() -> None:
    assert stage.progress_line(30.0, 2.0, "resolving") == (
        "building the control plane: 0m30s, 0.0 of ~24.5 CPU-minutes (downloading modules)"
    )
    # 6 of 24.5 CPU-minutes in 5 minutes: 1.2 CPU-s per s, 18.5 CPU-minutes to go.
    assert stage.progress_line(300.0, 360.0, "building") == (
        "building the control plane: 5m00s, 6.0 of ~24.5 CPU-minutes, ~15m25s left at this pace"
    )
    assert "another build is running" in stage.progress_line(10.0, 0.0, "waiting")
    assert stage.build_estimate(2) == (
        "24.5 CPU-minutes, about 12 minutes on 2 idle cores, longer when they are busy, plus "
        "downloading about 900 MB of Go modules once"
    )


def test_the_resource_is_the_one_the_issue_describes_and_valid() -> None:
    body = stage.manifest(window_s=15, cooldown_s=30, consecutive=3)
    spec = parse_resource(body).spec
    assert (spec.replicas, spec.shadow.replicas, spec.runtime.tensor_parallel_size) == (2, 1, 2)
    assert (spec.drafter.method, spec.drafter.num_speculative_tokens) == ("dspark", 7)
    assert not spec.drafter.adaptive_verification and spec.drafter.per_batch_size is None
    assert (spec.evaluation.window, spec.evaluation.consecutive_windows) == (15, 3)
    assert spec.rollback.cooldown == 30
    assert body["metadata"]["namespace"] == stage.DEMO_NAMESPACE
    # The shipped file itself parses too (it is what a user reads).
    assert parse_resource(yaml.safe_load(stage.MANIFEST.read_text())).spec.replicas == 2


def test_the_vllm_image_runs_as_the_deepseek_simulator_at_the_time_scale() -> None:
    argv = stage.sim_runner(2.0)(Launch(stage.SIM_IMAGE, (), ("deepseek-ai/DeepSeek-V4", "--x"),
                                        "127.0.9.3"))  # fmt: skip
    assert argv[1:] == ["-m", "specguard", "sim", "deepseek-ai/DeepSeek-V4", "--x", "--profile",
                        "deepseek-v4", "--time-scale", "2", "--host", "127.0.9.3"]  # fmt: skip


def test_the_profile_option_picks_the_simulator_profile() -> None:
    parser = build_parser()
    assert _check(parser.parse_args([])) and parser.parse_args([]).profile == "deepseek-v4"
    args = parser.parse_args(["--profile", "kimi-k3-published"])
    _check(args)  # accepted
    argv = stage.sim_runner(2.0, args.profile)(Launch(stage.SIM_IMAGE, (), ("m",), "127.0.9.3"))
    assert argv[argv.index("--profile") + 1] == "kimi-k3-published"
    assert "kimi-k3-published" in parser.format_help()


def test_client_lines_hold_numbers_only_and_read_back(tmp_path: Path) -> None:
    record = StreamRecord(10.0, chunk_times=[10.5, 11.0, 12.5], chunk_tokens=[1, 3, 4])
    line = record_line(
        record, started=1700000000.25, ended=1700000003.0, status=200, domain="math", phase=0
    )
    assert '"Solve' not in line and "content" not in line
    path = tmp_path / "client.jsonl"
    cut_off = record_line(StreamRecord(11.0), started=1700000001.0, ended=1700000001.5,
                          status=599, domain="math", phase=0)  # fmt: skip
    path.write_text(line + "\n" + cut_off + "\n" + '{"started": 1')  # a torn last line
    first, failed = read_records(path)
    assert (first.started, first.ended, first.tokens, first.decode_s, first.ok) == (
        1700000000.25,
        1700000003.0,
        8,
        2.0,
        True,
    )
    assert (failed.tokens, failed.ok, failed.usable) == (0, False, False)


def test_status_line_off_a_terminal_is_printed_once_per_window() -> None:
    out = io.StringIO()
    console = Console(out, every=3600.0)
    console.status("first")
    console.status("second")
    console.say("an event")
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 and lines[0].endswith("] first") and lines[1].endswith("] an event")


def _fake_build(tmp_path: Path, body: str) -> Path:
    script = tmp_path / "build-control-plane.sh"
    script.write_text("#!/usr/bin/env bash\nset -e\n" + body)
    return script


def test_a_missing_control_plane_is_built_with_a_progress_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    bin_dir = cache / "control-plane" / "v1.37.2" / "bin"
    script = _fake_build(tmp_path, (
        'echo "build-control-plane: building kube-apiserver ..." >&2\n'
        f"mkdir -p {bin_dir}\nsleep 2.5\n"
        f"for b in etcd kube-apiserver kube-controller-manager kube-scheduler kubectl; do "
        f"printf '#!/bin/sh\\n' > {bin_dir}/$b; chmod +x {bin_dir}/$b; done\n"
    ))  # fmt: skip
    monkeypatch.setenv("SPECGUARD_CACHE_DIR", str(cache))
    monkeypatch.delenv("KUBEBUILDER_ASSETS", raising=False)
    monkeypatch.delenv("SPECGUARD_KUBE_VERSION", raising=False)
    monkeypatch.setattr(stage, "build_script", lambda: script)
    said: list[str] = []
    progress: list[str] = []
    origin = stage.ensure_binaries(said.append, progress.append)
    assert origin == str(bin_dir)
    assert said[0].startswith("building Kubernetes and etcd from the Go modules (first use only;")
    assert said[-1].startswith("control plane built in 0m0") and str(bin_dir) in said[-1]
    assert progress and progress[0].startswith("building the control plane: 0m00s, ")


def test_a_failed_build_is_one_line_with_its_reason_and_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = _fake_build(tmp_path, (
        'echo "build-control-plane: resolving k8s.io/kubernetes v1.37.2" >&2\n'
        'echo "build-control-plane: error: go mod tidy failed (log: /x/tidy.log)" >&2\nexit 1\n'
    ))  # fmt: skip
    monkeypatch.setenv("SPECGUARD_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("KUBEBUILDER_ASSETS", raising=False)
    monkeypatch.setattr(stage, "build_script", lambda: script)
    with pytest.raises(stage.DemoError) as error:
        stage.ensure_binaries(lambda _: None, lambda _: None)
    message = str(error.value)
    assert message.startswith(
        "cannot build the control plane: go mod tidy failed (log: /x/tidy.log)"
    )
    assert "\n" not in message and "demo-build.log" in message


def test_the_closing_commands_put_the_venvs_kubectl_first_on_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The venv holds the plugin and kubectl of the control plane's release: the commands
    printed at the end say to put it first unless PATH already finds both there."""
    venv, system = tmp_path / "venv" / "bin", tmp_path / "usr" / "bin"
    for directory, names in ((venv, ("kubectl", "kubectl-specguard")), (system, ("kubectl",))):
        directory.mkdir(parents=True)
        for name in names:
            (directory / name).write_text("#!/bin/sh\n")
            (directory / name).chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(venv / "python"))
    out = io.StringIO()
    demo = Demo(build_parser().parse_args([]), (), Console(out, every=3600.0))
    demo.stage = cast(stage.Stage, SimpleNamespace(name="dsv4", cluster=None))
    export = f"  export PATH={venv}:$PATH    # its kubectl and the specguard plugin"
    for path, printed in ((f"{system}:{venv}", True), (f"{venv}:{system}", False)):
        monkeypatch.setenv("PATH", path)
        out.truncate(0)
        out.seek(0)
        demo._commands()
        lines = out.getvalue().splitlines()
        assert (export in lines) is printed, (path, lines)
        assert "  kubectl specguard history dsv4 -n specguard-demo" in lines
