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
        [sys.executable, "-m", "specguard", "no-such-command"], capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert "unknown command 'no-such-command'" in proc.stderr
