"""``sources`` on real vLLM's /metrics, and the speculation guardrails on real counters.

How real vLLM is made to show each case, legitimately (the tiny models are bigram cycles:
greedy decoding repeats an 8-token cycle, temperature 1 is near-uniform noise):

- healthy speculation: ngram (prompt_lookup_min 2) on greedy completions — it matches the
  cycle, nearly every draft token is accepted;
- NothingToPropose: the same ngram server on sampled completions — no 2-gram of the noise
  ever recurs, so ngram proposes nothing: the counters are exported (the drafter is in
  effect) and stay at 0 — told apart from SpeculationOff, where they are absent;
- SpeculationOff, no counters: a drafter arm whose server has no --speculative-config (the
  baseline server): real vLLM exports no spec_decode family at all;
- RungNotInEffect: the ngram server (k = 4) on greedy completions, judged as if its rung asked
  for k = 2: the counters show 4 draft tokens per draft, so the engine does not run the rung
  it was given (the operator cannot read the speculative config the engine runs; it checks
  what it does);
- AcceptanceCollapsed: the draft_model drafter with a draft built on another permutation
  (a wrong draft for this target): it drafts every step and the target rejects nearly all.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import httpx
import pytest

from specguard.judge import GUARDRAILS, ArmErrors, DrafterRun, Evidence, PolicySettings
from specguard.render._vllm import INTER_TOKEN_LATENCY_BUCKETS
from specguard.sources import (
    Reading,
    acceptance_between,
    draft_counters,
    parse_reading,
    parse_samples,
)
from specguard_testkit._realvllm import SERVED_NAME


def reading(url: str) -> Reading:
    return parse_reading(httpx.get(url + "/metrics", timeout=10).text)


def complete(url: str, n: int, temperature: float, max_tokens: int = 48) -> int:
    """``n`` non-streamed completions at once; returns the tokens generated."""

    async def run() -> int:
        async with httpx.AsyncClient(timeout=120) as client:
            body = {"model": SERVED_NAME, "prompt": "Once upon a time", "max_tokens": max_tokens,
                    "temperature": temperature, "ignore_eos": True}  # fmt: skip
            answers = await asyncio.gather(
                *(client.post(url + "/v1/completions", json=body) for _ in range(n))
            )
            for a in answers:
                assert a.status_code == 200, a.text
            return sum(int(a.json()["usage"]["completion_tokens"]) for a in answers)

    return asyncio.run(run())


NGRAM = DrafterRun("ngram", 4)  # what the ngram server runs


def guardrail(before: Mapping[str, Reading], after: Mapping[str, Reading], requests: int,
              drafter: DrafterRun = NGRAM) -> tuple[str, str] | None:  # fmt: skip
    """The operator's guardrails (judge.GUARDRAILS) on the drafter arm's readings at both ends
    of a window in which it served ``requests``, its rung ``drafter``: (cause, message) of the
    first that trips."""
    evidence = Evidence(speculation=draft_counters(before, after), drafter=drafter,
                        errors=ArmErrors(spec_requests=requests))  # fmt: skip
    settings = PolicySettings(speculation_min_requests=requests)
    for check in GUARDRAILS:
        trip = check(evidence, settings, 0.0)
        if trip is not None:
            return trip.cause, trip.message
    return None


def test_sources_read_real_spec_decode_counters_and_tpot(servers: Any) -> None:
    url = servers.get("ngram").url
    before = reading(url)
    assert before.has_spec_decode and before.positions == 4  # k = 4: positions 0..3
    tokens = complete(url, 6, temperature=0.0)
    after = reading(url)
    # one TPOT observation per finished request, in the histogram sources judge from
    assert after.tpot_count - before.tpot_count == 6
    assert max(after.tpot_buckets.values()) - max(before.tpot_buckets.values()) == 6
    acceptance = acceptance_between(before, after)
    assert acceptance is not None and acceptance.length is not None
    # on the cycle nearly every draft lands: well over 2 tokens per step (k + 1 = 5 at most)
    assert 2.5 < acceptance.length <= 5.0
    assert after.draft_tokens is not None and before.draft_tokens is not None
    assert after.accepted is not None and before.accepted is not None
    assert after.accepted - before.accepted <= after.draft_tokens - before.draft_tokens
    # generation tokens, counted by the server, match what the answers said
    samples = parse_samples(httpx.get(url + "/metrics", timeout=10).text)
    key = ("vllm:generation_tokens_total", (("engine", "0"), ("model_name", SERVED_NAME)))
    assert key in samples
    assert tokens == 6 * 48


def test_baseline_exports_no_spec_decode(servers: Any) -> None:
    r = reading(servers.get("off").url)
    assert not r.has_spec_decode and r.drafts is None and r.positions is None


def test_guardrails_quiet_on_healthy_speculation(servers: Any) -> None:
    url = servers.get("ngram").url
    before = {"pod": reading(url)}
    complete(url, 4, temperature=0.0)
    assert guardrail(before, {"pod": reading(url)}, 4) is None


def test_nothing_to_propose_when_ngram_never_matches(servers: Any) -> None:
    url = servers.get("ngram").url
    before = {"pod": reading(url)}
    complete(url, 6, temperature=1.0)
    after = {"pod": reading(url)}
    assert after["pod"].drafts == before["pod"].drafts  # real vLLM counted no draft at all
    # the request-steps the counters are set against are there (the inter-token histogram)
    assert (after["pod"].steps or 0) > (before["pod"].steps or 0)
    trip = guardrail(before, after, 6)
    assert trip is not None and trip[0] == "NothingToPropose"
    assert "0 drafts" in trip[1]


def test_rung_not_in_effect_when_the_engine_drafts_more_than_its_rung(servers: Any) -> None:
    """Real counters of an ngram engine at k = 4, judged against a rung that asks for k = 2:
    4 draft tokens per draft, where the rung allows 2.5 — not in effect; against its own
    k = 4, quiet."""
    url = servers.get("ngram").url
    before = {"pod": reading(url)}
    complete(url, 8, temperature=0.0, max_tokens=160)
    after = {"pod": reading(url)}
    drafts = (after["pod"].drafts or 0) - (before["pod"].drafts or 0)
    assert drafts >= 100, drafts  # the guardrail's minimum
    trip = guardrail(before, after, 8, DrafterRun("ngram", 2))
    assert trip is not None and trip[0] == "RungNotInEffect", trip
    assert "tokens per draft" in trip[1] and "asks for k=2" in trip[1], trip[1]
    assert "the configuration is not in effect" in trip[1]
    assert guardrail(before, after, 8, DrafterRun("ngram", 4)) is None


def test_speculation_off_without_spec_decode_counters(servers: Any) -> None:
    url = servers.get("off").url
    before = {"pod": reading(url)}
    complete(url, 3, temperature=0.0)
    trip = guardrail(before, {"pod": reading(url)}, 3)
    assert trip is not None and trip[0] == "SpeculationOff"
    assert "exports spec-decode counters" in trip[1]


def test_acceptance_collapsed_with_a_wrong_draft_model(servers: Any) -> None:
    url = servers.get("draft").url
    before = {"pod": reading(url)}
    complete(url, 4, temperature=0.0, max_tokens=64)
    after = {"pod": reading(url)}
    assert after["pod"].drafts is not None and before["pod"].drafts is not None
    assert after["pod"].drafts - before["pod"].drafts >= 100
    trip = guardrail(before, after, 4)
    assert trip is not None and trip[0] == "AcceptanceCollapsed", trip


@pytest.mark.parametrize("name", ["off", "ngram"])
def test_health_and_models(servers: Any, name: str) -> None:
    url = servers.get(name).url
    assert httpx.get(url + "/health", timeout=10).status_code == 200
    models = httpx.get(url + "/v1/models", timeout=10).json()
    assert [m["id"] for m in models["data"]] == [SERVED_NAME]


def test_render_flags_start_real_servers(servers: Any) -> None:
    """`specguard render`'s args for the ngram and the draft_model drafter start real vLLM 0.32:
    the drafter runs with render's k, and the fine inter-token-latency buckets render asks for
    (--custom-histogram-buckets) are the ones the server exports."""
    for name, k in (("ngram", 4), ("draft", 3)):
        argv = servers.argv[name]
        assert "--speculative-config" in argv and "--custom-histogram-buckets" in argv
        url = servers.get(name).url
        assert reading(url).positions == k
        samples = parse_samples(httpx.get(url + "/metrics", timeout=10).text)
        bounds = sorted(
            float(dict(labels)["le"]) for (n, labels), _ in samples.items()
            if n == "vllm:inter_token_latency_seconds_bucket"
        )  # fmt: skip
        assert bounds[:-1] == list(INTER_TOKEN_LATENCY_BUCKETS)
