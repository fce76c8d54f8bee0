"""The ladder's pure steps by exact equality: the next rung after a loss, the shadow's
regressed streak, climbing back after retryAfter, the pending rung taking effect, and the
schedule derived from the configured drafter's verdicts per in-flight band."""

from __future__ import annotations

import numpy as np
import pytest

from specguard.judge import (
    JudgeSettings,
    LadderState,
    Level,
    LevelPairs,
    Loss,
    Rung,
    Sample,
    after_loss,
    climb_back,
    derive_schedule,
    describe,
    merge_levels,
    rung_order,
    settle,
    shadow_window,
)

ORDER = rung_order(["adaptive", "schedule"])
HOUR = 3600.0


def level(low: int, high: int, in_flight: float, outcome: str, ratio: float | None) -> Level:
    return Level(low, high, in_flight, outcome, ratio, None, None, 300)  # type: ignore[arg-type]


# Math at 4 in flight: the drafter halves per-token latency; tool calls at 40: +40%.
EVIDENCE = (
    level(4, 5, 4.0, "improved", 0.5),
    level(32, 47, 40.0, "regressed", 1.4),
)


def test_rung_order_starts_with_the_configured_drafter() -> None:
    assert ORDER == ("configured", "adaptive", "schedule")
    assert rung_order([]) == ("configured",)


def test_a_lost_configured_rung_leads_to_the_next_one() -> None:
    state, sentence = after_loss(
        LadderState(levels=EVIDENCE), order=ORDER, cause="Regressed", message="+40%",
        ratio=1.4, now=1000.0, retry_after=HOUR, k=7,
    )  # fmt: skip
    assert state == LadderState(
        rung=Rung("configured"),
        next=Rung("adaptive"),
        lost=(Loss("configured", 1000.0, "Regressed", "+40%", 1.4),),
        levels=EVIDENCE,
    )
    assert sentence == "configured lost; next: adaptive"


def test_the_schedule_rung_gets_the_derived_schedule() -> None:
    start = LadderState(rung=Rung("adaptive"), levels=EVIDENCE,
                        lost=(Loss("configured", 10.0, "Regressed"),))  # fmt: skip
    state, sentence = after_loss(start, order=ORDER, cause="Regressed", message="", ratio=1.2,
                                 now=500.0, retry_after=HOUR, k=7)  # fmt: skip
    # gain +100% at 4, -28.6% at 40: zero at exp(ln4 + ln10 / 1.2857) = 23.98.
    assert state.next == Rung("schedule", ((1, 23, 7), (24, 1024, 0)))
    assert sentence == "adaptive lost; next: schedule"
    assert [loss.rung for loss in state.lost] == ["configured", "adaptive"]


def test_without_evidence_the_schedule_is_passed_over() -> None:
    start = LadderState(rung=Rung("adaptive"), levels=(level(32, 47, 40.0, "regressed", 1.4),))
    state, sentence = after_loss(start, order=ORDER, cause="DrafterErrors", message="5%",
                                 ratio=None, now=500.0, retry_after=HOUR, k=7)  # fmt: skip
    assert state.next is None
    assert sentence == (
        "adaptive lost; no rung left: the drafter stays off (schedule: no in-flight band "
        "below 40 where the configured drafter is faster)"
    )


def test_a_rung_lost_within_retry_after_is_skipped() -> None:
    start = LadderState(lost=(Loss("adaptive", 900.0, "Regressed"),), levels=EVIDENCE)
    state, sentence = after_loss(start, order=ORDER, cause="Regressed", message="",
                                 ratio=1.3, now=1000.0, retry_after=HOUR, k=7)  # fmt: skip
    assert state.next == Rung("schedule", ((1, 23, 7), (24, 1024, 0)))
    assert sentence == "configured lost; next: schedule (adaptive lost 100s ago)"
    # An hour later adaptive may be tried again.
    later, _ = after_loss(start, order=ORDER, cause="Regressed", message="", ratio=1.3,
                          now=900.0 + HOUR, retry_after=HOUR, k=7)  # fmt: skip
    assert later.next == Rung("adaptive")


def test_the_shadow_loses_after_consecutive_regressed_windows() -> None:
    state = LadderState(rung=Rung("adaptive"))
    state, lost = shadow_window(state, "regressed", 2)
    assert (state.streak, lost) == (1, False)
    state, lost = shadow_window(state, "inconclusive", 2)
    assert (state.streak, lost) == (0, False)
    state, _ = shadow_window(state, "regressed", 2)
    state, lost = shadow_window(state, "regressed", 2)
    assert (state.streak, lost) == (2, True)


