"""The simulator's HTTP surface: vLLM's OpenAI-compatible routes on aiohttp.

Nothing here logs or keeps request or response text.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from specguard.sim._domains import (
    chat_prompt_tokens,
    choose_domain,
    completion_prompt_text,
    count_tokens,
    message_text,
)
from specguard.sim._engine import Engine, Sequence
from specguard.sim._exporter import SimMetrics
from specguard.sim._filler import Filler
from specguard.sim._openai_format import (
    DONE,
    ChunkEncoder,
    chat_response,
    completion_response,
    error_body,
    request_id,
)
from specguard.sim._options import SimOptions
from specguard.sim._tools import BREAKAGES, Breakage, tool_arguments

DOMAIN_HEADER = "X-Specguard-Domain"
SSE_HEADERS = {"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}

OPTIONS_KEY = web.AppKey("options", SimOptions)


class SimState:
    """Everything one simulator process holds."""

    def __init__(self, options: SimOptions) -> None:
        self.options = options
        # --fault-drop-drafter: the config was accepted but never applied
        spec = options.served_spec
        k = spec.num_speculative_tokens if spec else 0
        self.metrics = SimMetrics(
            options.served_model_name,
            num_spec_tokens=k,
            max_model_len=options.max_model_len,
            itl_buckets=options.itl_buckets,
        )
        self.engine = Engine(
            options.profile,
            spec,
            self.metrics,
            max_num_seqs=options.max_num_seqs,
            time_scale=options.time_scale,
            seed=options.seed,
            kv_capacity_tokens=options.kv_capacity_tokens,
            block_size=options.block_size,
            accept_nothing=options.fault_accept_nothing,
        )
        # a stream of its own: sharing the engine's would correlate text and acceptance
        self.rng = random.Random(None if options.seed is None else f"server-{options.seed}")
        self.filler = Filler(self.rng)
        self.loaded = asyncio.Event()
        self.requests = 0
        self.created = int(time.time())
        self.draining = False  # SIGTERM with --shutdown-timeout: finish, take nothing new
        self.aborting = False  # SIGTERM without it: end the streams in flight with an error
        self.active = 0  # completion requests being answered
        self.idle = asyncio.Event()  # set while active == 0
        self.idle.set()

    @property
    def dead(self) -> bool:
        fail_after = self.options.fail_after
        return fail_after is not None and self.requests >= fail_after


STATE_KEY = web.AppKey("state", SimState)


def _error(message: str, err_type: str, status: int, param: str | None = None) -> web.Response:
    return web.json_response(error_body(message, err_type, status, param), status=status)


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
    # draining: vLLM 0.32 keeps answering 200 until its HTTP server stops
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


SHUTDOWN_REFUSAL = "cannot schedule new futures after shutdown"
ENGINE_ERROR = "EngineCore encountered an issue. See stack trace (above) for the root cause."
# SIGTERM without --shutdown-timeout: vLLM 0.32 ends each stream in flight with this event
# (json.dumps' spacing, as vLLM writes it) and [DONE], status 200 (tests/realvllm).
ABORT_EVENT = b"data: " + json.dumps(
    {"error": {"message": ENGINE_ERROR, "type": "InternalServerError", "param": None,
               "code": 500}}).encode() + b"\n\n"  # fmt: skip


class _Refused(Exception):  # noqa: N818 - a refusal, answered as vLLM's error JSON
    """A request vLLM would refuse before it reaches the engine."""

    def __init__(
        self, message: str, param: str | None = None, *, err_type: str = "BadRequestError",
        status: int = 400,
    ) -> None:  # fmt: skip
        super().__init__(message)
        self.param, self.err_type, self.status = param, err_type, status

    def response(self) -> web.Response:
        return _error(str(self), self.err_type, self.status, self.param)


def _invalid(field: str, expected: str) -> _Refused:
    # vLLM's handler for pydantic validation errors answers 400 with type "Bad Request"
    return _Refused(f"{field}: Input should be {expected}", field, err_type="Bad Request")


@dataclass(frozen=True, slots=True)
class _Request:
    """What the simulator reads from a valid body (the text itself is not kept)."""

    chat: bool
    model: str
    tool_name: str | None  # the first tool's, when the answer is a tool call
    tool_schema: Any  # its parameters schema (None: none declared)
    domain: str
    prompt_tokens: int
    max_tokens: int | None  # as sent (max_completion_tokens wins in chat)
    effective_max_tokens: int  # as vLLM's SamplingParams gets it: sent, or the room left
    stream: bool
    include_usage: bool
    continuous: bool


def _optional_bool(obj: dict[str, Any], key: str, field: str) -> bool | None:
    # JSON booleans only: pydantic would also coerce "true"/1, the simulator refuses them
    value = obj.get(key)
    if value is not None and not isinstance(value, bool):
        raise _invalid(field, "a valid boolean")
    return value


def _check_model(state: SimState, body: dict[str, Any]) -> str:
    model = body.get("model")
    if model is None:
        return state.options.served_model_name
    if not isinstance(model, str):
        raise _invalid("model", "a valid string")
    if model not in state.options.served_model_names:
        aliases = ", ".join(state.options.served_model_names)
        raise _Refused(f"The model `{model}` does not exist. Valid aliases: {aliases}.", "model",
                       err_type="NotFoundError", status=404)  # fmt: skip
    return model


def _check_messages(body: dict[str, Any]) -> list[Any]:
    messages = body.get("messages")
    if messages is None:
        raise _Refused("messages: Field required", "messages", err_type="Bad Request")
    if not isinstance(messages, list):
        raise _invalid("messages", "a valid list")
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise _invalid(f"messages.{i}", "a valid dictionary")
    return messages


def _check_prompt(body: dict[str, Any]) -> Any:
    """vLLM's prompt: a string, a list of strings, token ids, or lists of token ids."""
    prompt = body.get("prompt")
    if prompt is None:
        raise _Refused("prompt: Field required", "prompt", err_type="Bad Request")
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and prompt:
        kinds = {type(p) for p in prompt}
        if kinds <= {str} or kinds <= {int}:
            return prompt
        if kinds <= {list} and all(
            p and all(type(t) is int for t in p) for p in prompt
        ):  # fmt: skip
            return [t for p in prompt for t in p]  # counted as token ids
    raise _invalid("prompt", "a string, a list of strings or a list of token ids")


