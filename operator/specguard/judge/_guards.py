"""Guards beside the median: tail and first-token latency, judged per window on the same
mirrored pairs as the median per-token latency ratio.

The median per-request ratio is what the policy's streaks and cumulative evidence are about;
it can improve while what users hold SLOs on gets worse (a drafter whose low-acceptance
requests straggle: median per-token latency better, end-to-end p99 worse). Each guard is one
quantile of one per-request figure, compared between the arms on the window's mirrored pairs:

- ``tpot_p99``: p99 per-token latency (TPOT);
- ``ttft_p50`` and ``ttft_p99``: time to first token, p50 and p99;
- ``e2e_p99``: end-to-end time, p99.

The quantity is the arm ratio of the quantile, speculative ÷ baseline, over the pairs that
have the figure on both halves. Its interval is a percentile bootstrap over the *pairs* (both
halves of a resampled pair go together, so what a prompt does to both arms stays paired),
widened by the spread between pods the median's interval carries (``Verdict.pod_variance``:
one arm's pods may run a little slower, which no resampling of requests shows). The
bootstrap's random numbers come from the judge's seed and the window's values: the same
window gives the same result. A guard is **regressed** only when the interval's lower
bound is above ``1 + tolerance``; with fewer than ``min_pairs`` pairs it says so ("too few
pairs") and never is. A guard whose point estimate is within ``1 + tolerance`` cannot be
regressed (the lower bound is never above the estimate), and no interval is computed.

**Load.** Under the in-flight load match the median's pairs are moved to equal in-flight
(``_adjust.in_flight_gap``: each pair's log ratio less the window's slope of log latency on log
in-flight × the pair's log gap), and a lighter arm compared at equal arrivals has its interval
widened by what that lighter load could hide. The guards do alike (``GuardLoad``): the
speculative half's per-token latency is moved by its pair's shift, and the decode part of its
end-to-end time (e2e less TTFT) with it; the slope's uncertainty widens the interval, and a
widening the median got (a gap the window cannot measure, a lighter arm) widens every
guard's. TTFT is not moved by a slope measured on per-token latency (its load is queueing
and prefill, which the pairs do not measure): its interval is widened toward the lighter arm
by the most the gap could move it (latency at most proportional to in-flight, the median's
``MAX_LOAD_SLOPE``). A guard acts only on a regression its pairs show beyond their load.

Chunk-counted or non-streamed per-token figures overstate a drafter's TPOT
(``INEXACT_MEASUREMENTS``): on them ``tpot_p99`` is never regressed, as the median is not.
TTFT and end-to-end times are whole-request times and need no exact token count.

What a regressed guard does is the policy's (``judge._policy``): it counts as a regressed
window while the drafter serves (K in a row roll back, the cause names the guard), holds a
re-promotion while the baseline serves, and a rung shadowed against no drafter loses on it.

Pure: no I/O, no clocks.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, NamedTuple

import numpy as np
import numpy.typing as npt

from specguard.judge._adjust import MAX_LOAD_SLOPE, widen, z_of
from specguard.judge._sample import Sample

GuardName = Literal["tpot_p99", "ttft_p50", "ttft_p99", "e2e_p99"]
GUARD_NAMES: tuple[GuardName, ...] = ("tpot_p99", "ttft_p50", "ttft_p99", "e2e_p99")
GuardOutcome = Literal["regressed", "clear", "too_few", "not_judged"]


class _Figure(NamedTuple):
    """What a guard reads off a sample, at which quantile, its words and its cause."""

    field: str  # what the guard reads off a sample
    quantile: float
    label: str  # the guard in words
    cause: str  # a regressed guard's cause


_FIGURE: dict[str, _Figure] = {
    "tpot_p99": _Figure("tpot_s", 0.99, "p99 per-token latency", "TpotP99Regressed"),
    "ttft_p50": _Figure("ttft_s", 0.50, "TTFT p50", "TtftP50Regressed"),
    "ttft_p99": _Figure("ttft_s", 0.99, "TTFT p99", "TtftP99Regressed"),
    "e2e_p99": _Figure("e2e_s", 0.99, "end-to-end p99", "E2eP99Regressed"),
}
# The causes a regressed guard gives a transition, an Event and a lost rung.
GUARD_CAUSES: tuple[str, ...] = tuple(_FIGURE[name].cause for name in GUARD_NAMES)

# A p99 needs pairs beyond it: 500 pairs put 5 of each arm above it.
DEFAULT_MIN_PAIRS_TAIL = 500
DEFAULT_MIN_PAIRS_MEDIAN = 200
# The bootstrap's resamples (the judge's ``JudgeSettings.resamples``): more does not move a
# 99% percentile bound visibly.
GUARD_RESAMPLES = 2000
# Cells of the (resamples × pairs) matrix handled at once.
_CHUNK_CELLS = 250_000  # 2 MB of int64 picks, ~8 MB peak with the gathered values

FloatArray = npt.NDArray[np.float64]


def tolerance_text(tolerance: float) -> str:
    """A guard's tolerance as a relative change with every digit it has: 0.125 → "+12.5%",
    0.1 → "+10%" (``{:.0%}`` would say +12%)."""
    return f"+{round(tolerance * 100.0, 6):g}%"


class _Named:
    """A guard's words and cause, from its ``name`` (``Guard``, ``GuardResult``)."""

    __slots__ = ()
    name: GuardName

    @property
    def label(self) -> str:
        return _FIGURE[self.name].label

    @property
    def cause(self) -> str:
        return _FIGURE[self.name].cause


