"""Verdicts from server-side histograms (Prometheus or direct /metrics scrapes) when no router
samples exist. Coarser than the router's per-request samples, and says so in ``basis``.

Input: each arm's bucket counts of ``vllm:request_time_per_output_token_seconds`` over the
window (one observation per finished request: decode time / (tokens − 1), i.e. per token).
Never ``vllm:inter_token_latency_seconds``: that one is per engine step, and a drafter makes
steps longer while making tokens faster.

A histogram only says in which bucket each request fell, so a median is known only to lie
between the edges of the bucket where the cumulative count crosses half. The point estimate
interpolates linearly inside that bucket (as ``histogram_quantile`` does), but the confidence
interval is built from the edges: each bootstrap resample (a multinomial draw of the bucket
counts) gives the lowest possible ratio (speculative lower edge ÷ baseline upper edge) and the
highest (upper ÷ lower), and the CI spans the lower quantile of the first to the upper quantile
of the second. So the CI covers sampling noise AND bucket width: with vLLM's default buckets
(0.01, 0.025, 0.05, 0.075, 0.1, ...) a median near 30 ms is only known to ±40%, and nothing
smaller than that can be called. When the bucket at the median is wider than the tolerance
and the CI does not clear it, the verdict is ``inconclusive`` (not ``neutral``: the source
cannot tell), with the reason. Fine buckets (``--custom-histogram-buckets``) make it useful.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from specguard._arms import ARMS
from specguard.judge._verdict import (
    JudgeSettings,
    Verdict,
    _insufficient,
    classify,
    inconclusive,
)

BASIS_PROMETHEUS = "prometheus histogram of per-request TPOT (coarser: bucket resolution)"
BASIS_SCRAPE = "pod /metrics histogram deltas of per-request TPOT (coarser: bucket resolution)"


@dataclass(frozen=True, slots=True)
class Histogram:
    """Per-bucket counts over a window. ``bounds`` are the ascending upper bounds (``le``),
    the last one usually +Inf; ``counts[i]`` is the number of observations in
    (bounds[i-1], bounds[i]] (bounds[-1] taken as 0)."""

    bounds: tuple[float, ...]
    counts: tuple[int, ...]

    @property
    def total(self) -> int:
        return sum(self.counts)

    @classmethod
    def from_cumulative(cls, buckets: Iterable[tuple[float, float]]) -> Histogram:
        """From Prometheus-style cumulative (le, count) pairs, in any order. Counts from
        ``increase()`` are extrapolated floats; they are rounded, and a cumulative count that
        dips (a counter reset inside the window) is clamped so per-bucket counts stay >= 0."""
        ordered = sorted((float(le), float(c)) for le, c in buckets)
        bounds: list[float] = []
        counts: list[int] = []
        previous = 0
        for le, cumulative in ordered:
            value = round(cumulative) if math.isfinite(cumulative) else 0
            value = max(value, previous)
            bounds.append(le)
            counts.append(value - previous)
            previous = value
        return cls(tuple(bounds), tuple(counts))

    def __add__(self, other: Histogram) -> Histogram:
        if not self.bounds:
            return other
        if not other.bounds:
            return self
        if self.bounds != other.bounds:
            raise ValueError("histogram buckets differ")
        return Histogram(
            self.bounds, tuple(a + b for a, b in zip(self.counts, other.counts, strict=True))
        )


EMPTY = Histogram((), ())


def _edges(bounds: tuple[float, ...]) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    upper = np.asarray(bounds, dtype=np.float64)
    lower = np.r_[0.0, upper[:-1]]
    return lower, upper


def median_bucket(counts: npt.NDArray[np.int64]) -> npt.NDArray[np.intp]:
    """Index of the bucket holding the median, per row of a (resamples, buckets) matrix."""
    cumulative = np.cumsum(counts, axis=-1)
    half = cumulative[..., -1:] / 2.0
    index: npt.NDArray[np.intp] = np.argmax(cumulative >= half, axis=-1)
    return index


def interpolated_median(hist: Histogram) -> float | None:
    """``histogram_quantile(0.5, ...)``: linear inside the median's bucket; None when the median
    is in the +Inf bucket or there is no data."""
    if hist.total == 0:
        return None
    counts = np.asarray(hist.counts, dtype=np.int64)
    i = int(median_bucket(counts))
    lower, upper = _edges(hist.bounds)
    if not math.isfinite(upper[i]):
        return None
    below = float(counts[:i].sum())
    fraction = (hist.total / 2.0 - below) / counts[i]
    return float(lower[i] + (upper[i] - lower[i]) * fraction)


def judge_histograms(
    spec: Histogram,
    base: Histogram,
    settings: JudgeSettings | None = None,
    *,
    concurrency: Mapping[str, float | None] | None = None,
    pod_concurrency: Mapping[str, Mapping[str, float]] | None = None,
    acceptance_length: float | None = None,
    basis: str = BASIS_PROMETHEUS,
) -> Verdict:
    """The verdict for one window of per-arm TPOT histograms. Never raises on data problems."""
    settings = settings or JudgeSettings()
    conc = {"speculative": None, "baseline": None, **(concurrency or {})}
    conc = {k: (v if v is not None and math.isfinite(v) else None) for k, v in conc.items()}
    if acceptance_length is not None and not math.isfinite(acceptance_length):
        acceptance_length = None
    n = {"speculative": spec.total, "baseline": base.total}
    med = {"speculative": interpolated_median(spec), "baseline": interpolated_median(base)}
    common = {
        "confidence": settings.confidence,
        "tolerance": settings.tolerance,
        "basis": basis,
        "median_s": med,
        "n": n,
        "concurrency": conc,
        "pod_concurrency": dict(pod_concurrency or {}),
        "acceptance_length": acceptance_length,
        "requests": dict(n),
    }

    per_pod = dict(pod_concurrency or {})
    requests_per_pod: dict[str, float | None] = {
        arm: n[arm] / len(per_pod[arm]) if per_pod.get(arm) else None
        for arm in ARMS
    }
    common["requests_per_pod"] = requests_per_pod
    reasons, notes = _insufficient(n, conc, requests_per_pod, settings)
    if spec.total and base.total and spec.bounds != base.bounds:
        reasons.append("the arms' histogram buckets differ")
    for arm in ARMS:
        if n[arm] and med[arm] is None:
            reasons.append(f"{arm} median is in the +Inf bucket")
    if settings.concurrency_match == "in_flight" and any(c is None for c in conc.values()):
        reasons.append("concurrency of an arm is unknown")
    med_s, med_b = med["speculative"], med["baseline"]
    if reasons or not med_s or not med_b:
        return inconclusive(reasons, common)
    ratio = med_s / med_b
    lower, upper = _edges(spec.bounds)
    rng = np.random.default_rng(settings.seed)
    draws = {}
    for arm, hist in (("speculative", spec), ("baseline", base)):
        p = np.asarray(hist.counts, dtype=np.float64) / hist.total
        draws[arm] = median_bucket(rng.multinomial(hist.total, p, size=settings.resamples))
    with np.errstate(divide="ignore", invalid="ignore"):
        low = lower[draws["speculative"]] / upper[draws["baseline"]]
        high = upper[draws["speculative"]] / lower[draws["baseline"]]
    alpha = 1.0 - settings.confidence
    ci_low = float(np.quantile(low, alpha / 2))
    ci_high = float(np.quantile(np.nan_to_num(high, nan=np.inf), 1 - alpha / 2))
    ci_low, ci_high = min(ci_low, ratio), max(ci_high, ratio)
    outcome = classify(ci_low, ci_high, settings.tolerance)
    widths = [
        float(upper[i] / lower[i]) if lower[i] > 0 else math.inf
        for i in (int(median_bucket(np.asarray(h.counts))) for h in (spec, base))
    ]
    if outcome == "neutral" and max(widths) > 1.0 + settings.tolerance:
        outcome = "inconclusive"
        notes.append(
            f"the bucket at the median spans ×{max(widths):.2f}, wider than the tolerance"
            f" ±{settings.tolerance:.1%}: this histogram cannot resolve the change"
        )
    return Verdict(
        outcome=outcome,
        ratio=ratio,
        ci_low=ci_low,
        ci_high=ci_high,
        method="histogram",
        ratio_of_medians=ratio,
        reasons=tuple(notes),
        **common,  # type: ignore[arg-type]
    )


__all__ = [
    "BASIS_PROMETHEUS",
    "BASIS_SCRAPE",
    "EMPTY",
    "Histogram",
    "interpolated_median",
    "judge_histograms",
    "median_bucket",
]
