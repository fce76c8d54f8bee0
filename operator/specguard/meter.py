"""Per-request latency measurement from an OpenAI-compatible response, free of I/O (used
by the router and by `specguard evaluate`).

`StreamMeter` is fed the raw bytes of a server-sent-event stream as they arrive (split
anywhere) with the time each read completed, and at the end reports TTFT, output tokens and
per-token latency. `measure_json` does the same for a non-streamed JSON body. `to_sample`
turns either into the shared `Sample` record.

What counts as a token (vLLM's streaming format, see docs/router.md):

- When a chunk carries ``usage.completion_tokens`` alongside choices
  (``stream_options.continuous_usage_stats``), the tokens in that chunk are the increase of
  that running count. This is exact, even when a drafter packs several tokens in one chunk.
- Otherwise a chunk holds one token when it carries output: chat ``delta.content``,
  ``delta.reasoning_content``/``delta.reasoning``, ``delta.tool_calls``, or completion
  ``text``. The first chat chunk carries only ``delta.role`` and is not a token; nor is a
  chunk that only sets ``finish_reason``.
- The final usage chunk (``choices: []``, from ``include_usage``) only fixes the total.

The meter never keeps text: it parses each event, reads counts, and drops it. For a
request that carried tools, a :class:`specguard.toolcalls.ToolCallCheck` given to the meter
holds the tool-call arguments until the response ends and reports only whether they were
valid (``Measured.tool_call``).
"""

from __future__ import annotations

import json
import re
import statistics
from array import array
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from specguard.judge import Arm, Measurement, Role, Sample, tpot
from specguard.toolcalls import ToolCallCheck, ToolCallResult

# An event larger than this without its end is not a vLLM chunk; the meter stops parsing
# (the proxy still forwards the bytes) rather than buffer without bound.
MAX_LINE_BYTES = 1 << 20

# JSONDecoder.decode on str skips json.loads' bytes-encoding sniffing (hot path).
_DECODE = json.JSONDecoder().decode

_DOMAIN_RE = re.compile(r"[a-z0-9][a-z0-9_.-]{0,31}")


def sse_event_end(buffer: bytes, start: int = 0) -> int:
    """Index just past the blank line that ends the next server-sent event at or after
    ``start``, or -1 when the buffer holds no whole event yet (lines end in LF or CRLF)."""
    lf = buffer.find(b"\n\n", start)
    # With CRLF (or mixed) line ends a blank line follows "\n\r\n"; "\r\n\r\n" is one.
    crlf = buffer.find(b"\n\r\n", start, lf + 2 if lf >= 0 else len(buffer))
    if crlf >= 0:
        return crlf + 3
    return lf + 2 if lf >= 0 else -1


def sse_event_data(event: bytes) -> bytes | None:
    """The data of one server-sent event (its ``data:`` lines joined by LF), or None when
    it has none (comments, ``event:``/``id:``/``retry:`` lines carry no tokens)."""
    if event.startswith(b"data: "):  # the usual single-line event, fast
        nl = event.find(b"\n")
        if nl < 0:
            if not event.endswith(b"\r"):
                return event[6:]
        elif event[nl - 1] != 0x0D and not event[nl + 1 :].strip(b"\n"):
            return event[6:nl]
    lines = [line[:-1] if line.endswith(b"\r") else line for line in event.split(b"\n")]
    data = [line[5:] for line in lines if line.startswith(b"data:")]
    if not data:
        return None
    return b"\n".join(d[1:] if d.startswith(b" ") else d for d in data)


@dataclass(frozen=True, slots=True)
class Measured:
    """What one response told us. Times in seconds on the clock the caller used."""

    started_at: float
    e2e_s: float
    ttft_s: float | None
    output_tokens: int
    tpot_s: float | None
    chunk_tpot_s: float | None
    measurement: Measurement
    prompt_tokens: int | None
    usage_seen: bool
    # Chunks that carried at least one token.
    token_chunks: int
    # The stream ended with ``data: [DONE]`` (always True for a JSON body that parsed).
    complete: bool
    # The body carried an OpenAI-shaped ``error`` object (vLLM sends one mid-stream when
    # generation fails after the 200 status line went out).
    error_seen: bool
    # For a request with tools: what its tool calls were (specguard.toolcalls).
    tool_call: ToolCallResult | None = None


