"""The per-request sample record: the one schema the router writes, the judge reads,
`specguard judge` loads from JSONL and `specguard evaluate` produces.

One JSON object per line (see docs/samples.md). Field names are stable; new optional
fields may be added, unknown fields are ignored when reading so old readers keep working.

No field ever holds prompt or completion text.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal, TextIO

from specguard._arms import ARMS, ROLES, Arm, Role

SCHEMA_VERSION = 1
# Bounds on one JSONL line: a record is a few hundred characters and nested one level.
MAX_LINE = 65_536
MAX_BRACKETS = 64
# Whole-number fields (tokens, concurrency, status) above this are not measurements.
MAX_WHOLE = 2**53

# How the per-token figure was obtained:
#   stream_usage  - streamed with usage stats: token counts are exact
#   stream_chunks - streamed without usage: one chunk counted as one token (a lower bound
#                   on tokens, so TPOT is an upper bound when a drafter packs chunks)
#   non_stream    - no stream: only e2e latency and usage; no TTFT, TPOT is e2e/(tokens)
#   unknown       - the record does not say (no ``measurement`` field): it may be any of the
#                   above, so it is treated as inexact (never judged regressed)
Measurement = Literal["stream_usage", "stream_chunks", "non_stream", "unknown"]

MEASUREMENTS: tuple[Measurement, ...] = ("stream_usage", "stream_chunks", "non_stream", "unknown")
# What a record without the ``measurement`` field is read as (and the Sample's default).
MEASUREMENT_ABSENT: Measurement = "unknown"

# What a response to a request with tools carried (specguard.toolcalls.RESULTS).
ToolCall = Literal[
    "none", "valid", "empty", "invalid_json", "unknown_tool", "invalid_schema", "unchecked"
]
TOOL_CALLS: tuple[ToolCall, ...] = (
    "none", "valid", "empty", "invalid_json", "unknown_tool", "invalid_schema", "unchecked"
)  # fmt: skip
# The results that are a broken tool call.
INVALID_TOOL_CALLS: frozenset[str] = frozenset(
    {"empty", "invalid_json", "unknown_tool", "invalid_schema"}
)


class SampleError(ValueError):
    """A sample record that does not follow the schema; the message names the field."""


@dataclass(frozen=True, slots=True)
class Sample:
    """One request's measurement on one arm.

    Times are seconds. ``tpot_s`` is (t_last_token - t_first_token) / (output_tokens - 1),
    per token, never per chunk; None when fewer than two tokens came back.
    ``chunk_tpot_s`` is the median over chunks of (gap to previous chunk / tokens in the
    chunk), known only when the stream carried continuous usage stats.
    ``concurrency`` is the in-flight requests on that pod when this one started
    (this one included). ``measurement`` is ``unknown`` unless said, in a record as in code
    (:data:`MEASUREMENT_ABSENT`): a figure whose kind is not known is never judged regressed.
    ``tool_call``: for a request that carried tools, what came back (``specguard.toolcalls``:
    valid, none, or how the call was broken); None otherwise.
    """

    arm: Arm
    role: Role
    pod: str
    domain: str
    started_at: float
    concurrency: int
    output_tokens: int
    e2e_s: float
    ttft_s: float | None = None
    tpot_s: float | None = None
    chunk_tpot_s: float | None = None
    measurement: Measurement = MEASUREMENT_ABSENT
    status: int = 200
    pair_id: str | None = None
    prompt_tokens: int | None = None
    tool_call: ToolCall | None = None

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def to_dict(self) -> dict[str, Any]:
        return {"v": SCHEMA_VERSION, **asdict(self)}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"), allow_nan=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Sample:
        return _parse(data)


def _require(data: Mapping[str, Any], name: str) -> Any:
    if name not in data or data[name] is None:
        raise SampleError(f"{name}: required field is missing")
    return data[name]


def _number(data: Mapping[str, Any], name: str, *, optional: bool) -> float | None:
    value = data.get(name)
    if value is None:
        if optional:
            return None
        raise SampleError(f"{name}: required field is missing")
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SampleError(f"{name}: expected a number, got {type(value).__name__}")
    try:
        number = float(value)
    except OverflowError:
        raise SampleError(
            f"{name}: expected a finite number >= 0, got a {_digits(value)}"
        ) from None
    if not math.isfinite(number) or number < 0:
        raise SampleError(f"{name}: expected a finite number >= 0, got {value!r}")
    return number


def _integer(data: Mapping[str, Any], name: str, default: int | None = None) -> int:
    value = data.get(name, default)
    if value is None:
        raise SampleError(f"{name}: required field is missing")
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise SampleError(f"{name}: expected a whole number >= 0, got {_short(value)}")
    if value > MAX_WHOLE:
        raise SampleError(f"{name}: expected a whole number <= {MAX_WHOLE}, got a {_digits(value)}")
    return int(value)


def _digits(value: Any) -> str:
    return f"{len(str(abs(value)))}-digit number" if isinstance(value, int) else "number"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _choice(
    data: Mapping[str, Any], name: str, allowed: tuple[str, ...], default: str | None = None
) -> Any:
    value = data.get(name, default)
    if value not in allowed:
        raise SampleError(f"{name}: expected one of {', '.join(allowed)}, got {_short(value)}")
    return value


def _parse(data: Mapping[str, Any]) -> Sample:
    if not isinstance(data, Mapping):
        raise SampleError(f"record: expected a JSON object, got {type(data).__name__}")
    version = data.get("v", SCHEMA_VERSION)
    if isinstance(version, bool) or not isinstance(version, int) or version != SCHEMA_VERSION:
        raise SampleError(
            f"v: unsupported schema version {_short(version)} (this reader knows {SCHEMA_VERSION})"
        )
    pod = _require(data, "pod")
    domain = _require(data, "domain")
    for name, value in (("pod", pod), ("domain", domain)):
        if not isinstance(value, str):
            raise SampleError(f"{name}: expected a string, got {type(value).__name__}")
    pair_id = data.get("pair_id")
    if pair_id is not None and not isinstance(pair_id, str):
        raise SampleError(f"pair_id: expected a string or null, got {type(pair_id).__name__}")
    prompt_tokens = data.get("prompt_tokens")
    tool_call = data.get("tool_call")
    return Sample(
        arm=_choice(data, "arm", ARMS),
        role=_choice(data, "role", ROLES),
        pod=pod,
        domain=domain,
        started_at=_number(data, "started_at", optional=False) or 0.0,
        concurrency=_integer(data, "concurrency"),
        output_tokens=_integer(data, "output_tokens"),
        e2e_s=_number(data, "e2e_s", optional=False) or 0.0,
        ttft_s=_number(data, "ttft_s", optional=True),
        tpot_s=_number(data, "tpot_s", optional=True),
        chunk_tpot_s=_number(data, "chunk_tpot_s", optional=True),
        measurement=_choice(data, "measurement", MEASUREMENTS, MEASUREMENT_ABSENT),
        status=_integer(data, "status", 200),
        pair_id=pair_id,
        prompt_tokens=None if prompt_tokens is None else _integer(data, "prompt_tokens"),
        tool_call=None if tool_call is None else _choice(data, "tool_call", TOOL_CALLS),
    )


def parse_lines(lines: Iterable[str]) -> Iterator[Sample]:
    """Samples from JSONL text; a bad line raises SampleError naming its line number.
    Lines longer than :data:`MAX_LINE` characters, numbers of thousands of digits and deep
    nesting are refused as bad lines (no record needs them)."""
    for number, line in enumerate(lines, start=1):
        if len(line) > MAX_LINE:
            raise SampleError(f"line {number}: longer than {MAX_LINE} characters")
        text = line.strip()
        if not text:
            continue
        if text.count("[") + text.count("{") > MAX_BRACKETS:
            raise SampleError(f"line {number}: not a sample record (nested too deeply)")
        try:
            yield _parse(json.loads(text))
        except json.JSONDecodeError as exc:
            raise SampleError(f"line {number}: not JSON ({exc.msg})") from exc
        except SampleError as exc:
            raise SampleError(f"line {number}: {exc}") from exc
        except (ValueError, RecursionError) as exc:
            # int() refuses numbers of more than 4300 digits; deep nesting overflows the stack
            raise SampleError(f"line {number}: not a sample record ({type(exc).__name__})") from exc


def read_lines(handle: TextIO) -> Iterator[str]:
    """The lines of a text stream, each read with a bound, so a file without newlines cannot
    take memory in proportion to its size: an over-long line is returned cut at
    ``MAX_LINE + 1`` characters, which :func:`parse_lines` refuses."""
    while True:
        line = handle.readline(MAX_LINE + 1)
        if not line:
            return
        if len(line) > MAX_LINE:
            yield line
            return
        yield line


def tpot(first_token_at: float, last_token_at: float, tokens: int) -> float | None:
    """Per-token latency of one request: the decode time spread over the tokens after the first."""
    if tokens < 2:
        return None
    return max(last_token_at - first_token_at, 0.0) / (tokens - 1)


__all__ = [
    "ARMS",
    "INVALID_TOOL_CALLS",
    "MEASUREMENTS",
    "MEASUREMENT_ABSENT",
    "ROLES",
    "SCHEMA_VERSION",
    "TOOL_CALLS",
    "Arm",
    "Measurement",
    "Role",
    "Sample",
    "SampleError",
    "ToolCall",
    "parse_lines",
    "read_lines",
    "tpot",
]
