"""`specguard judge SAMPLES.jsonl`, run as the real command."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from specguard.judge.synthetic import window


def specguard(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specguard", "judge", *args],
        check=False, capture_output=True, text=True, input=stdin, timeout=60,
    )


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Six 60 s windows: two A/A, then the drafter 15% slower per token."""
    rng = np.random.default_rng(9)
    path = tmp_path_factory.mktemp("judge") / "samples.jsonl"
    with path.open("w") as out:
        for w in range(6):
            for s in window("lognormal", 220, rng, factor=1.0 if w < 2 else 1.15):
                record = s.to_dict()
                record["started_at"] = 1_700_000_000 + 60 * w + 0.2 * s.started_at
                out.write(json.dumps(record) + "\n")
    return path


def test_prints_sentence_and_table(recording: Path) -> None:
    proc = specguard(str(recording))
    assert proc.returncode == 0, proc.stderr
    first, *rest = proc.stdout.splitlines()
    assert first.startswith("regressed: ratio of median per-token latency")
    assert "n 1320 vs 1320" in first
    table = "\n".join(rest)
    assert "speculative" in table and "baseline" in table and "8-15: 1320/1320" in table


def test_json_output_is_the_verdict(recording: Path) -> None:
    proc = specguard(str(recording), "--json", "--tolerance", "0.5")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["outcome"] == "neutral"  # a 10% change is inside a ±50% band
    assert data["tolerance"] == 0.5 and data["n"] == {"speculative": 1320, "baseline": 1320}
    assert data["sentence"].startswith("neutral:")


def test_windows_replay_the_policy(recording: Path) -> None:
    proc = specguard(str(recording), "--window", "60")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert [line.split()[2] for line in lines[:6]] == ["neutral"] * 2 + ["regressed"] * 4
    assert "would roll back at window(s) 4" in lines[-1]
    data = json.loads(specguard(str(recording), "--window", "60", "--json").stdout)
    assert [w["decision"]["action"] for w in data] == ["hold"] * 4 + ["notify", "hold"]


def test_reads_stdin(recording: Path) -> None:
    proc = specguard("-", "--min-requests", "5000", stdin=recording.read_text())
    assert proc.returncode == 0
    assert proc.stdout.startswith("inconclusive: too few usable requests")


@pytest.mark.parametrize(
    ("content", "args", "message"),
    [
        ('{"arm": "speculative"}\n', (), "line 1: pod: required field is missing"),
        ("\n\nnot json\n", (), "line 3: not JSON"),
        ('{"arm":"speculative","role":"serving","pod":"p","domain":"chat","started_at":1,'
         '"concurrency":-1,"output_tokens":9,"e2e_s":1}\n', (), "line 1: concurrency:"),
        ("", ("--confidence", "1.5"), "--confidence: must be in [0.5, 1)"),
        ("", ("--window", "0"), "--window: must be a positive number"),
        ("", ("--seed", "-1"), "--seed: must be >= 0"),
        ("", ("--tolerance", "abc"), "argument --tolerance: invalid float value"),
    ],
)
def test_bad_input_is_one_line_exit_2(
    tmp_path: Path, content: str, args: tuple[str, ...], message: str
) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    proc = specguard(str(path), *args)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


def test_missing_file_is_exit_2(tmp_path: Path) -> None:
    proc = specguard(str(tmp_path / "nope.jsonl"))
    assert proc.returncode == 2 and "No such file" in proc.stderr
