"""The cumulative rule (judge._cumulative): each window's log-likelihood ratio, the CUSUM, the
cap that makes it need K windows, gaps, the gain mirror, and the issue's case (a sustained
+5–8% loss that no single window shows)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import pytest

from specguard.judge._cumulative import (
    DEFAULT_BETWEEN_WINDOWS,
    GAIN_STRICTNESS,
    Cumulative,
    CumulativeSettings,
    Direction,
    WindowWeight,
    add,
    design_shift,
    evidence_summary,
    reached,
    standard_error,
    weigh,
)
from specguard.judge._verdict import Outcome, Verdict, classify

Z99 = 2.5758293035489004
S = CumulativeSettings()  # tolerance 0.03, 10 000 windows per false alarm, K 3 (4 to re-promote)
UNCAPPED = CumulativeSettings(windows_per_false_alarm=1e300)  # no cap in the way


def verdict(
    ratio: float | None,
    half: float = 0.04,
    *,
    outcome: Outcome | None = None,
    measurement: str | None = "stream_usage",
    confidence: float = 0.99,
) -> Verdict:
    """A window with ``ratio`` and a 99% CI of ± ``half`` (relative, symmetric in log)."""
    low = None if ratio is None else ratio / (1 + half)
    high = None if ratio is None else ratio * (1 + half)
    if outcome is None:
        outcome = "inconclusive" if low is None or high is None else classify(low, high, 0.03)
    return Verdict(
        outcome=outcome,
        ratio=ratio,
        ci_low=low,
        ci_high=high,
        confidence=confidence,
        tolerance=0.03,
        method="paired",
        basis="test",
        median_s={},
        n={"speculative": 200, "baseline": 200},
        measurement=measurement,
    )


def feed(
    ratios: Sequence[float | None],
    settings: CumulativeSettings = S,
    half: float = 0.04,
    direction: Direction = "loss",
) -> list[Cumulative]:
    """The evidence after each window (None: a window that brings none)."""
    evidence, out = Cumulative(), []
    for r in ratios:
        w = None if r is None else weigh(verdict(r, half), direction, settings)
        evidence = add(evidence, w, direction, settings)
        out.append(evidence)
    return out


def acted(
    ratios: Sequence[float | None],
    settings: CumulativeSettings = S,
    half: float = 0.04,
    direction: Direction = "loss",
) -> int | None:
    """The first window (1-based) at which the evidence is enough, or None."""
    for i, e in enumerate(feed(ratios, settings, half, direction), start=1):
        if reached(e, direction, settings):
            return i
    return None


def test_standard_error_is_the_interval_width_in_log_over_two_z() -> None:
    v = verdict(1.1, 0.05)
    assert standard_error(v) == pytest.approx(2 * math.log(1.05) / (2 * Z99), rel=1e-12)
    v95 = verdict(1.1, 0.05, confidence=0.95)
    assert standard_error(v95) == pytest.approx(math.log(1.05) / 1.959963984540054, rel=1e-12)
    for low, high in ((None, 1.1), (1.1, None), (0.0, 1.1), (1.2, 1.1), (1.0, math.inf)):
        assert standard_error(replace(v, ci_low=low, ci_high=high)) is None


def test_the_spread_between_pods_is_taken_out_of_the_standard_error() -> None:
    """The interval carries the pods' variance (hypot with z·√pod_variance); the window's
    weight does not: the same pods' offset is the same in every window."""
    sampling = math.log(1.04) / Z99
    pods = 0.03**2
    wide = math.sqrt(sampling**2 + pods) * Z99  # the judge's widened half-width, in log
    v = replace(verdict(1.1), ci_low=1.1 / math.exp(wide), ci_high=1.1 * math.exp(wide))
    assert standard_error(v) == pytest.approx(math.sqrt(sampling**2 + pods), rel=1e-9)
    assert standard_error(replace(v, pod_variance=pods)) == pytest.approx(sampling, rel=1e-9)
    # Never below a tenth of the width (a pod variance larger than the interval's).
    whole = math.sqrt(sampling**2 + pods)
    assert standard_error(replace(v, pod_variance=1.0)) == pytest.approx(whole / 10, rel=1e-9)