def test_climbing_back_after_retry_after() -> None:
    lost = (Loss("configured", 0.0, "Regressed"), Loss("adaptive", 100.0, "Regressed"))
    state = LadderState(rung=Rung("adaptive"), lost=lost, levels=EVIDENCE)
    assert climb_back(state, order=ORDER, now=50.0, retry_after=HOUR, k=7) == replace_next(
        state, Rung("schedule", ((1, 23, 7), (24, 1024, 0)))
    )  # the schedule never lost
    no_schedule = LadderState(rung=Rung("adaptive"), lost=lost)
    assert climb_back(no_schedule, order=ORDER, now=50.0, retry_after=HOUR, k=7) is None
    assert climb_back(no_schedule, order=ORDER, now=HOUR, retry_after=HOUR, k=7) == (
        replace_next(no_schedule, Rung("configured"))
    )
    # A shadow rung that has not lost stays; so does a pending change.
    assert climb_back(LadderState(rung=Rung("adaptive")), order=ORDER, now=HOUR * 9,
                      retry_after=HOUR, k=7) is None  # fmt: skip
    pending = replace_next(no_schedule, Rung("configured"))
    assert climb_back(pending, order=ORDER, now=HOUR * 9, retry_after=HOUR, k=7) is None


def replace_next(state: LadderState, rung: Rung) -> LadderState:
    return LadderState(state.rung, rung, state.lost, state.levels, 0)


def test_the_pending_rung_waits_for_the_swap() -> None:
    state = LadderState(next=Rung("adaptive"), streak=1)
    assert settle(state, swapping=True) == (state, False)
    assert settle(state, swapping=False) == (LadderState(rung=Rung("adaptive")), True)
    assert settle(LadderState(), swapping=False) == (LadderState(), False)


@pytest.mark.parametrize(
    ("levels", "expected"),
    [
        # never loses: no schedule (keep the drafter)
        ((level(4, 5, 4, "improved", 0.5), level(8, 11, 9, "neutral", 0.99)),
         (None, "no in-flight band where the configured drafter loses")),
        # loses at the lowest band seen
        ((level(32, 47, 40, "regressed", 1.4),),
         (None, "no in-flight band below 40 where the configured drafter is faster")),
        # a neutral band before the loss: no interpolation, N is the last band below
        ((level(4, 5, 4, "improved", 0.5), level(12, 15, 13, "neutral", 1.01),
          level(32, 47, 40, "regressed", 1.4)),
         ([[1, 13, 7], [14, 1024, 0]], "")),
        # inconclusive bands carry no evidence
        ((level(2, 2, 2, "inconclusive", None), level(4, 5, 4, "improved", 0.5),
          level(32, 47, 40, "regressed", 1.4)),
         ([[1, 23, 7], [24, 1024, 0]], "")),
        # a regression that is not confident is not the crossing
        ((level(4, 5, 4, "improved", 0.5), level(32, 47, 40, "neutral", 1.02),
          level(128, 191, 150, "regressed", 1.3)),
         ([[1, 40, 7], [41, 1024, 0]], "")),
    ],
)  # fmt: skip
def test_derive_schedule(levels: tuple[Level, ...], expected: object) -> None:
    assert derive_schedule(levels, 7) == expected


def test_merge_levels_keeps_the_newest_conclusive_verdict_per_band() -> None:
    old = (level(4, 5, 4, "improved", 0.5), level(32, 47, 40, "regressed", 1.4))
    new = [level(32, 47, 41, "inconclusive", None), level(8, 11, 9, "improved", 0.6),
           level(4, 5, 5, "neutral", 1.0)]  # fmt: skip
    assert merge_levels(old, new) == (
        level(4, 5, 5, "neutral", 1.0),
        level(8, 11, 9, "improved", 0.6),
        level(32, 47, 40, "regressed", 1.4),
    )


def test_describe_names_the_configuration() -> None:
    assert describe(Rung(), "dspark", 7) == "configured (dspark k=7)"
    assert describe(Rung("adaptive"), "dspark", 7) == "adaptive (dspark k=7, adaptive verification)"
    assert describe(Rung("schedule", ((1, 23, 7), (24, 1024, 0))), "ngram", 7) == (
        "schedule (ngram, in flight 1-23: k=7, 24-1024: k=0)"
    )


