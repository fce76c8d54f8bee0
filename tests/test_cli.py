"""The `specguard` command and the one argument-parser style of its subcommands.

The subcommands are listed here by hand, not taken from ``specguard.cli.COMMANDS`` (the table
the help is built from): a command missing from the help, or one added without a test, fails.
"""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import cast

import pytest

from specguard import __version__
from specguard.cli import main

# name -> "module:function" that builds its parser
SUBCOMMANDS = {
    "render": "specguard.commands.render:build_parser",
    "crd": "specguard.commands.crd:build_parser",
    "sim": "specguard.sim._options:build_parser",
    "router": "specguard.router._command:build_parser",
    "judge": "specguard.commands.judge:build_parser",
    "evaluate": "specguard.evaluate._command:build_parser",
    "run": "specguard.controller._command:build_parser",
    "demo": "specguard.demo._command:build_parser",
}

# name -> (a bad command line, the flag its one-line error must name)
BAD_FLAGS = {
    "render": (["--mode", "sideways", "x.yaml"], "--mode"),
    "crd": (["--kube-version", "one"], "--kube-version"),
    "sim": (["--seed", "many"], "--seed"),
    "router": (["--port", "http"], "--port"),
    "judge": (["x.jsonl", "--tolerance", "wide"], "--tolerance"),
    "evaluate": (["--requests", "lots"], "--requests"),
    "run": (["--metrics-port", "nine"], "--metrics-port"),
    "demo": (["--window", "ten"], "--window"),
}

# The simulator passes unknown flags on as vLLM's (ignored with a warning), so an unknown flag
# is not an error there; every other command refuses it.
TAKES_UNKNOWN_FLAGS = {"sim"}


def _parser(name: str) -> argparse.ArgumentParser:
    module, _, function = SUBCOMMANDS[name].partition(":")
    build = cast(
        Callable[[], argparse.ArgumentParser], getattr(importlib.import_module(module), function)
    )
    return build()


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of ``specguard ARGV`` run in this process."""
    try:
        code = main(argv)
    except SystemExit as exit_:  # --help and --version exit from inside argparse
        code = exit_.code if isinstance(exit_.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


def _listed_commands(help_text: str) -> set[str]:
    lines = help_text.splitlines()
    start = lines.index("commands:") + 1
    return {line.split()[0] for line in lines[start:] if line.startswith("  ") and line.strip()}


def test_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(["--help"], capsys)
    assert code == 0
    assert _listed_commands(out) == set(SUBCOMMANDS)


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(["--version"], capsys)[:2] == (0, f"{__version__}\n")


def test_unknown_command_exits_2() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "specguard", "no-such-command"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "unknown command 'no-such-command'" in proc.stderr


@pytest.mark.parametrize("name", sorted(SUBCOMMANDS))
def test_subcommand_help(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run([name, "--help"], capsys)
    assert code == 0, err
    assert out.startswith(f"usage: specguard {name} ")
    assert "--version" in out
    assert "`" not in out, "reST markup in the help"


@pytest.mark.parametrize("name", sorted(SUBCOMMANDS))
def test_subcommand_version(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert _run([name, "--version"], capsys)[:2] == (0, f"specguard {name} {__version__}\n")


@pytest.mark.parametrize("name", sorted(SUBCOMMANDS))
def test_bad_flag_value_is_one_line_naming_the_flag(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv, flag = BAD_FLAGS[name]
    code, out, err = _run([name, *argv], capsys)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1, err
    assert err.startswith(f"specguard {name}: ") and f"{flag}:" in err, err


@pytest.mark.parametrize("name", sorted(set(SUBCOMMANDS) - TAKES_UNKNOWN_FLAGS))
def test_unknown_flag_is_one_line(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run([name, "--no-such-flag", "x"], capsys)
    assert code == 2
    assert err.count("\n") == 1, err
    assert err.startswith(f"specguard {name}: ") and "--no-such-flag" in err, err


def test_every_command_module_has_a_parser_test() -> None:
    # COMMANDS may only grow together with SUBCOMMANDS above (and BAD_FLAGS).
    from specguard.cli import COMMANDS

    assert set(COMMANDS) == set(SUBCOMMANDS) == set(BAD_FLAGS)


# Flags without a help text, by command: the help texts of these commands are being written
# on other branches (sim, router, evaluate); strict, so the marks must go once they are in.
_HELP_PENDING: set[str] = set()


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(n, marks=pytest.mark.xfail(strict=True, reason="help texts pending"))
        if n in _HELP_PENDING
        else n
        for n in sorted(SUBCOMMANDS)
    ],
)
def test_every_flag_has_help_and_shows_its_default(name: str) -> None:
    parser = _parser(name)
    formatter = parser.formatter_class(prog=parser.prog)
    problems = []
    for action in parser._actions:
        if not action.option_strings or action.help == argparse.SUPPRESS:
            continue
        flag = action.option_strings[-1]
        if not (action.help or "").strip():
            problems.append(f"{flag}: no help")
            continue
        shown = formatter._expand_help(action)
        if action.default not in (None, False, [], argparse.SUPPRESS) and (
            "default" not in shown.lower()
        ):
            problems.append(f"{flag}: default {action.default!r} not shown")
    assert problems == []


def test_render_reads_standard_input() -> None:
    example = Path(__file__).resolve().parents[1] / "examples" / "ngram-tp1.yaml"

    def render(argv: list[str], stdin: str | None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "specguard", "render", *argv],
            input=stdin, capture_output=True, text=True, check=False, timeout=120,
        )  # fmt: skip

    from_stdin = render(["-"], example.read_text(encoding="utf-8"))
    from_file = render([str(example)], None)
    assert from_stdin.returncode == 0, from_stdin.stderr
    assert "kind: Deployment" in from_stdin.stdout
    assert from_stdin.stdout == from_file.stdout


def test_missing_extra_is_one_line_naming_it() -> None:
    # matplotlib and rich come with the `evaluate` extra; without them `evaluate` says so.
    code = (
        "import sys; sys.modules['matplotlib'] = None; sys.modules['rich'] = None\n"
        "from specguard.cli import main; raise SystemExit(main(['evaluate', '--help']))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=120
    )
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert "pip install 'specguard[evaluate]'" in proc.stderr


def test_demo_without_the_testkit_is_one_line_naming_it() -> None:
    # The operator's wheel and image leave the test rig (testkit/, specguard-testkit) out:
    # there `specguard demo` says what to install, one line and exit 2, no traceback, and
    # every other command still runs.
    blocker = "import sys; sys.modules['specguard_testkit'] = None\n"

    def specguard(*argv: str) -> subprocess.CompletedProcess[str]:
        code = blocker + f"from specguard.cli import main; raise SystemExit(main({list(argv)!r}))"
        return subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=120
        )

    for argv in (["demo"], ["demo", "--help"], ["demo", "--keep"]):
        proc = specguard(*argv)
        assert proc.returncode == 2, proc.stderr
        assert proc.stdout == ""
        assert proc.stderr == (
            "specguard demo: needs specguard-testkit (the local control plane and process "
            "kubelet the demo runs on): pip install -e ./testkit (in a checkout of specguard; "
            "scripts/setup.sh does)\n"
        )
    for name in SUBCOMMANDS.keys() - {"demo"}:
        proc = specguard(name, "--help")
        assert proc.returncode == 0, f"{name}: {proc.stderr}"
        assert "usage:" in proc.stdout
