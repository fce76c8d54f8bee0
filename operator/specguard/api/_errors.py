"""One error type that carries every problem found in a resource, each with its field path.

Every line is bounded: values are shown elided (:func:`shown`), and a problem's path and
message are cut to :data:`MAX_PATH` and :data:`MAX_MESSAGE` characters, so a 5 MB name
gives a short line, not a 5 MB one.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

from pydantic import ValidationError

MAX_VALUE: Final = 64  # characters of a value quoted in a message
MAX_PATH: Final = 200
MAX_MESSAGE: Final = 400
ELLIPSIS: Final = "…"


def elide(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, keeping the start and the end."""
    if len(text) <= limit:
        return text
    head = (limit - len(ELLIPSIS)) * 2 // 3
    tail = limit - len(ELLIPSIS) - head
    return text[:head] + ELLIPSIS + (text[-tail:] if tail else "")


def shown(value: Any, *, quote: bool = True, limit: int = MAX_VALUE) -> str:
    """A value as a message quotes it: repr for strings (``quote``), bounded in length.

    Never calls str() on a huge int (Python refuses past 4300 digits)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 200:
        sign = "-" if value < 0 else ""
        return f"{sign}an integer of about {int(value.bit_length() * 0.30103)} digits"
    if isinstance(value, str):
        text = repr(value) if quote else value
        # One line: control characters as escapes even unquoted.
        if not quote and not text.isprintable():
            text = repr(value)[1:-1]
        return elide(text, limit)
    if isinstance(value, dict | list):
        return f"a {'mapping' if isinstance(value, dict) else 'list'} of {len(value)}"
    return elide(repr(value), limit)


@dataclass(frozen=True, order=True)
class Problem:
    path: str  # e.g. "spec.drafter.adaptiveVerification" or "spec.runtime.env[2].name"
    message: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", elide(_one_line(self.path), MAX_PATH))
        object.__setattr__(self, "message", elide(_one_line(self.message), MAX_MESSAGE))

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


def _one_line(text: str) -> str:
    return text if text.isprintable() else repr(text)[1:-1]


class SpecError(ValueError):
    """A SpeculativeDeployment that cannot be used; ``problems`` lists all that is wrong."""

    def __init__(self, problems: Iterable[Problem]) -> None:
        self.problems: list[Problem] = list(problems)
        super().__init__("\n".join(str(problem) for problem in self.problems))


def join_path(prefix: str, loc: Iterable[int | str]) -> str:
    path = prefix
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            name = shown(part, quote=False)
            path = f"{path}.{name}" if path else name
    return path


# Pydantic's wording for the common cases, said the way a resource's author thinks of them.
_MESSAGES = {
    "missing": "required field is missing",
    "extra_forbidden": "unknown field",
}


def problems_from_pydantic(error: ValidationError, prefix: str) -> list[Problem]:
    problems = []
    for item in error.errors(include_url=False, include_input=False, include_context=False):
        # Union members and annotated validators add loc parts that are type names, not
        # fields (e.g. "function-after[...]", "int", "str"); keep only the real path.
        loc = [part for part in item["loc"] if isinstance(part, int) or _is_field(part)]
        message = _MESSAGES.get(item["type"], item["msg"])
        if item["type"] == "value_error":
            message = message.removeprefix("Value error, ")
        problems.append(Problem(join_path(prefix, loc), message))
    return sorted(set(problems))


def _is_field(part: str) -> bool:
    return not ("[" in part or part in {"int", "str", "float", "bool", "dict", "list"})
