"""The Prometheus source against a real Prometheus (Debian's binary) scraping vLLM-shaped
/metrics endpoints whose histograms the test drives."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from specguard.judge._verdict import JudgeSettings
from specguard.sources._prometheus import ArmSelectors, PrometheusSource, queries

pytestmark = [pytest.mark.prometheus, pytest.mark.slow]

SELECTORS = ArmSelectors.for_deployment("demo", "llm")


def labels(arm: str, pod: str) -> dict[str, str]:
    # What the cluster Prometheus's labelmap of pod labels produces for a specguard pod.
    return {"namespace": "llm", "pod": pod, "specguard_io_deployment": "demo",
            "specguard_io_arm": arm}  # fmt: skip


def test_queries_select_the_arm_and_use_per_token_latency() -> None:
    q = queries(SELECTORS, "baseline", 60)
    assert q["tpot"] == (
        "sum by (le) (increase(vllm:request_time_per_output_token_seconds_bucket"
        '{specguard_io_deployment="demo",namespace="llm",specguard_io_arm="baseline"}[60s]))'
    )
    assert all("inter_token_latency" not in text for text in q.values())


def test_regression_judged_from_prometheus(
    make_pod: Callable[..., Any], make_prometheus: Callable[..., Any]
) -> None:
    spec = [make_pod(drafter=True) for _ in range(2)]
    base = make_pod()
    for pod in [*spec, base]:
        pod.finish(np.array([]), running=48)
    targets = [(f"127.0.0.1:{p.port}", labels("speculative", f"demo-spec-{i}"))
               for i, p in enumerate(spec)]  # fmt: skip
    targets.append((f"127.0.0.1:{base.port}", labels("baseline", "demo-base-0")))
    with make_prometheus(targets) as prom:
        prom.wait_for_samples("vllm:num_requests_running", 2)
        rng = np.random.default_rng(7)
        # Two serving (drafter) pods and one shadow pod at mirror share 1/2: every pod
        # finishes 250 requests, at 40 ms per token with the drafter and 30 ms without: a
        # 33% regression, 1 ms buckets.
        for pod in spec:
            pod.finish(0.040 * np.exp(rng.normal(0, 0.08, 250)), running=48,
                       accepted_per_draft=1.65)  # fmt: skip
        base.finish(0.030 * np.exp(rng.normal(0, 0.08, 250)), running=48)
        changed_at = time.time()
        prom.wait_for_samples("vllm:num_requests_running", 5)
        while time.time() < changed_at + 2.5:  # two more scrapes after the change
            time.sleep(0.2)
        source = PrometheusSource(prom.url, SELECTORS)
        verdict = source.verdict(window_s=60, settings=JudgeSettings())
        now = time.time()
        window = asyncio.run(source.collect(now - 60, now))  # the operator's call
    assert window.state == "ok" and window.histograms is not None
    assert window.verdict(JudgeSettings()).outcome == "regressed"
    assert verdict.outcome == "regressed", verdict.sentence()
    assert verdict.method == "histogram" and "prometheus histogram" in verdict.basis
    # increase() extrapolates past the last scrape by up to half a scrape interval: with only
    # ~6 one-second scrapes here that inflates counts by up to ~20% (measured 481 for 400).
    assert 490 <= verdict.n["speculative"] <= 650 and 245 <= verdict.n["baseline"] <= 325
    per_pod = verdict.requests_per_pod
    assert per_pod["speculative"] == pytest.approx(verdict.n["speculative"] / 2)
    assert per_pod["baseline"] == verdict.n["baseline"]
    assert verdict.ratio is not None and 1.25 < verdict.ratio < 1.42
    assert verdict.concurrency == {"speculative": 48.0, "baseline": 48.0}
    assert set(verdict.pod_concurrency["speculative"]) == {"demo-spec-0", "demo-spec-1"}
    assert verdict.acceptance_length == pytest.approx(2.65, abs=0.01)


def test_no_data_and_no_prometheus_are_inconclusive(
    make_pod: Callable[..., Any], make_prometheus: Callable[..., Any]
) -> None:
    pod = make_pod()
    with make_prometheus([(f"127.0.0.1:{pod.port}", labels("baseline", "b"))]) as prom:
        prom.wait_for_samples("vllm:num_requests_running", 1)
        verdict = PrometheusSource(prom.url, SELECTORS).verdict(window_s=30)
        assert verdict.outcome == "inconclusive"
        assert "too few usable requests" in verdict.reasons[0]
        now = time.time()
        empty = PrometheusSource(prom.url, SELECTORS).window(now - 30, now)
        assert empty.state == "empty" and empty.degraded
        other = ArmSelectors.for_deployment("nothing-here")
        assert PrometheusSource(prom.url, other).verdict(window_s=30).outcome == "inconclusive"
    gone = PrometheusSource(prom.url, SELECTORS, timeout=2).verdict(window_s=30)
    assert gone.outcome == "inconclusive"
    assert gone.reasons[0].startswith("prometheus unavailable")
    down = PrometheusSource(prom.url, SELECTORS, timeout=2).window(time.time() - 30, time.time())
    assert down.state == "down" and "failed" in down.problem and "\n" not in down.problem
