"""/metrics: vLLM's names, types, labels and buckets, and exactly vLLM's observation
rules (ITL once per engine step per request, TPOT once per finished request)."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import Iterator

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from specguard.sim.launch import SimProcess, start_sim
from specguard.sim.loadclient import StreamRecord, completion_payload, stream_once
from specguard.sim.metrics import ITL_BUCKETS
from specguard.sim.scrape import Samples, scrape, value

SPEC = json.dumps({"method": "dspark", "model": "org/kimi-dspark", "num_speculative_tokens": 8})

TYPES = {
    "vllm:num_requests_running": "gauge",
    "vllm:num_requests_waiting": "gauge",
    "vllm:prompt_tokens": "counter",
    "vllm:generation_tokens": "counter",
    "vllm:request_success": "counter",
    "vllm:time_to_first_token_seconds": "histogram",
    "vllm:inter_token_latency_seconds": "histogram",
    "vllm:request_time_per_output_token_seconds": "histogram",
    "vllm:e2e_request_latency_seconds": "histogram",
    "vllm:request_decode_time_seconds": "histogram",
}
SPEC_COUNTERS = (
    "vllm:spec_decode_num_drafts",
    "vllm:spec_decode_num_draft_tokens",
    "vllm:spec_decode_num_accepted_tokens",
    "vllm:spec_decode_num_accepted_tokens_per_pos",
)


@pytest.fixture(scope="module")
def spec_sim() -> Iterator[SimProcess]:
    with start_sim(["org/kimi", "--served-model-name", "kimi", "--speculative-config", SPEC,
                    "--time-scale", "0.2", "--seed", "2"]) as sim:  # fmt: skip
        yield sim


def _families(url: str) -> dict[str, object]:
    with urllib.request.urlopen(url + "/metrics") as resp:
        text = resp.read().decode()
    return {f.name: f for f in text_string_to_metric_families(text)}


def _stream(url: str, max_tokens: int) -> StreamRecord:
    async def go() -> StreamRecord:
        async with aiohttp.ClientSession() as session:
            return await stream_once(session, url, completion_payload(None, max_tokens),
                                     {"Content-Type": "application/json"})  # fmt: skip

    return asyncio.run(go())


def test_names_types_labels_and_buckets(spec_sim: SimProcess) -> None:
    families = _families(spec_sim.url)
    for name, kind in TYPES.items():
        assert families[name].type == kind, name  # type: ignore[attr-defined]
    for name in SPEC_COUNTERS:
        assert families[name].type == "counter", name  # type: ignore[attr-defined]
    for family in families.values():
        if not family.name.startswith("vllm:"):  # type: ignore[attr-defined]
            continue
        for sample in family.samples:  # type: ignore[attr-defined]
            assert sample.labels["model_name"] == "kimi"
            assert sample.labels["engine"] == "0"
    itl = families["vllm:inter_token_latency_seconds"]
    bounds = [float(s.labels["le"]) for s in itl.samples if s.name.endswith("_bucket")]  # type: ignore[attr-defined]
    assert bounds == [*ITL_BUCKETS, float("inf")]
    positions = {s.labels["position"] for s in families[  # type: ignore[attr-defined]
        "vllm:spec_decode_num_accepted_tokens_per_pos"].samples}  # fmt: skip
    assert positions == {str(i) for i in range(8)}


def test_spec_counters_only_with_a_drafter() -> None:
    with start_sim(["--time-scale", "0.01"]) as sim:
        names = set(_families(sim.url))
    assert "vllm:generation_tokens" in names
    assert not any(n.startswith("vllm:spec_decode") for n in names)


def _delta(a: Samples, b: Samples, name: str, **labels: str) -> float:
    return value(b, name, **labels) - value(a, name, **labels)


def test_itl_once_per_step_and_tpot_once_per_request(spec_sim: SimProcess) -> None:
    before = scrape(spec_sim.url)
    record = _stream(spec_sim.url, 200)
    after = scrape(spec_sim.url)
    chunks = len(record.chunk_times)
    assert record.tokens == 200
    assert chunks < 200  # the drafter packs tokens: fewer steps than tokens
    itl_count = _delta(before, after, "vllm:inter_token_latency_seconds_count")
    assert itl_count == chunks - 1  # one per decode step, not per token
    assert _delta(before, after, "vllm:request_time_per_output_token_seconds_count") == 1
    # TPOT = decode time / (tokens - 1), as the client measures it (±10%: the client's
    # timestamps include scheduling delay on shared cores)
    tpot = _delta(before, after, "vllm:request_time_per_output_token_seconds_sum")
    assert record.tpot is not None
    assert tpot == pytest.approx(record.tpot, rel=0.10)
    itl_sum = _delta(before, after, "vllm:inter_token_latency_seconds_sum")
    assert itl_sum == pytest.approx(tpot * 199, rel=1e-6)  # ITL gaps add up to decode time
    assert _delta(before, after, "vllm:generation_tokens_total") == 200
    assert _delta(before, after, "vllm:request_success_total", finished_reason="length") == 1
    assert _delta(before, after, "vllm:time_to_first_token_seconds_count") == 1
    assert _delta(before, after, "vllm:request_params_max_tokens_sum") == 200


def test_acceptance_counters_are_consistent(spec_sim: SimProcess) -> None:
    before = scrape(spec_sim.url)
    record = _stream(spec_sim.url, 120)
    after = scrape(spec_sim.url)
    drafts = _delta(before, after, "vllm:spec_decode_num_drafts_total")
    accepted = _delta(before, after, "vllm:spec_decode_num_accepted_tokens_total")
    per_pos = _delta(before, after, "vllm:spec_decode_num_accepted_tokens_per_pos_total")
    assert drafts == len(record.chunk_times) - 1  # one draft per decode step
    assert _delta(before, after, "vllm:spec_decode_num_draft_tokens_total") == 8 * drafts
    assert per_pos == accepted
    # position 0 is accepted at least as often as position 7 (a run stops at a miss)
    p0 = _delta(before, after, "vllm:spec_decode_num_accepted_tokens_per_pos_total", position="0")
    p7 = _delta(before, after, "vllm:spec_decode_num_accepted_tokens_per_pos_total", position="7")
    assert p0 >= p7


def test_custom_histogram_buckets() -> None:
    buckets = '{"inter_token_latency": [0.001, 0.01, 0.1, 1]}'
    with start_sim(["--custom-histogram-buckets", buckets, "--time-scale", "0.01"]) as sim:
        families = _families(sim.url)
    for name in ("vllm:inter_token_latency_seconds", "vllm:request_time_per_output_token_seconds"):
        bounds = [float(s.labels["le"]) for s in families[name].samples  # type: ignore[attr-defined]
                  if s.name.endswith("_bucket")]  # fmt: skip
        assert bounds == [0.001, 0.01, 0.1, 1.0, float("inf")]
