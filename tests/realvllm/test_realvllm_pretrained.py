"""A pretrained model on real vLLM: SmolLM2-135M-Instruct (converted from PyPI's GGUF by
scripts/install-vllm-cpu.sh) served with no drafter, the ngram drafter and its layer-skipped
draft model, each with the args ``specguard render`` gives the arm. Greedy decoding gives the
same tokens on every arm, and each drafter's spec-decode counters count accepted drafts."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import pytest

from specguard._exposition import Reading, acceptance_between, parse_reading
from specguard_testkit import RealVllm
from specguard_testkit._realvllm import SERVED_NAME, pretrained_argv

MAX_TOKENS = 48
# Two chat prompts: an answer that quotes its context (ngram's case) and open chat.
PROMPTS: list[list[dict[str, str]]] = [
    [{"role": "system", "content": "Answer using only the passage. Quote it exactly."},
     {"role": "user", "content": "Passage: The Rhine flows from the Swiss Alps through Germany "
      "and the Netherlands into the North Sea. It is about 1,230 kilometres long.\n\n"
      "Question: Where does the Rhine flow, and how long is it?"}],
    [{"role": "user", "content": "What is the boiling point of water in Celsius?"}],
]  # fmt: skip


def _post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(url, json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})  # fmt: skip
    with urllib.request.urlopen(request, timeout=300) as resp:
        result: dict[str, Any] = json.loads(resp.read())
    return result


def _metrics(url: str) -> Reading:
    with urllib.request.urlopen(url + "/metrics", timeout=30) as resp:
        return parse_reading(resp.read().decode())


@pytest.fixture(scope="module")
def arms(real: RealVllm, servers: Any) -> dict[str, tuple[list[list[int]], Reading, Reading]]:
    """Per arm: the completion tokens of each prompt and /metrics before and after them.
    One server at a time (each holds the model; the draft arm two)."""
    out: dict[str, tuple[list[list[int]], Reading, Reading]] = {}
    for name in (None, "ngram", "skip-draft"):
        server = servers.start(pretrained_argv(real, name), f"smollm2 {name or 'off'}")
        try:
            before = _metrics(server.url)
            tokens: list[list[int]] = []
            for messages in PROMPTS:
                answer = _post(server.url + "/v1/chat/completions", {
                    "model": SERVED_NAME, "messages": messages, "max_tokens": MAX_TOKENS,
                    "temperature": 0.0, "return_token_ids": True,
                })  # fmt: skip
                tokens.append(list(answer["choices"][0]["token_ids"]))
            out[name or "off"] = (tokens, before, _metrics(server.url))
        finally:
            server.stop(timeout=30)
    return out


def test_greedy_output_is_the_same_with_every_drafter(arms: dict[str, Any]) -> None:
    baseline = arms["off"][0]
    assert all(len(t) > 8 for t in baseline), [len(t) for t in baseline]
    for name in ("ngram", "skip-draft"):
        # compared without printing the tokens (no completion text in logs)
        differing = [i for i, (a, b) in enumerate(zip(arms[name][0], baseline, strict=True))
                     if a != b]  # fmt: skip
        assert not differing, f"{name}: prompts {differing} decode differently from no drafter"


def test_the_drafters_counters_count_accepted_drafts(arms: dict[str, Any]) -> None:
    assert not arms["off"][2].has_spec_decode
    for name in ("ngram", "skip-draft"):
        _, before, after = arms[name]
        acceptance = acceptance_between(before, after)
        assert acceptance is not None and acceptance.drafts > 0, name
        # greedy: the target's own token plus at least one accepted draft token on average
        # over the drafts of this run (the reference measured ~2.5 for the skip draft at k=4)
        assert acceptance.length is not None and acceptance.length > 1.0, (name, acceptance)
