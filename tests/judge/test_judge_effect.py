"""The configuration really in effect: the drafter arm's spec-decode counters against what
its rung asks for (``judge._guardrails``: ``RungNotInEffect``, ``NothingToPropose`` apart
from ``SpeculationOff``), and the spans ``draft_counters`` builds from two readings."""

from __future__ import annotations

import pytest

from specguard._exposition import draft_counters, parse_reading
from specguard.judge import (
    ArmErrors,
    DraftCounters,
    DrafterRun,
    DraftSpan,
    Evidence,
    PolicySettings,
    rung_mismatch,
    speculation_guardrail,
)

SETTINGS = PolicySettings(speculation_min_requests=200, speculation_min_drafts=100)
SCHEDULE = DrafterRun("dspark", 8, ((1, 2, 8), (3, 1024, 0)), rung="schedule")
SERVED = ArmErrors(spec_requests=500, base_requests=500)


def counters(*spans: DraftSpan, accepted_per_draft: float = 3.0) -> DraftCounters:
    drafts = sum(s.drafts for s in spans)
    tokens = sum(s.draft_tokens for s in spans)
    return DraftCounters(len(spans), len(spans), drafts, drafts * accepted_per_draft, tokens,
                         spans)  # fmt: skip


def cause(c: DraftCounters, drafter: DrafterRun | None) -> str | None:
    trip = speculation_guardrail(
        Evidence(speculation=c, drafter=drafter, errors=SERVED), SETTINGS, 0.0
    )
    return None if trip is None else trip.cause


def test_a_schedule_kept_drafts_nothing_above_its_limit() -> None:
    # six running requests at both readings: the schedule asks for k = 0, and the engine
    # drafted in 2% of the steps (a batch that dipped below 3 between the readings).
    kept = counters(DraftSpan(6, 6, 1200, 24, 24 * 8), DraftSpan(1, 2, 400, 400, 3200))
    assert rung_mismatch(kept, SCHEDULE, 100) is None
    assert cause(kept, SCHEDULE) is None


def test_a_schedule_ignored_drafts_k_above_its_limit() -> None:
    ignored = counters(DraftSpan(6, 6, 1200, 1200, 9600), DraftSpan(5, 7, 800, 790, 6320))
    message = rung_mismatch(ignored, SCHEDULE, 100)
    assert message == (
        "the engine drafted in 100% of 2000 request-steps at 5-7 running requests per pod, "
        "where the schedule rung asks for no draft (schedule 1-2: k=8, 3-1024: k=0): the "
        "configuration is not in effect"
    )
    assert cause(ignored, SCHEDULE) == "RungNotInEffect"


def test_too_few_steps_in_the_band_or_a_span_across_ranges_says_nothing() -> None:
    few = counters(DraftSpan(6, 6, 99, 99, 792))
    across = counters(DraftSpan(2, 6, 5000, 5000, 40000))  # k = 8 and k = 0 both apply
    assert rung_mismatch(few, SCHEDULE, 100) is None
    assert rung_mismatch(across, SCHEDULE, 100) is None


def test_more_tokens_per_draft_than_the_rung_asks_is_not_in_effect() -> None:
    reduced = DrafterRun("dspark", 8, ((1, 4, 8), (5, 1024, 2)), rung="schedule")
    at_two = counters(DraftSpan(8, 8, 1000, 1000, 2000))
    at_eight = counters(DraftSpan(8, 8, 1000, 1000, 8000))
    assert rung_mismatch(at_two, reduced, 100) is None
    assert rung_mismatch(at_eight, reduced, 100) == (
        "the engine drafted 8.00 tokens per draft over 1000 drafts at 8 running requests per "
        "pod, where the schedule rung asks for k=2 (schedule 1-4: k=8, 5-1024: k=2): the "
        "configuration is not in effect"
    )
    # The configured rung: k = 4 asked, 6 drafted (another k than the one configured).
    configured = DrafterRun("eagle3", 4)
    assert rung_mismatch(counters(DraftSpan(3, 9, 1000, 900, 5400)), configured, 100) is not None
    assert rung_mismatch(counters(DraftSpan(3, 9, 1000, 900, 3600)), configured, 100) is None


