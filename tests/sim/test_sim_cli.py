"""`specguard sim` command line: vLLM's flags, its --speculative-config checks, exit 2."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from specguard.sim._launch import start_sim
from specguard.sim._options import OptionError, build_parser, parse_options
from specguard.sim._specconfig import SpecConfigError, parse_spec_config


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specguard", "sim", *args],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("config", "needle"),
    [
        ("{not json", "invalid JSON"),
        ('["dspark"]', "must be a JSON object"),
        ('{"method": "medusa", "model": "m"}', "no longer supported"),
        ('{"method": "warp", "model": "m"}', "unknown speculative method 'warp'"),
        ('{"method": "dspark", "model": "m", "num_speculative_tokens": 0}', "must be > 0"),
        ('{"method": "dspark", "model": "m", "num_speculative_tokens": "8"}', "valid integer"),
        ('{"method": "eagle3", "model": "m", "num_speculative_tokens": 3, '
         '"enable_adaptive_verification": true}', "only supported with method 'dspark'"),
        ('{"method": "dspark", "num_speculative_tokens": 3}', "draft model is required"),
        ('{"method": "ngram"}', "num_speculative_tokens: required"),
        ('{"method": "dspark", "model": "m", "num_speculative_tokens": 3, "bogus": 1}',
         "bogus: Extra inputs are not permitted"),
        # removed from vLLM (a no-op since v0.10): per-batch-size k=0 is what is left
        ('{"method": "dspark", "model": "m", "num_speculative_tokens": 3, '
         '"disable_by_batch_size": 8}', "disable_by_batch_size: Extra inputs are not permitted"),
        ('{"method": "dspark", "model": "m", "num_speculative_tokens": 4, '
         '"num_speculative_tokens_per_batch_size": [[2, 8, 4]]}', "must start at 1"),
        ('{"method": "dspark", "model": "m", "num_speculative_tokens": 4, '
         '"num_speculative_tokens_per_batch_size": [[1, 8, 4], [8, 16, 2]]}', "overlaps"),
        ('{"method": "dspark", "model": "m", "num_speculative_tokens": 4, '
         '"num_speculative_tokens_per_batch_size": [[1, 8, 5]]}', "between 0 and"),
        ('{"method": "dspark", "model": "m", "num_speculative_tokens": 4, '
         '"num_speculative_tokens_per_batch_size": [[1, 8]]}', "[start, end, k]"),
    ],
)  # fmt: skip
def test_bad_speculative_config_is_refused(config: str, needle: str) -> None:
    with pytest.raises(SpecConfigError, match=None) as info:
        parse_spec_config(config, default_k=8)
    assert needle in str(info.value)


def test_bad_speculative_config_exits_2_with_one_line() -> None:
    proc = _run("m", "--speculative-config", '{"method": "dspark", "model": "m", '
                '"num_speculative_tokens": -1}')  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "specguard sim: --speculative-config: num_speculative_tokens: must be > 0, got -1"
    ]
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--custom-histogram-buckets", "[0.1, 0.05]"], "strictly increasing"),
        (["--custom-histogram-buckets", '{"ttft": [1]}'], "unknown histogram family"),
        (["--custom-histogram-buckets", "nope"], "invalid JSON"),
        (["--profile", "gpt-9"], "--profile: unknown profile 'gpt-9'"),
        (["--time-scale", "0"], "--time-scale"),
        (["--error-rate", "1.5"], "--error-rate"),
        (["--max-num-seqs", "0"], "--max-num-seqs"),
        (["--max-model-len", "0"], "--max-model-len"),
        (["--startup-delay", "nan"], "--startup-delay"),
        (["--seed", "x"], "argument --seed: invalid int value"),
        (["--block-size", "0"], "--block-size: must be >= 1"),
        (["--max-model-len", "4096", "--num-gpu-blocks-override", "100"],
         "--num-gpu-blocks-override: 100 blocks of 16 tokens hold 1600 tokens, fewer than"),
        (["-tp", "2", "--speculative-config",
          '{"method": "dspark", "model": "m", "draft_tensor_parallel_size": 4}'],
         "draft_tensor_parallel_size must be 1 or"),
    ],
)  # fmt: skip
def test_bad_flags_name_the_flag(args: list[str], needle: str) -> None:
    with pytest.raises(OptionError) as info:
        parse_options(["m", *args])
    assert needle in str(info.value)


def test_every_profile_is_offered_and_chosen_by_name() -> None:
    assert "kimi-k3-published" in build_parser().format_help()
    options = parse_options(["--profile", "kimi-k3-published"])
    assert (options.profile.name, options.model) == ("kimi-k3-published", "moonshotai/Kimi-K3")
    spec = parse_options(["--profile", "kimi-k3-published", "--spec-model", "org/dspark"]).spec
    assert spec is not None and spec.num_speculative_tokens == 8  # the profile's k


def test_bad_flag_exit_code_is_2() -> None:
    proc = _run("--custom-histogram-buckets", "[0.5, 0.1]")
    assert proc.returncode == 2
    assert "--custom-histogram-buckets" in proc.stderr
    typo = _run("--seed", "x")
    assert typo.returncode == 2
    assert typo.stderr.strip().splitlines() == [
        "specguard sim: argument --seed: invalid int value: 'x'"
    ]


def test_vllm_flags_and_model_forms() -> None:
    o = parse_options(["--model", "org/m", "--served-model-name", "a", "b", "-tp", "4",
                       "--max-num-seqs", "32", "--port", "9000"])  # fmt: skip
    assert (o.model, o.served_model_names, o.tensor_parallel_size) == ("org/m", ("a", "b"), 4)
    assert (o.max_num_seqs, o.port, o.spec) == (32, 9000, None)
    positional = parse_options(["org/m"])
    assert positional.served_model_name == "org/m"
    spec = parse_options(["org/m", "-sc", json.dumps({"model": "org/m-dspark"})]).spec
    assert spec is not None
    assert (spec.method, spec.num_speculative_tokens) == ("dspark", 8)  # inferred; profile k


def test_per_batch_size_ranges_pick_k() -> None:
    spec = parse_spec_config(json.dumps({
        "method": "dspark", "model": "m", "num_speculative_tokens": 6,
        "num_speculative_tokens_per_batch_size": [[1, 4, 6], [5, 32, 3], [33, 64, 0]],
    }), default_k=8)  # fmt: skip
    assert [spec.k_for_batch(b) for b in (1, 4, 5, 32, 33, 64, 500)] == [6, 6, 3, 3, 0, 0, 0]


def test_unknown_vllm_flags_are_accepted_with_a_warning() -> None:
    args = ["org/m", "--gpu-memory-utilization", "0.9", "--enforce-eager",
            "--trust-remote-code", "--time-scale", "0.01"]  # fmt: skip
    with start_sim(args) as sim:
        assert sim.alive()
        log = sim.log_tail()
    assert "ignoring vLLM arguments" in log
    assert "--gpu-memory-utilization" in log


def test_stop_leaves_no_process_behind() -> None:
    sim = start_sim(["--time-scale", "0.01"])
    pid = sim.pid
    assert sim.stop() == 0  # SIGTERM: clean exit
    with pytest.raises(ProcessLookupError):
        import os

        os.kill(pid, 0)


def test_spec_shorthand_flags() -> None:
    spec = parse_options(["m", "--spec-method", "dspark", "--spec-model", "org/d",
                          "--spec-tokens", "5"]).spec  # fmt: skip
    assert spec is not None
    assert (spec.method, spec.model, spec.num_speculative_tokens) == ("dspark", "org/d", 5)
    with pytest.raises(OptionError, match="--spec-tokens: clashes"):
        parse_options(
            ["m", "--spec-tokens", "5", "-sc", '{"model": "d", "num_speculative_tokens": 3}']
        )


def test_underscore_flag_spelling_like_vllm() -> None:
    o = parse_options(["m", "--max_num_seqs", "8", "--served_model_name=x", "--time_scale", "0.5"])
    assert (o.max_num_seqs, o.served_model_names, o.time_scale) == (8, ("x",), 0.5)


@pytest.mark.parametrize(
    ("args", "model", "unknown"),
    [
        # an unknown flag's value is its own, not the positional model's
        (["--dtype", "auto", "Qwen/x"], "Qwen/x", ("--dtype", "auto")),
        (["Qwen/x", "--dtype", "auto"], "Qwen/x", ("--dtype", "auto")),
        (["--dtype=auto", "Qwen/x"], "Qwen/x", ("--dtype=auto",)),
        # a known vLLM boolean flag takes no value
        (["--enforce-eager", "Qwen/x"], "Qwen/x", ("--enforce-eager",)),
        (["--dtype", "auto", "--enforce-eager", "Qwen/x"], "Qwen/x",
         ("--dtype", "auto", "--enforce-eager")),
        (["--no-enable-prefix-caching", "Qwen/x"], "Qwen/x", ("--no-enable-prefix-caching",)),
        # an unknown boolean flag before the model: the model is the last value taken
        (["--some-new-bool", "Qwen/x"], "Qwen/x", ("--some-new-bool",)),
        (["--model", "Qwen/x", "--dtype", "auto"], "Qwen/x", ("--dtype", "auto")),
        (["--model", "Qwen/x", "--some-new-bool"], "Qwen/x", ("--some-new-bool",)),
        (["Qwen/x", "--swap-space", "-1", "--seed", "3"], "Qwen/x", ("--swap-space", "-1")),
        (["Qwen/x", "stray"], "Qwen/x", ("stray",)),
    ],
)  # fmt: skip
def test_positional_model_next_to_unknown_flags(
    args: list[str], model: str, unknown: tuple[str, ...]
) -> None:
    o = parse_options(args)
    assert (o.model, o.unknown) == (model, unknown)


@pytest.mark.parametrize(
    ("typo", "meant"),
    [
        ("--eror-rate", "--error-rate"),
        ("--time-scael", "--time-scale"),
        ("--fault-drop-drafer", "--fault-drop-drafter"),
        ("--startup_dealy", "--startup-delay"),
    ],
)
def test_near_miss_of_a_simulator_flag_is_refused_naming_the_flag(typo: str, meant: str) -> None:
    with pytest.raises(OptionError, match=f"did you mean {meant}"):
        parse_options([typo, "0.5"])


def test_near_miss_exits_2_with_one_line_while_real_vllm_flags_pass() -> None:
    result = _run("--eror-rate", "0.5")
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "specguard sim: --eror-rate: unknown flag; did you mean --error-rate?"
    )
    # vLLM flags the simulator does not model, some of them near its own vLLM flags
    options = parse_options(
        ["m", "--max-num-batched-tokens", "8192", "--seed-offset", "1", "--profiler-config", "x"]
    )
    assert "--max-num-batched-tokens" in options.unknown and "--profiler-config" in options.unknown


def test_help_gives_every_flag_a_help_text() -> None:
    result = _run("--help")
    assert result.returncode == 0
    assert "MODEL_FLAG" not in result.stdout
    from specguard.sim._options import build_parser

    parser = build_parser()
    silent = [
        a.option_strings[0]
        for a in parser._actions
        if a.option_strings and not a.help and a.dest != "help"
    ]
    assert silent == []
    for flag in ("--fault-drop-drafter", "--fault-accept-nothing"):
        assert flag in result.stdout


@pytest.mark.parametrize(
    "flag", ["--fault-drop-drafter", "--fault-accept-nothing", "--fault-ignore-schedule"]
)
def test_drafter_faults_need_a_drafter(flag: str) -> None:
    with pytest.raises(OptionError, match=f"{flag}: needs a drafter"):
        parse_options([flag])
    spec = json.dumps({"method": "dspark", "model": "m", "num_speculative_tokens": 4,
                       "num_speculative_tokens_per_batch_size": [[1, 2, 4], [3, 64, 0]]})
    options = parse_options([flag, "--speculative-config", spec])
    assert options.spec is not None
    assert (options.served_spec is None) == (flag == "--fault-drop-drafter")


def test_an_ignored_schedule_needs_a_schedule() -> None:
    spec = json.dumps({"method": "dspark", "model": "m", "num_speculative_tokens": 4})
    with pytest.raises(OptionError, match=r"^--fault-ignore-schedule: needs "
                       r"num_speculative_tokens_per_batch_size"):  # fmt: skip
        parse_options(["--fault-ignore-schedule", "--speculative-config", spec])


def test_an_acceptance_spread_does_not_go_with_a_synthetic_acceptance_length() -> None:
    spec = {"method": "dspark", "model": "m", "num_speculative_tokens": 4}
    synthetic = json.dumps({**spec, "rejection_sample_method": "synthetic",
                            "synthetic_acceptance_length": 2.5})  # fmt: skip
    with pytest.raises(OptionError, match=r"^--acceptance-spread: cannot go with a synthetic"):
        parse_options(["--acceptance-spread", "1", "--speculative-config", synthetic])
    assert parse_options(["--speculative-config", synthetic]).spec is not None
    assert parse_options(["--acceptance-spread", "1", "--speculative-config",
                          json.dumps(spec)]).profile is not None  # fmt: skip


def test_an_ignored_schedule_keeps_k_at_every_batch_size() -> None:
    spec = json.dumps({"method": "dspark", "model": "m", "num_speculative_tokens": 4,
                       "num_speculative_tokens_per_batch_size": [[1, 2, 4], [3, 64, 0]]})
    kept = parse_options(["--speculative-config", spec]).served_spec
    ignored = parse_options(["--fault-ignore-schedule", "--speculative-config", spec])
    assert kept is not None and kept.k_for_batch(8) == 0
    assert ignored.spec is not None and ignored.spec.k_for_batch(8) == 0  # still checked
    assert ignored.served_spec is not None and ignored.served_spec.k_for_batch(8) == 4


def test_a_dropped_drafter_is_still_checked_as_vllm_checks_it() -> None:
    with pytest.raises(OptionError, match="unknown speculative method"):
        parse_options(["--fault-drop-drafter", "--speculative-config", '{"method": "x"}'])
