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
# vLLM 0.32's system_fingerprint is "vllm-<version>-<8 hex>"; the simulator names itself.
SYSTEM_FINGERPRINT = "vllm-0.32.0-specsim0"


def _usage(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "total_tokens": prompt + completion,
            "completion_tokens": completion}  # fmt: skip


def usage_json(prompt: int, completion: int, details: bool = False) -> bytes:
    """``details``: chat chunks' continuous usage carries ``completion_tokens_details``
    (null); completion chunks' and the final usage chunk's do not (vLLM 0.32)."""
    tail = b',"completion_tokens_details":null}' if details else b"}"
    return b'{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d' % (
        prompt,
        prompt + completion,
        completion,
    ) + tail


def request_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


class ChunkEncoder:
    """Encodes one streaming response's SSE events, field for field as vLLM 0.32.0 sends
    them (tests/sim/test_sim_fidelity.py compares with a recording of the real server)."""

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

    def _tail(self, completion_tokens: int, extra: bytes = b"") -> bytes:
        if self.continuous_usage:
            usage = usage_json(self.prompt_tokens, completion_tokens, details=self.chat)
            return b',"usage":' + usage + extra + b"}\n\n"
        return extra + b"}\n\n"

    def _finish(self, reason: str | None) -> bytes:
        """finish_reason and what follows it: chat adds stop_reason on the last chunk only,
        completions on every chunk, with the prompt's token ids; then token_ids (null)."""
        value = b"null" if reason is None else b'"' + reason.encode() + b'"'
        if self.chat:
            stop = b',"stop_reason":null' if reason is not None else b""
            return value + stop + b',"token_ids":null'
        return value + b',"stop_reason":null,"prompt_token_ids":null,"token_ids":null'

    def role(self) -> bytes:
        return (
            self._head + b'[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,'
            b'"finish_reason":null}]'
            + self._tail(0, b',"prompt_token_ids":null,"prompt_text":null')
        )

    def text(self, text: str, completion_tokens: int, finish: str | None) -> bytes:
        """A chunk of plain filler text (no characters needing JSON escapes)."""
        body = text.encode()
        if self.chat:
            choice = b'[{"index":0,"delta":{"content":"' + body + b'"},"logprobs":null,'
            choice += b'"finish_reason":' + self._finish(finish) + b"}]"
        else:
            choice = b'[{"index":0,"text":"' + body + b'","logprobs":null,"finish_reason":'
            choice += self._finish(finish) + b"}]"
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
            + b',"system_fingerprint":"'
            + SYSTEM_FINGERPRINT.encode()
            + b'"}\n\n'
        )


def error_body(message: str, err_type: str, code: int, param: str | None = None) -> dict[str, Any]:
    """vLLM's ErrorResponse: ``{"error": ErrorInfo}``, the OpenAI envelope (vLLM dropped
    the flat ``{"object": "error", ...}`` shape); ``code`` is the HTTP status, an int."""
    return {"error": {"message": message, "type": err_type, "param": param, "code": code}}


def _response_usage(prompt: int, completion: int) -> dict[str, Any]:
    return {**_usage(prompt, completion), "prompt_tokens_details": None,
            "completion_tokens_details": None}  # fmt: skip


def chat_response(
    *,
    model: str,
    prompt_tokens: int,
    completion_tokens: int,
    finish: str,
    content: str | None,
    tool_calls: list[dict[str, Any]],
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": None,
                               "annotations": None, "audio": None, "function_call": None}
    if tool_calls:  # vLLM 0.32 leaves the key out when there are none
        message["tool_calls"] = tool_calls
    message["reasoning"] = None
    return {
        "id": request_id("chatcmpl"),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": finish,
                "stop_reason": None,
                "token_ids": None,
                "routed_experts": None,
            }
        ],
        "service_tier": None,
        "system_fingerprint": SYSTEM_FINGERPRINT,
        "usage": _response_usage(prompt_tokens, completion_tokens),
        "prompt_logprobs": None,
        "prompt_token_ids": None,
        "prompt_text": None,
        "kv_transfer_params": None,
        "ec_transfer_params": None,
        "metrics": None,
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
             "stop_reason": None, "token_ids": None, "prompt_logprobs": None,
             "prompt_token_ids": None, "routed_experts": None}
        ],
        "service_tier": None,
        "system_fingerprint": SYSTEM_FINGERPRINT,
        "usage": _response_usage(prompt_tokens, completion_tokens),
        "kv_transfer_params": None,
        "ec_transfer_params": None,
        "metrics": None,
    }  # fmt: skip