def _check_tools(body: dict[str, Any]) -> tuple[str, Any] | None:
    """Name and parameters schema of the first tool, or None without tools (or with
    tool_choice "none")."""
    tools = body.get("tools")
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise _invalid("tools", "a valid list")
    for i, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict):
            raise _invalid(f"tools.{i}.function", "a valid dictionary")
        if not isinstance(function.get("name"), str):
            raise _invalid(f"tools.{i}.function.name", "a valid string")
    if not tools or body.get("tool_choice") == "none":
        return None
    function = tools[0]["function"]
    return str(function["name"]), function.get("parameters")


def _check_max_tokens(body: dict[str, Any], chat: bool) -> int | None:
    field = "max_tokens"
    max_tokens = body.get("max_completion_tokens") if chat else None
    if max_tokens is not None:
        field = "max_completion_tokens"
    else:
        max_tokens = body.get("max_tokens")
    if max_tokens is None:
        return None
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool):
        raise _invalid(field, "a valid integer")
    if max_tokens < 1:
        raise _Refused(f"{field} must be at least 1, got {max_tokens}.", field)
    return max_tokens


def _check_stream(body: dict[str, Any], force_usage: bool) -> tuple[bool, bool, bool]:
    """(stream, include_usage, continuous_usage), as vLLM's should_include_usage."""
    stream = bool(_optional_bool(body, "stream", "stream"))
    options = body.get("stream_options")
    if options is None:
        return stream, stream and force_usage, False
    if not isinstance(options, dict):
        raise _invalid("stream_options", "a valid dictionary")
    if options and not stream:
        raise _Refused("stream_options: can only be defined when `stream=True`.",
                       "stream_options", err_type="Bad Request")  # fmt: skip
    # vLLM's StreamOptions defaults include_usage to True once the object is sent
    include = _optional_bool(options, "include_usage", "stream_options.include_usage")
    include = (True if "include_usage" not in options else bool(include)) or force_usage
    continuous = _optional_bool(
        options, "continuous_usage_stats", "stream_options.continuous_usage_stats"
    )
    return stream, include, include and bool(continuous)