@dataclass(frozen=True, slots=True)
class Guard(_Named):
    """One guard's settings: ``tolerance`` (relative: regressed needs the lower bound above
    1 + tolerance), ``min_pairs`` (fewer pairs with the figure on both halves: too few, no
    action) and ``enabled`` (off: not judged)."""

    name: GuardName
    tolerance: float
    min_pairs: int
    enabled: bool = True

    def __post_init__(self) -> None:
        if self.name not in GUARD_NAMES:
            raise ValueError(f"guards: unknown guard {self.name!r}")
        if not (0.0 <= self.tolerance < 10.0 and math.isfinite(self.tolerance)):
            raise ValueError(f"guards.{self.name}.tolerance: must be in [0, 10), got "
                             f"{self.tolerance!r}")  # fmt: skip
        if self.min_pairs < 20:
            raise ValueError(f"guards.{self.name}.min_pairs: must be at least 20, got "
                             f"{self.min_pairs!r}")  # fmt: skip


# The defaults (the resource's spec.rollback.guards).
DEFAULT_GUARDS: tuple[Guard, ...] = (
    Guard("tpot_p99", 0.10, DEFAULT_MIN_PAIRS_TAIL),
    # Off by default: a drafter lengthens every engine step and a new request waits for the
    # step in progress, so at load its first token is later by about the step-time ratio by
    # design (docs/judge.md, "Why the TTFT guards are off by default").
    Guard("ttft_p50", 0.20, DEFAULT_MIN_PAIRS_MEDIAN, enabled=False),
    Guard("ttft_p99", 0.25, DEFAULT_MIN_PAIRS_TAIL, enabled=False),
    Guard("e2e_p99", 0.10, DEFAULT_MIN_PAIRS_TAIL),
)


@dataclass(frozen=True, slots=True)
class GuardResult(_Named):
    """One guard's result in one window: the ratio of the arms' quantiles (speculative ÷
    baseline) over ``n`` pairs, its interval when the estimate is beyond the tolerance, and
    the outcome; ``reason`` when it has none."""

    name: GuardName
    outcome: GuardOutcome
    tolerance: float
    n: int
    ratio: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    reason: str = ""

    @property
    def regressed(self) -> bool:
        return self.outcome == "regressed"

    def sentence(self) -> str:
        """One sentence with the numbers, e.g. "end-to-end p99 regressed: speculative ÷
        baseline 1.412 (99% bound 1.221–1.630, tolerance +10%), 800 pairs"."""
        if self.ratio is None:
            return f"{self.label}: {self.reason}"
        allowed = tolerance_text(self.tolerance)
        interval = (
            f" (bound {self.ci_low:.3f}–{self.ci_high:.3f}, tolerance {allowed})"
            if self.ci_low is not None and self.ci_high is not None
            else f" (tolerance {allowed})"
        )
        word = {"regressed": "regressed", "clear": "not regressed"}.get(self.outcome, self.outcome)
        text = (
            f"{self.label} {word}: speculative ÷ baseline {self.ratio:.3f}{interval}, "
            f"{self.n} pairs"
        )
        return f"{text} — {self.reason}" if self.reason else text