class StreamMeter:
    """Measures one SSE response. Feed bytes in arrival order, then call `finish`."""

    __slots__ = (
        "_broken",
        "_buffer",
        "_chunk_rates",
        "_continuous",
        "_done",
        "_error",
        "_first_token_at",
        "_last_token_at",
        "_prompt_tokens",
        "_running_tokens",
        "_started_at",
        "_token_chunks",
        "_tools",
        "_total_tokens",
    )

    def __init__(self, started_at: float, tools: ToolCallCheck | None = None) -> None:
        self._started_at = started_at
        self._tools = tools
        self._buffer = b""
        self._broken = False
        self._done = False
        self._error = False
        self._first_token_at: float | None = None
        self._last_token_at: float | None = None
        self._token_chunks = 0
        # Running completion_tokens seen on chunks with choices (continuous usage stats).
        self._running_tokens: int | None = None
        self._continuous = False
        # completion_tokens of the final usage chunk (include_usage).
        self._total_tokens: int | None = None
        self._prompt_tokens: int | None = None
        # 8 bytes a chunk (a list of floats costs ~4x that): 512 long streams stay small.
        self._chunk_rates = array("d")

    @property
    def done(self) -> bool:
        """``data: [DONE]`` has been seen."""
        return self._done

    def feed(self, data: bytes, now: float) -> None:
        """Take the next bytes of the stream, read at time ``now``."""
        if self._broken or not data:
            return
        buffer = self._buffer + data if self._buffer else data
        start = 0
        end = sse_event_end(buffer)
        while end >= 0:
            self._event(buffer[start:end], now)
            start = end
            end = sse_event_end(buffer, start)
        self._buffer = buffer[start:]
        if len(self._buffer) > MAX_LINE_BYTES:
            self._broken = True
            self._buffer = b""

    def finish(self, now: float) -> Measured:
        """The measurement, with ``now`` the time the response ended (or was cut off)."""
        if self._buffer and not self._broken:
            # A last event without its blank line still counts (a server may close early).
            self._event(self._buffer, now)
            self._buffer = b""
        usage_seen = self._total_tokens is not None or self._running_tokens is not None
        if self._total_tokens is not None:
            tokens = self._total_tokens
        elif self._running_tokens is not None:
            tokens = self._running_tokens
        else:
            tokens = self._token_chunks
        first, last = self._first_token_at, self._last_token_at
        per_token = None if first is None or last is None else tpot(first, last, tokens)
        chunk_tpot = statistics.median(self._chunk_rates) if self._chunk_rates else None
        measurement: Measurement = "stream_usage" if usage_seen else "stream_chunks"
        return Measured(
            started_at=self._started_at,
            e2e_s=max(now - self._started_at, 0.0),
            ttft_s=None if first is None else max(first - self._started_at, 0.0),
            output_tokens=tokens,
            tpot_s=per_token,
            chunk_tpot_s=chunk_tpot,
            measurement=measurement,
            prompt_tokens=self._prompt_tokens,
            usage_seen=usage_seen,
            token_chunks=self._token_chunks,
            complete=self._done,
            error_seen=self._error,
            tool_call=None if self._tools is None else self._tools.result(),
        )

    def _event(self, event: bytes, now: float) -> None:
        payload = sse_event_data(event)
        if payload is None:
            return
        if payload == b"[DONE]":
            self._done = True
            return
        try:
            chunk = _DECODE(payload.decode())
        except ValueError:  # UnicodeDecodeError is one
            return
        if isinstance(chunk, dict):
            self.observe_chunk(chunk, now)

    # -- chunk semantics ---------------------------------------------------------------

    def observe_done(self) -> None:
        """``data: [DONE]`` seen by a caller that frames the stream itself."""
        self._done = True

    def observe_chunk(self, chunk: dict[str, Any], now: float) -> None:
        """One parsed event, for a caller that frames and parses the stream itself (the
        router's usage stripper does, so each chunk is parsed once). Do not mix with
        `feed` on the same meter."""
        if "error" in chunk and "choices" not in chunk:
            self._error = True
            return
        choices = chunk.get("choices")
        usage = chunk.get("usage")
        completion_tokens = _count(usage, "completion_tokens")
        prompt_tokens = _count(usage, "prompt_tokens")
        if prompt_tokens is not None:
            self._prompt_tokens = prompt_tokens
        if not choices:
            # The include_usage summary chunk (choices: []): the total, no timing.
            if completion_tokens is not None:
                self._total_tokens = completion_tokens
            return
        if self._tools is not None:
            self._tools.observe(choices)
        if completion_tokens is not None:
            previous = self._running_tokens or 0
            tokens = max(completion_tokens - previous, 0)
            self._running_tokens = max(completion_tokens, previous)
            self._continuous = True
        elif self._continuous:
            # Usage stopped mid-stream: fall back to one token per output-bearing chunk.
            tokens = 1 if _has_output(choices) else 0
            self._running_tokens = (self._running_tokens or 0) + tokens
        else:
            tokens = 1 if _has_output(choices) else 0
        if tokens == 0:
            return
        if self._first_token_at is None:
            self._first_token_at = now
        elif self._continuous and self._last_token_at is not None:
            self._chunk_rates.append(max(now - self._last_token_at, 0.0) / tokens)
        self._last_token_at = now
        self._token_chunks += 1


