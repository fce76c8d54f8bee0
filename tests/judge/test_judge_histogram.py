"""Verdicts from per-arm TPOT histograms: bucket-edge CIs, coarse buckets say inconclusive."""

from __future__ import annotations

import math

import numpy as np
import pytest

from specguard.judge._histogram import (
    Histogram,
    interpolated_median,
    judge_histograms,
)
from specguard.judge._verdict import JudgeSettings

VLLM_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
                7.5, 10.0, 20.0, 40.0, 80.0, math.inf)
FINE_BUCKETS = (*np.round(np.arange(0.001, 0.101, 0.001), 3).tolist(), math.inf)
MATCHED = {"speculative": 200.0, "baseline": 200.0}
PODS = {"speculative": {"spec-0": 200.0}, "baseline": {"base-0": 200.0}}


def histogram(values: np.ndarray, bounds: tuple[float, ...]) -> Histogram:
    cumulative = [(le, float(np.sum(values <= le))) for le in bounds]
    return Histogram.from_cumulative(cumulative)


def lognormal(median: float, n: int, seed: int) -> np.ndarray:
    return median * np.exp(np.random.default_rng(seed).normal(0, 0.1, n))


def test_from_cumulative_orders_rounds_and_clamps() -> None:
    h = Histogram.from_cumulative([(math.inf, 10.2), (0.1, 4.0), (0.05, 5.0)])
    assert h.bounds == (0.05, 0.1, math.inf)
    assert h.counts == (5, 0, 5)  # the dip 5 → 4 (a reset inside the window) is clamped
    assert h.total == 10


def test_interpolated_median_matches_histogram_quantile() -> None:
    h = Histogram((0.01, 0.02, math.inf), (2, 6, 2))
    # rank 5 of 10: 3 into the second bucket's 6 → 0.01 + 0.01 * 3/6
    assert interpolated_median(h) == pytest.approx(0.015)
    assert interpolated_median(Histogram((0.01, math.inf), (1, 9))) is None
    assert interpolated_median(Histogram((), ())) is None


def test_addition_needs_the_same_buckets() -> None:
    a = Histogram((0.1, math.inf), (1, 2))
    assert (a + a).counts == (2, 4)
    with pytest.raises(ValueError, match="buckets differ"):
        _ = a + Histogram((0.2, math.inf), (1, 2))


def test_fine_buckets_detect_a_big_regression() -> None:
    spec = histogram(lognormal(0.034, 2000, 1), FINE_BUCKETS)
    base = histogram(lognormal(0.026, 2000, 2), FINE_BUCKETS)
    v = judge_histograms(
        spec, base, concurrency=MATCHED, pod_concurrency=PODS, acceptance_length=2.6
    )
    assert v.outcome == "regressed", v.sentence()
    assert v.method == "histogram" and "prometheus histogram" in v.basis
    assert v.ratio == pytest.approx(0.034 / 0.026, rel=0.05)
    assert v.ci_low is not None and v.ci_high is not None and v.ratio is not None
    assert v.ci_low <= v.ratio <= v.ci_high
    assert "coarser" in v.sentence() and "acceptance length 2.60" in v.sentence()


def test_ci_includes_the_bucket_width() -> None:
    # Identical data: sampling noise alone is zero, but the 1 ms bucket around 30 ms still
    # leaves about ±3% on each arm, so the interval is at least that wide.
    values = lognormal(0.030, 5000, 3)
    h = histogram(values, FINE_BUCKETS)
    v = judge_histograms(h, h, concurrency=MATCHED, pod_concurrency=PODS)
    assert v.ratio == 1.0
    assert v.ci_low is not None and v.ci_high is not None
    assert v.ci_low < 0.97 and v.ci_high > 1.03


def test_vllm_default_buckets_cannot_resolve_thirty_percent() -> None:
    # 34 ms vs 26 ms both land in vLLM's 25–50 ms bucket: the histogram cannot tell them
    # apart, and says so instead of calling it neutral.
    spec = histogram(lognormal(0.034, 2000, 4), VLLM_BUCKETS)
    base = histogram(lognormal(0.026, 2000, 5), VLLM_BUCKETS)
    v = judge_histograms(spec, base, concurrency=MATCHED, pod_concurrency=PODS)
    assert v.outcome == "inconclusive"
    assert any("cannot resolve" in r for r in v.reasons)


