"""The simulator's HTTP surface: vLLM's OpenAI-compatible routes on aiohttp.

Nothing here logs or keeps request or response text.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from typing import Any

from aiohttp import web

from specguard.sim.domains import (
    chat_prompt_tokens,
    choose_domain,
    completion_prompt_text,
    count_tokens,
    message_text,
)
from specguard.sim.engine import Engine, Sequence
from specguard.sim.filler import Filler, tool_tokens
from specguard.sim.metrics import SimMetrics
from specguard.sim.openai_format import (
    DONE,
    ChunkEncoder,
    chat_response,
    completion_response,
    error_body,
    request_id,
)
from specguard.sim.options import SimOptions

DOMAIN_HEADER = "X-Specguard-Domain"
SSE_HEADERS = {"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}

OPTIONS_KEY = web.AppKey("options", SimOptions)


class SimState:
    """Everything one simulator process holds."""

    def __init__(self, options: SimOptions) -> None:
        self.options = options
        k = options.spec.num_speculative_tokens if options.spec else 0
        self.metrics = SimMetrics(
            options.served_model_name, num_spec_tokens=k, itl_buckets=options.itl_buckets
        )
        self.engine = Engine(
            options.profile,
            options.spec,
            self.metrics,
            max_num_seqs=options.max_num_seqs,
            time_scale=options.time_scale,
            seed=options.seed,
        )
        # a stream of its own: sharing the engine's would correlate text and acceptance
        self.rng = random.Random(None if options.seed is None else f"server-{options.seed}")
        self.filler = Filler(self.rng)
        self.loaded = asyncio.Event()
        self.requests = 0
        self.created = int(time.time())

    @property
    def dead(self) -> bool:
        fail_after = self.options.fail_after
        return fail_after is not None and self.requests >= fail_after


STATE_KEY = web.AppKey("state", SimState)


def _error(message: str, err_type: str, status: int) -> web.Response:
    return web.json_response(error_body(message, err_type, status), status=status)


@web.middleware
async def _hold_while_loading(request: web.Request, handler: Any) -> web.StreamResponse:
    # A loading vLLM has its port bound but answers nothing; hold every request until
    # the model is "loaded" (bounded by --startup-delay).
    state = request.app[STATE_KEY]
    if not state.loaded.is_set():
        await state.loaded.wait()
    response: web.StreamResponse = await handler(request)
    return response


async def health(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    return web.Response(status=503 if state.dead else 200)


async def models(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    o = state.options
    data: list[dict[str, object]] = [
        {
            "id": name,
            "object": "model",
            "created": state.created,
            "owned_by": "vllm",
            "root": o.model,
            "parent": None,
            "max_model_len": o.max_model_len,
            "permission": [],
        }
        for name in o.served_model_names
    ]
    return web.json_response({"object": "list", "data": data})


async def metrics(request: web.Request) -> web.Response:
    body = request.app[STATE_KEY].metrics.render()
    return web.Response(
        body=body, headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"}
    )


async def version(request: web.Request) -> web.Response:
    return web.json_response({"version": "0.33.0"})


def _plan_length(
    state: SimState, body: dict[str, Any], prompt_tokens: int, tool: bool, chat: bool
) -> tuple[int, str] | web.Response:
    """Tokens to generate and the finish reason when they are all out."""
    o = state.options
    max_tokens = body.get("max_completion_tokens") if chat else None
    if max_tokens is None:
        max_tokens = body.get("max_tokens")
    if max_tokens is not None and (
        not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1
    ):
        return _error(f"max_tokens must be at least 1, got {max_tokens}.", "BadRequestError", 400)
    room = o.max_model_len - prompt_tokens
    if room < 1 or (max_tokens is not None and max_tokens > room):
        return _error(
            f"This model's maximum context length is {o.max_model_len} tokens. However, you "
            f"requested {prompt_tokens + (max_tokens or 0)} tokens ({prompt_tokens} in the "
            f"messages, {max_tokens or 0} in the completion). Please reduce the length of the "
            "messages or completion.",
            "BadRequestError",
            400,
        )
    profile = o.profile
    lo, hi = profile.tool_length if tool else profile.natural_length
    natural = state.rng.randint(lo, hi)
    if tool:
        if max_tokens is not None and max_tokens < natural:
            return max_tokens, "length"
        return natural, "tool_calls"
    if max_tokens is not None:
        return max_tokens, "length"
    return min(natural, room), "stop"


def _check_request(state: SimState, body: Any, chat: bool) -> web.Response | None:
    if not isinstance(body, dict):
        return _error("request body must be a JSON object", "BadRequestError", 400)
    model = body.get("model")
    if model is not None and model not in state.options.served_model_names:
        return _error(f"The model `{model}` does not exist.", "NotFoundError", 404)
    if chat and not isinstance(body.get("messages"), list):
        return _error("messages: Field required", "BadRequestError", 400)
    if not chat and body.get("prompt") is None:
        return _error("prompt: Field required", "BadRequestError", 400)
    n = body.get("n", 1)
    if n not in (1, None):
        return _error("the simulator supports n=1 only", "BadRequestError", 400)
    return None


async def _read_json(request: web.Request) -> Any:
    try:
        return await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None


def _fault(state: SimState) -> web.Response | None:
    if state.dead:
        return _error(
            "EngineCore encountered an issue. See stack trace (above) for the root cause.",
                      "InternalServerError", 500)  # fmt: skip
    state.requests += 1
    if state.options.error_rate > 0 and state.rng.random() < state.options.error_rate:
        return _error("simulated engine error (--error-rate)", "InternalServerError", 500)
    return None


async def chat_completions(request: web.Request) -> web.StreamResponse:
    return await _complete(request, chat=True)


async def completions(request: web.Request) -> web.StreamResponse:
    return await _complete(request, chat=False)


async def _complete(request: web.Request, *, chat: bool) -> web.StreamResponse:
    state = request.app[STATE_KEY]
    o = state.options
    body = await _read_json(request)
    bad = _check_request(state, body, chat)
    if bad is not None:
        return bad
    fault = _fault(state)
    if fault is not None:
        return fault
    tools = body.get("tools") if chat else None
    tool = bool(tools) and body.get("tool_choice") != "none"
    if chat:
        text = message_text(body["messages"])
        prompt_tokens = chat_prompt_tokens(body["messages"], tools)
    else:
        text = completion_prompt_text(body["prompt"])
        prompt_tokens = max(1, count_tokens(text))
    domain = choose_domain(request.headers.get(DOMAIN_HEADER), tool, text)
    del text  # only classified, never kept
    plan = _plan_length(state, body, prompt_tokens, tool, chat)
    if isinstance(plan, web.Response):
        return plan
    n_tokens, finish = plan
    seq = Sequence(domain, prompt_tokens, n_tokens, finish, asyncio.get_running_loop().time())
    requested = body.get("max_completion_tokens") if chat else None
    seq.max_tokens_param = requested if requested is not None else body.get("max_tokens")
    model = body.get("model") or o.served_model_name
    tool_name = _tool_name(tools) if tool else None
    state.engine.submit(seq)
    if body.get("stream"):
        stream_options = body.get("stream_options") or {}
        include_usage = bool(stream_options.get("include_usage")) or o.force_include_usage
        continuous = include_usage and bool(stream_options.get("continuous_usage_stats"))
        return await _stream(request, state, seq, model, chat, tool_name, include_usage, continuous)
    try:
        await seq.wait_finished()
    except asyncio.CancelledError:
        seq.cancelled = True
        raise
    if tool_name is not None:
        args = "".join(tool_tokens(state.rng, seq.generated))
        calls = [{"id": request_id("chatcmpl-tool"), "type": "function",
                  "function": {"name": tool_name, "arguments": args}}]  # fmt: skip
        payload = chat_response(model=model, prompt_tokens=prompt_tokens,
                                completion_tokens=seq.generated, finish=finish, content=None,
                                tool_calls=calls)  # fmt: skip
    else:
        out = state.filler.take(seq.generated)
        if chat:
            payload = chat_response(model=model, prompt_tokens=prompt_tokens,
                                    completion_tokens=seq.generated, finish=finish, content=out,
                                    tool_calls=[])  # fmt: skip
        else:
            payload = completion_response(model=model, prompt_tokens=prompt_tokens,
                                          completion_tokens=seq.generated, finish=finish,
                                          text=out)  # fmt: skip
    return web.json_response(payload)


def _tool_name(tools: Any) -> str:
    choice_name = None
    if isinstance(tools, list):
        for t in tools:
            if isinstance(t, dict) and isinstance(t.get("function"), dict):
                name = t["function"].get("name")
                if isinstance(name, str):
                    choice_name = name
                    break
    return choice_name or "tool"


async def _stream(  # noqa: PLR0917
    request: web.Request,
    state: SimState,
    seq: Sequence,
    model: str,
    chat: bool,
    tool_name: str | None,
    include_usage: bool,
    continuous: bool,
) -> web.StreamResponse:
    enc = ChunkEncoder(chat=chat, model=model, prompt_tokens=seq.prompt_tokens,
                       continuous_usage=continuous)  # fmt: skip
    response = web.StreamResponse(headers=SSE_HEADERS)
    rng, filler = state.rng, state.filler
    try:
        await response.prepare(request)
        if chat:
            await response.write(enc.role())
        sent = 0
        tool_parts: list[str] = []
        if tool_name is not None:
            tool_parts = tool_tokens(rng, seq.max_new_tokens)
        while sent < seq.generated or not seq.finished:
            counts = await seq.next_chunks()
            parts: list[bytes] = []
            for n in counts:
                start, sent = sent, sent + n
                finish = seq.finish_reason if seq.finished and sent >= seq.generated else None
                if tool_name is None:
                    parts.append(enc.text(filler.take(n), sent, finish))
                else:
                    fragment = "".join(tool_parts[start:sent])
                    call: dict[str, Any] = {"index": 0, "function": {"arguments": fragment}}
                    if start == 0:
                        call = {"id": request_id("chatcmpl-tool"), "type": "function", "index": 0,
                                "function": {"name": tool_name, "arguments": fragment}}  # fmt: skip
                    parts.append(enc.tool(call, sent, finish))
            if parts:
                await response.write(b"".join(parts))
        tail = enc.usage(seq.generated) + DONE if include_usage else DONE
        await response.write(tail)
        await response.write_eof()
    except ConnectionResetError:
        # The client went away (aiohttp's ClientConnectionResetError is a subclass):
        # the engine drops the sequence at its next step, as vLLM aborts it. Returning
        # quietly matters: a logged traceback per dropped stream costs real CPU.
        seq.cancelled = True
    except asyncio.CancelledError:
        seq.cancelled = True
        raise
    return response


def build_app(options: SimOptions) -> web.Application:
    app = web.Application(middlewares=[_hold_while_loading], client_max_size=64 * 1024 * 1024)
    app[OPTIONS_KEY] = options
    app[STATE_KEY] = SimState(options)
    app.router.add_get("/health", health)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/version", version)
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_post("/v1/completions", completions)
    return app
