from __future__ import annotations

from specguard.controller._speculation import (
    DraftCounters,
    draft_counters,
    speculation_guardrail,
)
from specguard.sources._exposition import Reading


def test_counters_are_window_deltas_over_pods_read_at_both_ends() -> None:
    start = {"a": Reading(drafts=100, accepted=300), "b": Reading(drafts=5, accepted=5)}
    end = {"a": Reading(drafts=150, accepted=400), "c": Reading(drafts=1, accepted=1)}
    assert draft_counters(start, end) == DraftCounters(1, 1, 50.0, 100.0)
    assert draft_counters({"a": Reading()}, {"a": Reading()}) == DraftCounters(1, 0, 0.0, 0.0)


def test_speculation_off_and_collapsed() -> None:
    assert speculation_guardrail(DraftCounters(2, 0, 0, 0), 300, 30) == (
        "SpeculationOff",
        "the drafter arm served 300 requests but none of its 2 pods exports spec-decode "
        "counters (vllm:spec_decode_num_drafts): the speculative config is not in effect",
    )
    assert speculation_guardrail(DraftCounters(2, 2, 0, 0), 300, 30) == (
        "SpeculationOff",
        "the drafter arm served 300 requests with 0 drafts over the window",
    )
    assert speculation_guardrail(DraftCounters(2, 2, 1000, 20), 300, 30) == (
        "AcceptanceCollapsed",
        "mean acceptance length 1.020 over 1000 drafts (1.000 = no draft token accepted; "
        "threshold 1.05)",
    )


def test_healthy_idle_or_thin_evidence_is_not_tripped() -> None:
    assert speculation_guardrail(DraftCounters(2, 2, 1000, 2500), 300, 30) is None
    assert speculation_guardrail(DraftCounters(2, 0, 0, 0), 10, 30) is None  # too few requests
    assert speculation_guardrail(DraftCounters(2, 2, 50, 0), 300, 30) is None  # too few drafts
    # A drafter that accepts nothing is slow: its arm may serve fewer requests than the
    # judge needs, and the drafts alone are the evidence.
    assert speculation_guardrail(DraftCounters(1, 1, 800, 0), 12, 30) == (
        "AcceptanceCollapsed",
        "mean acceptance length 1.000 over 800 drafts (1.000 = no draft token accepted; "
        "threshold 1.05)",
    )
    assert speculation_guardrail(None, 300, 30) is None
