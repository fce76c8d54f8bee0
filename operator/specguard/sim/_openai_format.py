"""vLLM's OpenAI-compatible response bodies, pre-encoded where it matters.

Streaming chunks are assembled from byte fragments fixed per request (id, created,
model) plus the chunk's text, so the per-chunk cost is a few concatenations instead of a
json.dumps of a nested dict. Text from ``specguard.sim._filler`` needs no JSON escaping
except the tool-call fragments, which go through json.dumps.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

DONE = b"data: [DONE]\n\n"


def _usage(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "total_tokens": prompt + completion,
            "completion_tokens": completion}  # fmt: skip


def usage_json(prompt: int, completion: int) -> bytes:
    return b'{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d}' % (
        prompt,
        prompt + completion,
        completion,
    )


def request_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


class ChunkEncoder:
    """Encodes one streaming response's SSE events."""

    def __init__(
        self, *, chat: bool, model: str, prompt_tokens: int, continuous_usage: bool
    ) -> None:
        self.chat = chat
        self.prompt_tokens = prompt_tokens
        self.continuous_usage = continuous_usage
        self.id = request_id("chatcmpl" if chat else "cmpl")
        self.created = int(time.time())
        obj = "chat.completion.chunk" if chat else "text_completion"
        self._head = b'data: {"id":"%s","object":"%s","created":%d,"model":%s,"choices":' % (
            self.id.encode(),
            obj.encode(),
            self.created,
            json.dumps(model).encode(),
        )

    def _tail(self, completion_tokens: int) -> bytes:
        if self.continuous_usage:
            return b',"usage":' + usage_json(self.prompt_tokens, completion_tokens) + b"}\n\n"
        return b"}\n\n"

    @staticmethod
    def _finish(reason: str | None) -> bytes:
        return b"null" if reason is None else b'"' + reason.encode() + b'"'

    def role(self) -> bytes:
        return (
            self._head + b'[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,'
            b'"finish_reason":null}]' + self._tail(0)
        )

    def text(self, text: str, completion_tokens: int, finish: str | None) -> bytes:
        """A chunk of plain filler text (no characters needing JSON escapes)."""
        body = text.encode()
        if self.chat:
            choice = b'[{"index":0,"delta":{"content":"' + body + b'"},"logprobs":null,'
            choice += b'"finish_reason":' + self._finish(finish) + b"}]"
        else:
            choice = b'[{"index":0,"text":"' + body + b'","logprobs":null,"finish_reason":'
            choice += self._finish(finish) + b',"stop_reason":null}]'
        return self._head + choice + self._tail(completion_tokens)

    def tool(self, call: dict[str, Any], completion_tokens: int, finish: str | None) -> bytes:
        delta = json.dumps({"tool_calls": [call]}, separators=(",", ":")).encode()
        choice = b'[{"index":0,"delta":' + delta + b',"logprobs":null,"finish_reason":'
        choice += self._finish(finish) + b"}]"
        return self._head + choice + self._tail(completion_tokens)

    def usage(self, completion_tokens: int) -> bytes:
        return (
            self._head
            + b'[],"usage":'
            + usage_json(self.prompt_tokens, completion_tokens)
            + b"}\n\n"
        )


def error_body(message: str, err_type: str, code: int, param: str | None = None) -> dict[str, Any]:
    """vLLM's ErrorResponse: ``{"error": ErrorInfo}``, the OpenAI envelope (vLLM dropped
    the flat ``{"object": "error", ...}`` shape); ``code`` is the HTTP status, an int."""
    return {"error": {"message": message, "type": err_type, "param": param, "code": code}}


def chat_response(
    *,
    model: str,
    prompt_tokens: int,
    completion_tokens: int,
    finish: str,
    content: str | None,
    tool_calls: list[dict[str, Any]],
) -> dict[str, Any]:
    return {
        "id": request_id("chatcmpl"),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content, "tool_calls": tool_calls},
                "logprobs": None,
                "finish_reason": finish,
                "stop_reason": None,
            }
        ],
        "usage": _usage(prompt_tokens, completion_tokens),
        "prompt_logprobs": None,
    }


def completion_response(
    *, model: str, prompt_tokens: int, completion_tokens: int, finish: str, text: str
) -> dict[str, Any]:
    return {
        "id": request_id("cmpl"),
        "object": "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {"index": 0, "text": text, "logprobs": None, "finish_reason": finish,
             "stop_reason": None, "prompt_logprobs": None}
        ],
        "usage": _usage(prompt_tokens, completion_tokens),
    }  # fmt: skip