def test_window_log_likelihood_ratio_is_exact_at_the_hypotheses() -> None:
    """x at θ0 (the tolerance) → −Δ²/2v; at θ1 = θ0 + Δ → +Δ²/2v; half way → 0."""
    delta = math.log(1.03)
    for x, expected_sign in ((delta, -1), (2 * delta, 1), (1.5 * delta, 0)):
        w = weigh(verdict(math.exp(x), 0.04), "loss", UNCAPPED)
        assert w is not None
        s = math.log(1.04) / Z99
        v = s * s + DEFAULT_BETWEEN_WINDOWS**2
        assert w.v == pytest.approx(v, rel=1e-12)
        assert w.x == pytest.approx(x, rel=1e-12)
        assert w.llr == pytest.approx(expected_sign * delta * delta / (2 * v), abs=1e-9)


def test_a_window_adds_at_most_a_kth_of_the_threshold() -> None:
    w = weigh(verdict(2.0, 0.01), "loss", S)
    assert w is not None and w.llr == pytest.approx(math.log(10_000) / 3)
    k5 = CumulativeSettings(min_windows=5)
    assert weigh(verdict(2.0, 0.01), "loss", k5).llr == pytest.approx(math.log(10_000) / 5)  # type: ignore[union-attr]
    # A very good window is not capped below: it clears the evidence at once.
    assert weigh(verdict(0.5, 0.01), "loss", S).llr < -100  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "v",
    [
        None,
        verdict(None),
        verdict(1.3, outcome="inconclusive"),  # e.g. mismatched load, with an estimate
        verdict(1.3, measurement="stream_chunks"),  # chunk-counted: overstates the drafter
        verdict(1.3, measurement="non_stream"),
        replace(verdict(1.3), ci_low=None),
        replace(verdict(1.3), ratio=0.0),
        replace(verdict(1.3), ratio=math.inf, ci_high=math.inf),
        replace(verdict(1.3), ci_low=1.4),  # an interval that does not hold its estimate
    ],
)
def test_no_evidence_from_inconclusive_missing_or_inexact_windows(v: Verdict | None) -> None:
    assert weigh(v, "loss", S) is None
    assert weigh(v, "gain", S) is None


def test_histogram_verdicts_without_a_measurement_kind_count() -> None:
    assert weigh(verdict(1.3, measurement=None), "loss", S) is not None


def test_never_on_fewer_than_k_windows_however_strong() -> None:
    assert acted([3.0, 3.0, 3.0]) == 3
    assert acted([3.0, 3.0, 3.0], CumulativeSettings(min_windows=5)) is None
    assert acted([3.0] * 5, CumulativeSettings(min_windows=5)) == 5
    assert acted([3.0], CumulativeSettings(min_windows=1)) == 1
    # One odd window cannot carry the decision: the others must show a loss too.
    assert acted([3.0, 1.0, 1.0, 1.0, 1.0]) is None
    assert acted([3.0, 1.03, 1.03, 3.0]) is None  # two odd windows around the tolerance
    assert acted([3.0, 1.06, 1.06, 3.0]) == 4  # windows that show a loss add up
    assert feed([3.0, 1.0])[-1] == Cumulative()


def test_the_issue_case_a_sustained_loss_no_single_window_shows() -> None:
    """+5–8% over consecutive windows of ~200 pairs, each interval ±5% so that no window is
    regressed: K in a row never comes; the cumulative rule acts within a few windows."""
    ratios = [1.07, 1.05, 1.08, 1.06] * 3
    assert all(verdict(r, 0.05).outcome == "neutral" for r in ratios)
    when = acted(list(ratios), half=0.05)
    assert when is not None and 4 < when <= 8
    # Narrower windows (more pairs) carry more evidence each: sooner.
    assert acted(list(ratios), half=0.03) == 4
    assert acted([1.065] * 20, half=0.05) == 7
    # Off: never.
    assert acted(ratios, CumulativeSettings(windows_per_false_alarm=0), half=0.05) is None


def test_losses_within_the_tolerance_never_act() -> None:
    for ratio in (0.9, 1.0, 1.02, 1.03):
        assert acted([ratio] * 200, half=0.02) is None
        assert feed([ratio] * 200, half=0.02)[-1].total < S.threshold("loss") / 2


def test_an_inconclusive_window_holds_the_evidence_and_k_in_a_row_clear_it() -> None:
    before = feed([1.08, 1.08])[-1]
    after_gap = feed([1.08, 1.08, None])[-1]
    assert after_gap == replace(before, gap=1)
    assert feed([1.08, 1.08, None, None])[-1].gap == 2
    assert feed([1.08, 1.08, None, None, None])[-1] == Cumulative()  # K = 3 gaps in a row
    # A gap neither counts nor breaks: windows on both sides of it add up.
    assert acted([1.2, 1.2, None, 1.2]) == 4
    assert acted([1.2, 1.2, None, None, None, 1.2]) is None
    # K = 1: any gap clears.
    assert add(
        Cumulative(total=1.0, windows=1), None, "loss", CumulativeSettings(min_windows=1)
    ) == (Cumulative())


