"""/metrics: vLLM's names, types, labels and buckets, and exactly vLLM's observation
rules (ITL once per engine step per request, TPOT once per finished request)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import time
import urllib.request
from collections.abc import Iterator

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from specguard._exposition import Samples, sample_value
from specguard.sim._launch import SimProcess, start_sim
from specguard_testkit._loadclient import (
    StreamRecord,
    completion_payload,
    read_metrics,
    stream_once,
)

SPEC = json.dumps({"method": "dspark", "model": "org/kimi-dspark", "num_speculative_tokens": 8})

# Every family the simulator exports, with the type vLLM gives it.
TYPES = {
    "vllm:num_requests_running": "gauge",
    "vllm:num_requests_waiting": "gauge",
    "vllm:kv_cache_usage_perc": "gauge",
    "vllm:prompt_tokens": "counter",
    "vllm:generation_tokens": "counter",
    "vllm:request_success": "counter",
    "vllm:num_preemptions": "counter",
    "vllm:time_to_first_token_seconds": "histogram",
    "vllm:inter_token_latency_seconds": "histogram",
    "vllm:request_time_per_output_token_seconds": "histogram",
    "vllm:e2e_request_latency_seconds": "histogram",
    "vllm:request_queue_time_seconds": "histogram",
    "vllm:request_prefill_time_seconds": "histogram",
    "vllm:request_inference_time_seconds": "histogram",
    "vllm:request_decode_time_seconds": "histogram",
    "vllm:request_prompt_tokens": "histogram",
    "vllm:request_generation_tokens": "histogram",
    "vllm:request_params_max_tokens": "histogram",
}
# vLLM's bucket bounds (vllm/v1/metrics/loggers.py), written out rather than imported
# from the simulator so that a wrong constant there fails here.
VLLM_TTFT = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
             5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0]  # fmt: skip
VLLM_ITL = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
            7.5, 10.0, 20.0, 40.0, 80.0]  # fmt: skip
VLLM_REQUEST_LATENCY = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
                        40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0]  # fmt: skip
# build_1_2_5_buckets(max_model_len) with --max-model-len 4096
VLLM_TOKENS_4096 = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000]
BUCKETS: dict[str, list[float] | list[int]] = {
    "vllm:time_to_first_token_seconds": VLLM_TTFT,
    "vllm:inter_token_latency_seconds": VLLM_ITL,
    "vllm:request_time_per_output_token_seconds": VLLM_ITL,
    "vllm:e2e_request_latency_seconds": VLLM_REQUEST_LATENCY,
    "vllm:request_queue_time_seconds": VLLM_REQUEST_LATENCY,
    "vllm:request_prefill_time_seconds": VLLM_REQUEST_LATENCY,
    "vllm:request_inference_time_seconds": VLLM_REQUEST_LATENCY,
    "vllm:request_decode_time_seconds": VLLM_REQUEST_LATENCY,
    "vllm:request_prompt_tokens": VLLM_TOKENS_4096,
    "vllm:request_generation_tokens": VLLM_TOKENS_4096,
    "vllm:request_params_max_tokens": VLLM_TOKENS_4096,
}
SPEC_COUNTERS = (
    "vllm:spec_decode_num_drafts",
    "vllm:spec_decode_num_draft_tokens",
    "vllm:spec_decode_num_accepted_tokens",
    "vllm:spec_decode_num_accepted_tokens_per_pos",
)


@pytest.fixture(scope="module")
def spec_sim() -> Iterator[SimProcess]:
    args = ["org/kimi", "--served-model-name", "kimi", "--speculative-config", SPEC,
            "--max-model-len", "4096", "--time-scale", "0.2", "--seed", "2"]  # fmt: skip
    with start_sim(args) as sim:
        yield sim


def _families(url: str) -> dict[str, object]:
    with urllib.request.urlopen(url + "/metrics") as resp:
        text = resp.read().decode()
    return {f.name: f for f in text_string_to_metric_families(text)}


def _bounds(families: dict[str, object], name: str) -> list[float]:
    samples = families[name].samples  # type: ignore[attr-defined]
    return [float(s.labels["le"]) for s in samples if s.name.endswith("_bucket")]


def _stream(url: str, max_tokens: int) -> StreamRecord:
    async def go() -> StreamRecord:
        async with aiohttp.ClientSession() as session:
            return await stream_once(session, url, completion_payload(None, max_tokens),
                                     {"Content-Type": "application/json"})  # fmt: skip

    return asyncio.run(go())


def test_names_types_labels_and_buckets(spec_sim: SimProcess) -> None:
    families = _families(spec_sim.url)
    exported = {name for name in families if name.startswith("vllm:")}
    declared = set(TYPES) | set(SPEC_COUNTERS)
    # vLLM 0.32 keeps prometheus_client's `_created` gauges for counters and histograms
    created = {f"{n}_created" for n in declared if n in SPEC_COUNTERS
               or TYPES.get(n) in ("counter", "histogram")}  # fmt: skip
    assert exported == declared | created  # nothing undeclared, nothing missing
    for name, kind in TYPES.items():
        assert families[name].type == kind, name  # type: ignore[attr-defined]
    for name in SPEC_COUNTERS:
        assert families[name].type == "counter", name  # type: ignore[attr-defined]
    for name, bounds in BUCKETS.items():
        assert _bounds(families, name) == [*bounds, float("inf")], name
    for family in families.values():
        if not family.name.startswith("vllm:") or family.name in created:  # type: ignore[attr-defined]
            continue
        for sample in family.samples:  # type: ignore[attr-defined]
            assert sample.labels["model_name"] == "kimi"
            assert sample.labels["engine"] == "0"
    positions = {s.labels["position"] for s in families[  # type: ignore[attr-defined]
        "vllm:spec_decode_num_accepted_tokens_per_pos"].samples}  # fmt: skip
    assert positions == {str(i) for i in range(8)}


def test_spec_counters_only_with_a_drafter() -> None:
    with start_sim(["--time-scale", "0.01"]) as sim:
        names = set(_families(sim.url))
    assert "vllm:generation_tokens" in names
    assert not any(n.startswith("vllm:spec_decode") for n in names)


def _delta(a: Samples, b: Samples, name: str, **labels: str) -> float:
    return sample_value(b, name, **labels) - sample_value(a, name, **labels)


def test_itl_once_per_step_and_tpot_once_per_request(spec_sim: SimProcess) -> None:
    before = read_metrics(spec_sim.url)
    record = _stream(spec_sim.url, 200)
    after = read_metrics(spec_sim.url)
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
    before = read_metrics(spec_sim.url)
    record = _stream(spec_sim.url, 120)
    after = read_metrics(spec_sim.url)
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
        assert _bounds(families, name) == [0.001, 0.01, 0.1, 1.0, float("inf")]


def _complete(url: str, body: dict[str, object]) -> dict[str, object]:
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})  # fmt: skip
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.load(resp)  # type: ignore[no-any-return]


def test_max_tokens_param_is_observed_for_every_request(spec_sim: SimProcess) -> None:
    # vLLM observes SamplingParams.max_tokens, which it sets to the room left in the
    # context (max_model_len - prompt tokens) when the client sends none
    name = "vllm:request_params_max_tokens_sum"
    before = read_metrics(spec_sim.url)
    answer = _complete(spec_sim.url, {"prompt": "hi"})
    after = read_metrics(spec_sim.url)
    prompt = answer["usage"]["prompt_tokens"]  # type: ignore[index]
    assert _delta(before, after, "vllm:request_params_max_tokens_count") == 1
    assert _delta(before, after, name) == 4096 - prompt


def test_token_buckets_follow_max_model_len() -> None:
    # build_1_2_5_buckets(32768): 50000 is past the default --max-model-len
    with start_sim(["--time-scale", "0.01"]) as sim:
        families = _families(sim.url)
    assert _bounds(families, "vllm:request_prompt_tokens") == [
        1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, float("inf"),
    ]  # fmt: skip


def test_kv_cache_usage_follows_the_running_sequences() -> None:
    # 256 blocks of 16 = 4096 tokens. A 100-token prompt holds at least 7 blocks while it
    # runs; usage is whole blocks over the capacity, and 0 once nothing runs.
    args = ["--max-model-len", "4096", "--num-gpu-blocks-override", "256", "--seed", "5"]
    with start_sim(args) as sim:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            done = pool.submit(_complete, sim.url, {"prompt": "w" * 400, "max_tokens": 300})
            deadline = time.monotonic() + 10
            usage = 0.0
            while usage == 0.0 and time.monotonic() < deadline:
                usage = sample_value(read_metrics(sim.url), "vllm:kv_cache_usage_perc")
                time.sleep(0.01)
            done.result(timeout=30)
        idle = sample_value(read_metrics(sim.url), "vllm:kv_cache_usage_perc")
    blocks = usage * 4096 / 16
    assert blocks == pytest.approx(round(blocks))  # whole blocks
    assert 7 <= round(blocks) <= 7 + 300 // 16 + 1
    assert idle == 0.0
