"""Direct /metrics scrapes: histogram deltas per arm → verdict; never per-step ITL."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from prometheus_client.parser import text_string_to_metric_families

from specguard._exposition import (
    Reading,
    acceptance_length,
    bucket_delta,
    histogram_of,
    parse_reading,
)
from specguard.judge._histogram import Histogram, judge_histograms
from specguard.judge._verdict import JudgeSettings
from specguard.sources._scrape import ScrapeSource, verdict_from_rounds

RNG = np.random.default_rng(42)


def tpots(median: float, n: int) -> np.ndarray:
    return median * np.exp(RNG.normal(0, 0.08, n))


def test_parse_reading_takes_tpot_and_ignores_itl(make_pod: Callable[..., Any]) -> None:
    pod = make_pod(drafter=True)
    pod.finish(np.array([0.0105, 0.0205]), tokens_per_step=4, running=7, accepted_per_draft=2)
    import httpx

    reading = parse_reading(httpx.get(pod.url + "/metrics").text)
    assert reading.tpot_count == 2
    assert reading.tpot_buckets[0.011] == 1 and reading.tpot_buckets[0.021] == 2
    assert reading.tpot_buckets[float("inf")] == 2  # ITL's 20 step observations not counted
    assert reading.running == 7
    assert acceptance_length(reading.drafts, reading.accepted) == 3.0


def test_bucket_delta_handles_a_restart() -> None:
    before = Reading({0.01: 5, float("inf"): 10}, 10)
    after = Reading({0.01: 7, float("inf"): 15}, 15)
    assert bucket_delta(before, after) == {0.01: 2, float("inf"): 5}
    restarted = Reading({0.01: 1, float("inf"): 3}, 3)
    assert bucket_delta(before, restarted) == {0.01: 1, float("inf"): 3}
    assert histogram_of([{0.01: 1, float("inf"): 3}, {0.01: 2, float("inf"): 2}]) == Histogram(
        (0.01, float("inf")), (3, 2)
    )


def _itl_histogram(text: str) -> Histogram:
    pairs = [
        (float(s.labels["le"]), s.value)
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == "vllm:inter_token_latency_seconds_bucket"
    ]
    return Histogram.from_cumulative(pairs)


async def test_faster_per_token_but_slower_per_step_is_improved(
    make_pod: Callable[..., Any],
) -> None:
    # The drafter pod emits 3 tokens per step: each step takes 45 ms (vs 30 ms without), but
    # tokens arrive every 15 ms (vs 30 ms). Per token it is twice as fast.
    spec, base = make_pod(drafter=True), make_pod()
    spec.finish(tpots(0.030, 50), tokens_per_step=1.0, running=16)  # before the window
    base.finish(np.array([]), running=15)
    async with ScrapeSource({"speculative": [spec.url], "baseline": [base.url]}) as source:
        first = await source.read()
        spec.finish(tpots(0.015, 400), tokens_per_step=3.0, running=16, accepted_per_draft=2.0)
        base.finish(tpots(0.030, 400), tokens_per_step=1.0, running=15)
        last = await source.read()
    verdict = verdict_from_rounds([first, last])
    assert verdict.outcome == "improved", verdict.sentence()
    assert verdict.n == {"speculative": 400, "baseline": 400}  # only the window's requests
    assert verdict.ratio is not None and 0.45 < verdict.ratio < 0.55
    assert verdict.acceptance_length == 3.0
    assert verdict.concurrency == {"speculative": 16.0, "baseline": 15.0}
    assert "pod /metrics histogram" in verdict.basis

    # The same pods judged on per-step ITL would call the drafter a 1.5× regression: the
    # reason specguard never reads that metric.
    import httpx

    itl = judge_histograms(
        _itl_histogram(httpx.get(spec.url + "/metrics").text),
        _itl_histogram(httpx.get(base.url + "/metrics").text),
        concurrency={"speculative": 16.0, "baseline": 15.0},
        pod_concurrency=verdict.pod_concurrency,
    )
    assert itl.outcome == "regressed"


async def test_several_pods_per_arm_add_up_and_load_is_per_pod(
    make_pod: Callable[..., Any],
) -> None:
    pods = [make_pod() for _ in range(4)]
    arms = {"speculative": [p.url for p in pods[:2]], "baseline": [p.url for p in pods[2:]]}
    for i, pod in enumerate(pods):
        pod.finish(np.array([]), running=64 if i < 2 else 8)
    async with ScrapeSource(arms) as source:
        first = await source.read()
        for i, pod in enumerate(pods):
            pod.finish(tpots(0.040 if i < 2 else 0.030, 150), running=64 if i < 2 else 8)
        last = await source.read()
    verdict = verdict_from_rounds([first, last])
    assert verdict.n == {"speculative": 300, "baseline": 300}
    assert verdict.requests_per_pod == {"speculative": 150.0, "baseline": 150.0}
    assert verdict.concurrency == {"speculative": 64.0, "baseline": 8.0}
    # Same requests per pod: the baseline pods are faster at that load (Little's law).
    assert verdict.outcome == "regressed"
    assert any("compared at equal arrivals" in r for r in verdict.reasons), verdict.reasons
    load = verdict_from_rounds([first, last], JudgeSettings(concurrency_match="load"))
    assert load.outcome == "regressed" and not load.reasons


async def test_unreachable_pod_is_reported_and_never_regresses(
    make_pod: Callable[..., Any],
) -> None:
    spec, base = make_pod(), make_pod()
    async with ScrapeSource({"speculative": [spec.url], "baseline": [base.url]}) as source:
        first = await source.read()
        base.finish(tpots(0.03, 300), running=4)
        spec.finish(tpots(0.06, 300), running=4)
        spec.close()
        last = await source.read()
    assert spec.url in last.failed
    verdict = verdict_from_rounds([first, last])
    assert verdict.outcome == "inconclusive"
    assert any("unreadable" in r for r in verdict.reasons)
    assert verdict_from_rounds([first]).outcome == "inconclusive"


async def test_sweep_polls_concurrency_through_the_window(
    make_pod: Callable[..., Any],
) -> None:
    # Readings at the start, in between and at the end. The window is long next to the
    # polling step (8 steps), so that even reads slowed 4-fold on a busy machine leave
    # one in between; the count is only bounded, not exact.
    spec, base = make_pod(), make_pod()
    spec.finish(np.array([]), running=10)
    base.finish(np.array([]), running=10)
    async with ScrapeSource({"speculative": [spec.url], "baseline": [base.url]}) as source:
        rounds = await source.sweep(window_s=2.0, every_s=0.25)
    assert 3 <= len(rounds) <= 10
    # The whole window is covered (a round's time is stamped before its page is parsed,
    # which takes a while on a loaded machine: hence the slack).
    assert rounds[-1].at - rounds[0].at >= 2.0 - 0.5
    verdict = verdict_from_rounds(rounds)
    assert verdict.concurrency == {"speculative": 10.0, "baseline": 10.0}
    assert verdict.outcome == "inconclusive"  # no requests finished in the window


async def test_collect_judges_the_window_from_background_readings(
    make_pod: Callable[..., Any],
) -> None:
    spec, base = make_pod(), make_pod()
    spec.finish(tpots(0.030, 50), running=8)  # before the window: not counted
    base.finish(np.array([]), running=8)
    arms = {"speculative": [spec.url], "baseline": [base.url]}
    async with ScrapeSource(arms, every_s=0.1) as source:
        source.start()
        await asyncio.sleep(0.5)  # readings before the window starts
        start = time.time()
        await asyncio.sleep(0.5)
        spec.finish(tpots(0.040, 300), running=8)
        base.finish(tpots(0.030, 300), running=8)
        await asyncio.sleep(0.3)
        window = await source.collect(start, time.time())
        assert window.state == "ok" and window.histograms is not None
        verdict = window.verdict()
        assert verdict.n == {"speculative": 300, "baseline": 300}
        assert verdict.outcome == "regressed"
        assert verdict.concurrency == {"speculative": 8.0, "baseline": 8.0}
        # Nothing finished in the next window: empty, a typed result.
        later = time.time()
        await asyncio.sleep(0.3)
        quiet = await source.collect(later, time.time())
        assert quiet.state == "empty" and quiet.degraded
        spec.close()
        base.close()
        await asyncio.sleep(0.3)  # past any reading that started before the close
        down = await source.collect(time.time(), time.time() + 0.01)
    assert down.state == "down" and "GET /metrics" in down.problem, down
    async with ScrapeSource() as nothing:
        assert (await nothing.collect(0.0, 1.0)).state == "down"
