"""Tool calls the simulator returns: valid for the request's tool schema, or broken by
``--fault-invalid-tool-calls`` (read back with the router's own check)."""

from __future__ import annotations

import json
import random
from collections import Counter
from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specguard.meter import StreamMeter
from specguard.sim._launch import start_sim
from specguard.sim._options import OptionError, parse_options
from specguard.sim._tools import BREAKAGES, instance, tool_arguments
from specguard.toolcalls import ToolCallCheck

BOOKING = {
    "type": "object",
    "properties": {
        "origin": {"type": "string", "minLength": 3, "maxLength": 3},
        "destination": {"type": "string", "minLength": 3, "maxLength": 3},
        "date": {"type": "string"},
        "passengers": {"type": "integer", "minimum": 1, "maximum": 9},
        "cabin": {"enum": ["economy", "business"]},
        "flexible": {"type": "boolean"},
        "legs": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 3},
        "meta": {"type": "object", "properties": {"note": {"type": "string"}}},
    },
    "required": ["origin", "destination", "date", "passengers"],
    "additionalProperties": False,
}
TOOLS = [{"type": "function", "function": {"name": "book_flight", "parameters": BOOKING}}]


@settings(max_examples=200, deadline=None, derandomize=True)
@given(n=st.integers(1, 400), seed=st.integers(0, 2**32))
def test_arguments_fill_the_tokens_and_fit_the_schema(n: int, seed: int) -> None:
    parts = tool_arguments(random.Random(seed), BOOKING, n)
    assert len(parts) == n
    value = json.loads("".join(parts))
    jsonschema.validate(value, BOOKING)


@pytest.mark.parametrize("breakage", BREAKAGES)
def test_each_breakage_is_what_the_router_calls_it(breakage: Any) -> None:
    expected = {"truncated": "invalid_json", "empty": "empty", "schema": "invalid_schema"}
    check = ToolCallCheck.for_request({"tools": TOOLS})
    assert check is not None
    parts = tool_arguments(random.Random(1), BOOKING, 40, breakage)
    assert len(parts) == 40
    for i, part in enumerate(parts):
        function = {"arguments": part, **({"name": "book_flight"} if i == 0 else {})}
        check.observe([{"delta": {"tool_calls": [{"index": 0, "function": function}]}}])
    assert check.result() == expected[breakage]


def test_instances_of_unusual_schemas() -> None:
    rng = random.Random(0)
    for schema in (
        {"type": "object"},
        {"type": ["null", "integer"], "exclusiveMinimum": 3, "exclusiveMaximum": 5},
        {"anyOf": [{"type": "string"}, {"type": "integer"}]},
        {"const": {"a": 1}},
        {"type": "object", "required": ["x"]},  # required but not described
    ):
        jsonschema.validate(instance(schema, rng), schema)


def test_the_fault_rate_is_checked() -> None:
    with pytest.raises(OptionError, match="--fault-invalid-tool-calls: must be in"):
        parse_options(["m", "--fault-invalid-tool-calls", "1.5"])


async def _calls(url: str, n: int, *, stream: bool) -> Counter[str]:
    import aiohttp

    results: Counter[str] = Counter()
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "Book me a flight"}],
        "tools": TOOLS,
        "stream": stream,
        **({"stream_options": {"include_usage": True, "continuous_usage_stats": True}}
           if stream else {}),
    }  # fmt: skip
    async with aiohttp.ClientSession() as session:
        for _ in range(n):
            check = ToolCallCheck.for_request(body)
            async with session.post(url + "/v1/chat/completions", json=body) as response:
                assert response.status == 200
                if stream:
                    meter = StreamMeter(0.0, check)
                    async for data in response.content.iter_any():
                        meter.feed(data, 0.0)
                    result = meter.finish(1.0).tool_call
                else:
                    assert check is not None
                    check.observe((await response.json())["choices"])
                    result = check.result()
            assert result is not None
            results[result] += 1
    return results


async def test_a_simulator_answers_valid_calls_and_the_fault_breaks_some() -> None:
    args = ["m", "--time-scale", "0.01", "--seed", "3"]
    with start_sim(args) as good:
        assert await _calls(good.url, 12, stream=True) == Counter(valid=12)
        assert await _calls(good.url, 4, stream=False) == Counter(valid=4)
    with start_sim([*args, "--fault-invalid-tool-calls", "0.5"]) as broken:
        results = await _calls(broken.url, 60, stream=True)
    assert set(results) <= {"valid", "invalid_json", "empty", "invalid_schema"}
    assert 15 <= results["valid"] <= 45, results  # about half
    assert all(results[kind] >= 3 for kind in ("invalid_json", "empty", "invalid_schema"))
