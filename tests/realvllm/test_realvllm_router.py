"""The router measures real vLLM streams: multi-token chunks (ngram), continuous usage, and a
per-token figure that agrees with the tokens and times seen.

A client streams through an in-process Router in front of one real server and times every
chunk itself; the router's sample must count the same tokens and give the same per-token
latency ((t_last - t_first) / (tokens - 1), never per chunk).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from specguard.judge import Arm
from specguard.router import Endpoint, Router, RouterConfig, Topology
from specguard_testkit import free_port
from specguard_testkit._realvllm import SERVED_NAME

pytestmark = pytest.mark.asyncio


@dataclass
class Seen:
    """One stream as the client saw it: the time and token count of each chunk with tokens,
    and whether any chunk carried ``usage``."""

    times: list[float] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    usage_chunks: int = 0
    role_chunk: bool = False

    @property
    def total(self) -> int:
        return sum(self.tokens)

    @property
    def per_token(self) -> float:
        return (self.times[-1] - self.times[0]) / (self.total - 1)

    @property
    def per_chunk(self) -> float:
        return (self.times[-1] - self.times[0]) / (len(self.times) - 1)


def chat(temperature: float, max_tokens: int, usage: bool = True) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": SERVED_NAME, "messages": [{"role": "user", "content": "Tell me a story."}],
        "max_tokens": max_tokens, "temperature": temperature, "ignore_eos": True, "stream": True,
    }  # fmt: skip
    if usage:
        body["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
    return body


async def stream(session: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> Seen:
    seen = Seen()
    count = 0
    async with session.post(url + "/v1/chat/completions", json=body) as resp:
        assert resp.status == 200, await resp.text()
        async for line in resp.content:
            if not line.startswith(b"data: {"):
                continue
            event = json.loads(line[6:])
            now = time.monotonic()
            if event.get("usage") is not None:
                seen.usage_chunks += 1
            choices = event.get("choices") or []
            if not choices:
                continue
            delta = choices[0].get("delta") or {}
            if delta.get("role") == "assistant" and not delta.get("content"):
                seen.role_chunk = True
                continue
            usage = event.get("usage")
            n = usage["completion_tokens"] - count if usage else 1
            count += n
            if n > 0:
                seen.times.append(now)
                seen.tokens.append(n)
    return seen


async def through_router(server_url: str, arm: Arm, bodies: list[dict[str, Any]]
                         ) -> tuple[list[Seen], list[Any]]:  # fmt: skip
    top = Topology()
    top.set_roles(arm, 0.0)
    top.set_endpoints([Endpoint("pod-0", server_url, arm)])
    router = Router(top, RouterConfig())
    runner = web.AppRunner(router.app(), handler_cancellation=True, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        async with aiohttp.ClientSession() as session:
            seen = [await stream(session, f"http://127.0.0.1:{port}", b) for b in bodies]
    finally:
        await runner.cleanup()
    return seen, list(router.feed.read(None, 1000).samples)


async def test_ngram_streams_are_measured_per_token(servers: Any) -> None:
    server = servers.get("ngram")
    seen, samples = await through_router(server.url, "speculative", [chat(0.0, 64)] * 4)
    assert len(samples) == 4
    for client, sample in zip(seen, samples, strict=True):
        assert sample.ok and sample.measurement == "stream_usage"
        assert client.total == sample.output_tokens == 64
        assert client.role_chunk  # vLLM's first chat chunk: role only, no token
        # ngram on a cycle: several tokens per chunk (k + 1 = 5 per engine step, more when
        # vLLM's API server falls behind and merges waiting steps into one chunk: 10 seen in
        # CI on two busy cores)
        assert max(client.tokens) > 1
        assert len(client.tokens) < 40
        assert sample.tpot_s is not None
        # the router's figure is the client's (a proxy hop apart): per token, not per chunk
        assert sample.tpot_s == pytest.approx(client.per_token, rel=0.25, abs=0.002)
        if client.per_chunk > 1.5 * client.per_token + 0.002:
            assert abs(sample.tpot_s - client.per_token) < abs(sample.tpot_s - client.per_chunk)


async def test_baseline_streams_counted_exactly(servers: Any) -> None:
    """Without a drafter a chunk is one engine step of one token — unless the API server falls
    behind the engine: then vLLM merges the waiting outputs of a request into one chunk (seen
    here on two busy cores), so even the baseline needs the usage count, not a chunk count."""
    server = servers.get("off")
    seen, samples = await through_router(server.url, "baseline", [chat(0.0, 32)] * 2)
    for client, sample in zip(seen, samples, strict=True):
        assert client.total == sample.output_tokens == 32
        assert len(client.tokens) > 8  # streamed, not one burst
        assert sample.tpot_s == pytest.approx(client.per_token, rel=0.25, abs=0.002)


async def test_router_asks_real_vllm_for_usage_and_strips_it(servers: Any) -> None:
    """A client that streams without stream_options: the router asks the server for
    continuous usage (exact token counts with multi-token chunks) and the client sees none."""
    server = servers.get("ngram")
    seen, samples = await through_router(server.url, "speculative",
                                         [chat(0.0, 48, usage=False)])  # fmt: skip
    assert seen[0].usage_chunks == 0
    assert samples[0].output_tokens == 48
    assert samples[0].measurement == "stream_usage"
