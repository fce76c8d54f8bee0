"""Take back out of an SSE stream the usage the router asked for and the client did not.

The router asks the serving pod for ``stream_options: {include_usage, continuous_usage_stats}``
so that its token counts are exact. vLLM then adds ``"usage":{...}`` to every chunk and a
last chunk with ``choices: []``. A client that did not ask for them must get the stream it
would have got directly, so this removes, byte for byte, what the options added:

- the ``usage`` member of each chunk with choices (cut out of the JSON text in place, so the
  rest of the bytes stay exactly as the server wrote them);
- the final usage-only chunk, unless the client asked for ``include_usage`` itself.

Events without a ``"usage"`` key pass through untouched (the common fast path).
"""

from __future__ import annotations

import json
from typing import Any

from specguard.meter import StreamMeter, sse_event_data, sse_event_end

_KEY = b'"usage"'
# JSONDecoder.decode on str skips json.loads' bytes-encoding sniffing (hot path).
_DECODE = json.JSONDecoder().decode
_WHITESPACE = b" \t\r\n"


class UsageStripper:
    """Rewrites an SSE byte stream event by event; partial events wait for their end.

    Given a `StreamMeter`, it also hands the meter each parsed event, so a chunk is framed
    and parsed once on the router's hot path instead of twice.
    """

    __slots__ = ("_buffer", "_keep_final", "_meter")

    def __init__(self, keep_final: bool, meter: StreamMeter | None = None) -> None:
        self._keep_final = keep_final
        self._meter = meter
        self._buffer = b""

    def attach(self, meter: StreamMeter | None) -> None:
        self._meter = meter

    def feed(self, data: bytes, now: float = 0.0) -> bytes:
        """The bytes to pass on now (whole events only); ``now`` is when they arrived."""
        buffer = self._buffer + data if self._buffer else data
        end = sse_event_end(buffer)
        if end < 0:
            self._buffer = buffer
            return b""
        if self._meter is None and end == len(buffer) and _KEY not in buffer:
            self._buffer = b""
            return buffer
        out: list[bytes] = []
        start = 0
        while end >= 0:
            out.append(self._event(buffer[start:end], now))
            start = end
            end = sse_event_end(buffer, start)
        self._buffer = buffer[start:]
        return b"".join(out)

    def finish(self, now: float = 0.0) -> bytes:
        """Whatever is left at the end of the stream, passed on as it is (and measured)."""
        rest, self._buffer = self._buffer, b""
        if rest and self._meter is not None:
            self._measure(sse_event_data(rest), now)
        return rest

    def _measure(self, payload: bytes | None, now: float) -> Any:
        if payload is None:
            return None
        if payload == b"[DONE]":
            if self._meter is not None:
                self._meter.observe_done()
            return None
        try:
            chunk = _DECODE(payload.decode())
        except (ValueError, UnicodeDecodeError):
            return None
        if self._meter is not None and isinstance(chunk, dict):
            self._meter.observe_chunk(chunk, now)
        return chunk

    def _event(self, event: bytes, now: float) -> bytes:
        if self._meter is None and _KEY not in event:
            return event
        payload = sse_event_data(event)
        chunk = self._measure(payload, now)
        if payload is None or _KEY not in payload or not isinstance(chunk, dict):
            return event
        if not isinstance(chunk.get("usage"), dict):
            return event
        if not chunk.get("choices"):
            return event if self._keep_final else b""
        offset = 6 if event.startswith(b"data: ") else 5
        body_end = offset + len(payload)
        if event[offset:body_end] != payload:
            return event  # a multi-line event: not what vLLM sends; leave it alone
        return event[:offset] + remove_member(payload, chunk) + event[body_end:]


def remove_member(payload: bytes, chunk: dict[str, Any]) -> bytes:
    """``payload`` without its top-level ``"usage"`` member, other bytes unchanged.

    Falls back to compact re-serialisation (vLLM's own format) if the text is not laid out
    as expected.
    """
    cut = _cut(payload, chunk["usage"])
    if cut is not None:
        return cut
    expected = {key: value for key, value in chunk.items() if key != "usage"}
    return json.dumps(expected, separators=(",", ":"), ensure_ascii=False).encode()


def _cut(payload: bytes, usage: Any) -> bytes | None:
    at = payload.find(_KEY)
    # Inside a JSON string a quote is escaped, so an unescaped "usage" is a key; the caller
    # parsed the chunk and found a top-level one. More than one: not the expected layout.
    if at < 0 or payload.find(_KEY, at + 1) >= 0:
        return None
    i = _skip(payload, at + len(_KEY))
    if payload[i : i + 1] != b":":
        return None
    i = _skip(payload, i + 1)
    end = _object_end(payload, i)
    if end < 0:
        return None
    try:
        if _DECODE(payload[i:end].decode()) != usage:  # the value we cut is the usage, exactly
            return None
    except (ValueError, UnicodeDecodeError):
        return None
    before = at
    while before > 0 and payload[before - 1] in _WHITESPACE:
        before -= 1
    if before > 0 and payload[before - 1] == 0x2C:  # a comma before: take it with us
        return payload[: before - 1] + payload[end:]
    after = _skip(payload, end)
    if payload[after : after + 1] == b",":
        return payload[:at] + payload[_skip(payload, after + 1) :]
    return payload[:at] + payload[end:]


def _object_end(payload: bytes, i: int) -> int:
    """Index past the JSON object starting at ``i`` (objects of numbers, nulls, objects)."""
    if payload[i : i + 1] != b"{":
        return -1
    close = payload.find(b"}", i)
    if close >= 0 and payload.find(b"{", i + 1, close) < 0:
        return close + 1  # flat, the usual case
    depth = 0
    for j in range(i, len(payload)):
        byte = payload[j]
        if byte == 0x7B:  # {
            depth += 1
        elif byte == 0x7D:  # }
            depth -= 1
            if depth == 0:
                return j + 1
    return -1


def _skip(data: bytes, i: int) -> int:
    while i < len(data) and data[i] in _WHITESPACE:
        i += 1
    return i


__all__ = ["UsageStripper", "remove_member"]