def test_missing_and_mismatched_inputs_are_inconclusive() -> None:
    empty = Histogram((), ())
    some = histogram(lognormal(0.03, 500, 6), FINE_BUCKETS)
    for spec, base in ((empty, empty), (some, empty)):
        v = judge_histograms(spec, base, concurrency=MATCHED, pod_concurrency=PODS)
        assert v.outcome == "inconclusive"
    v = judge_histograms(some, some)
    assert v.outcome == "inconclusive" and "concurrency of an arm is unknown" in v.reasons[0]
    load = JudgeSettings(concurrency_match="arrivals")
    v = judge_histograms(some, some, load)
    assert v.outcome == "inconclusive" and "arrivals of an arm are unknown" in v.reasons[0]
    four = {"speculative": {"s": 1.0}, "baseline": {"b0": 1.0, "b1": 1.0, "b2": 1.0, "b3": 1.0}}
    # The baseline pods got a quarter of the drafter pod's requests and ran lighter:
    # underfed, not judged.
    light = {"speculative": 200.0, "baseline": 50.0}
    v = judge_histograms(some, some, load, concurrency=light, pod_concurrency=four)
    assert v.outcome == "inconclusive" and "mismatched arrivals" in v.reasons[0]
    assert "the baseline arm was underfed" in v.reasons[0]
    v = judge_histograms(some, some, load, concurrency=MATCHED, pod_concurrency=four)
    assert v.outcome == "inconclusive" and "mismatched arrivals" in v.reasons[0]
    # ... and ran busier than the drafter pod: slower at a quarter of the arrivals (Little's
    # law), so the load check passes and says so (these buckets still cannot resolve ±3%).
    busy = {"speculative": 200.0, "baseline": 400.0}
    v = judge_histograms(some, some, load, concurrency=busy, pod_concurrency=four)
    assert not any("mismatched" in r for r in v.reasons), v.reasons
    assert any("slower at a lighter load" in r for r in v.reasons), v.reasons
    # In flight per pod: the baseline pods ran at 10 against the drafter pod's 40, with a
    # quarter of its requests per pod — underfed, not judged.
    heavy = {"speculative": 40.0, "baseline": 10.0}
    four_idle = {"speculative": {"s": 40.0}, "baseline": {f"b{i}": 10.0 for i in range(4)}}
    v = judge_histograms(some, some, concurrency=heavy, pod_concurrency=four_idle)
    assert v.outcome == "inconclusive" and "mismatched concurrency" in v.reasons[0]
    assert "125 vs 500 requests per pod" in v.reasons[0]
    coarse = histogram(lognormal(0.03, 500, 7), VLLM_BUCKETS)
    v = judge_histograms(some, coarse, concurrency=MATCHED, pod_concurrency=PODS)
    assert "buckets differ" in " ".join(v.reasons)
    inf = Histogram((0.01, math.inf), (0, 500))
    v = judge_histograms(inf, inf, concurrency=MATCHED, pod_concurrency=PODS)
    assert v.outcome == "inconclusive" and "+Inf" in v.reasons[-1]


def test_nan_concurrency_and_acceptance_are_treated_as_unknown() -> None:
    h = histogram(lognormal(0.03, 500, 8), FINE_BUCKETS)
    v = judge_histograms(h, h, concurrency={"speculative": math.nan, "baseline": 3.0},
                         pod_concurrency=PODS, acceptance_length=math.nan)
    assert v.acceptance_length is None and v.concurrency["speculative"] is None
    strict = JudgeSettings(concurrency_match="in_flight")
    v = judge_histograms(h, h, strict, concurrency={"speculative": math.nan, "baseline": 3.0},
                         pod_concurrency=PODS)
    assert v.outcome == "inconclusive" and "concurrency of an arm is unknown" in v.reasons
