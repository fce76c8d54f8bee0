"""Request validation as vLLM's API server does it: a malformed body gets a 400 with
vLLM's error JSON naming the field, never a traceback or a 500, and it does not count
toward --fail-after (vLLM refuses it before the engine sees it)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from specguard.sim._launch import SimProcess, start_sim

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def sim() -> Iterator[SimProcess]:
    # --fail-after 1: one counted request kills the engine, so a 400 that counted would
    # turn every later case into a 500
    with start_sim(["--fail-after", "1", "--max-model-len", "4096", "--time-scale", "0.01"]) as s:
        yield s


def _post(url: str, path: str, body: object) -> tuple[int, dict[str, object]]:
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})  # fmt: skip
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.load(resp)
    except urllib.error.HTTPError as err:
        return err.code, json.load(err)


BAD: list[tuple[str, object, str | None]] = [
    (COMPLETIONS, {"prompt": "hi", "stream": True, "stream_options": "x"}, "stream_options"),
    (COMPLETIONS, {"prompt": "hi", "stream": True, "stream_options": {"include_usage": "yes"}},
     "stream_options.include_usage"),
    (COMPLETIONS, {"prompt": "hi", "stream_options": {"include_usage": True}}, "stream_options"),
    (CHAT, {"messages": MESSAGES, "tools": "abc"}, "tools"),
    (CHAT, {"messages": MESSAGES, "tools": [{"type": "function"}]}, "tools.0.function"),
    (CHAT, {"messages": MESSAGES, "tools": [{"function": {"name": 3}}]}, "tools.0.function.name"),
    (COMPLETIONS, {"prompt": "hi", "max_tokens": "5"}, "max_tokens"),
    (COMPLETIONS, {"prompt": "hi", "max_tokens": 2.5}, "max_tokens"),
    (COMPLETIONS, {"prompt": "hi", "max_tokens": 0}, "max_tokens"),
    (CHAT, {"messages": MESSAGES, "max_completion_tokens": [1]}, "max_completion_tokens"),
    (CHAT, {"messages": "hi"}, "messages"),
    (CHAT, {"messages": ["hi"]}, "messages.0"),
    (CHAT, {}, "messages"),
    (COMPLETIONS, {"prompt": {"text": "hi"}}, "prompt"),
    (COMPLETIONS, {"prompt": [1, "a"]}, "prompt"),
    (COMPLETIONS, {}, "prompt"),
    (COMPLETIONS, {"prompt": "hi", "stream": "yes"}, "stream"),
    (COMPLETIONS, {"prompt": "hi", "model": 5}, "model"),
    (COMPLETIONS, {"prompt": "hi", "n": 2}, "n"),
    (COMPLETIONS, {"prompt": "hi", "max_tokens": 10**9}, "max_tokens"),  # over max_model_len
    (COMPLETIONS, [1, 2], None),  # not an object
]  # fmt: skip


def test_bad_bodies_get_400_naming_the_field_and_do_not_count(sim: SimProcess) -> None:
    for path, body, field in BAD:
        status, answer = _post(sim.url, path, body)
        assert status == 400, (body, answer)
        error = answer["error"]
        assert isinstance(error, dict), answer
        assert error["code"] == 400
        assert error["param"] == field, (body, error)
        if field is not None:
            assert field in str(error["message"]), error
    # none of them counted toward --fail-after 1: the engine is alive for one request
    assert _post(sim.url, COMPLETIONS, {"prompt": "hi", "max_tokens": 2})[0] == 200
    status, answer = _post(sim.url, COMPLETIONS, {"prompt": "hi", "max_tokens": 2})
    assert status == 500
    # and a dead engine still answers a malformed request 400: validation comes first
    assert _post(sim.url, CHAT, {"messages": MESSAGES, "tools": "abc"})[0] == 400
    log = sim.log_tail()
    assert "Traceback" not in log
    assert "Error handling request" not in log


def test_unknown_model_is_404_with_param() -> None:
    with start_sim(["--served-model-name", "m", "--time-scale", "0.01"]) as s:
        status, answer = _post(s.url, COMPLETIONS, {"model": "x", "prompt": "hi"})
    assert status == 404
    assert answer["error"] == {"message": "The model `x` does not exist. Valid aliases: m.",
                               "type": "NotFoundError", "param": "model", "code": 404}  # fmt: skip


def _usage_chunks(url: str, stream_options: dict[str, object]) -> list[dict[str, object]]:
    body = {"prompt": "hi", "max_tokens": 3, "stream": True, "stream_options": stream_options}
    req = urllib.request.Request(url + COMPLETIONS, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})  # fmt: skip
    with urllib.request.urlopen(req, timeout=10) as resp:
        lines = resp.read().decode().splitlines()
    events = [json.loads(x[6:]) for x in lines if x.startswith("data: {")]
    return [e for e in events if e.get("usage") is not None]


def test_stream_options_include_usage_defaults_to_true_as_in_vllm() -> None:
    # vLLM's StreamOptions has include_usage=True by default: sending the object at all
    # asks for the usage chunk; continuous_usage_stats alone turns on both
    with start_sim(["--time-scale", "0.01"]) as s:
        assert len(_usage_chunks(s.url, {})) == 1
        assert _usage_chunks(s.url, {"include_usage": False}) == []
        continuous = _usage_chunks(s.url, {"continuous_usage_stats": True})
    assert len(continuous) > 1
    assert continuous[-1]["choices"] == []
