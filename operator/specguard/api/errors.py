"""One error type that carries every problem found in a resource, each with its field path."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from pydantic import ValidationError


@dataclass(frozen=True, order=True)
class Problem:
    path: str  # e.g. "spec.drafter.adaptiveVerification" or "spec.runtime.env[2].name"
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


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
            path = f"{path}.{part}" if path else part
    return path


# Pydantic's wording for the common cases, said the way a resource's author thinks of them.
_MESSAGES = {
    "missing": "required field is missing",
    "extra_forbidden": "unknown field",
}


def problems_from_pydantic(error: ValidationError, prefix: str) -> list[Problem]:
    problems = []
    for item in error.errors(include_url=False):
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
