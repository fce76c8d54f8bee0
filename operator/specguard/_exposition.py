"""What specguard reads from a vLLM /metrics page, and how two readings subtract: the one
parser of vLLM's Prometheus text exposition (sources, evaluate and the tests all use it;
``specguard.sources`` re-exports it). Pure: a top-level module rather than a part of the
I/O package ``sources``, so that pure code (``evaluate/_cells.py``) can use it.

Only ``vllm:request_time_per_output_token_seconds`` (one observation per request, per token)
is used for latency; ``vllm:inter_token_latency_seconds`` is per engine step and is never
read for latency (a drafter makes steps slower while making tokens faster); its count (one
observation per engine step per request) is the request-steps the spec-decode counters are
set against (``draft_counters``' spans: drafts per step).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from specguard._arms import ARMS, Arm, LoadMatch
from specguard.judge import ArmLoad, DraftCounters, DraftSpan, Histogram

TPOT_METRIC = "vllm:request_time_per_output_token_seconds"
ITL_METRIC = "vllm:inter_token_latency_seconds"
RUNNING_METRIC = "vllm:num_requests_running"
WAITING_METRIC = "vllm:num_requests_waiting"
DRAFTS_METRIC = "vllm:spec_decode_num_drafts"
DRAFT_TOKENS_METRIC = "vllm:spec_decode_num_draft_tokens"
ACCEPTED_METRIC = "vllm:spec_decode_num_accepted_tokens"
PER_POSITION_METRIC = "vllm:spec_decode_num_accepted_tokens_per_pos"

# {(sample name, sorted label pairs): value}: every sample of a page, for readers that want
# more than a Reading (the tests read any vLLM metric through it).
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse_samples(text: str) -> Samples:
    """Every sample of a text exposition (raises ValueError on malformed text)."""
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = float(s.value)
    return out


def sample_value(samples: Samples, name: str, **labels: str) -> float:
    """Sum of the samples named ``name`` whose labels include ``labels`` (0 if none)."""
    return sum(
        v
        for (n, lab), v in samples.items()
        if n == name and all(dict(lab).get(k) == want for k, want in labels.items())
    )


@dataclass(frozen=True)
class Reading:
    """One pod's counters at one moment (summed over label sets, e.g. engines).
    A spec-decode field is None when the page has no such metric (no drafter)."""

    tpot_buckets: Mapping[float, float] = field(default_factory=dict)  # le → cumulative
    tpot_count: float = 0.0
    running: float | None = None
    drafts: float | None = None
    accepted: float | None = None
    draft_tokens: float | None = None
    waiting: float | None = None
    # highest ``position`` label + 1 on the per-position acceptance counter: the drafter's k
    positions: int | None = None
    # request-steps: the inter-token histogram's count (None: not exported)
    steps: float | None = None

    @property
    def has_spec_decode(self) -> bool:
        return self.drafts is not None and self.accepted is not None


def _base(name: str) -> str:
    # Counters are exposed as <name>_total (older exporters: without the suffix).
    return name[: -len("_total")] if name.endswith("_total") else name


def parse_reading(text: str) -> Reading:
    """Parse Prometheus text exposition (raises ValueError on malformed text)."""
    buckets: dict[float, float] = {}
    count = 0.0
    sums: dict[str, float] = {}
    positions: int | None = None
    for (name, labels), value in parse_samples(text).items():
        if name == f"{TPOT_METRIC}_bucket":
            le = float(dict(labels)["le"])
            buckets[le] = buckets.get(le, 0.0) + value
        elif name == f"{TPOT_METRIC}_count":
            count += value
        elif name == f"{ITL_METRIC}_count":
            sums[ITL_METRIC] = sums.get(ITL_METRIC, 0.0) + value
        else:
            base = _base(name)
            if base in (RUNNING_METRIC, WAITING_METRIC, DRAFTS_METRIC, DRAFT_TOKENS_METRIC,
                        ACCEPTED_METRIC):  # fmt: skip
                sums[base] = sums.get(base, 0.0) + value
            elif base == PER_POSITION_METRIC:
                position = dict(labels).get("position", "")
                if position.isdigit():
                    positions = max(positions or 0, int(position) + 1)
    return Reading(
        buckets,
        count,
        running=sums.get(RUNNING_METRIC),
        drafts=sums.get(DRAFTS_METRIC),
        accepted=sums.get(ACCEPTED_METRIC),
        draft_tokens=sums.get(DRAFT_TOKENS_METRIC),
        waiting=sums.get(WAITING_METRIC),
        positions=positions,
        steps=sums.get(ITL_METRIC),
    )


def counter_delta(before: float | None, after: float | None) -> float | None:
    if after is None:
        return None
    if before is None or after < before:
        # No earlier reading, or the counter went down: the process restarted in between,
        # and everything it counted since is new.
        return after
    return after - before


def draft_counters(start: Mapping[str, Reading], end: Mapping[str, Reading]) -> DraftCounters:
    """The drafter arm's spec-decode counters over a window: per-pod deltas between two
    readings (pod URL → Reading), summed over the pods read at both ends; a span per
    exporting pod that also exports the running gauge and the inter-token histogram."""
    pods = sorted(set(start) & set(end))
    exporting = 0
    drafts = accepted = tokens = 0.0
    spans: list[DraftSpan] = []
    for pod in pods:
        a, b = start[pod], end[pod]
        if b.drafts is None:
            continue
        exporting += 1
        pod_drafts = counter_delta(a.drafts, b.drafts) or 0.0
        pod_tokens = counter_delta(a.draft_tokens, b.draft_tokens) or 0.0
        drafts += pod_drafts
        tokens += pod_tokens
        accepted += counter_delta(a.accepted, b.accepted) or 0.0
        steps = counter_delta(a.steps, b.steps)
        if a.running is not None and b.running is not None and steps is not None:
            low, high = sorted((a.running, b.running))
            spans.append(DraftSpan(low, high, steps, pod_drafts, pod_tokens))
    return DraftCounters(len(pods), exporting, drafts, accepted, tokens, tuple(spans))


def arm_load(
    start: Mapping[Arm, Mapping[str, Reading]],
    end: Mapping[Arm, Mapping[str, Reading]],
    rule: LoadMatch,
    last: Mapping[Arm, Mapping[str, Reading]] | None = None,
    *,
    split: bool = False,
) -> ArmLoad:
    """Requests in each arm's engines (running + waiting) per pod at a window's start and
    end: the mean over the pods read at both that export both gauges (arm → pod URL →
    Reading); an arm without such a pod is left out. ``last``, the look before the end when
    there was one: the same pods' mean at it, for an arm whose every such pod was read
    there too (a pod that missed the look leaves the arm's ``last`` out, not the arm).
    ``done``: the requests the same pods finished between the two readings, per pod (the
    per-request TPOT histogram's count; a pod restarted in between counts from zero), for
    an arm whose every such pod exports it at the end. ``split``: routes by domain."""
    before: dict[Arm, float] = {}
    after: dict[Arm, float] = {}
    between: dict[Arm, float] = {}
    pods: dict[Arm, int] = {}
    done: dict[Arm, float] = {}
    for arm in ARMS:
        first, final = start.get(arm, {}), end.get(arm, {})
        kept = {}
        for url in sorted(set(first) & set(final)):
            a, b = _held(first[url]), _held(final[url])
            if a is not None and b is not None:
                kept[url] = (a, b)
        if not kept:
            continue
        pods[arm] = len(kept)
        before[arm] = sum(a for a, _ in kept.values()) / len(kept)
        after[arm] = sum(b for _, b in kept.values()) / len(kept)
        looked = (last or {}).get(arm, {})
        at_look = [_held(looked[url]) if url in looked else None for url in kept]
        if last is not None and None not in at_look:
            between[arm] = sum(x or 0.0 for x in at_look) / len(kept)
        if all(final[url].tpot_count > 0 for url in kept):
            finished = (counter_delta(first[url].tpot_count, final[url].tpot_count) for url in kept)
            done[arm] = sum(x or 0.0 for x in finished) / len(kept)
    return ArmLoad(before, after, pods, rule, between, done, split)


def _held(reading: Reading) -> float | None:
    if reading.running is None or reading.waiting is None:
        return None
    return reading.running + reading.waiting


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


@dataclass(frozen=True, slots=True)
class Acceptance:
    """Spec-decode counter increases between two readings of one drafter endpoint."""

    drafts: float
    draft_tokens: float
    accepted: float

    @property
    def length(self) -> float | None:
        """Mean acceptance length (target token included), None when no step drafted."""
        return acceptance_length(self.drafts, self.accepted)

    @property
    def rate(self) -> float | None:
        """Share of drafted tokens accepted."""
        if self.draft_tokens <= 0:
            return None
        return self.accepted / self.draft_tokens


def acceptance_between(before: Reading, after: Reading) -> Acceptance | None:
    """Counter increase between two readings; None without spec-decode counters, or when a
    counter went backwards (the server restarted in between: the delta means nothing)."""
    if not (before.has_spec_decode and after.has_spec_decode):
        return None
    values: list[float] = []
    for name in ("drafts", "draft_tokens", "accepted"):
        old, new = getattr(before, name) or 0.0, getattr(after, name) or 0.0
        if new < old:
            return None
        values.append(counter_delta(old, new) or 0.0)
    return Acceptance(drafts=values[0], draft_tokens=values[1], accepted=values[2])


__all__ = [
    "ACCEPTED_METRIC",
    "DRAFTS_METRIC",
    "DRAFT_TOKENS_METRIC",
    "ITL_METRIC",
    "PER_POSITION_METRIC",
    "RUNNING_METRIC",
    "TPOT_METRIC",
    "WAITING_METRIC",
    "Acceptance",
    "Reading",
    "Samples",
    "acceptance_between",
    "acceptance_length",
    "bucket_delta",
    "counter_delta",
    "draft_counters",
    "histogram_of",
    "parse_reading",
    "parse_samples",
    "sample_value",
]
