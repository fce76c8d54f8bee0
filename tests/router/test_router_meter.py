"""The streaming measurement core: SSE framing, token counting, timing, Sample building."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specguard.judge._sample import Sample
from specguard.meter import StreamMeter, measure_json, request_domain, to_sample


def event(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def chat(
    delta: dict[str, Any], usage: dict[str, int] | None = None, finish: str | None = None
) -> bytes:
    chunk: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    if usage is not None:
        chunk["usage"] = usage
    return event(chunk)


def completion(text: str, usage: dict[str, int] | None = None) -> bytes:
    chunk: dict[str, Any] = {"object": "text_completion", "choices": [{"index": 0, "text": text}]}
    if usage is not None:
        chunk["usage"] = usage
    return event(chunk)


def usage_chunk(prompt: int, completion_tokens: int) -> bytes:
    return event(
        {
            "object": "chat.completion.chunk",
            "choices": [],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt + completion_tokens,
            },
        }
    )


DONE = b"data: [DONE]\n\n"


def run(events: list[tuple[float, bytes]], end: float, start: float = 100.0) -> Any:
    meter = StreamMeter(start)
    for at, data in events:
        meter.feed(data, at)
    return meter.finish(end)


def test_chat_role_chunk_is_not_a_token_and_chunks_count_without_usage() -> None:
    m = run(
        [
            (100.05, chat({"role": "assistant", "content": ""})),
            (100.10, chat({"content": "a"})),
            (100.12, chat({"content": "b"})),
            (100.14, chat({"content": "c"})),
            (100.15, chat({}, finish="stop")),
            (100.15, DONE),
        ],
        end=100.2,
    )
    assert m.ttft_s == pytest.approx(0.10)
    assert m.output_tokens == 3
    assert m.tpot_s == pytest.approx(0.02)
    assert m.chunk_tpot_s is None
    assert m.measurement == "stream_chunks"
    assert not m.usage_seen
    assert m.complete
    assert m.e2e_s == pytest.approx(0.2)


def test_continuous_usage_counts_tokens_packed_in_a_chunk() -> None:
    # A drafter step emits several tokens in one chunk: 1, then 4, then 3 tokens.
    m = run(
        [
            (
                100.05,
                chat(
                    {"role": "assistant", "content": ""},
                    {"prompt_tokens": 7, "completion_tokens": 0},
                ),
            ),
            (100.10, chat({"content": "a"}, {"prompt_tokens": 7, "completion_tokens": 1})),
            (100.14, chat({"content": "bcde"}, {"prompt_tokens": 7, "completion_tokens": 5})),
            (100.17, chat({"content": "fgh"}, {"prompt_tokens": 7, "completion_tokens": 8})),
            (100.17, chat({}, {"prompt_tokens": 7, "completion_tokens": 8}, finish="stop")),
            (100.18, usage_chunk(7, 8)),
            (100.18, DONE),
        ],
        end=100.19,
    )
    assert m.output_tokens == 8
    assert m.prompt_tokens == 7
    assert m.ttft_s == pytest.approx(0.10)
    # (t_last - t_first) / (tokens - 1), per token, not per chunk.
    assert m.tpot_s == pytest.approx(0.07 / 7)
    # Median of chunk gap / tokens in the chunk: 0.04/4 and 0.03/3.
    assert m.chunk_tpot_s == pytest.approx(0.01)
    assert m.measurement == "stream_usage"
    assert m.token_chunks == 3


def test_final_usage_only_fixes_total_but_not_chunk_rates() -> None:
    m = run(
        [
            (100.1, completion("ab")),
            (100.2, completion("cd")),
            (100.3, completion("ef")),
            (100.3, usage_chunk(3, 6)),
            (100.3, DONE),
        ],
        end=100.3,
    )
    assert m.output_tokens == 6
    assert m.tpot_s == pytest.approx(0.2 / 5)
    assert m.chunk_tpot_s is None
    assert m.measurement == "stream_usage"
    assert m.prompt_tokens == 3


def test_tool_call_deltas_are_tokens() -> None:
    m = run(
        [
            (100.01, chat({"role": "assistant", "content": None})),
            (
                100.02,
                chat(
                    {
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": "call_1",
                                "type": "function",
                                "function": {"name": "get_weather", "arguments": ""},
                            }
                        ]
                    }
                ),
            ),
            (100.03, chat({"tool_calls": [{"index": 0, "function": {"arguments": '{"city":'}}]})),
            (100.04, chat({"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]})),
            (100.05, chat({}, finish="tool_calls")),
            (100.05, DONE),
        ],
        end=100.05,
    )
    assert m.output_tokens == 3
    assert m.ttft_s == pytest.approx(0.02)


def test_reasoning_deltas_are_tokens() -> None:
    m = run(
        [(100.1, chat({"reasoning_content": "hm"})), (100.2, chat({"content": "x"}))], end=100.2
    )
    assert m.output_tokens == 2


def test_comments_crlf_and_events_split_anywhere() -> None:
    body = (
        b": keep-alive\r\n\r\n"
        + chat({"role": "assistant"}).replace(b"\n", b"\r\n")
        + chat({"content": "x"}, {"completion_tokens": 1})
        + b": ping\n\n"
        + chat({"content": "yz"}, {"completion_tokens": 3})
        + DONE
    )
    whole = run([(100.5, body)], end=101.0)
    # Same bytes one at a time: counts must not depend on how reads split them.
    meter = StreamMeter(100.0)
    for i in range(len(body)):
        meter.feed(body[i : i + 1], 100.5)
    split = meter.finish(101.0)
    assert whole.output_tokens == split.output_tokens == 3
    assert whole.complete and split.complete


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=40), min_size=1, max_size=30))
def test_framing_is_independent_of_read_boundaries(cuts: list[int]) -> None:
    body = b"".join(chat({"content": "t"}, {"completion_tokens": i + 1}) for i in range(10)) + DONE
    meter = StreamMeter(0.0)
    pos = 0
    for cut in cuts:
        meter.feed(body[pos : pos + cut], 1.0)
        pos += cut
    meter.feed(body[pos:], 1.0)
    m = meter.finish(1.0)
    assert m.output_tokens == 10 and m.complete


def test_multi_line_data_event_is_joined() -> None:
    payload = json.dumps({"choices": [{"delta": {"content": "x"}}]}, indent=1).encode()
    body = b"".join(b"data: " + line + b"\n" for line in payload.split(b"\n")) + b"\n"
    assert run([(100.1, body)], end=100.2).output_tokens == 1


def test_cut_off_stream_is_incomplete_and_counts_what_arrived() -> None:
    m = run(
        [
            (100.1, chat({"content": "a"}, {"completion_tokens": 1})),
            (100.2, chat({"content": "b"}, {"completion_tokens": 2})[:-5]),
        ],
        end=100.3,
    )
    assert not m.complete
    assert m.output_tokens == 1


def test_last_event_without_blank_line_still_counts() -> None:
    m = run(
        [(100.1, chat({"content": "a"})), (100.2, chat({"content": "b"}).rstrip(b"\n"))], end=100.3
    )
    assert m.output_tokens == 2


def test_error_event_marks_stream_failed() -> None:
    m = run(
        [
            (100.1, chat({"content": "a"})),
            (
                100.2,
                event({"error": {"message": "boom", "type": "InternalServerError", "code": 500}}),
            ),
        ],
        end=100.2,
    )
    assert m.error_seen
    sample = to_sample(
        m, arm="speculative", role="serving", pod="p", domain="chat", concurrency=1, status=200
    )
    assert sample.status == 500


def test_no_tokens_gives_no_ttft_no_tpot() -> None:
    m = run([(100.1, chat({"role": "assistant"})), (100.1, DONE)], end=100.1)
    assert m.output_tokens == 0 and m.ttft_s is None and m.tpot_s is None


def test_single_token_has_no_tpot() -> None:
    m = run([(100.1, completion("a")), (100.1, usage_chunk(2, 1))], end=100.1)
    assert m.output_tokens == 1 and m.tpot_s is None and m.ttft_s == pytest.approx(0.1)


def test_oversized_line_stops_parsing_without_growing() -> None:
    meter = StreamMeter(0.0)
    meter.feed(b"data: " + b"x" * (1 << 20) + b"y" * 10, 1.0)
    meter.feed(chat({"content": "a"}), 1.0)
    assert meter.finish(1.0).output_tokens == 0


def test_measure_json_non_stream() -> None:
    body = json.dumps(
        {
            "object": "chat.completion",
            "choices": [{"message": {"content": "hi"}}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 20},
        }
    ).encode()
    m = measure_json(body, 10.0, 10.5)
    assert m.measurement == "non_stream"
    assert m.ttft_s is None
    assert m.output_tokens == 20
    assert m.tpot_s == pytest.approx(0.5 / 20)
    assert m.prompt_tokens == 5


def test_measure_json_error_and_garbage() -> None:
    err = measure_json(b'{"error": {"message": "bad"}}', 0.0, 0.1)
    assert err.error_seen and err.output_tokens == 0 and err.tpot_s is None
    junk = measure_json(b"not json", 0.0, 0.1)
    assert not junk.complete and junk.output_tokens == 0


def test_to_sample_round_trips_through_the_schema() -> None:
    m = run(
        [
            (100.1, chat({"content": "a"}, {"prompt_tokens": 4, "completion_tokens": 1})),
            (100.2, chat({"content": "bc"}, {"prompt_tokens": 4, "completion_tokens": 3})),
            (100.2, DONE),
        ],
        end=100.25,
    )
    sample = to_sample(
        m,
        arm="baseline",
        role="shadow",
        pod="10.0.0.1:8000",
        domain="chat",
        concurrency=3,
        status=200,
        pair_id="abc",
        started_at=1.7e9,
    )
    assert Sample.from_dict(json.loads(sample.to_json())) == sample
    assert sample.started_at == 1.7e9
    assert sample.output_tokens == 3 and sample.chunk_tpot_s == pytest.approx(0.05)
    assert sample.pair_id == "abc" and sample.role == "shadow" and sample.arm == "baseline"


def test_request_domain() -> None:
    assert request_domain({"tools": [{"type": "function"}]}, "/v1/chat/completions") == "tool_call"
    assert request_domain({"messages": []}, "/v1/chat/completions") == "chat"
    assert request_domain({"prompt": "x"}, "/v1/completions") == "completion"
    assert request_domain({"prompt": "x"}, "/v1/completions", "Math") == "math"
    assert request_domain({"tools": []}, "/v1/chat/completions", None) == "chat"
    # A header that is not a plain short tag is ignored (it becomes a metric label).
    assert request_domain(None, "/v1/chat/completions", "x" * 100) == "chat"
    assert request_domain(None, "/v1/chat/completions", "a b{c}") == "chat"


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.sampled_from([b"\n", b"\r\n"]), min_size=12, max_size=12),
    st.lists(st.integers(min_value=1, max_value=60), min_size=1, max_size=20),
)
def test_meter_and_usage_stripper_frame_alike(ends: list[bytes], cuts: list[int]) -> None:
    # One SSE framer (meter.sse_event_end / sse_event_data) serves both the meter and the
    # router's usage stripper: the same stream, with LF, CRLF or mixed line ends and split
    # anywhere, measures the same either way.
    from specguard.router._strip import UsageStripper

    events = [chat({"role": "assistant"}), b": ping\n\n"]
    events += [chat({"content": "t"}, {"completion_tokens": i + 1}) for i in range(9)]
    events.append(DONE)
    body = b"".join(e.replace(b"\n", end) if end != b"\n" else e
                    for e, end in zip(events, ends, strict=True))  # fmt: skip
    direct, attached = StreamMeter(0.0), StreamMeter(0.0)
    stripper = UsageStripper(keep_final=True, meter=attached)
    passed = b""
    pos = 0
    for cut in [*cuts, len(body)]:
        piece = body[pos : pos + cut]
        pos += len(piece)
        direct.feed(piece, float(pos))
        passed += stripper.feed(piece, float(pos))
    passed += stripper.finish(float(pos))
    a, b = direct.finish(1e6), attached.finish(1e6)
    assert a == b and a.output_tokens == 9 and a.complete
    assert passed.count(b"[DONE]") == 1
