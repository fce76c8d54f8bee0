"""`specguard judge SAMPLES.jsonl`, run as the real command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from specguard_testkit import _traffic as traffic
from specguard_testkit._synthetic import samples, window


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
    assert "speculative" in table and "baseline" in table and "8-11: 1320/1320" in table


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
    assert proc.returncode == 3  # inconclusive: no verdict reached
    assert proc.stdout.startswith("inconclusive: too few usable requests")


@pytest.mark.parametrize(
    ("content", "args", "message"),
    [
        ('{"arm": "speculative"}\n', (), "line 1: pod: required field is missing"),
        ("\n\nnot json\n", (), "line 3: not JSON"),
        ('{"arm":"speculative","role":"serving","pod":"p","domain":"chat","started_at":1,'
         '"concurrency":-1,"output_tokens":9,"e2e_s":1}\n', (), "line 1: concurrency:"),
        ("", ("--confidence", "1.5"), "--confidence: must be in [0.5, 1)"),
        ("", ("--window", "0"), "--window: must be 0.001 to 3.1536e+07 seconds"),
        ("", ("--window", "1e-7"), "--window: must be 0.001 to"),
        ("", ("--window", "nan"), "--window: must be 0.001 to"),
        ("", ("--resamples", "1000000000"), "--resamples: must be between 100 and 100000"),
        ("", ("--min-requests", "9" * 5000), "argument --min-requests: invalid int value"),
        ("", ("--tolerance", "1e999"), "--tolerance: must be in [0, 1)"),
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


RECORD = (
    '{"arm":"speculative","role":"serving","pod":"p","domain":"chat","started_at":%s,'
    '"concurrency":%s,"output_tokens":9,"e2e_s":1,"tpot_s":0.03%s}\n'
)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (RECORD % ("1" + "0" * 400, 1, ""), "line 1: started_at: expected a finite number"),
        (RECORD % (1, "9" * 5000, ""), "line 1: not a sample record"),
        (RECORD % (1, "9" * 400, ""), "line 1: concurrency: expected a whole number <="),
        ("[" * 30_000 + "]" * 30_000 + "\n", "line 1: not a sample record (nested too deeply)"),
        ('{"a":' * 50 + "1" + "}" * 50 + "\n", "line 1: pod: required field is missing"),
        (RECORD % (1, 1, ',"v":true'), "line 1: v: unsupported schema version True"),
        ("x" * 70_000 + "\n", "line 1: longer than 65536 characters"),
        ("x" * 200_000, "line 1: longer than 65536 characters"),  # no newline at all
        ("\xff\n", "not UTF-8 text (invalid start byte)"),
    ],
)
def test_hostile_files_are_one_line_exit_2(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(content, encoding="latin-1" if "\xff" in content else "utf-8")
    proc = specguard(str(path))
    assert proc.returncode == 2, proc.stdout
    assert message in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


def test_no_verdict_is_exit_3_with_the_reason(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    proc = specguard(str(empty))
    assert proc.returncode == 3 and "no samples" in proc.stdout
    # every speculative request failed: the sentence carries the error counts
    rng = np.random.default_rng(1)
    lines = []
    for s in window("lognormal", 220, rng):
        record = s.to_dict()
        if s.arm == "speculative":
            record["status"] = 503
        lines.append(json.dumps(record))
    failed = tmp_path / "failed.jsonl"
    failed.write_text("\n".join(lines) + "\n")
    proc = specguard(str(failed))
    assert proc.returncode == 3
    assert "errors: speculative 220 of 220 requests, baseline 0 of 220" in proc.stdout


def test_window_replay_grows_with_samples_not_with_the_time_they_span(
    recording: Path, tmp_path: Path
) -> None:
    # One record at started_at 0 in front of real ones 1.7e9 s later, and two records 1e15 s
    # apart: the empty windows between are one line each, not 28 million or 1.6e13 windows.
    records = recording.read_text().splitlines()
    first = json.loads(records[0])
    path = tmp_path / "gap.jsonl"
    path.write_text(json.dumps({**first, "started_at": 0}) + "\n" + "\n".join(records) + "\n")
    proc = specguard(str(path), "--window", "60")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[1] == "window 1–28333332: no samples"
    assert "would roll back at window(s) 28333337" in lines[-1]
    far = tmp_path / "far.jsonl"
    far.write_text(json.dumps(first) + "\n" + json.dumps({**first, "started_at": 1e15}) + "\n")
    proc = specguard(str(far), "--window", "0.001")
    assert proc.returncode == 3, proc.stderr
    assert len(proc.stdout.splitlines()) == 4


def test_a_closed_pipe_is_one_line_exit_2(recording: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "specguard", "judge", str(recording), "--window", "1", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.read(10)
    proc.stdout.close()  # the reader goes away, as `| head -c 10` does
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 2
    assert "output closed" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_a_time_span_past_counting_is_one_line_exit_2(tmp_path: Path) -> None:
    # Two records 1.7e308 s apart cut in 1 ms windows: 1.7e311 windows, past what a float
    # counts (the window number overflowed). A clear error, not a traceback.
    path = tmp_path / "span.jsonl"
    path.write_text(RECORD % (0, 1, "") + RECORD % ("1.7e308", 1, ""))
    proc = specguard(str(path), "--window", "0.001")
    assert proc.returncode == 2, proc.stdout
    assert "--window: the samples span 1.7e+308 s, more than 1e+18 windows" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


def _named(domain: str) -> str:
    lines = []
    for s in window("lognormal", 30, np.random.default_rng(4)):
        lines.append(json.dumps({**s.to_dict(), "domain": domain}))
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    ("domain", "encoding", "shown"),
    [
        ("\ud800", "utf-8", "\\ud800"),  # a lone surrogate from a JSON escape
        ("réponse–longue", "latin-1", "réponse\\u2013longue"),  # a terminal without "–"
    ],
)
def test_names_the_terminal_cannot_show_are_escaped(
    tmp_path: Path, domain: str, encoding: str, shown: str
) -> None:
    path = tmp_path / "names.jsonl"
    path.write_text(_named(domain))
    proc = subprocess.run(
        [sys.executable, "-m", "specguard", "judge", str(path), "--min-requests", "20"],
        check=False, capture_output=True, timeout=60,
        env={**os.environ, "PYTHONIOENCODING": encoding},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    assert shown in proc.stdout.decode(encoding)


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (Linux)")
def test_an_unwritable_output_is_one_line_exit_2(recording: Path) -> None:
    with open("/dev/full", "w") as full:  # every write fails: no space left on device
        proc = subprocess.run(
            [sys.executable, "-m", "specguard", "judge", str(recording)],
            check=False, stdout=full, stderr=subprocess.PIPE, text=True, timeout=60,
        )  # fmt: skip
    assert proc.returncode == 2
    assert "cannot write the report: No space left on device" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


def test_the_replay_acts_on_a_sustained_loss_no_window_shows(tmp_path: Path) -> None:
    """Mirrored windows of 230 pairs with noisy requests (intervals of ±7%), the drafter 9%
    slower: K in a row does not come, the cumulative evidence rolls back; off, it does not.
    The pods do not differ: with three per arm at log-σ 0.05 the evidence carries their
    possible offset once (±11%), which a +9% drafter does not clear (docs/judge.md)."""
    rng = np.random.default_rng(31)
    noisy = traffic.Traffic(pair_noise=0.2, pod_bias=0.0)
    path = tmp_path / "sustained.jsonl"
    with path.open("w") as out:
        for w in range(12):
            pairs = traffic.window(rng, 230, noisy, effect=1.09, paired=True,
                                     start=60.0 * w + 5, duration=50.0)  # fmt: skip
            for s in pairs:
                record = s.to_dict()
                record["started_at"] = 1_700_000_000 + s.started_at
                out.write(json.dumps(record) + "\n")
    on = specguard(str(path), "--window", "60")
    assert on.returncode == 0, on.stderr
    last = on.stdout.splitlines()[-1]
    assert "cumulative evidence at 10000 windows per false alarm" in last
    assert "would roll back at window(s)" in last, on.stdout
    assert "(sustained loss: the cumulative evidence)" in on.stdout
    off = specguard(str(path), "--window", "60", "--windows-per-false-alarm", "0")
    assert off.stdout.splitlines()[-1] == (
        "policy replay (dry run, 3 consecutive windows, no cumulative evidence): would not act"
    ), off.stdout
    bad = specguard(str(path), "--window", "60", "--windows-per-false-alarm", "1")
    assert bad.returncode == 2
    assert bad.stderr.startswith("specguard judge: --windows-per-false-alarm: must be 0 (off)")


def test_arms_loaded_differently_are_not_compared_pooled(tmp_path: Path) -> None:
    """Issue 25: 300 drafter requests at 2 in flight against 1200 baseline requests at 8 (4×
    the arrivals per pod, a wrong mirror share) share no in-flight level. Before: compared
    pooled, citing Little's law, "improved 0.620", exit 0. Little's law explains an in-flight
    gap only at one arrival rate: inconclusive, exit 3, with both arrival counts."""
    rng = np.random.default_rng(25)
    spec = samples("speculative", 0.012 * 1.125 * np.exp(rng.normal(0, 0.35, 300)), concurrency=2)
    base = samples("baseline", 0.012 * 1.5 * np.exp(rng.normal(0, 0.35, 1200)), concurrency=8)
    path = tmp_path / "apart.jsonl"
    path.write_text("".join(s.to_json() + "\n" for s in spec + base))
    proc = specguard(str(path))
    assert proc.returncode == 3, proc.stdout
    first = proc.stdout.splitlines()[0]
    assert first.startswith("inconclusive: the arms share too few in-flight levels"), first
    assert "their arrivals differ (150 vs 600 requests per pod" in first