def _check_room(state: SimState, prompt_tokens: int, max_tokens: int | None) -> int:
    """vLLM's context-length refusal; returns the effective max_tokens."""
    limit = state.options.max_model_len
    if max_tokens is not None and max_tokens > limit:
        raise _Refused(
            f"max_tokens={max_tokens} cannot be greater than max_model_len={limit}. Please "
            f"request fewer output tokens. (parameter=max_tokens, value={max_tokens})",
            "max_tokens",
        )
    room = limit - prompt_tokens
    if room < 1 or (max_tokens is not None and max_tokens > room):
        raise _Refused(
            f"This model's maximum context length is {limit} tokens. However, you "
            f"requested {prompt_tokens + (max_tokens or 0)} tokens ({prompt_tokens} in the "
            f"messages, {max_tokens or 0} in the completion). Please reduce the length of the "
            "messages or completion."
        )
    return room if max_tokens is None else max_tokens


def _parse(state: SimState, body: Any, chat: bool, domain_header: str | None) -> _Request:
    """Every check vLLM makes before the engine sees the request; raises _Refused."""
    if not isinstance(body, dict):
        raise _Refused("request body must be a JSON object", err_type="Bad Request")
    model = _check_model(state, body)
    n = body.get("n")
    if n not in (1, None) or isinstance(n, bool):
        raise _Refused("the simulator supports n=1 only", "n")
    stream, include_usage, continuous = _check_stream(body, state.options.force_include_usage)
    max_tokens = _check_max_tokens(body, chat)
    tool: tuple[str, Any] | None = None
    if chat:
        messages = _check_messages(body)
        tool = _check_tools(body)
        text = message_text(messages)
        prompt_tokens = chat_prompt_tokens(messages, body.get("tools"))
    else:
        text = completion_prompt_text(_check_prompt(body))
        prompt_tokens = max(1, count_tokens(text))
    domain = choose_domain(domain_header, tool is not None, text)
    del text  # only classified, never kept
    effective = _check_room(state, prompt_tokens, max_tokens)
    tool_name, tool_schema = tool if tool is not None else (None, None)
    return _Request(chat, model, tool_name, tool_schema, domain, prompt_tokens, max_tokens,
                    effective, stream, include_usage, continuous)  # fmt: skip


def _plan_length(state: SimState, req: _Request) -> tuple[int, str]:
    """Tokens to generate and the finish reason when they are all out."""
    profile = state.options.profile
    tool = req.tool_name is not None
    lo, hi = profile.tool_length if tool else profile.natural_length
    natural = state.rng.randint(lo, hi)
    if tool:
        if req.max_tokens is not None and req.max_tokens < natural:
            return req.max_tokens, "length"
        return natural, "tool_calls"
    if req.max_tokens is not None:
        return req.max_tokens, "length"
    return min(natural, req.effective_max_tokens), "stop"


async def _read_json(request: web.Request) -> Any:
    try:
        return await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None


def _breakage(state: SimState, req: _Request) -> Breakage | None:
    """--fault-invalid-tool-calls: how this response's tool call comes back broken."""
    rate = state.options.fault_invalid_tool_calls
    if req.tool_name is None or rate <= 0 or state.rng.random() >= rate:
        return None
    return BREAKAGES[state.rng.randrange(len(BREAKAGES))]


