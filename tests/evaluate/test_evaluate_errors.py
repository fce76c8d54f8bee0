"""Every way a sweep cannot start prints one line naming the flag or endpoint and exits 2
(no traceback), against real servers: simulators, and a port nobody listens on."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specguard._exposition import sample_value
from specguard.evaluate._command import main
from specguard.evaluate._sweep import error_text
from specguard.judge._sample import parse_lines
from specguard.sim._launch import SimProcess, start_sim
from specguard_testkit._loadclient import read_metrics
from specguard_testkit._ports import free_port

DRAFTER = json.dumps({"method": "dspark", "model": "org/drafter", "num_speculative_tokens": 4})
SMALL = ["--concurrency", "1", "--requests", "2", "--subsets", "chat", "--max-tokens", "8"]


_COMMON = ["m", "--served-model-name", "served", "--profile", "kimi-k3", "--time-scale", "0.2"]
SIMS = ([*_COMMON, "--speculative-config", DRAFTER], _COMMON)  # ``sims``: spec, base


def _one_line(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    code = main(argv)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, err
    assert len(lines) == 1, err
    assert "Traceback" not in err
    assert lines[0].startswith("specguard evaluate: ")
    return lines[0]


def test_unreachable_endpoint(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    line = _one_line(
        capsys, ["--with-drafter", url, "--without-drafter", url, "--out", str(tmp_path)]
    )
    assert f"--with-drafter {url}: unreachable" in line


def test_wrong_model_name(
    sims: tuple[SimProcess, SimProcess], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    spec, base = sims
    argv = ["--with-drafter", spec.url, "--without-drafter", base.url, "--model", "gpt-9"]
    line = _one_line(capsys, [*argv, "--out", str(tmp_path)])
    assert "--model: 'gpt-9' is not served by --with-drafter" in line and "served" in line


def test_swapped_endpoints(
    sims: tuple[SimProcess, SimProcess], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    spec, base = sims
    line = _one_line(
        capsys, ["--with-drafter", base.url, "--without-drafter", spec.url, "--out", str(tmp_path)]
    )
    assert "exports no spec-decode metrics" in line and "swapped" in line


def test_server_without_spec_decode_metrics_is_a_warning_and_the_run_goes_on(
    sims: tuple[SimProcess, SimProcess], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    _, base = sims
    code = main(
        ["--with-drafter", base.url, "--without-drafter", base.url, *SMALL, "--out", str(tmp_path)]
    )
    err = capsys.readouterr().err
    assert code == 0, err
    warnings = [line for line in err.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "no vllm:spec_decode_* counters" in warnings[0]
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["warnings"] and report["cells"][0]["acceptance_length"] is None


def test_a_third_endpoint_is_measured_as_its_own_arm(
    sims: tuple[SimProcess, SimProcess], tmp_path: Path
) -> None:
    spec, base = sims
    ranges = [[1, 1, 4], [2, 64, 0]]
    schedule = json.dumps({**json.loads(DRAFTER), "num_speculative_tokens_per_batch_size": ranges})
    common = ["m", "--served-model-name", "served", "--profile", "kimi-k3", "--time-scale", "0.2"]
    with start_sim([*common, "--speculative-config", schedule]) as third:
        argv = [
            "--with-drafter", spec.url, "--without-drafter", base.url, "--with-variant",
            third.url, "--variant-config", schedule, "--concurrency", "4", "--requests", "6",
            "--min-requests", "4", "--subsets", "chat", "--max-tokens", "24",
            "--out", str(tmp_path),
        ]  # fmt: skip
        assert main(argv) == 0
    doc = json.loads((tmp_path / "report.json").read_text())
    arms = {a["name"]: a for a in doc["drafter_arms"]}
    assert set(arms) == {"fixed", "schedule"}
    assert arms["schedule"]["config"] == json.loads(schedule)
    row = arms["schedule"]["levels"][0]
    # 4 streams fall in the k=0 range: held there, it gains nothing (it costs a little)
    assert row["arms"]["speculative"]["requests"] == 6
    assert row["gain"] < 0.2 < arms["fixed"]["levels"][0]["gain"]
    assert doc["config"]["with_variant"] == third.url
    pairs = (tmp_path / "samples-schedule.jsonl").read_text().splitlines()
    assert len(pairs) == 12


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ([], "--with-drafter and --without-drafter are both required"),
        (["--with-drafter", "http://a"], "--with-drafter and --without-drafter are both required"),
        (["--simulate", "gpt-9"], "--simulate: unknown profile 'gpt-9'"),
        (["--simulate", "kimi-k3", "--with-drafter", "http://a"], "--simulate: give either"),
        (
            ["--with-drafter", "a:1", "--without-drafter", "http://b"],
            "--with-drafter: expected an http",
        ),
        (
            ["--simulate", "kimi-k3", "--concurrency", "1,x"],
            "--concurrency: expected comma-separated",
        ),
        (["--simulate", "kimi-k3", "--concurrency", "0"], "--concurrency: levels must be >= 1"),
        (["--simulate", "kimi-k3", "--requests", "0"], "--requests: must be >= 1"),
        (
            ["--simulate", "kimi-k3", "--requests", "2", "--duration", "3"],
            "not allowed with argument",
        ),
        (["--simulate", "kimi-k3", "--subsets", "poetry"], "--subsets: unknown subset 'poetry'"),
        (["--simulate", "kimi-k3", "--drafter-config", "{"], "--drafter-config: not JSON"),
        (["--simulate", "kimi-k3", "--bogus"], "unrecognized arguments: --bogus"),
        (["--simulate", "kimi-k3", "--confidence", "1.5"], "--confidence: must be in [0.5, 1)"),
        (["--simulate", "kimi-k3", "--tolerance", "-0.1"], "--tolerance: must be in [0, 1)"),
        (["--simulate", "kimi-k3", "--seed", "-1"], "--seed: must be >= 0"),
        (["--simulate", "kimi-k3", "--duration", "nan"], "--duration: must be > 0"),
        (
            ["--with-drafter", "http://a", "--without-drafter", "http://b", "--with-variant",
             "http://c"],
            "--variant-config: give it together with --with-variant",
        ),
        (
            ["--simulate", "kimi-k3", "--with-variant", "http://c", "--variant-config", "{}"],
            "--with-variant: not with --simulate",
        ),
        (
            ["--with-drafter", "http://a", "--without-drafter", "http://b", "--with-variant",
             "http://c", "--variant-config", '{"method": "dspark"}'],
            "--variant-config: expected num_speculative_tokens_per_batch_size or",
        ),
        (
            ["--simulate", "kimi-k3", "--concurrency", "1,4", "--usual-concurrency", "16"],
            "--usual-concurrency: 16 not among the swept levels (1, 4)",
        ),
    ],
)  # fmt: skip
def test_bad_command_lines(
    capsys: pytest.CaptureFixture[str], argv: list[str], expected: str
) -> None:
    assert expected in _one_line(capsys, argv)


def test_bad_out_is_refused_before_anything_runs(
    sims: tuple[SimProcess, SimProcess], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    spec, base = sims
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory\n")
    argv = ["--with-drafter", spec.url, "--without-drafter", base.url, *SMALL]
    before = [_completed(sim) for sim in sims]
    line = _one_line(capsys, [*argv, "--out", str(blocker)])
    assert line == f"specguard evaluate: --out: {blocker} exists and is not a directory"
    line = _one_line(capsys, [*argv, "--out", str(blocker / "sub" / "dir")])
    assert f"--out: {blocker / 'sub' / 'dir'} cannot be created: {blocker} is not a" in line
    # refused before the sweep: no request reached either server
    assert [_completed(sim) for sim in sims] == before


def _completed(sim: SimProcess) -> float:
    return sample_value(read_metrics(sim.url), "vllm:request_success_total")


def test_write_error_after_the_sweep_is_one_line_and_keeps_the_samples(
    sims: tuple[SimProcess, SimProcess], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    spec, base = sims
    (tmp_path / "report.json").mkdir()  # passes the --out check, fails only at the end
    code = main(
        ["--with-drafter", spec.url, "--without-drafter", base.url, *SMALL, "--out", str(tmp_path)]
    )
    captured = capsys.readouterr()
    assert code == 2 and "Traceback" not in captured.err
    errors = [line for line in captured.err.splitlines() if line.startswith("specguard evaluate")]
    assert errors == [
        f"specguard evaluate: --out: cannot write the report ({tmp_path / 'report.json'}: "
        "Is a directory)"
    ]
    # what could be written was: the measured samples, the plots, and the answer on stdout
    samples = list(parse_lines((tmp_path / "samples.jsonl").read_text().splitlines()))
    assert len(samples) == 2 * 2
    assert (tmp_path / "gain.png").stat().st_size > 0
    assert "Recommendation" in captured.out


def test_ctrl_c_before_the_first_cell_says_nothing_was_measured(tmp_path: Path) -> None:
    # slow simulators, so the first cell is still running when the interrupt comes
    slow = ["m", "--served-model-name", "served", "--profile", "kimi-k3", "--time-scale", "20"]
    with start_sim([*slow, "--speculative-config", DRAFTER]) as spec, start_sim(slow) as base:
        cmd = [
            sys.executable, "-m", "specguard", "evaluate", "--with-drafter", spec.url,
            "--without-drafter", base.url, *SMALL, "--out", str(tmp_path / "out"),
        ]  # fmt: skip
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 60
            # the sweep has started once a request is running on the drafter's server
            while not _running(spec):
                assert time.monotonic() < deadline and proc.poll() is None
                time.sleep(0.1)
            os.kill(proc.pid, signal.SIGINT)
            _, stderr = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr and "writing a partial report" not in stderr
    assert "interrupted before any cell finished: nothing measured, no report written" in stderr
    assert not (tmp_path / "out").exists()


def _running(sim: SimProcess) -> bool:
    return sample_value(read_metrics(sim.url), "vllm:num_requests_running") > 0


def test_bad_prompt_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    prompts = tmp_path / "mine.jsonl"
    prompts.write_text('{"prompt": "ok"}\n{"messages": [{"role": "user"}]}\n')
    line = _one_line(capsys, ["--simulate", "kimi-k3", "--prompts", str(prompts)])
    assert f"{prompts}:2: messages[0].content: missing" in line


def test_cli_entry_point_dispatches(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "specguard", "evaluate", "--simulate", "nope"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 2
    expected = (
        "--simulate: unknown profile 'nope'; profiles are kimi-k3, deepseek-v4, "
        "kimi-k3-published, kimi-k3-tails"
    )
    assert proc.stderr.strip() == f"specguard evaluate: {expected}"


def test_endpoint_that_dies_mid_sweep(
    sims: tuple[SimProcess, SimProcess], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    _, base = sims
    dying = ["m", "--served-model-name", "served", "--profile", "kimi-k3", "--time-scale", "0.2"]
    with start_sim([*dying, "--speculative-config", DRAFTER, "--fail-after", "0"]) as spec:
        argv = ["--with-drafter", spec.url, "--without-drafter", base.url, "--requests", "12"]
        code = main([*argv, "--concurrency", "1", "--subsets", "chat", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    errors = [line for line in err.splitlines() if line.startswith("specguard evaluate: ")]
    assert len(errors) == 1
    assert f"--with-drafter {spec.url}: 10 requests failed in a row (HTTP 500" in errors[0]


def test_failed_request_text_never_echoes_the_request() -> None:
    # FastAPI/vLLM validation errors echo the request body (the prompt) under "input".
    secret = "my customer's order A-1234"
    body = json.dumps(
        {"detail": [{"loc": ["body", "max_tokens"], "msg": "must be > 0", "input": secret}]}
    )
    assert error_text(422, "Unprocessable Entity", body) == "HTTP 422: body.max_tokens: must be > 0"
    openai = json.dumps({"error": {"message": "The model `x` does not exist.", "code": 404}})
    assert error_text(404, "Not Found", openai) == "HTTP 404: The model `x` does not exist."
    assert error_text(502, "Bad Gateway", f"<html>{secret}</html>") == "HTTP 502 Bad Gateway"
    assert error_text(500, None, json.dumps({"echo": secret})) == "HTTP 500"


def test_simulate_offers_every_profile_and_starts_its_simulators() -> None:
    from specguard.evaluate import _command, _simulate

    assert "kimi-k3-published" in _command.build_parser().format_help()
    prof = _simulate.profile("kimi-k3-published")
    config = _simulate.drafter_config(prof, None)
    assert (config["method"], config["num_speculative_tokens"]) == ("dspark", 8)
    with _simulate.simulators(prof, {"speculative": config}, 1, 1.0, 0) as targets:
        metrics = read_metrics(targets["speculative"].url)
    # the simulator runs the profile's drafter: its spec-decode counters are there
    assert sample_value(metrics, "vllm:spec_decode_num_drafts_total") == 0
