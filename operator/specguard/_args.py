"""The one argument-parser style of every ``specguard`` subcommand.

- A bad command line is one line naming the flag (``argument --seed: invalid int value:
  'x'``), raised as ``UsageError``; the command (or ``specguard.cli``, for one that lets it
  through) prints ``specguard NAME: <message>`` and exits 2.
- ``--help`` shows every flag's default (unless its help already says it) and plain text:
  the backquotes of reST literals and interpreted text in docstrings are left out.
- ``--version`` prints ``specguard NAME <version>``.

Validation after parsing raises the same ``UsageError``, with the flag first.
"""

from __future__ import annotations

import argparse
import re
from typing import NoReturn

from specguard import __version__

__all__ = ["ArgumentParser", "UsageError"]

_LITERAL = re.compile(r"``(.+?)``|`([^`]+)`")


class UsageError(ValueError):
    """Bad command line: one line that names the flag and the problem."""


def _plain(text: str) -> str:
    return _LITERAL.sub(lambda m: m[1] or m[2], text)


class _HelpFormatter(argparse.HelpFormatter):
    def _format_text(self, text: str) -> str:
        return super()._format_text(_plain(text))

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = _plain(action.help or "")
        default = action.default
        if (
            not action.option_strings
            or default is None
            or default is False
            or default == []
            or default is argparse.SUPPRESS
            or isinstance(action, argparse._VersionAction | argparse._HelpAction)
            or "default" in text.lower()
        ):
            return text
        return f"{text} (default: %(default)s)" if text else "(default: %(default)s)"


class ArgumentParser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` with one-line errors, shown defaults and ``--version``."""

    def __init__(
        self,
        prog: str,
        description: str | None = None,
        *,
        usage: str | None = None,
        epilog: str | None = None,
    ) -> None:
        super().__init__(
            prog=prog,
            usage=usage,
            description=description,
            epilog=epilog,
            formatter_class=_HelpFormatter,
        )
        self.add_argument(
            "--version", action="version", version=f"{prog} {__version__}",
            help="print the version and exit",
        )  # fmt: skip

    def error(self, message: str) -> NoReturn:
        # argparse's message names the flag; without the usage block it is one line.
        raise UsageError(message)
