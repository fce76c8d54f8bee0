"""Tool-call validity: fragments assembled as the stream delivers them, checked against the
request's tool schema; the schema subset agrees with the ``jsonschema`` package."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specguard.meter import StreamMeter, measure_json, to_sample
from specguard.toolcalls import MAX_ARGUMENT_BYTES, ToolCallCheck, schema_accepts

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "minLength": 1},
                "unit": {"enum": ["c", "f"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 14},
            },
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}
FREE = {"type": "function", "function": {"name": "search"}}  # no parameters: any object
BODY = {"messages": [{"role": "user", "content": "x"}], "tools": [WEATHER, FREE]}


def chunk(calls: list[dict[str, Any]], tokens: int) -> bytes:
    data = {
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {"tool_calls": calls}, "finish_reason": None}],
        "usage": {"prompt_tokens": 5, "completion_tokens": tokens},
    }
    return b"data: " + json.dumps(data).encode() + b"\n\n"


def streamed(name: str | None, arguments: str, pieces: int = 5) -> str | None:
    """The result for a stream that sends ``arguments`` in ``pieces`` fragments, cut at
    arbitrary byte boundaries of the SSE stream too."""
    check = ToolCallCheck.for_request(BODY)
    assert check is not None
    meter = StreamMeter(0.0, check)
    size = max(1, len(arguments) // pieces)
    parts = [arguments[i : i + size] for i in range(0, len(arguments), size)] or [""]
    stream = b""
    for i, part in enumerate(parts):
        call: dict[str, Any] = {"index": 0, "function": {"arguments": part}}
        if i == 0:
            call = {"index": 0, "id": "c1", "type": "function",
                    "function": {"name": name, "arguments": part}}  # fmt: skip
            if name is None:
                del call["function"]["name"]
        stream += chunk([call], i + 1)
    stream += b"data: [DONE]\n\n"
    for at in range(0, len(stream), 7):  # 7-byte reads: events split anywhere
        meter.feed(stream[at : at + 7], 1.0 + at)
    return meter.finish(99.0).tool_call


@pytest.mark.parametrize(
    ("name", "arguments", "result"),
    [
        ("get_weather", '{"city": "Oslo", "unit": "c", "days": 3}', "valid"),
        ("get_weather", '{"city": "Oslo"}', "valid"),
        ("get_weather", "", "empty"),
        ("get_weather", "   ", "empty"),
        ("get_weather", '{"city": "Oslo", "unit": "c"', "invalid_json"),
        ("get_weather", '["Oslo"]', "invalid_json"),
        ("get_weather", '{"unit": "c"}', "invalid_schema"),  # city is required
        ("get_weather", '{"city": "Oslo", "days": 30}', "invalid_schema"),
        ("get_weather", '{"city": "Oslo", "days": 2.5}', "invalid_schema"),
        ("get_weather", '{"city": "Oslo", "unit": "k"}', "invalid_schema"),
        ("get_weather", '{"city": "Oslo", "wind": true}', "invalid_schema"),
        ("get_weather", '{"city": ""}', "invalid_schema"),
        ("search", '{"anything": [1, 2]}', "valid"),
        ("send_email", '{"to": "a"}', "unknown_tool"),
        (None, '{"city": "Oslo"}', "unknown_tool"),
    ],
)
def test_streamed_tool_calls_are_assembled_and_checked(
    name: str | None, arguments: str, result: str
) -> None:
    assert streamed(name, arguments) == result


def test_text_answers_and_requests_without_tools() -> None:
    check = ToolCallCheck.for_request(BODY)
    assert check is not None
    meter = StreamMeter(0.0, check)
    text = {"choices": [{"index": 0, "delta": {"content": "no call"}}]}
    meter.feed(b"data: " + json.dumps(text).encode() + b"\n\ndata: [DONE]\n\n", 1.0)
    assert meter.finish(2.0).tool_call == "none"
    assert ToolCallCheck.for_request({"messages": []}) is None
    assert ToolCallCheck.for_request({**BODY, "tool_choice": "none"}) is None
    plain = StreamMeter(0.0)
    plain.feed(b"data: " + json.dumps(text).encode() + b"\n\n", 1.0)
    assert plain.finish(2.0).tool_call is None


def test_parallel_calls_are_checked_each_by_its_index() -> None:
    check = ToolCallCheck.for_request(BODY)
    assert check is not None
    first = {"index": 0, "function": {"name": "get_weather", "arguments": '{"city":'}}
    second = {"index": 1, "function": {"name": "search", "arguments": '{"q": 1}'}}
    check.observe([{"delta": {"tool_calls": [first, second]}}])
    check.observe([{"delta": {"tool_calls": [{"index": 0, "function": {"arguments": '"x"}'}}]}}])
    assert check.result() == "valid"
    check.observe([{"delta": {"tool_calls": [{"index": 1, "function": {"arguments": "}"}}]}}])
    assert check.result() == "invalid_json"  # the second call now reads {"q": 1}}


def test_a_non_streamed_response_is_checked_from_its_message() -> None:
    body = {
        "choices": [
            {
                "message": {
                    "role": "assistant",
                    "tool_calls": [
                        {
                            "id": "1",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"days": 1}'},
                        }
                    ],
                }
            }
        ],
        "usage": {"completion_tokens": 9},
    }
    measured = measure_json(json.dumps(body).encode(), 0.0, 1.0, ToolCallCheck.for_request(BODY))
    assert measured.tool_call == "invalid_schema"
    sample = to_sample(measured, arm="speculative", role="shadow", pod="p", domain="tool_call",
                       concurrency=1, status=200)  # fmt: skip
    assert sample.tool_call == "invalid_schema"
    assert "get_weather" not in sample.to_json() and "days" not in sample.to_json()


def test_oversized_arguments_are_unchecked_and_not_kept() -> None:
    check = ToolCallCheck.for_request(BODY)
    assert check is not None
    piece = "x" * 65536
    for _ in range(MAX_ARGUMENT_BYTES // len(piece) + 1):
        check.observe([{"delta": {"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}}])
    assert check.result() == "unchecked"
    assert check._size > MAX_ARGUMENT_BYTES and not check._calls  # the text was dropped


def test_a_pathological_schema_is_bounded() -> None:
    # A oneOf nested 40 deep would be exponential to check naively; the bound answers
    # at once (nothing claimed about it: accepted).
    schema: Any = {"type": "integer"}
    for _ in range(40):
        schema = {"oneOf": [schema, schema]}
    assert schema_accepts(schema, 1) is True
    recursive = {"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}
    assert schema_accepts(recursive, 1) is True


# --- the schema subset against jsonschema (Draft 2020-12) ---------------------------------

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 5),
    st.sampled_from([0.5, 1.0, -2.0, 3.25]),
    st.sampled_from(["", "a", "ab", "abc", "Oslo"]),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(["a", "b", "c"]), inner, max_size=3)
    ),
    max_leaves=8,
)
TYPES = st.sampled_from(["object", "array", "string", "integer", "number", "boolean", "null"])


def _schemas(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    keyword = st.one_of(
        TYPES.map(lambda t: {"type": t}),
        st.lists(TYPES, min_size=1, max_size=3, unique=True).map(lambda ts: {"type": ts}),
        st.lists(SCALARS, min_size=1, max_size=3).map(lambda e: {"enum": e}),
        SCALARS.map(lambda v: {"const": v}),
        st.dictionaries(st.sampled_from(["a", "b", "c"]), inner, max_size=3).map(
            lambda p: {"properties": p}
        ),
        st.lists(st.sampled_from(["a", "b", "c"]), max_size=3, unique=True).map(
            lambda r: {"required": r}
        ),
        st.one_of(st.booleans(), inner).map(lambda a: {"additionalProperties": a}),
        inner.map(lambda i: {"items": i}),
        st.lists(inner, max_size=2).map(lambda p: {"prefixItems": p}),
        st.integers(0, 3).map(lambda n: {"minItems": n}),
        st.integers(0, 3).map(lambda n: {"maxItems": n}),
        st.integers(0, 3).map(lambda n: {"minLength": n}),
        st.integers(0, 3).map(lambda n: {"maxLength": n}),
        st.integers(-3, 3).map(lambda n: {"minimum": n}),
        st.integers(-3, 3).map(lambda n: {"maximum": n}),
        st.integers(-3, 3).map(lambda n: {"exclusiveMinimum": n}),
        st.integers(-3, 3).map(lambda n: {"exclusiveMaximum": n}),
        st.sampled_from([0.5, 2, 3]).map(lambda n: {"multipleOf": n}),
        st.lists(inner, min_size=1, max_size=3).map(lambda o: {"anyOf": o}),
        st.lists(inner, min_size=1, max_size=3).map(lambda o: {"oneOf": o}),
        st.lists(inner, min_size=1, max_size=3).map(lambda o: {"allOf": o}),
        inner.map(lambda n: {"not": n}),
    )

    def merge(parts: list[dict[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for part in parts:
            out.update(part)
        return out

    return st.lists(keyword, min_size=1, max_size=3).map(merge) | st.booleans()


SCHEMAS: st.SearchStrategy[Any] = st.recursive(st.just({}), _schemas, max_leaves=6)


@settings(
    max_examples=1500,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(schema=SCHEMAS, value=VALUES)
def test_the_schema_subset_agrees_with_jsonschema(schema: Any, value: Any) -> None:
    expected = jsonschema.Draft202012Validator(schema).is_valid(value)
    assert schema_accepts(schema, value) == expected, (schema, value)


@settings(max_examples=600, deadline=None, derandomize=True, database=None)
@given(schema=_schemas(st.just({})), value=SCALARS | st.lists(SCALARS, max_size=3))
def test_each_keyword_on_flat_values_agrees_with_jsonschema(schema: Any, value: Any) -> None:
    # Boundaries (a value equal to a bound, a length at the limit) are likely here.
    expected = jsonschema.Draft202012Validator(schema).is_valid(value)
    assert schema_accepts(schema, value) == expected, (schema, value)


@pytest.mark.parametrize(
    ("schema", "value", "valid"),
    [
        ({"$defs": {"c": {"type": "string"}}, "properties": {"a": {"$ref": "#/$defs/c"}}},
         {"a": "x"}, True),
        ({"$defs": {"c": {"type": "string"}}, "properties": {"a": {"$ref": "#/$defs/c"}}},
         {"a": 1}, False),
        ({"definitions": {"c": {"minimum": 2}}, "items": {"$ref": "#/definitions/c"}},
         [3, 1], False),
        ({"type": "integer"}, 2.0, True),
        ({"type": "integer"}, True, False),
        ({"enum": [1]}, True, False),
        ({"const": 1}, 1.0, True),
    ],
)  # fmt: skip
def test_local_references_and_json_equality(schema: Any, value: Any, valid: bool) -> None:
    assert jsonschema.Draft202012Validator(schema).is_valid(value) is valid
    assert schema_accepts(schema, value) is valid
