"""`specguard render`: YAML out for a good file; one line per problem and exit 2 otherwise."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from specguard.commands.render import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "qwen3.6-dspark-tp2.yaml"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specguard", "render", *args],
        capture_output=True,
        text=True,
        check=False,
    )


def test_render_example_prints_objects() -> None:
    proc = run(str(EXAMPLE))
    assert proc.returncode == 0, proc.stderr
    docs = list(yaml.safe_load_all(proc.stdout))
    assert [d["metadata"]["name"] for d in docs if d["kind"] == "Deployment"] == [
        "qwen-spec",
        "qwen-base",
        "qwen-router",
    ]


def test_baseline_mode_swaps_replicas(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(EXAMPLE), "--mode", "baseline"]) == 0
    docs = {d["metadata"]["name"]: d for d in yaml.safe_load_all(capsys.readouterr().out)}
    assert docs["qwen-spec"]["spec"]["replicas"] == 1
    assert docs["qwen-base"]["spec"]["replicas"] == 4


def test_invalid_file_lists_every_problem(tmp_path: Path) -> None:
    bad = yaml.safe_load(EXAMPLE.read_text())
    bad["spec"]["drafter"]["method"] = "eagle3"
    bad["spec"]["runtime"]["extraArgs"] = ["--tensor-parallel-size=2"]
    bad["spec"]["evaluation"]["tolerance"] = 0.9
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(bad))
    proc = run(str(path))
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert "Traceback" not in proc.stderr
    assert proc.stderr.splitlines() == [
        f"{path}: spec.evaluation.tolerance: Input should be less than or equal to 0.5",
        f"{path}: spec.drafter.adaptiveVerification: only supported with method dspark, got eagle3",
        f"{path}: spec.runtime.extraArgs: --tensor-parallel-size/-tp are owned by specguard "
        "(abbreviations too); set spec.runtime.tensorParallelSize instead, "
        "got --tensor-parallel-size",
    ]


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, "cannot read"),
        ("spec: [unclosed\n", "line 2 column 1: not valid YAML: "),
        ("", "no SpeculativeDeployment in the input"),
        ("- a\n- b\n", "(root): a SpeculativeDeployment must be a mapping"),
    ],
)
def test_unusable_files_get_one_clear_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, expected: str
) -> None:
    path = tmp_path / "in.yaml"
    if content is not None:
        path.write_text(content)
    assert main([str(path)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"{path}: ") and expected in line


def test_binary_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "weights.bin"
    path.write_bytes(b"\xff\xfe\x00\x81")
    assert main([str(path)]) == 2
    assert capsys.readouterr().err.strip() == f"{path}: line 1 column 1: not UTF-8 text"


def test_two_documents_render_both(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first = yaml.safe_load(EXAMPLE.read_text())
    second = yaml.safe_load(EXAMPLE.read_text())
    second["metadata"]["name"] = "qwen-b"
    second["spec"]["replicas"] = 0
    path = tmp_path / "two.yaml"
    path.write_text(yaml.safe_dump_all([first, second]))
    assert main([str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"{path} (document 2, qwen-b): spec.replicas:")
    second["spec"]["replicas"] = 2
    path.write_text(yaml.safe_dump_all([first, second]))
    assert main([str(path)]) == 0
    names = [d["metadata"]["name"] for d in yaml.safe_load_all(capsys.readouterr().out)]
    assert "qwen-router" in names and "qwen-b-router" in names


NAMESPACE = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "llm"}}


def test_a_namespace_in_the_same_file_is_left_out(tmp_path: Path) -> None:
    """A file applied with `kubectl apply -f` often creates its namespace too: the resource
    renders, and the other document is named in one line on stderr."""
    sd = yaml.safe_load(EXAMPLE.read_text())
    path = tmp_path / "with-namespace.yaml"
    path.write_text(yaml.safe_dump_all([NAMESPACE, sd]))
    proc = run(str(path))
    assert proc.returncode == 0, proc.stderr
    kinds = [d["kind"] for d in yaml.safe_load_all(proc.stdout)]
    assert "Deployment" in kinds and "Namespace" not in kinds
    assert proc.stderr.splitlines() == [
        f"{path}: left out (not a SpeculativeDeployment): document 1 (Namespace llm)"
    ]


def test_only_other_kinds_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "ns.yaml"
    path.write_text(yaml.safe_dump(NAMESPACE))
    assert main([str(path)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"{path}: no SpeculativeDeployment in the input (1 of another kind: "
        "document 1 (Namespace llm))"
    ]


def test_a_wrong_kind_in_specguards_group_is_still_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A typo in the kind of specguard's own resource is an error, not a skipped document."""
    sd = yaml.safe_load(EXAMPLE.read_text())
    sd["kind"] = "SpeculativeDeplyment"
    path = tmp_path / "typo.yaml"
    path.write_text(yaml.safe_dump_all([NAMESPACE, sd]))
    assert main([str(path)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"{path} (document 2, qwen): kind: must be SpeculativeDeployment, "
        "got 'SpeculativeDeplyment'"
    ]


LADDER = ROOT / "examples" / "deepseek-v4-ladder-tp4.yaml"


def _spec_args(out: str) -> str:
    docs = {d["metadata"]["name"]: d for d in yaml.safe_load_all(out)}
    args = docs["dsv4-spec"]["spec"]["template"]["spec"]["containers"][0]["args"]
    return str(args[args.index("--speculative-config") + 1])


def test_rung_from_the_flag_or_from_status(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert main([str(LADDER), "--rung", "adaptive"]) == 0
    assert '"enable_adaptive_verification":true' in _spec_args(capsys.readouterr().out)
    # A resource read back from the cluster renders the rung its status says runs.
    live = yaml.safe_load(LADDER.read_text())
    schedule = [{"minBatchSize": 1, "maxBatchSize": 30, "numSpeculativeTokens": 7},
                {"minBatchSize": 31, "maxBatchSize": 1024, "numSpeculativeTokens": 0}]  # fmt: skip
    live["status"] = {"ladder": {"rung": {"name": "schedule", "schedule": schedule}}}
    path = tmp_path / "live.yaml"
    path.write_text(yaml.safe_dump(live))
    assert main([str(path)]) == 0
    assert '"num_speculative_tokens_per_batch_size":[[1,30,7],[31,1024,0]]' in _spec_args(
        capsys.readouterr().out
    )
    assert main([str(path), "--rung", "configured"]) == 0
    assert "per_batch" not in _spec_args(capsys.readouterr().out)


def test_schedule_rung_without_a_derived_schedule_is_one_line() -> None:
    proc = run(str(LADDER), "--rung", "schedule")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == (
        "specguard render: --rung schedule: dsv4 has no derived schedule in status.ladder (the "
        "operator derives it when the schedule rung is chosen)\n"
    )
