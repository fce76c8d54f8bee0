"""Fixtures for router tests: a scriptable vLLM-shaped upstream and an in-process router.

The fake upstream is deterministic (fixed ids and timestamps) so a stream through the
router can be compared byte for byte with the same request sent to it directly. Tests that
need the real simulator start `specguard sim` through specguard.sim._launch.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web

from specguard.judge import LoadMatch
from specguard.router._pool import Endpoint, Topology
from specguard.router._proxy import Router, RouterConfig
from specguard_testkit._ports import free_port


@dataclass
class Upstream:
    """A fake vLLM. ``mode``: ok | hang | error | refuse (503, as vLLM shutting down) |
    break."""

    mode: str = "ok"
    tokens: int = 5
    gap_s: float = 0.0
    # Pause between ``data: [DONE]`` and the end of the body (the chunked terminator).
    done_tail_s: float = 0.0
    url: str = ""
    bodies: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    raw_bodies: list[bytes] = field(default_factory=list)
    started: int = 0
    peers: set[Any] = field(default_factory=set)
    cancelled: int = 0
    finished: int = 0
    runner: web.AppRunner | None = None

    async def handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        if request.transport is not None:
            self.peers.add(request.transport.get_extra_info("peername"))
        self.raw_bodies.append(raw)
        body = json.loads(raw) if raw else {}
        self.bodies.append(body)
        self.headers.append(dict(request.headers))
        self.started += 1
        try:
            return await self._answer(request, body)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        finally:
            self.finished += 1

    async def _answer(self, request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        if self.mode == "hang":
            await asyncio.sleep(3600)
        if self.mode == "refuse":
            return web.json_response(
                {"error": {"message": "The server is shutting down", "code": 503}},
                status=503,
                headers={"Retry-After": "1"},
            )
        if self.mode == "error":
            return web.json_response(
                {"error": {"message": "boom", "type": "InternalServerError", "code": 500}},
                status=500,
                headers={"X-Upstream": "err"},
            )
        chat = request.path.endswith("chat/completions")
        tokens = int(body.get("max_tokens") or self.tokens)
        if not body.get("stream"):
            return web.json_response(
                {
                    "id": "cmpl-fixed",
                    "object": "chat.completion" if chat else "text_completion",
                    "created": 1,
                    "model": "m",
                    "choices": [{"index": 0, "text": "x" * tokens, "finish_reason": "length"}],
                    "usage": {
                        "prompt_tokens": 3,
                        "completion_tokens": tokens,
                        "total_tokens": 3 + tokens,
                    },
                },
                headers={"X-Upstream": "yes"},
            )
        options = body.get("stream_options") or {}
        include = bool(options.get("include_usage"))
        continuous = include and bool(options.get("continuous_usage_stats"))
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream; charset=utf-8", "X-Upstream": "yes"}
        )
        await response.prepare(request)
        tools = bool(body.get("tools"))
        head = (
            b'{"id":"chatcmpl-fixed","object":"chat.completion.chunk","created":1,"model":"m",'
            b'"choices":'
        )

        def usage(n: int) -> bytes:
            return b'"usage":{"prompt_tokens":3,"total_tokens":%d,"completion_tokens":%d}' % (
                3 + n,
                n,
            )

        def send(choices: bytes, n: int) -> bytes:
            tail = b"," + usage(n) if continuous else b""
            return b"data: " + head + choices + tail + b"}\n\n"

        if chat:
            await response.write(
                send(
                    b'[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]',
                    0,
                )
            )
        for i in range(tokens):
            if self.gap_s:
                await asyncio.sleep(self.gap_s)
            if self.mode == "break" and i == 2:
                assert request.transport is not None
                request.transport.close()
                return response
            if tools:
                piece = json.dumps(
                    {"tool_calls": [{"index": 0, "function": {"arguments": f"a{i}"}}]}
                )
                choice = (
                    b'[{"index":0,"delta":%s,"logprobs":null,"finish_reason":null}]'
                    % piece.encode()
                )
            elif chat:
                choice = (
                    b'[{"index":0,"delta":{"content":"t%d \xc3\xa9\\"q\\""},'
                    b'"logprobs":null,"finish_reason":null}]' % i
                )
            else:
                choice = b'[{"index":0,"text":"t%d","logprobs":null,"finish_reason":null}]' % i
            await response.write(send(choice, i + 1))
        await response.write(
            send(b'[{"index":0,"delta":{},"logprobs":null,"finish_reason":"length"}]', tokens)
        )
        if include:
            await response.write(b"data: " + head + b"[]," + usage(tokens) + b"}\n\n")
        await response.write(b"data: [DONE]\n\n")
        if self.done_tail_s:
            await asyncio.sleep(self.done_tail_s)
        await response.write_eof()
        return response

    async def start(self) -> Upstream:
        app = web.Application()
        app.router.add_route("*", "/v1/{tail:.*}", self.handle)
        self.runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
        await self.runner.setup()
        port = free_port()
        await web.TCPSite(self.runner, "127.0.0.1", port).start()
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()


@dataclass
class RunningRouter:
    router: Router
    url: str
    runner: web.AppRunner


UpstreamFactory = Callable[..., Awaitable[Upstream]]
RouterFactory = Callable[..., Awaitable[RunningRouter]]


@pytest.fixture
async def upstream() -> AsyncIterator[UpstreamFactory]:
    made: list[Upstream] = []

    async def make(mode: str = "ok", **kwargs: Any) -> Upstream:
        up = await Upstream(mode=mode, **kwargs).start()
        made.append(up)
        return up

    yield make
    for up in made:
        await up.stop()


def topology(
    serving: list[str],
    shadow: list[str] | None = None,
    share: float = 0.0,
    arm: str = "speculative",
    load_match: LoadMatch = "in_flight",
) -> Topology:
    top = Topology()
    serving_arm: Any = arm
    shadow_arm: Any = "baseline" if arm == "speculative" else "speculative"
    top.set_roles(serving_arm, share, load_match=load_match)
    top.set_endpoints(
        [Endpoint(f"serve-{i}", u, serving_arm) for i, u in enumerate(serving)]
        + [Endpoint(f"shadow-{i}", u, shadow_arm) for i, u in enumerate(shadow or [])]
    )
    return top


@pytest.fixture
async def start_router() -> AsyncIterator[RouterFactory]:
    made: list[RunningRouter] = []

    async def make(top: Topology, config: RouterConfig | None = None) -> RunningRouter:
        router = Router(top, config)
        runner = web.AppRunner(router.app(), handler_cancellation=True, access_log=None)
        await runner.setup()
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        running = RunningRouter(router, f"http://127.0.0.1:{port}", runner)
        made.append(running)
        return running

    yield make
    for running in made:
        await running.runner.cleanup()


async def wait_for(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.01)


class Helpers:
    """Plain helpers handed to tests as a fixture (test modules cannot import conftest
    under --import-mode=importlib)."""

    topology = staticmethod(topology)
    wait_for = staticmethod(wait_for)
    free_port = staticmethod(free_port)


@pytest.fixture
def h() -> type[Helpers]:
    return Helpers