@dataclass(frozen=True, slots=True)
class GuardLoad:
    """What the median's load match did to a window's pairs, for the guards to do alike.

    ``shift``: per pair (in the order of the pairs judged), the log amount the speculative
    half's per-token latency is moved down by to the baseline half's in-flight count (the
    window's slope × the pair's log gap); ``se``: the log standard deviation the slope's
    uncertainty adds; ``below`` / ``above``: log amounts every guard's interval ends are
    moved out by (the median's own widenings: a gap the window cannot measure, a lighter
    arm compared at equal arrivals); ``gap``: the pairs' mean log in-flight gap, speculative
    over baseline, by which TTFT's interval is widened toward the lighter arm."""

    shift: FloatArray | None = None
    se: float = 0.0
    below: float = 0.0
    above: float = 0.0
    gap: float = 0.0

    def __post_init__(self) -> None:
        for name in ("se", "below", "above", "gap"):
            value = getattr(self, name)
            if not math.isfinite(value) or (name != "gap" and value < 0.0):
                raise ValueError(f"GuardLoad.{name}: must be finite and non-negative, got "
                                 f"{value!r}")  # fmt: skip


def judge_guards(
    pairs: Sequence[tuple[Sample, Sample]],
    guards: Sequence[Guard],
    *,
    confidence: float,
    seed: int = 0,
    resamples: int = GUARD_RESAMPLES,
    pod_variance: float = 0.0,
    exact_tpot: bool = True,
    load: GuardLoad | None = None,
) -> tuple[GuardResult, ...]:
    """The enabled ``guards`` on one window's mirrored ``pairs`` (speculative, baseline).
    ``pod_variance``: the spread between pods, in log units², that the interval carries
    beside the bootstrap's (the median's, ``Verdict.pod_variance``); ``exact_tpot``: whether
    the per-token figures count tokens exactly (else ``tpot_p99`` is never regressed);
    ``load``: the median's in-flight correction and widenings (none: the pairs are compared
    as measured)."""
    if load is not None and load.shift is not None and load.shift.size != len(pairs):
        raise ValueError(f"GuardLoad.shift: {load.shift.size} shifts for {len(pairs)} pairs")
    return tuple(
        _one(
            pairs,
            guard,
            confidence=confidence,
            seed=seed,
            resamples=resamples,
            pod_variance=pod_variance,
            exact_tpot=exact_tpot,
            load=load or GuardLoad(),
        )
        for guard in guards
        if guard.enabled
    )


def _moved(s: Sample, field: str, value: float, shift: float) -> float:
    """The speculative half's ``value`` of ``field`` at its pair's baseline in-flight count:
    per-token latency × exp(−shift); end-to-end time with its decode part (e2e less TTFT, or
    all of it without a TTFT) so moved; TTFT as measured."""
    if shift == 0.0 or field == "ttft_s":
        return value
    factor = math.exp(-shift)
    if field == "e2e_s" and s.ttft_s is not None and 0.0 < s.ttft_s < value:
        return s.ttft_s + (value - s.ttft_s) * factor
    return value * factor


