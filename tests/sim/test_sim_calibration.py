"""Kimi-K3-like calibration, measured by a streaming client against the running server.

Tolerances: the issue's ±15% on single-stream speed covers acceptance noise (a few
hundred draft steps give ~3% standard error on the mean acceptance length), timer
jitter on 2 shared cores and the prefill step; the tool/math ratio has ±10 points.
"""

from __future__ import annotations

import asyncio
import json
import statistics

import aiohttp
import pytest

from specguard._exposition import Samples, sample_value
from specguard.sim._launch import start_sim
from specguard_testkit._loadclient import StreamRecord, read_metrics, stream_once

DRAFTS = "vllm:spec_decode_num_drafts_total"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"

DSPARK_K8 = json.dumps(
    {"method": "dspark", "model": "org/kimi-dspark", "num_speculative_tokens": 8}
)
MATH_PROMPT = "Solve the equation 12x + 7 = 91 and prove the answer is unique."


async def _sequential(url: str, n: int, max_tokens: int) -> list[StreamRecord]:
    usage = {"include_usage": True, "continuous_usage_stats": True}
    body = json.dumps(
        {"prompt": MATH_PROMPT, "max_tokens": max_tokens, "stream": True, "stream_options": usage}
    )
    headers = {"Content-Type": "application/json"}
    async with aiohttp.ClientSession() as session:
        return [await stream_once(session, url, body.encode(), headers) for _ in range(n)]


def _tokens_per_second(args: list[str], scale: float, n: int, max_tokens: int) -> float:
    """Single-stream per-user speed in simulated tok/s: 1 / client-measured TPOT."""
    flags = ["--profile", "kimi-k3", "--time-scale", str(scale), "--seed", "7"]
    with start_sim([*args, *flags]) as sim:
        records = asyncio.run(_sequential(sim.url, n, max_tokens))
    tpots = [r.tpot for r in records if r.tpot is not None]
    assert len(tpots) == n
    return scale / statistics.fmean(tpots)


@pytest.mark.slow
@pytest.mark.parametrize("scale", [0.25, 1.0])
def test_kimi_single_stream_math_speed(scale: float) -> None:
    # The same published figures at two time scales: --time-scale must not move them.
    base = _tokens_per_second([], scale, 1, 160)
    spec = _tokens_per_second(["--speculative-config", DSPARK_K8], scale, 3, 400)
    assert base == pytest.approx(110, rel=0.15)
    assert spec == pytest.approx(435, rel=0.15)
    assert spec / base == pytest.approx(435 / 110, rel=0.15)


TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]


async def _chat_batch(url: str, bodies: list[dict[str, object]], concurrency: int) -> None:
    sem = asyncio.Semaphore(concurrency)
    async with aiohttp.ClientSession() as session:

        async def one(body: dict[str, object]) -> None:
            async with sem, session.post(url + "/v1/chat/completions", json=body) as resp:
                resp.raise_for_status()
                await resp.read()

        await asyncio.gather(*(one(b) for b in bodies))


def test_tool_calls_accept_about_43_percent_of_math_extra_tokens() -> None:
    args = ["--speculative-config", DSPARK_K8, "--profile", "kimi-k3", "--time-scale", "0.02"]
    math_body: dict[str, object] = {
        "messages": [{"role": "user", "content": MATH_PROMPT}],
        "max_tokens": 300,
        "stream": True,
    }
    tool_body: dict[str, object] = {
        "messages": [{"role": "user", "content": "Find the order status."}],
        "tools": TOOLS,
        "stream": True,
    }
    with start_sim([*args, "--seed", "11"]) as sim:
        s0 = read_metrics(sim.url)
        asyncio.run(_chat_batch(sim.url, [math_body] * 12, 6))
        s1 = read_metrics(sim.url)
        asyncio.run(_chat_batch(sim.url, [tool_body] * 60, 12))
        s2 = read_metrics(sim.url)

    def extra_per_step(a: Samples, b: Samples) -> float:
        drafts = sample_value(b, DRAFTS) - sample_value(a, DRAFTS)
        accepted = sample_value(b, ACCEPTED) - sample_value(a, ACCEPTED)
        assert drafts > 300  # enough draft steps for a ~3% standard error
        return accepted / drafts

    math_extra = extra_per_step(s0, s1)
    tool_extra = extra_per_step(s1, s2)
    # published Kimi K3: 5.42 (math) vs 2.33 (tool calling) extra tokens per step
    assert math_extra == pytest.approx(5.42, rel=0.08)
    assert tool_extra / math_extra == pytest.approx(0.43, abs=0.10)
