"""Where a drafter stops paying, and the ``num_speculative_tokens_per_batch_size`` schedule
that turns it off above that point: the one derivation ``specguard evaluate`` (sweep levels)
and the operator's ladder (in-flight bands of mirrored pairs) share.

Definitions (docs/evaluate.md repeats them):

- a level's **gain** = baseline ÷ drafter per-token latency − 1 (≤ 0: the drafter does not
  pay); it **loses** when the drafter is measurably slower there (a regressed verdict, or
  what the caller counts as a loss); it shows **no gain** when it is not measurably faster.
- the **crossing**: the first level (in order of concurrency) that loses with a negative
  gain, and the log-linear zero of the gain between it and the level before, when the gain
  there is positive (gain falls roughly linearly in log-concurrency between levels).
- the **limit** N of "no drafter above N": the larger of the last level below the crossing
  where the drafter is faster and ⌊interpolated crossing⌋, at most ``max_batch − 1``; none
  when the drafter is faster at no level below the crossing.
- the **schedule**: ``[[1, N, k], [N + 1, max_batch, 0]]`` (``[[1, max_batch, k]]`` when
  N reaches ``max_batch``).

Pure.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LevelGain:
    """One concurrency level's evidence: its gain, and whether the drafter measurably
    loses there or shows no measurable gain."""

    level: int
    gain: float | None
    loses: bool = False
    no_gain: bool = False


@dataclass(frozen=True, slots=True)
class Crossing:
    step: int | None  # the first level that loses; None when none does
    interpolated: float | None  # where the gain reaches zero between it and the level before
    at_first_level: bool  # it loses already at the lowest level with a gain


def crossing(levels: Sequence[LevelGain]) -> Crossing:
    """The first level that loses, and the log-linear zero of the gain before it."""
    ordered = sorted((lv for lv in levels if lv.gain is not None), key=lambda lv: lv.level)
    previous: LevelGain | None = None
    for level in ordered:
        gain = level.gain
        assert gain is not None
        if level.loses and gain < 0:
            if previous is None:
                return Crossing(level.level, None, at_first_level=True)
            g_a = previous.gain
            assert g_a is not None
            if g_a <= 0:  # no gain at the level before: its zero is not between the two
                return Crossing(level.level, None, at_first_level=False)
            t = g_a / (g_a - gain)
            log_c = math.log(previous.level) + t * (
                math.log(level.level) - math.log(previous.level)
            )
            return Crossing(level.level, math.exp(log_c), at_first_level=False)
        previous = level
    return Crossing(None, None, at_first_level=False)


def faster_levels(levels: Sequence[LevelGain]) -> list[int]:
    """The levels where the drafter is faster: a positive gain that is not 'no gain'."""
    return [lv.level for lv in levels if lv.gain is not None and lv.gain > 0 and not lv.no_gain]


def schedule_limit(levels: Sequence[LevelGain], found: Crossing, max_batch: int) -> int | None:
    """N of "no drafter above N" for ``found`` (see the module docstring); None when there
    is no crossing, it is at the first level, or the drafter is faster at no level below."""
    if found.step is None or found.at_first_level:
        return None
    faster = set(faster_levels(levels))
    below = [lv.level for lv in levels if lv.level < found.step]
    wins = [level for level in below if level in faster]
    if not wins:
        return None
    last_win = max(below)
    limit = max(last_win, math.floor(found.interpolated or last_win))
    return min(limit, max_batch - 1)


def schedule_ranges(k: int | None, limit: int, max_batch: int) -> list[list[int]] | None:
    """vLLM's ``[start, end, k]`` ranges: k up to ``limit``, 0 above; None when k is
    unknown (no k is made up)."""
    if k is None:
        return None
    if limit >= max_batch:
        return [[1, max_batch, k]]
    return [[1, limit, k], [limit + 1, max_batch, 0]]


__all__ = [
    "Crossing",
    "LevelGain",
    "crossing",
    "faster_levels",
    "schedule_limit",
    "schedule_ranges",
]