@pytest.mark.parametrize(
    ("method", "expected"),
    [("ngram", "NothingToPropose"), ("suffix", "NothingToPropose"),
     ("dspark", "SpeculationOff"), ("eagle3", "SpeculationOff")],
)  # fmt: skip
def test_zero_drafts_with_counters_present(method: str, expected: str) -> None:
    """The evidence apart: counters exported (vLLM registers them only with a drafter in
    effect) and no draft. A lookup drafter then found nothing to propose in this traffic;
    a drafter that proposes at every step it runs did not run: not in effect."""
    nothing = counters(DraftSpan(4, 4, 3000, 0, 0))
    assert cause(nothing, DrafterRun(method, 4)) == expected


def test_zero_drafts_over_too_few_decode_steps_says_nothing() -> None:
    """0 drafts where the pods made almost no decode step (requests that ended at their
    first token, or errors) is no evidence the drafter is off: the spans need
    ``speculation_min_drafts`` request-steps first."""
    idle = counters(DraftSpan(4, 4, 0, 0, 0), DraftSpan(3, 3, 99, 0, 0))
    assert cause(idle, DrafterRun("dspark", 4)) is None
    busy = counters(DraftSpan(4, 4, 0, 0, 0), DraftSpan(3, 3, 100, 0, 0))
    assert cause(busy, DrafterRun("dspark", 4)) == "SpeculationOff"


def test_no_counters_at_all_is_speculation_off_whatever_the_method() -> None:
    absent = DraftCounters(pods=2, exporting=0)
    assert cause(absent, DrafterRun("ngram", 4)) == "SpeculationOff"
    assert cause(absent, None) == "SpeculationOff"


def test_zero_drafts_above_the_schedule_limit_is_what_the_rung_asks() -> None:
    ngram = DrafterRun("ngram", 4, ((1, 8, 4), (9, 1024, 0)), rung="schedule")
    high = counters(DraftSpan(12, 20, 3000, 0, 0))
    low = counters(DraftSpan(2, 6, 3000, 0, 0))
    unread = DraftCounters(pods=1, exporting=1)  # no span: the batch is not known
    assert cause(high, ngram) is None
    assert cause(low, ngram) == "NothingToPropose"
    assert cause(unread, ngram) is None


def test_draft_counters_keep_each_pods_batch_and_steps() -> None:
    def page(running: float, steps: float, drafts: float, tokens: float) -> str:
        return (
            f'vllm:num_requests_running{{engine="0"}} {running}\n'
            f'vllm:inter_token_latency_seconds_count{{engine="0"}} {steps}\n'
            f'vllm:inter_token_latency_seconds_sum{{engine="0"}} 1.0\n'
            f'vllm:spec_decode_num_drafts_total{{engine="0"}} {drafts}\n'
            f'vllm:spec_decode_num_draft_tokens_total{{engine="0"}} {tokens}\n'
            'vllm:spec_decode_num_accepted_tokens_total{engine="0"} 0\n'
        )

    start = {"a": parse_reading(page(7, 100, 50, 400)), "b": parse_reading(page(1, 0, 0, 0))}
    end = {"a": parse_reading(page(5, 1300, 1250, 10000)),
           "b": parse_reading("vllm:num_requests_running 2\n")}  # fmt: skip
    got = draft_counters(start, end)
    assert got.spans == (DraftSpan(5, 7, 1200, 1200, 9600),)
    assert (got.pods, got.exporting, got.drafts, got.draft_tokens) == (2, 1, 1200, 9600)
    assert rung_mismatch(got, SCHEDULE, 100) is not None
