"""What the sweep reads from a vLLM server's ``/metrics``: the spec-decode counters (for
acceptance length) and the running/waiting gauges (to wait for an idle engine).

Acceptance length is read from counter deltas around one subset's run on the with-drafter
endpoint: ``1 + Δaccepted / Δdrafts`` (vLLM's own definition: the target's token counts,
so a drafter that never lands a guess scores 1.0). Counters are summed over label sets
(engines, data-parallel ranks).
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from specguard.sources.exposition import ACCEPTED_METRIC as ACCEPTED
from specguard.sources.exposition import DRAFTS_METRIC as DRAFTS
from specguard.sources.exposition import RUNNING_METRIC as RUNNING
from specguard.sources.exposition import acceptance_length

# Beyond what the judge's sources read: the sweep also wants the drafted-token count (for the
# acceptance rate), the per-position counter (the drafter's k) and the waiting queue.
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos"
WAITING = "vllm:num_requests_waiting"


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One scrape. ``drafts`` is None when the server exports no spec-decode counters."""

    drafts: float | None
    draft_tokens: float | None
    accepted: float | None
    # Highest ``position`` label + 1 on the per-position counter: the drafter's k.
    positions: int | None
    running: float
    waiting: float

    @property
    def has_spec_decode(self) -> bool:
        return self.drafts is not None and self.accepted is not None


@dataclass(frozen=True, slots=True)
class Acceptance:
    """Spec-decode counter deltas over one run."""

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


def parse(text: str) -> Snapshot:
    """A snapshot from Prometheus text exposition (ValueError when it does not parse)."""
    sums: dict[str, float] = {}
    positions: int | None = None
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name = sample.name
            # Counters are exposed as <name>_total; the family name drops the suffix.
            base = name[: -len("_total")] if name.endswith("_total") else name
            if base in (DRAFTS, DRAFT_TOKENS, ACCEPTED, RUNNING, WAITING):
                sums[base] = sums.get(base, 0.0) + float(sample.value)
            elif base == PER_POSITION:
                position = sample.labels.get("position", "")
                if position.isdigit():
                    positions = max(positions or 0, int(position) + 1)
    return Snapshot(
        drafts=sums.get(DRAFTS),
        draft_tokens=sums.get(DRAFT_TOKENS),
        accepted=sums.get(ACCEPTED),
        positions=positions,
        running=sums.get(RUNNING, 0.0),
        waiting=sums.get(WAITING, 0.0),
    )


def delta(before: Snapshot, after: Snapshot) -> Acceptance | None:
    """Counter increase between two scrapes; None without spec-decode counters, or when a
    counter went backwards (the server restarted in between: the delta means nothing)."""
    if not (before.has_spec_decode and after.has_spec_decode):
        return None
    values = []
    for name in ("drafts", "draft_tokens", "accepted"):
        old, new = getattr(before, name) or 0.0, getattr(after, name) or 0.0
        if new < old:
            return None
        values.append(new - old)
    return Acceptance(drafts=values[0], draft_tokens=values[1], accepted=values[2])


__all__ = ["Acceptance", "Snapshot", "delta", "parse"]
