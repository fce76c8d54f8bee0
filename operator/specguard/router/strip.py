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

_KEY = b'"usage"'
_WHITESPACE = b" \t\r\n"


class UsageStripper:
    """Rewrites an SSE byte stream event by event; partial events wait for their end."""

    __slots__ = ("_buffer", "_keep_final")

    def __init__(self, keep_final: bool) -> None:
        self._keep_final = keep_final
        self._buffer = b""

    def feed(self, data: bytes) -> bytes:
        """The bytes to pass on now (whole events only)."""
        buffer = self._buffer + data if self._buffer else data
        end = _event_end(buffer)
        if end < 0:
            self._buffer = buffer
            return b""
        if end == len(buffer) and _KEY not in buffer:
            self._buffer = b""
            return buffer
        out: list[bytes] = []
        start = 0
        while end >= 0:
            out.append(self._event(buffer[start:end]))
            start = end
            end = _event_end(buffer, start)
        self._buffer = buffer[start:]
        return b"".join(out)

    def finish(self) -> bytes:
        """Whatever is left at the end of the stream, passed on as it is."""
        rest, self._buffer = self._buffer, b""
        return rest

    def _event(self, event: bytes) -> bytes:
        if _KEY not in event or not event.startswith(b"data:"):
            return event
        body_end = len(event.rstrip(b"\r\n"))
        if b"\n" in event[:body_end]:
            return event  # multi-line events are not what vLLM sends; leave them alone
        offset = 6 if event.startswith(b"data: ") else 5
        payload = event[offset:body_end]
        try:
            chunk = json.loads(payload)
        except ValueError:
            return event
        if not isinstance(chunk, dict) or not isinstance(chunk.get("usage"), dict):
            return event
        if not chunk.get("choices"):
            return event if self._keep_final else b""
        stripped = remove_member(payload, chunk)
        return event[:offset] + stripped + event[body_end:]


def remove_member(payload: bytes, chunk: dict[str, Any]) -> bytes:
    """``payload`` without its top-level ``"usage"`` member, other bytes unchanged.

    Falls back to compact re-serialisation (vLLM's own format) if the text is not laid out
    as expected; the result is checked against the parsed chunk either way.
    """
    expected = {key: value for key, value in chunk.items() if key != "usage"}
    cut = _cut(payload)
    if cut is not None:
        try:
            if json.loads(cut) == expected:
                return cut
        except ValueError:
            pass
    return json.dumps(expected, separators=(",", ":"), ensure_ascii=False).encode()


def _cut(payload: bytes) -> bytes | None:
    at = payload.find(_KEY)
    # Inside a JSON string a quote is escaped, so an unescaped "usage" is a key. More than
    # one means a nested object also has one: not the layout this expects.
    if at < 0 or payload.find(_KEY, at + 1) >= 0:
        return None
    i = _skip(payload, at + len(_KEY))
    if payload[i : i + 1] != b":":
        return None
    i = _skip(payload, i + 1)
    if payload[i : i + 1] != b"{":
        return None
    depth = 0
    end = -1
    for j in range(i, len(payload)):
        byte = payload[j]
        if byte == 0x7B:  # {
            depth += 1
        elif byte == 0x7D:  # }
            depth -= 1
            if depth == 0:
                end = j + 1
                break
    if end < 0:
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


def _skip(data: bytes, i: int) -> int:
    while i < len(data) and data[i] in _WHITESPACE:
        i += 1
    return i


def _event_end(buffer: bytes, start: int = 0) -> int:
    """Index just past the blank line that ends the next event, or -1."""
    lf = buffer.find(b"\n\n", start)
    crlf = buffer.find(b"\r\n\r\n", start)
    if lf < 0 and crlf < 0:
        return -1
    if crlf < 0 or (0 <= lf < crlf):
        return lf + 2
    return crlf + 4


__all__ = ["UsageStripper", "remove_member"]
