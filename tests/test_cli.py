import subprocess
import sys

from specguard.cli import COMMANDS, main


def test_help_lists_every_command(capsys: object) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out  # type: ignore[attr-defined]
    for name in COMMANDS:
        assert name in out


def test_unknown_command_exits_2() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "specguard", "no-such-command"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert "unknown command 'no-such-command'" in proc.stderr


def test_every_command_loads_and_answers_help() -> None:
    for name in COMMANDS:
        proc = subprocess.run(
            [sys.executable, "-m", "specguard", name, "--help"],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        assert proc.returncode == 0, (name, proc.stderr[-2000:])
        assert "usage" in proc.stdout.lower(), name