def _one(
    pairs: Sequence[tuple[Sample, Sample]],
    guard: Guard,
    *,
    confidence: float,
    seed: int,
    resamples: int,
    pod_variance: float,
    exact_tpot: bool,
    load: GuardLoad,
) -> GuardResult:
    figure = _FIGURE[guard.name]
    field, q = figure.field, figure.quantile
    spec_list, base_list = [], []
    for index, (s, b) in enumerate(pairs):
        sv, bv = getattr(s, field), getattr(b, field)
        if sv is None or bv is None or not (sv > 0 and bv > 0):
            continue
        if not (math.isfinite(sv) and math.isfinite(bv)):
            continue
        shift = 0.0 if load.shift is None else float(load.shift[index])
        spec_list.append(_moved(s, field, float(sv), shift))
        base_list.append(float(bv))
    n = len(spec_list)
    if n < guard.min_pairs:
        return GuardResult(guard.name, "too_few", guard.tolerance, n,
                           reason=f"too few pairs ({n}; needs {guard.min_pairs})")  # fmt: skip
    spec, base = np.asarray(spec_list), np.asarray(base_list)
    ratio = float(np.quantile(spec, q) / np.quantile(base, q))
    threshold = 1.0 + guard.tolerance
    if ratio <= threshold:
        return GuardResult(guard.name, "clear", guard.tolerance, n, ratio)
    low, high = _interval(
        spec, base, q, confidence=confidence, seed=seed, name=guard.name, resamples=resamples
    )
    known = pod_variance + (load.se**2 if field != "ttft_s" else 0.0)
    if known > 0.0:
        low, high = widen(math.log(ratio), low, high, z_of(confidence) * math.sqrt(known))
    below, above = load.below, load.above
    if field == "ttft_s":
        # Not moved by the per-token slope: widened toward the lighter arm by the most its
        # load could move it (a heavier speculative arm may look slower than it is).
        reach = MAX_LOAD_SLOPE * abs(load.gap)
        below, above = (max(below, reach), above) if load.gap > 0 else (below, max(above, reach))
    low, high = low - below, high + above
    ci_low, ci_high = min(math.exp(low), ratio), max(math.exp(high), ratio)
    if ci_low <= threshold:
        return GuardResult(guard.name, "clear", guard.tolerance, n, ratio, ci_low, ci_high)
    if guard.name == "tpot_p99" and not exact_tpot:
        return GuardResult(
            guard.name, "not_judged", guard.tolerance, n, ratio, ci_low, ci_high,
            reason="not judged regressed on per-token figures that do not count tokens exactly",
        )  # fmt: skip
    return GuardResult(guard.name, "regressed", guard.tolerance, n, ratio, ci_low, ci_high)


def _interval(
    spec: FloatArray,
    base: FloatArray,
    q: float,
    *,
    confidence: float,
    seed: int,
    name: str,
    resamples: int = GUARD_RESAMPLES,
) -> tuple[float, float]:
    """The percentile bootstrap interval of log(q-quantile of spec ÷ of base), resampling
    pairs (one index for both halves), from random numbers seeded by ``seed``, the guard
    and the pairs' values (sorted: the same pairs in any order give the same interval)."""
    n = spec.size
    order = np.lexsort((base, spec))
    spec, base = spec[order], base[order]
    rng = np.random.default_rng(
        [seed, zlib.crc32(name.encode()), zlib.crc32(spec.tobytes() + base.tobytes())]
    )
    position = q * (n - 1)
    lo, hi = math.floor(position), math.ceil(position)
    frac = position - lo
    kth = [lo] if lo == hi else [lo, hi]
    logs = np.empty(resamples, dtype=np.float64)
    rows_per_chunk = max(1, _CHUNK_CELLS // n)
    for first in range(0, resamples, rows_per_chunk):
        rows = min(rows_per_chunk, resamples - first)
        picks = rng.integers(0, n, size=(rows, n))
        quantiles = []
        for values in (spec, base):
            part = np.partition(values[picks], kth, axis=1)
            quantiles.append(part[:, lo] * (1.0 - frac) + part[:, hi] * frac)
        logs[first : first + rows] = np.log(quantiles[0]) - np.log(quantiles[1])
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(logs, [tail, 1.0 - tail])
    return float(low), float(high)


__all__ = [
    "DEFAULT_GUARDS",
    "GUARD_CAUSES",
    "GUARD_NAMES",
    "Guard",
    "GuardLoad",
    "GuardName",
    "GuardOutcome",
    "GuardResult",
    "judge_guards",
    "tolerance_text",
]