def test_cusum_restarts_at_zero_so_old_good_windows_do_not_hide_a_new_loss() -> None:
    good = [0.95] * 500
    assert acted(good + [1.2] * 3) == 503
    assert feed(good)[-1] == Cumulative()


def test_the_gain_direction_is_the_mirror_image_and_stricter() -> None:
    for ratio in (0.8, 0.93, 0.97, 1.0, 1.1):
        gain = weigh(verdict(ratio), "gain", UNCAPPED)
        loss = weigh(verdict(1 / ratio), "loss", UNCAPPED)
        assert gain is not None and loss is not None
        assert gain.llr == pytest.approx(loss.llr, rel=1e-9, abs=1e-12)
    assert S.threshold("gain") == pytest.approx(math.log(10_000 * GAIN_STRICTNESS))
    assert S.windows("gain") == 4
    assert acted([0.5] * 3, direction="gain") is None
    assert acted([0.5] * 4, direction="gain") == 4
    # The same sustained change: a loss acts sooner than the mirror gain.
    loss_at = acted([1.065] * 30, half=0.045)
    gain_at = acted([1 / 1.065] * 30, half=0.045, direction="gain")
    assert loss_at is not None and gain_at is not None and gain_at > loss_at


def test_weighted_estimate_over_the_windows() -> None:
    e = feed([1.06, 1.08, 1.07])[-1]
    assert e.windows == 3
    ratio = e.ratio()
    assert ratio is not None and ratio == pytest.approx(
        math.exp(np.mean(np.log([1.06, 1.08, 1.07])))
    )
    width = e.half_width(0.99)
    s = math.log(1.04) / Z99
    expected = math.expm1(Z99 * math.sqrt((s * s + DEFAULT_BETWEEN_WINDOWS**2) / 3))
    assert width == pytest.approx(expected)
    text = evidence_summary(e, "loss", S)
    assert text.startswith(
        f"evidence of a loss {e.total:.1f} of 9.2 over 3 windows (together +7.0%"
    )
    assert Cumulative().ratio() is None and evidence_summary(Cumulative(), "gain", S) == (
        "evidence of a gain 0.0 of 11.5 over 0 windows"
    )


def test_settings_are_checked() -> None:
    for bad in (
        {"windows_per_false_alarm": 1.0},
        {"windows_per_false_alarm": -1.0},
        {"windows_per_false_alarm": math.inf},
        {"min_windows": 0},
        {"min_windows_gain": 0},
        {"between_windows": -0.01},
    ):
        with pytest.raises(ValueError, match=next(iter(bad))):
            CumulativeSettings(**bad)
    off = CumulativeSettings(windows_per_false_alarm=0)
    assert not off.enabled and off.threshold("loss") == math.inf
    assert add(Cumulative(total=5.0, windows=3), WindowWeight(0.1, 1e-4, 1.0), "loss", off) == (
        Cumulative()
    )
    assert not reached(Cumulative(total=1e9, windows=99), "loss", off)
    # Tolerance 0: the design shift has a floor, so windows still weigh.
    assert design_shift(0.0) == pytest.approx(math.log(1.01))
    zero = weigh(replace(verdict(1.05), tolerance=0.0), "loss", S)
    assert zero is not None and zero.llr > 0


def test_a_drafter_at_the_tolerance_rarely_reaches_the_threshold() -> None:
    """Gaussian windows exactly at the tolerance: the CUSUM's false alarms stay within the
    budget (Lorden: at most one per ``windows_per_false_alarm`` windows on average)."""
    rng = np.random.default_rng(5)
    budget = 100.0  # a small budget, so that alarms come often enough to count
    settings = CumulativeSettings(windows_per_false_alarm=budget, between_windows=0.0)
    s = math.log(1.04) / Z99
    alarms, evidence, windows = 0, Cumulative(), 20_000
    for x in rng.normal(math.log(1.03), s, windows):
        evidence = add(evidence, weigh(verdict(math.exp(x), 0.04), "loss", settings), "loss",
                       settings)  # fmt: skip
        if reached(evidence, "loss", settings):
            alarms, evidence = alarms + 1, Cumulative()
    assert alarms / windows <= 1 / budget
    assert alarms > 0  # the test can see an alarm: the bound is not vacuous here
