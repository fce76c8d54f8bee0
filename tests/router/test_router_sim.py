"""The router in front of the real simulator (`specguard sim`), with real clients.

Two simulators started with the same seed and arguments answer their first requests
identically, except the per-request random id and the wall-clock ``created`` second; those
two fields are the only ones normalised before comparing bytes.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

import aiohttp
import openai

from specguard.sim._launch import SimProcess, start_sim

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletionToolParam
    from tests.router.conftest import Helpers, RouterFactory

DRAFTER = json.dumps({"method": "dspark", "model": "drafter", "num_speculative_tokens": 8})
# Time scale 0.05: engine steps of ~1 ms instead of ~20 ms keep these tests fast.
SPEC = ["m", "--seed", "7", "--time-scale", "0.05", "--speculative-config", DRAFTER]
BASE = ["m", "--seed", "7", "--time-scale", "0.05"]


def normalise(body: bytes) -> bytes:
    body = re.sub(rb'"id":\s*"(chatcmpl|cmpl)-[0-9a-f]+"', rb'"id":"ID"', body)
    return re.sub(rb'"created":\s*\d+', rb'"created":0', body)


SIMS = {"direct": SPEC, "serving": SPEC, "shadow": BASE}  # the ``sims`` fixture's


async def fetch(url: str, body: dict[str, Any]) -> bytes:
    async with aiohttp.ClientSession() as s, s.post(url, json=body) as r:
        assert r.status == 200
        return await r.read()


async def test_stream_through_router_matches_direct_simulator(
    sims: dict[str, SimProcess], start_router: RouterFactory, h: type[Helpers]
) -> None:
    # Fresh simulators: these are the first requests each sees, so the seeds line up.
    direct, serving = start_sim(SPEC), start_sim(SPEC)
    try:
        rt = await start_router(h.topology([serving.url]))
        cases = [
            (
                "/v1/chat/completions",
                {
                    "model": "m",
                    "messages": [{"role": "user", "content": "hi"}],
                    "max_tokens": 24,
                    "stream": True,
                },
            ),
            (
                "/v1/chat/completions",
                {
                    "model": "m",
                    "messages": [{"role": "user", "content": "hi"}],
                    "max_tokens": 24,
                    "stream": True,
                    "stream_options": {"include_usage": True},
                },
            ),
            ("/v1/completions", {"model": "m", "prompt": "x", "max_tokens": 24, "stream": True}),
        ]
        for path, body in cases:
            want = await fetch(direct.url + path, body)
            got = await fetch(rt.url + path, body)
            assert normalise(got) == normalise(want), path
            assert (b'"usage"' in got) == ("stream_options" in body)
        samples = rt.router.feed.read(None, 10).samples
        assert [s.measurement for s in samples] == ["stream_usage"] * 3
        assert all(s.output_tokens == 24 for s in samples)
    finally:
        direct.stop()
        serving.stop()


async def test_openai_sdk_streaming_tools_through_router(
    sims: dict[str, SimProcess], start_router: RouterFactory, h: type[Helpers]
) -> None:
    rt = await start_router(h.topology([sims["serving"].url], [sims["shadow"].url], share=1.0))
    client = openai.AsyncOpenAI(base_url=rt.url + "/v1", api_key="unused")
    tools: list[ChatCompletionToolParam] = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        }
    ]
    stream = await client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "weather in Paris?"}], tools=tools,
        max_tokens=32, stream=True, stream_options={"include_usage": True},
    )  # fmt: skip
    calls, usage = 0, None
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.tool_calls:
            calls += 1
        if chunk.usage is not None:
            usage = chunk.usage
    assert calls > 0 and usage is not None
    await h.wait_for(lambda: len(rt.router.feed) == 2, timeout=10)
    samples = {s.role: s for s in rt.router.feed.read(None, 10).samples}
    assert samples["serving"].domain == samples["shadow"].domain == "tool_call"
    assert samples["serving"].output_tokens == usage.completion_tokens
    assert samples["serving"].pair_id == samples["shadow"].pair_id is not None
    assert samples["serving"].arm == "speculative" and samples["shadow"].arm == "baseline"
    assert samples["shadow"].measurement == "stream_usage"
    await client.close()


async def test_openai_sdk_completions_through_router(
    sims: dict[str, SimProcess], start_router: RouterFactory, h: type[Helpers]
) -> None:
    rt = await start_router(h.topology([sims["serving"].url]))
    client = openai.AsyncOpenAI(base_url=rt.url + "/v1", api_key="unused")
    text = ""
    async for chunk in await client.completions.create(
        model="m", prompt="Once", max_tokens=16, stream=True
    ):
        text += chunk.choices[0].text if chunk.choices else ""
    assert text
    whole = await client.completions.create(model="m", prompt="Once", max_tokens=16)
    assert whole.usage is not None and whole.usage.completion_tokens == 16
    chat = await client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=8
    )
    assert chat.choices[0].message.content
    models = await client.models.list()
    assert [m.id for m in models.data] == ["m"]
    samples = rt.router.feed.read(None, 10).samples
    assert [s.measurement for s in samples] == ["stream_usage", "non_stream", "non_stream"]
    assert samples[0].output_tokens == 16 and samples[0].domain == "completion"
    await client.close()


async def test_drafter_chunks_pack_tokens_and_sample_counts_them(
    sims: dict[str, SimProcess], start_router: RouterFactory, h: type[Helpers]
) -> None:
    rt = await start_router(h.topology([sims["serving"].url]))
    body = {"model": "m", "prompt": "x", "max_tokens": 64, "stream": True}
    raw = await fetch(rt.url + "/v1/completions", body)
    chunks = raw.count(b"data: {")
    [sample] = rt.router.feed.read(None, 10).samples
    # A DSpark drafter emits several tokens per step: fewer chunks than tokens, and the
    # sample counts tokens (from usage), not chunks.
    assert sample.output_tokens == 64 and chunks < 64
    assert sample.tpot_s is not None and sample.chunk_tpot_s is not None