def _count(usage: Any, name: str) -> int | None:
    if not isinstance(usage, dict):
        return None
    value = usage.get(name)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def _has_output(choices: Any) -> bool:
    if not isinstance(choices, list):
        return False
    for choice in choices:
        if not isinstance(choice, dict):
            continue
        text = choice.get("text")
        if isinstance(text, str) and text:
            return True
        delta = choice.get("delta")
        if isinstance(delta, dict) and _delta_has_output(delta):
            return True
    return False


def _delta_has_output(delta: dict[str, Any]) -> bool:
    for key in ("content", "reasoning_content", "reasoning", "refusal"):
        value = delta.get(key)
        if isinstance(value, str) and value:
            return True
    tool_calls = delta.get("tool_calls")
    if isinstance(tool_calls, list):
        for call in tool_calls:
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict) and (function.get("name") or function.get("arguments")):
                return True
    return False


def measure_json(
    body: bytes, started_at: float, now: float, tools: ToolCallCheck | None = None
) -> Measured:
    """Measure a non-streamed response: only e2e and usage are known; no TTFT.

    Per the Sample schema, ``tpot_s`` for a non-streamed response is e2e / output tokens
    (it includes prefill, so it is an upper bound and is marked ``non_stream``).
    """
    e2e = max(now - started_at, 0.0)
    try:
        parsed = json.loads(body)
    except ValueError:
        parsed = None
    usage = parsed.get("usage") if isinstance(parsed, dict) else None
    tokens = _count(usage, "completion_tokens")
    error = isinstance(parsed, dict) and "error" in parsed and "choices" not in parsed
    if tools is not None and isinstance(parsed, dict):
        tools.observe(parsed.get("choices"))
    return Measured(
        started_at=started_at,
        e2e_s=e2e,
        ttft_s=None,
        output_tokens=tokens or 0,
        tpot_s=e2e / tokens if tokens else None,
        chunk_tpot_s=None,
        measurement="non_stream",
        prompt_tokens=_count(usage, "prompt_tokens"),
        usage_seen=tokens is not None,
        token_chunks=0,
        complete=isinstance(parsed, dict),
        error_seen=error,
        tool_call=None if tools is None else tools.result(),
    )


def to_sample(
    measured: Measured,
    *,
    arm: Arm,
    role: Role,
    pod: str,
    domain: str,
    concurrency: int,
    status: int,
    pair_id: str | None = None,
    started_at: float | None = None,
) -> Sample:
    """The `Sample` record for a measurement.

    ``started_at`` is the wall-clock (epoch seconds) start to record; it defaults to the
    meter's own start, which is right when the meter ran on ``time.time()``. A stream that
    reported an error after a 2xx status line is recorded with status 500: it failed.
    """
    if measured.error_seen and 200 <= status < 300:
        status = 500
    return Sample(
        arm=arm,
        role=role,
        pod=pod,
        domain=domain,
        started_at=measured.started_at if started_at is None else started_at,
        concurrency=concurrency,
        output_tokens=measured.output_tokens,
        e2e_s=measured.e2e_s,
        ttft_s=measured.ttft_s,
        tpot_s=measured.tpot_s,
        chunk_tpot_s=measured.chunk_tpot_s,
        measurement=measured.measurement,
        status=status,
        pair_id=pair_id,
        prompt_tokens=measured.prompt_tokens,
        tool_call=measured.tool_call,
    )


def request_domain(body: Mapping[str, Any] | None, path: str, header: str | None = None) -> str:
    """The domain tag of a request: the ``X-Specguard-Domain`` header when set, else
    ``tool_call`` when it carries tools, ``chat`` for chat, ``completion`` otherwise."""
    if header:
        value = header.strip().lower()
        # A client-chosen tag: keep it short and plain so it can be a metric label.
        if _DOMAIN_RE.fullmatch(value):
            return value
    if body is not None and body.get("tools"):
        return "tool_call"
    if path.rstrip("/").endswith("chat/completions"):
        return "chat"
    return "completion"


__all__ = [
    "MAX_LINE_BYTES",
    "Measured",
    "StreamMeter",
    "measure_json",
    "request_domain",
    "sse_event_data",
    "sse_event_end",
    "to_sample",
]