# --- evidence from pairs -------------------------------------------------------------------


def _pairs(
    rng: np.random.Generator, n: int, in_flight: int, ratio: float, start: int
) -> list[Sample]:
    """Mirrored pairs at ``in_flight``: heavy-tailed per-request latency (lognormal,
    per-prompt spread), the drafter half ``ratio`` times the baseline's with noise."""
    out = []
    for i in range(n):
        base = float(rng.lognormal(np.log(0.02), 0.5))
        spec = base * ratio * float(rng.lognormal(0.0, 0.15))
        for arm, tpot in (("speculative", spec), ("baseline", base)):
            out.append(Sample(arm=arm, role="serving" if arm == "speculative" else "shadow",  # type: ignore[arg-type]
                              pod=f"{arm}-0", domain="math", started_at=float(i),
                              concurrency=in_flight + int(rng.integers(-1, 2)),
                              output_tokens=64, e2e_s=0.05 + 64 * tpot, tpot_s=tpot,
                              measurement="stream_usage",
                              pair_id=f"{start + i}"))  # fmt: skip
    return out


def test_level_pairs_judges_each_band_and_a_schedule_follows() -> None:
    rng = np.random.default_rng(3)
    evidence = LevelPairs(per_band=400)
    # Three windows: low load where the drafter wins, high load where it loses.
    evidence.add(_pairs(rng, 150, 4, 0.55, 0))
    evidence.add(_pairs(rng, 150, 40, 1.35, 1000))
    evidence.add(_pairs(rng, 150, 4, 0.55, 2000))
    assert len(evidence) == 450
    settings = JudgeSettings(min_requests_per_arm=100, resamples=200)
    levels = merge_levels((), evidence.verdicts(settings, window_end=99.0))
    # In flight 3..5 (4 ± 1) fall in bands 3 and 4-5; 39..41 in 32-47.
    assert [(lv.low, lv.high, lv.outcome) for lv in levels] == [
        (3, 3, "improved"),
        (4, 5, "improved"),
        (32, 47, "regressed"),
    ]
    assert sum(lv.pairs for lv in levels) == 450
    assert levels[2].window_end == 99.0
    schedule, why = derive_schedule(levels, 7)
    assert why == "" and schedule is not None
    assert schedule[0][:2] == [1, schedule[0][1]] and 4 <= schedule[0][1] < 40
    assert schedule[1] == [schedule[0][1] + 1, 1024, 0]


def test_level_pairs_keep_only_the_newest_per_band() -> None:
    rng = np.random.default_rng(5)
    evidence = LevelPairs(per_band=100)
    evidence.add(_pairs(rng, 80, 40, 1.0, 0))
    evidence.add(_pairs(rng, 80, 40, 1.5, 100))
    assert len(evidence) <= 3 * 100  # at most per_band in each of the (up to 3) bands
    verdicts = evidence.verdicts(JudgeSettings(min_requests_per_arm=50, resamples=200), None)
    main = max(verdicts, key=lambda lv: lv.pairs)
    assert main.outcome == "regressed" and main.ratio is not None and main.ratio > 1.3


def test_level_pairs_with_a_window_leave_the_kept_pairs_as_they_were() -> None:
    """The controller judges a window's bands on ``with_pairs`` and keeps that copy only when
    the window counts: a window that does not (its drafter not in effect) leaves nothing."""
    rng = np.random.default_rng(7)
    evidence = LevelPairs(per_band=100)
    evidence.add(_pairs(rng, 60, 4, 0.6, 0))
    kept = [(lv.low, lv.high, lv.pairs) for lv in evidence.verdicts(JudgeSettings(), None)]
    candidate = evidence.with_pairs(_pairs(rng, 80, 40, 1.5, 1000))
    assert len(candidate) == len(evidence) + 80 and candidate.per_band == 100
    assert [(lv.low, lv.high, lv.pairs) for lv in evidence.verdicts(JudgeSettings(), None)] == kept
    # The copy keeps the newest per_band of each band, as add does.
    more = candidate.with_pairs(_pairs(rng, 80, 40, 1.5, 2000))
    assert len(more) <= len(evidence) + 3 * 100 and len(candidate) == len(evidence) + 80
