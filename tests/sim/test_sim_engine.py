"""Engine behaviour seen from outside: the waiting queue, prefill cost, per-batch-size
draft lengths, and the launcher's cleanup when its owner dies."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time

import aiohttp
import pytest

from specguard._exposition import sample_value
from specguard.sim._launch import start_sim
from specguard_testkit._loadclient import (
    StreamRecord,
    completion_payload,
    read_metrics,
    stream_once,
)

HEADERS = {"Content-Type": "application/json"}


async def _concurrent(url: str, payloads: list[bytes]) -> list[StreamRecord]:
    async with aiohttp.ClientSession() as session:
        return list(
            await asyncio.gather(*(stream_once(session, url, p, HEADERS) for p in payloads))
        )


def test_max_num_seqs_queues_the_rest() -> None:
    # one sequence at a time: the second request starts only when the first is done
    with start_sim(["--max-num-seqs", "1", "--time-scale", "0.2"]) as sim:
        first, second = asyncio.run(_concurrent(sim.url, [completion_payload(None, 40)] * 2))
        samples = read_metrics(sim.url)
    early, late = sorted([first, second], key=lambda r: r.chunk_times[0])
    assert late.chunk_times[0] >= early.chunk_times[-1]
    assert sample_value(samples, "vllm:request_queue_time_seconds_count") == 2
    assert sample_value(samples, "vllm:request_queue_time_seconds_sum") > 0.5 * (
        early.chunk_times[-1] - early.chunk_times[0]
    )


def test_prefill_cost_grows_with_prompt_length() -> None:
    # kimi-k3: 0.01 ms per prompt token; 40,000 more characters = 10,000 more tokens
    # = +100 ms of TTFT, x3 at time scale 3 = +300 ms. Two long prompts, so fixed
    # per-request costs cancel. The time scale stretches the modelled cost but not the
    # unscaled noise (reading an 80 kB body, event-loop wake-ups on a core shared with
    # other test processes: up to ~50 ms seen in CI under load), so ±60 ms is 20%.
    medium = completion_payload(None, 2, prompt="word " * 8000)
    large = completion_payload(None, 2, prompt="word " * 16000)
    with start_sim(["--time-scale", "3.0"]) as sim:
        asyncio.run(_concurrent(sim.url, [completion_payload(None, 2)]))  # warm up
        a = asyncio.run(_concurrent(sim.url, [medium]))[0]
        b = asyncio.run(_concurrent(sim.url, [large]))[0]
    assert a.ttft is not None and b.ttft is not None
    assert b.ttft - a.ttft == pytest.approx(0.300, abs=0.060)


def test_per_batch_size_k_zero_turns_speculation_off() -> None:
    spec = {"method": "dspark", "model": "m", "num_speculative_tokens": 8,
            "num_speculative_tokens_per_batch_size": [[1, 2, 8], [3, 256, 0]]}  # fmt: skip
    args = ["--speculative-config", json.dumps(spec), "--time-scale", "0.5"]
    with start_sim(args) as sim:
        s0 = read_metrics(sim.url)
        alone = asyncio.run(_concurrent(sim.url, [completion_payload(None, 60)]))
        s1 = read_metrics(sim.url)
        crowd = asyncio.run(_concurrent(sim.url, [completion_payload(None, 60)] * 6))
        s2 = read_metrics(sim.url)
    drafts = "vllm:spec_decode_num_drafts_total"
    assert sample_value(s1, drafts) - sample_value(s0, drafts) == len(alone[0].chunk_times) - 1
    assert max(alone[0].chunk_tokens) > 1
    # six running sequences fall in [3, 256] -> k = 0: one token per step, no drafts
    # (except while the batch ramps up or drains below 3)
    crowd_drafts = sample_value(s2, drafts) - sample_value(s1, drafts)
    crowd_steps = sum(len(r.chunk_times) - 1 for r in crowd)
    assert crowd_drafts < 0.1 * crowd_steps
    singles = sum(n == 1 for r in crowd for n in r.chunk_tokens)
    assert singles > 0.9 * sum(len(r.chunk_tokens) for r in crowd)


def test_simulator_exits_when_its_owner_dies() -> None:
    code = (
        "import sys\n"
        "from specguard.sim._launch import start_sim\n"
        "sim = start_sim(['--time-scale', '0.01'])\n"
        "print(sim.pid, flush=True)\n"
        "import os; os._exit(0)\n"  # no atexit, no stop(): the watchdog must act
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True)  # fmt: skip
    pid = int(out.stdout.split()[-1])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    os.kill(pid, 9)
    pytest.fail("simulator outlived the process that started it")


def test_synthetic_acceptance_length_overrides_the_profile() -> None:
    spec = {"method": "dspark", "model": "m", "num_speculative_tokens": 4,
            "rejection_sample_method": "synthetic", "synthetic_acceptance_length": 2.5}  # fmt: skip
    args = ["--speculative-config", json.dumps(spec), "--time-scale", "0.02", "--seed", "9"]
    with start_sim(args) as sim:
        before = read_metrics(sim.url)
        asyncio.run(_concurrent(sim.url, [completion_payload(None, 400)] * 8))
        after = read_metrics(sim.url)
    drafts = sample_value(after, "vllm:spec_decode_num_drafts_total") - sample_value(
        before, "vllm:spec_decode_num_drafts_total"
    )
    accepted = sample_value(after, "vllm:spec_decode_num_accepted_tokens_total") - sample_value(
        before, "vllm:spec_decode_num_accepted_tokens_total"
    )
    # ~1,300 draft steps: the mean is within ~3% at 3 standard errors
    assert 1 + accepted / drafts == pytest.approx(2.5, rel=0.05)


def test_a_draft_length_past_the_acceptance_model_keeps_the_engine_running() -> None:
    # k = 32 (the API's largest) with adaptive verification: the profile's acceptance model
    # has 16 positions. Adaptive verification weighed every k up to 32 and the engine loop
    # died on the 17th (every request then hung); positions past the model accept nothing.
    spec = {"method": "dspark", "model": "m", "num_speculative_tokens": 32,
            "enable_adaptive_verification": True}  # fmt: skip
    args = ["--profile", "deepseek-v4", "--speculative-config", json.dumps(spec),
            "--time-scale", "0.2"]  # fmt: skip
    with start_sim(args) as sim:
        done = asyncio.run(
            asyncio.wait_for(_concurrent(sim.url, [completion_payload(None, 40)] * 3), 30)
        )
    assert [r.tokens for r in done] == [40, 40, 40]
