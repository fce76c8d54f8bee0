"""The simulator's OpenAI-compatible surface, driven by the official openai SDK."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator

import openai
import pytest
from openai.types.chat import ChatCompletionToolParam

from specguard.sim._launch import SimProcess, start_sim

SPEC = json.dumps({"method": "dspark", "model": "org/kimi-dspark", "num_speculative_tokens": 8})
TOOLS: list[ChatCompletionToolParam] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "weather for a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]


@pytest.fixture(scope="module")
def sim() -> Iterator[SimProcess]:
    args = ["org/kimi", "--served-model-name", "kimi", "--speculative-config", SPEC,
            "--profile", "kimi-k3", "--time-scale", "0.05", "--seed", "1"]  # fmt: skip
    with start_sim(args) as proc:
        yield proc


@pytest.fixture
def client(sim: SimProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=sim.url + "/v1", api_key="none", max_retries=0)


def test_models_lists_served_name(sim: SimProcess) -> None:
    with urllib.request.urlopen(sim.url + "/v1/models") as resp:
        body = json.load(resp)
    assert [m["id"] for m in body["data"]] == ["kimi"]
    assert body["data"][0]["root"] == "org/kimi"


def test_health_ok(sim: SimProcess) -> None:
    with urllib.request.urlopen(sim.url + "/health") as resp:
        assert resp.status == 200


def test_streaming_chat_counts_tokens_per_chunk(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model="kimi",
        messages=[{"role": "user", "content": "Solve the equation 3x + 5 = 20."}],
        max_tokens=64,
        stream=True,
        # continuous_usage_stats is vLLM's extension, not in the SDK's types
        extra_body={"stream_options": {"include_usage": True, "continuous_usage_stats": True}},
    )
    chunks = list(stream)
    first, *content, usage_chunk = chunks
    assert first.choices[0].delta.role == "assistant"
    assert first.choices[0].delta.content == ""
    counts = [c.usage.completion_tokens for c in content if c.usage]
    assert counts[-1] == 64
    steps = [b - a for a, b in zip([0, *counts], counts, strict=False)]
    # a drafter packs several tokens into one chunk, never more than k + 1 = 9
    assert max(steps) > 1
    assert all(1 <= s <= 9 for s in steps)
    text = "".join(c.choices[0].delta.content or "" for c in content)
    assert len(text.split()) == 64  # one filler word per token
    assert content[-1].choices[0].finish_reason == "length"
    assert usage_chunk.choices == []
    assert usage_chunk.usage is not None
    assert usage_chunk.usage.completion_tokens == 64
    assert usage_chunk.usage.total_tokens == usage_chunk.usage.prompt_tokens + 64


def test_streaming_chat_with_tools_returns_tool_calls(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model="kimi",
        messages=[{"role": "user", "content": "What is the weather in Paris?"}],
        tools=TOOLS,
        stream=True,
    )
    name, arguments, finish = None, "", None
    for chunk in stream:
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        for call in choice.delta.tool_calls or []:
            if call.function and call.function.name:
                name = call.function.name
            arguments += (call.function.arguments or "") if call.function else ""
        finish = choice.finish_reason or finish
    assert name == "get_weather"
    assert finish == "tool_calls"
    assert isinstance(json.loads(arguments), dict)


def test_streaming_completion(client: openai.OpenAI) -> None:
    stream = client.completions.create(
        model="kimi", prompt="Once upon a time", max_tokens=30, stream=True
    )
    chunks = list(stream)
    assert all(c.object == "text_completion" for c in chunks)
    text = "".join(c.choices[0].text for c in chunks)
    assert len(text.split()) == 30
    assert chunks[-1].choices[0].finish_reason == "length"


def test_non_streaming_chat_and_tools(client: openai.OpenAI) -> None:
    plain = client.chat.completions.create(
        model="kimi", messages=[{"role": "user", "content": "hello"}], max_tokens=12
    )
    assert plain.choices[0].finish_reason == "length"
    assert plain.usage is not None and plain.usage.completion_tokens == 12
    assert len((plain.choices[0].message.content or "").split()) == 12
    tool = client.chat.completions.create(
        model="kimi",
        messages=[{"role": "user", "content": "weather?"}],
        tools=TOOLS,
    )
    calls = tool.choices[0].message.tool_calls or []
    assert tool.choices[0].finish_reason == "tool_calls"
    assert calls[0].function.name == "get_weather"  # type: ignore[union-attr]
    assert isinstance(json.loads(calls[0].function.arguments), dict)  # type: ignore[union-attr]


def test_non_streaming_completion_without_max_tokens_stops(client: openai.OpenAI) -> None:
    done = client.completions.create(model="kimi", prompt="hi")
    assert done.choices[0].finish_reason == "stop"
    assert done.usage is not None and done.usage.completion_tokens >= 1


def test_unknown_model_is_404(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="nope", prompt="hi", max_tokens=2)
