"""What specguard reads from a vLLM /metrics page, and how two readings subtract.

Only ``vllm:request_time_per_output_token_seconds`` (one observation per request, per token)
is used for latency; ``vllm:inter_token_latency_seconds`` is per engine step and is never
read (a drafter makes steps slower while making tokens faster).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from specguard.judge.histogram import Histogram

TPOT_METRIC = "vllm:request_time_per_output_token_seconds"
RUNNING_METRIC = "vllm:num_requests_running"
DRAFTS_METRIC = "vllm:spec_decode_num_drafts"
ACCEPTED_METRIC = "vllm:spec_decode_num_accepted_tokens"


@dataclass(frozen=True)
class Reading:
    """One pod's counters at one moment (summed over label sets, e.g. engines)."""

    tpot_buckets: Mapping[float, float] = field(default_factory=dict)  # le → cumulative
    tpot_count: float = 0.0
    running: float | None = None
    drafts: float | None = None
    accepted: float | None = None


def parse_reading(text: str) -> Reading:
    """Parse Prometheus text exposition (raises ValueError on malformed text)."""
    buckets: dict[float, float] = {}
    count = 0.0
    running: float | None = None
    drafts: float | None = None
    accepted: float | None = None
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name, value = sample.name, float(sample.value)
            if name == f"{TPOT_METRIC}_bucket":
                le = float(sample.labels["le"])
                buckets[le] = buckets.get(le, 0.0) + value
            elif name == f"{TPOT_METRIC}_count":
                count += value
            elif name == RUNNING_METRIC:
                running = (running or 0.0) + value
            elif name in (f"{DRAFTS_METRIC}_total", DRAFTS_METRIC):
                drafts = (drafts or 0.0) + value
            elif name in (f"{ACCEPTED_METRIC}_total", ACCEPTED_METRIC):
                accepted = (accepted or 0.0) + value
    return Reading(buckets, count, running, drafts, accepted)


def counter_delta(before: float | None, after: float | None) -> float | None:
    if after is None:
        return None
    if before is None or after < before:
        # No earlier reading, or the counter went down: the process restarted in between,
        # and everything it counted since is new.
        return after
    return after - before


def bucket_delta(before: Reading, after: Reading) -> dict[float, float]:
    """Cumulative TPOT bucket increases between two readings of one pod."""
    reset = after.tpot_count < before.tpot_count or any(
        after.tpot_buckets.get(le, 0.0) < v for le, v in before.tpot_buckets.items()
    )
    if reset or not before.tpot_buckets:
        return dict(after.tpot_buckets)
    return {le: v - before.tpot_buckets.get(le, 0.0) for le, v in after.tpot_buckets.items()}


def histogram_of(deltas: Iterable[Mapping[float, float]]) -> Histogram:
    """Sum per-pod cumulative bucket deltas into one histogram; pods whose bucket bounds
    differ from the first pod's are left out (a mixed rollout) — ValueError if none match."""
    total: dict[float, float] = {}
    bounds: tuple[float, ...] | None = None
    for delta in deltas:
        if not delta:
            continue
        these = tuple(sorted(delta))
        if bounds is None:
            bounds = these
        if these != bounds:
            continue
        for le, v in delta.items():
            total[le] = total.get(le, 0.0) + v
    if bounds is None:
        return Histogram((), ())
    if not math.isinf(bounds[-1]):
        raise ValueError(f"{TPOT_METRIC}: no +Inf bucket")
    return Histogram.from_cumulative(total.items())


def acceptance_length(drafts: float | None, accepted: float | None) -> float | None:
    """Mean acceptance length: 1 + accepted / drafts (counts the target's own token)."""
    if drafts is None or accepted is None or drafts <= 0:
        return None
    return 1.0 + accepted / drafts


__all__ = [
    "ACCEPTED_METRIC",
    "DRAFTS_METRIC",
    "RUNNING_METRIC",
    "TPOT_METRIC",
    "Reading",
    "acceptance_length",
    "bucket_delta",
    "counter_delta",
    "histogram_of",
    "parse_reading",
]