def _fault(state: SimState) -> web.Response | None:
    """--fail-after and --error-rate. Called only for requests that passed validation:
    vLLM refuses a malformed request in the API server, before the engine, so a 400 is
    neither counted toward --fail-after nor turned into a 500 by a dead engine."""
    if state.dead:
        return _error(ENGINE_ERROR, "InternalServerError", 500)
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
    if state.draining:
        # vLLM 0.32 with --shutdown-timeout: the engine client's executor is shut down
        return _error(SHUTDOWN_REFUSAL, "InternalServerError", 500)
    state.active += 1
    state.idle.clear()
    try:
        return await _answer(request, state, chat=chat)
    finally:
        state.active -= 1
        if not state.active:
            state.idle.set()


async def _answer(request: web.Request, state: SimState, *, chat: bool) -> web.StreamResponse:
    try:
        req = _parse(state, await _read_json(request), chat, request.headers.get(DOMAIN_HEADER))
    except _Refused as refused:
        return refused.response()
    fault = _fault(state)
    if fault is not None:
        return fault
    n_tokens, finish = _plan_length(state, req)
    seq = Sequence(req.domain, req.prompt_tokens, n_tokens, finish,
                   asyncio.get_running_loop().time())  # fmt: skip
    seq.max_tokens_param = req.effective_max_tokens
    breakage = _breakage(state, req)
    state.engine.submit(seq)
    if req.stream:
        return await _stream(request, state, seq, req, breakage)
    try:
        await seq.wait_finished()
    except asyncio.CancelledError:
        # the client left (the runner cancels handlers on disconnect): vLLM aborts
        seq.cancelled = True
        raise
    return web.json_response(_full_response(state, seq, req, breakage))


def _full_response(
    state: SimState, seq: Sequence, req: _Request, breakage: Breakage | None
) -> dict[str, Any]:
    model, prompt, done, finish = req.model, req.prompt_tokens, seq.generated, seq.finish_reason
    if req.tool_name is not None:
        args = "".join(tool_arguments(state.rng, req.tool_schema, done, breakage))
        calls = [{"id": request_id("chatcmpl-tool"), "type": "function",
                  "function": {"name": req.tool_name, "arguments": args}}]  # fmt: skip
        return chat_response(model=model, prompt_tokens=prompt, completion_tokens=done,
                             finish=finish, content=None, tool_calls=calls)  # fmt: skip
    out = state.filler.take(done)
    if req.chat:
        return chat_response(model=model, prompt_tokens=prompt, completion_tokens=done,
                             finish=finish, content=out, tool_calls=[])  # fmt: skip
    return completion_response(model=model, prompt_tokens=prompt, completion_tokens=done,
                               finish=finish, text=out)  # fmt: skip


async def _stream(
    request: web.Request,
    state: SimState,
    seq: Sequence,
    req: _Request,
    breakage: Breakage | None = None,
) -> web.StreamResponse:
    chat, tool_name = req.chat, req.tool_name
    enc = ChunkEncoder(chat=chat, model=req.model, prompt_tokens=seq.prompt_tokens,
                       continuous_usage=req.continuous)  # fmt: skip
    response = web.StreamResponse(headers=SSE_HEADERS)
    rng, filler = state.rng, state.filler
    try:
        await response.prepare(request)
        if chat:
            await response.write(enc.role())
        sent = 0
        tool_parts: list[str] = []
        if tool_name is not None:
            tool_parts = tool_arguments(rng, req.tool_schema, seq.max_new_tokens, breakage)
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
            if state.aborting:
                seq.cancelled = True
                await response.write(ABORT_EVENT + DONE)
                await response.write_eof()
                return response
        tail = enc.usage(seq.generated) + DONE if req.include_usage else DONE
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
