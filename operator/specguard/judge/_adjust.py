"""What a window's own data says beyond the comparison of the arms, and what the verdict does
with it:

- ``in_flight_gap``: inside mirrored pairs the two arms rarely hold exactly the same number of
  requests in flight (a router copies to the shadow only while it has room, so the shadow
  runs a little lighter). Per-token latency grows with load, so a lighter shadow looks
  faster. The slope of log latency against log in-flight is measured from the pairs
  themselves (each pair's own gap against its own log ratio: the prompt cancels), and each
  pair's log ratio is moved to equal in-flight by it; the slope's uncertainty goes into the
  interval. The slope followed is capped to [0, ``MAX_LOAD_SLOPE``]: latency does not fall
  with load nor grow faster than in proportion to it, and a steeper fit is confounding.
  When the gap hardly varies between pairs the slope cannot be measured, and the interval
  is widened by the largest correction the gap could need instead.
- ``pod_spread``: pods of one arm differ in speed (hardware, neighbours). One arm's pods may
  be slower on average than the other's for reasons that have nothing to do with the
  drafter, and within one window that looks exactly like an arm effect. The spread between
  pods is estimated from the pods of each arm (how far their medians lie apart beyond
  chance, a method-of-moments estimate) and carried into the interval as the variance of
  the arms' pod-weighted average bias.

Pure numpy; no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np
import numpy.typing as npt

from specguard.judge._robust import median_se, resistant_slope
from specguard.judge._sample import ARMS, Arm

FloatArray = npt.NDArray[np.float64]

# Latency at most proportional to in-flight (a log-log slope of 1): what the widening assumes
# when the window cannot measure the slope. Decode step time grows about linearly with the
# batch (a + b·batch), whose log-log slope is below 1.
MAX_LOAD_SLOPE = 1.0
# The slope needs this many pairs in each outer third, and the thirds' gaps this far apart
# (log in-flight: 5%).
_SLOPE_POINTS = 10
_SLOPE_SPREAD = math.log(1.05)
# A mean gap below this (1%) is not named in the verdict's reasons.
_NOTE_GAP = 0.01
# The spread between pods is named in the verdict's reasons when it widens the interval by
# this factor or more.
_NOTE_WIDER = 1.1
# The pods' spread is estimated from at least this many degrees of freedom (pods beyond the
# first of each arm: 3 + 2, 2 + 3, 4 + 1, ... pods), and inflated at most as a t's variance at
# 3 degrees of freedom.
MIN_POD_DF = 3
_MAX_ALLOWANCE = 3.0
# Pods with fewer samples than this do not enter the spread estimate (their weight still
# counts in the variance it adds).
_POD_MINIMUM = 10


@dataclass(frozen=True, slots=True)
class GapCorrection:
    """How the pairs' log ratios are moved to equal in-flight, and what that costs.

    ``shift``: per pair, the amount subtracted from its log ratio (slope × its log gap);
    ``se``: the standard error the slope's uncertainty adds to the median log ratio;
    ``widen``: (below, above) the interval's ends are moved out by, in log units, when the
    slope could not be measured (else zeros); ``slope`` the slope applied (the measured one
    capped to [0, ``MAX_LOAD_SLOPE``]) or None; ``gap``
    the mean log in-flight gap, speculative over baseline; ``note`` what a reason says."""

    shift: FloatArray
    se: float
    widen: tuple[float, float]
    slope: float | None
    gap: float
    note: str | None


def in_flight_gap(
    log_ratios: FloatArray,
    spec_levels: npt.NDArray[np.int64],
    base_levels: npt.NDArray[np.int64],
) -> GapCorrection | None:
    """The correction for the arms' in-flight gap inside pairs, or None when every pair was
    measured at one in-flight count on both arms (levels count 0 as 1)."""
    gaps = np.log(np.maximum(spec_levels, 1)) - np.log(np.maximum(base_levels, 1))
    if not gaps.any():
        return None
    gap = float(gaps.mean())
    said = f"{math.exp(gap) - 1:+.0%}"
    fit = resistant_slope(gaps, log_ratios, minimum=_SLOPE_POINTS, min_spread=_SLOPE_SPREAD)
    if fit is None:
        reach = MAX_LOAD_SLOPE * abs(gap)
        # A heavier speculative arm (gap > 0) looks slower than it is: the truth may lie
        # lower, so the lower end moves down; a lighter one, the upper end up.
        widen = (reach, 0.0) if gap > 0 else (0.0, reach)
        unmeasured = (
            f"the speculative arm held {said} in flight against its pairs' baseline, and the "
            "gap hardly varies between pairs, so the window does not show how latency moves "
            "with load and the gap cannot be corrected: the interval is widened by the most it "
            f"could need ({math.exp(reach) - 1:.1%}, latency at most proportional to in-flight)"
        )
        return GapCorrection(np.zeros_like(gaps), 0.0, widen, None, gap, unmeasured)
    measured, slope_se = fit
    # Latency neither falls with load nor grows faster than in proportion to it: a slope
    # outside [0, 1] is the pairs' own confounding (on real vLLM CPU, gaps of +44-84% read
    # slopes that moved a 1.4-2.2x loss to 0.54-1.17), not physics, and is not followed.
    slope = min(max(measured, 0.0), MAX_LOAD_SLOPE)
    capped = "" if slope == measured else f", capped at {slope:.0f} (measured {measured:.2f})"
    note: str | None = None
    if abs(gap) >= _NOTE_GAP:
        note = (
            f"the speculative arm held {said} in flight against its pairs' baseline: each "
            f"pair moved to equal in-flight by the window's own slope of log latency on log "
            f"in-flight, {slope:.2f} ± {slope_se:.2f} (from the pairs' gaps{capped}), which "
            f"moved the ratio by about {math.exp(-slope * gap) - 1:+.1%}"
        )
    return GapCorrection(slope * gaps, slope_se * abs(gap), (0.0, 0.0), slope, gap, note)


@dataclass(frozen=True, slots=True)
class PodSpread:
    """The spread between pods a window shows, and what it adds to the interval.

    ``sigma``: the between-pod log-σ (0 when the pods differ no more than chance says);
    ``variance``: what it adds to the variance of the log ratio (σ² × the sum over both arms
    of each pod's squared share of its arm's weight); ``pods``: pods that entered the
    estimate; ``df``: its degrees of freedom (pods − 1, summed over the arms); ``raw``: the
    variance it adds before the floor at 0 (may be negative: chance spread below what the
    pods' own errors explain), which averages without bias over many windows."""

    sigma: float
    variance: float
    pods: int
    df: int
    raw: float = 0.0

    @property
    def allowance(self) -> float:
        """The variance the interval carries for it: ``variance`` × df ÷ (df − 2), the
        variance of Student's t at ``df`` over the normal's (×3 at most, from 3 degrees of
        freedom down), because it is estimated from a handful of pods. Measured on 200 pairs,
        3 + 3 pods of log-σ 0.05 each not centred per arm: false regressed and false improved
        0.35% and 0.5% per window (2000 windows), power at +20% 60%; with the plug-in
        variance 0.8–1.5% false each way, power 80%; with Student's t itself 0.5–0.9%, power
        54%."""
        return self.variance * self._factor

    @property
    def raw_allowance(self) -> float:
        """``allowance`` before the floor at 0: what the evidence across windows averages
        (the mean of floored estimates would grow with noise where pods do not differ)."""
        return self.raw * self._factor

    @property
    def _factor(self) -> float:
        return self.df / (self.df - 2) if self.df > 3 else _MAX_ALLOWANCE

    def note(self, before: float, after: float) -> str | None:
        """A reason's text when the spread widens the interval by a tenth or more (``before``
        and ``after``: the interval's log half-width without and with it)."""
        if self.variance <= 0.0 or after < _NOTE_WIDER * before:
            return None
        return (
            f"pods differ in speed (spread between pods {self.sigma:.1%}, from {self.pods} "
            f"pods): a pod's own speed is not its arm's, so the interval carries it "
            f"(±{math.exp(before) - 1:.1%} without it)"
        )


def pod_spread(
    residuals: Mapping[Arm, FloatArray],
    pods: Mapping[Arm, Sequence[str]],
    weights: Mapping[Arm, FloatArray],
) -> PodSpread | None:
    """The between-pod spread of per-sample log residuals (each sample's log latency, or log
    ratio, less the estimate it entered), per arm grouped by the pod that answered.

    Per arm and pod with at least 10 samples: the median residual and its standard error.
    The spread among an arm's pod medians beyond their standard errors estimates the
    between-pod variance (method of moments), pooled over both arms by degrees of freedom and
    floored at 0. ``weights``: each sample's weight in the estimate of its arm; a pod's share
    is the sum of its samples'. None with fewer than ``MIN_POD_DF`` degrees of freedom (pods
    beyond the first of each arm): two pods per arm, or two serving pods and one shadow, say
    too little about the spread to widen by — a noise-driven estimate there cost a tenth of
    the power at +10% on pods that do not differ, and cannot catch a single shadow pod's own
    bias anyway."""
    estimates: list[tuple[int, float]] = []
    weight_sq = 0.0
    counted = 0
    for arm in ARMS:
        by_pod: dict[str, list[int]] = {}
        for index, pod in enumerate(pods[arm]):
            by_pod.setdefault(pod, []).append(index)
        total = float(weights[arm].sum())
        if total <= 0.0:
            continue
        medians, errors = [], []
        for members in by_pod.values():
            picked = np.asarray(members, dtype=np.intp)
            weight_sq += (float(weights[arm][picked].sum()) / total) ** 2
            if picked.size >= _POD_MINIMUM:
                values = residuals[arm][picked]
                medians.append(float(np.median(values)))
                errors.append(median_se(values))
        if len(medians) >= 2:
            between = float(np.var(medians, ddof=1)) - float(np.mean(np.square(errors)))
            estimates.append((len(medians) - 1, between))
            counted += len(medians)
    df = sum(d for d, _ in estimates)
    if df < MIN_POD_DF:
        return None
    raw = sum(d * v for d, v in estimates) / df
    variance = max(0.0, raw)
    return PodSpread(math.sqrt(variance), variance * weight_sq, counted, df, raw * weight_sq)


def z_of(confidence: float) -> float:
    """The two-sided normal quantile of ``confidence`` (2.576 at 0.99)."""
    return NormalDist().inv_cdf(0.5 + confidence / 2.0)


def widen(centre: float, low: float, high: float, reach: float) -> tuple[float, float]:
    """[low, high] around ``centre`` (log units) with ``reach`` (z × a standard deviation
    beside the sampling's) added on each side: each side becomes hypot(side, reach)."""
    return centre - math.hypot(centre - low, reach), centre + math.hypot(high - centre, reach)


__all__ = [
    "MAX_LOAD_SLOPE",
    "MIN_POD_DF",
    "GapCorrection",
    "PodSpread",
    "in_flight_gap",
    "pod_spread",
    "widen",
    "z_of",
]
