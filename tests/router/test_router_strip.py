"""Taking the router's own usage request back out of a stream, byte for byte."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specguard.meter import StreamMeter
from specguard.router._strip import UsageStripper, remove_member

USAGE = {"prompt_tokens": 3, "total_tokens": 5, "completion_tokens": 2}


@pytest.mark.parametrize(
    ("payload", "want"),
    [
        (
            b'{"id":"a","choices":[{"text":"x"}],"usage":{"prompt_tokens":3,"total_tokens":5,'
            b'"completion_tokens":2}}',
            b'{"id":"a","choices":[{"text":"x"}]}',
        ),
        # json.dumps default separators, usage in the middle
        (
            b'{"id": "a", "usage": {"prompt_tokens": 3, "total_tokens": 5, "completion_tokens": 2},'
            b' "choices": [{"text": "x"}]}',
            b'{"id": "a", "choices": [{"text": "x"}]}',
        ),
        # usage first
        (
            b'{"usage":{"prompt_tokens":3,"total_tokens":5,"completion_tokens":2},"choices":[]}',
            b'{"choices":[]}',
        ),
    ],
)
def test_remove_member_cuts_only_the_usage(payload: bytes, want: bytes) -> None:
    assert remove_member(payload, json.loads(payload)) == want


def test_nested_usage_details_are_cut_whole() -> None:
    chunk = {
        "id": "a",
        "choices": [{"text": "}{"}],
        "usage": {"prompt_tokens": 1, "prompt_tokens_details": {"cached_tokens": 0}},
    }
    payload = json.dumps(chunk, separators=(",", ":")).encode()
    assert remove_member(payload, chunk) == b'{"id":"a","choices":[{"text":"}{"}]}'


def test_text_that_looks_like_a_usage_key_is_left_alone() -> None:
    chunk = {"choices": [{"text": '"usage":{"x":1}'}], "usage": USAGE}
    payload = json.dumps(chunk, separators=(",", ":")).encode()
    out = remove_member(payload, chunk)
    assert json.loads(out) == {"choices": [{"text": '"usage":{"x":1}'}]}


def event(obj: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


STREAM = (
    event(
        {"choices": [{"delta": {"role": "assistant"}}], "usage": {**USAGE, "completion_tokens": 0}}
    )
    + b": comment\n\n"
    + event({"choices": [{"delta": {"content": "ab"}}], "usage": {**USAGE, "completion_tokens": 2}})
    + event({"choices": [], "usage": {**USAGE, "completion_tokens": 2}})
    + b"data: [DONE]\n\n"
)
WITHOUT = (
    event({"choices": [{"delta": {"role": "assistant"}}]})
    + b": comment\n\n"
    + event({"choices": [{"delta": {"content": "ab"}}]})
    + b"data: [DONE]\n\n"
)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=50), max_size=20))
def test_stream_rewrite_is_independent_of_reads(cuts: list[int]) -> None:
    meter = StreamMeter(0.0)
    stripper = UsageStripper(keep_final=False, meter=meter)
    out, pos = b"", 0
    for cut in cuts:
        out += stripper.feed(STREAM[pos : pos + cut], 1.0)
        pos += cut
    out += stripper.feed(STREAM[pos:], 1.0) + stripper.finish(1.0)
    assert out == WITHOUT
    measured = meter.finish(1.0)
    assert measured.output_tokens == 2 and measured.complete and measured.usage_seen


def test_keep_final_usage_chunk_when_client_asked() -> None:
    out = UsageStripper(keep_final=True).feed(STREAM)
    assert out.count(b'"usage"') == 1 and b'"choices":[],"usage"' in out


def test_events_without_usage_pass_untouched_and_tail_is_kept() -> None:
    stripper = UsageStripper(keep_final=False)
    assert stripper.feed(WITHOUT) == WITHOUT
    assert stripper.feed(b"data: {partial") == b""
    assert stripper.finish() == b"data: {partial"
