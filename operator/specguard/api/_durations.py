"""Durations as the resource spells them ("60s", "30m", "6h", "1h30m") and as seconds.

The wire form is a subset of Go's duration syntax (whole hours, minutes and seconds, in
that order), so Kubernetes CEL's ``duration()`` reads the same strings the operator does.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Final

from pydantic import BeforeValidator, GetCoreSchemaHandler, PlainSerializer, WithJsonSchema
from pydantic_core import core_schema

DURATION_PATTERN: Final = r"^([0-9]+h)?([0-9]+m)?([0-9]+s)?$"
_DURATION_RE: Final = re.compile(DURATION_PATTERN)
MAX_DURATION_LENGTH: Final = 32


def parse_duration(text: str) -> int:
    """Seconds in ``text``; ValueError naming the accepted form otherwise."""
    # No stripping: the CRD's pattern refuses " 60s", so Python must refuse it too.
    if len(text) > MAX_DURATION_LENGTH:
        raise ValueError(
            f"invalid duration of {len(text)} characters: at most {MAX_DURATION_LENGTH}, "
            "like '60s', '30m', '6h' or '1h30m'"
        )
    match = _DURATION_RE.fullmatch(text) if text else None
    if match is None:
        raise ValueError(
            f"invalid duration {text!r}: use whole hours, minutes and seconds like "
            "'60s', '30m', '6h' or '1h30m'"
        )
    hours, minutes, seconds = (int(group[:-1]) if group else 0 for group in match.groups())
    return hours * 3600 + minutes * 60 + seconds


def format_duration(seconds: int) -> str:
    """The shortest wire form of ``seconds``: 90 -> "1m30s", 3600 -> "1h", 0 -> "0s"."""
    if seconds < 0:
        raise ValueError(f"negative duration: {seconds}")
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    text = "".join(
        f"{value}{unit}" for value, unit in ((hours, "h"), (minutes, "m"), (secs, "s")) if value
    )
    return text or "0s"


class Seconds(int):
    """A duration already in seconds, for defaults and Python callers; input read from YAML or
    JSON never has this type, so a bare number there is still refused."""

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: type[Any], handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        # Lets pydantic write a default of this type into the JSON schema (as seconds).
        return core_schema.no_info_after_validator_function(cls, core_schema.int_schema())


def _coerce(value: Any) -> int:
    # Wire input must be a string, as the CRD's schema demands: a bare YAML number
    # (window: 60) passing here but refused by the apiserver would make the two disagree.
    if isinstance(value, Seconds):
        if value < 0:
            raise ValueError(f"negative duration: {int(value)}")
        return int(value)
    if isinstance(value, str):
        return parse_duration(value)
    raise ValueError(
        f"a duration is a string like '60s' or '30m', got {type(value).__name__} {value!r}"
    )


# A field holding a duration: seconds (int) in Python, a duration string on the wire.
Duration = Annotated[
    int,
    BeforeValidator(_coerce),
    PlainSerializer(format_duration, return_type=str, when_used="unless-none"),
    WithJsonSchema(
        {
            "type": "string",
            "pattern": DURATION_PATTERN,
            "minLength": 2,
            "maxLength": MAX_DURATION_LENGTH,
        }
    ),
]
