"""The drafter configuration ladder: which configuration the drafter arm runs, what a lost
rung leads to, and the schedule derived from the configured drafter's own evidence.

Rungs, in the resource's order: ``configured`` (``spec.drafter`` as written), then those of
``spec.ladder.rungs`` — ``adaptive`` (the same drafter with adaptive verification) and
``schedule`` (the same drafter with a ``num_speculative_tokens_per_batch_size`` schedule) —
and below them all, no drafter (the baseline arm serving). Every rung is judged as today's
drafter is: against the baseline arm, on mirrored pairs, by the policy's streaks.

- **A rung loses** when the policy rolls it back while it serves (regressed windows, or a
  guardrail), or, while the baseline serves and it is the shadow, after
  ``consecutive_windows`` regressed windows in a row. It is remembered with the time and
  the numbers (``lost``) and stays out for ``retry_after``.
- **The next rung** is the first after it, in order, that has not lost within
  ``retry_after`` (the schedule only once it can be derived, below). It runs as the shadow
  while the baseline serves: the drafter arm's pods restart with it once the rollback's
  swap is done (``next``, then :func:`settle`), and it is re-promoted as the drafter is
  today, by ``consecutive_windows + 1`` improved windows after the cooldown. With no rung
  left, the lost one stays the shadow (a change of traffic can still bring it back).
- **Climbing back**: while the baseline serves and its shadow rung has lost, the first rung
  in order whose loss is older than ``retry_after`` is tried again. A rung that serves and
  wins is kept: the ladder moves only on a loss.
- **The schedule** is derived from the configured drafter's verdicts per band of in-flight
  requests per pod (``levels``: every window's mirrored pairs, grouped by the drafter half's
  in-flight count, each band judged on the pairs it holds): k up to the crossing, 0 above
  it (``judge._schedule``, the derivation ``specguard evaluate`` makes from a sweep). It
  needs a band where the drafter is faster below the first band where it loses; without
  one the schedule rung is passed over.

Pure: plain data in and out; the controller keeps :class:`LadderState` in
``status.ladder``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from specguard._arms import ARMS
from specguard.judge._sample import Sample
from specguard.judge._schedule import LevelGain, crossing, schedule_limit, schedule_ranges
from specguard.judge._verdict import JudgeSettings, Outcome, judge, stratum_of

RUNG_CONFIGURED = "configured"
# The schedule's last batch size: vLLM keeps the last range's k past it (as evaluate's
# --max-batch-size default).
MAX_BATCH = 1024
MAX_LEVELS = 24


@dataclass(frozen=True, slots=True)
class Rung:
    """A drafter configuration: its name and, for ``schedule``, the derived ranges."""

    name: str = RUNG_CONFIGURED
    schedule: tuple[tuple[int, int, int], ...] = ()


@dataclass(frozen=True, slots=True)
class Level:
    """The configured drafter's verdict in one band of in-flight requests per pod."""

    low: int
    high: int
    in_flight: float  # median in-flight count of the drafter halves judged
    outcome: Outcome
    ratio: float | None
    ci_low: float | None
    ci_high: float | None
    pairs: int
    window_end: float | None = None


@dataclass(frozen=True, slots=True)
class Loss:
    rung: str
    at: float
    cause: str
    message: str = ""
    ratio: float | None = None


@dataclass(frozen=True, slots=True)
class LadderState:
    """``rung``: what the drafter arm runs; ``next``: what it moves to once the swap in
    progress is done; ``lost``: the latest loss of each rung; ``levels``: the schedule's
    evidence; ``streak``: regressed windows in a row of the shadow rung while the baseline
    serves."""

    rung: Rung = Rung()
    next: Rung | None = None
    lost: tuple[Loss, ...] = ()
    levels: tuple[Level, ...] = ()
    streak: int = 0

    def lost_at(self, name: str) -> float | None:
        return next((loss.at for loss in self.lost if loss.rung == name), None)

    @property
    def lost_now(self) -> bool:
        """Has the rung the drafter arm runs lost (and is it kept for want of another)?"""
        return any(loss.rung == self.rung.name for loss in self.lost)


def rung_order(rungs: Sequence[str]) -> tuple[str, ...]:
    return (RUNG_CONFIGURED, *rungs)


def _eligible(state: LadderState, name: str, now: float, retry_after: float) -> bool:
    at = state.lost_at(name)
    return at is None or now - at >= retry_after


def _candidate(
    state: LadderState, name: str, k: int | None, max_batch: int
) -> tuple[Rung | None, str]:
    """The rung to run for ``name`` (None: the schedule cannot be derived, and why)."""
    if name != "schedule":
        return Rung(name), ""
    if k is None:
        return None, "the schedule needs spec.drafter.numSpeculativeTokens"
    ranges, why = derive_schedule(state.levels, k, max_batch)
    if ranges is None:
        return None, why
    return Rung("schedule", tuple((lo, hi, kk) for lo, hi, kk in ranges)), ""


def after_loss(
    state: LadderState,
    *,
    order: Sequence[str],
    cause: str,
    message: str,
    ratio: float | None,
    now: float,
    retry_after: float,
    k: int | None,
    max_batch: int = MAX_BATCH,
) -> tuple[LadderState, str]:
    """The drafter arm's rung lost (``cause``, ``message``): remember it and choose the rung
    to try next (``next``; None when none is left). Returns the sentence for the Event."""
    current = state.rung.name
    lost = (*(loss for loss in state.lost if loss.rung != current),
            Loss(current, now, cause, message, ratio))  # fmt: skip
    state = replace(state, lost=lost, streak=0, next=None)
    skipped: list[str] = []
    start = order.index(current) + 1 if current in order else 0
    for name in order[start:]:
        if not _eligible(state, name, now, retry_after):
            skipped.append(f"{name} lost {now - (state.lost_at(name) or now):.0f}s ago")
            continue
        rung, why = _candidate(state, name, k, max_batch)
        if rung is None:
            skipped.append(f"{name}: {why}")
            continue
        note = f" ({'; '.join(skipped)})" if skipped else ""
        return replace(state, next=rung), f"{current} lost; next: {name}{note}"
    note = f" ({'; '.join(skipped)})" if skipped else ""
    return state, f"{current} lost; no rung left: the drafter stays off{note}"


def shadow_window(
    state: LadderState, outcome: Outcome, consecutive_windows: int
) -> tuple[LadderState, bool]:
    """A judged window while the baseline serves and the drafter arm is the shadow: its
    regressed streak, and whether it has now lost (``consecutive_windows`` in a row; any
    other outcome breaks the streak)."""
    if outcome != "regressed":
        return replace(state, streak=0), False
    streak = state.streak + 1
    return replace(state, streak=streak), streak >= consecutive_windows


def climb_back(
    state: LadderState,
    *,
    order: Sequence[str],
    now: float,
    retry_after: float,
    k: int | None,
    max_batch: int = MAX_BATCH,
) -> LadderState | None:
    """While the baseline serves and its shadow rung has lost: the first rung in order
    whose loss is older than ``retry_after`` (or that never lost), as ``next``; None when
    there is nothing to change."""
    if state.next is not None or not state.lost_now:
        return None
    for name in order:
        if name == state.rung.name or not _eligible(state, name, now, retry_after):
            continue
        rung, _ = _candidate(state, name, k, max_batch)
        if rung is not None:
            return replace(state, next=rung, streak=0)
    return None


def settle(state: LadderState, swapping: bool) -> tuple[LadderState, bool]:
    """The pending rung takes effect once no swap is running: (state, changed)."""
    if state.next is None or swapping:
        return state, False
    changed = state.next != state.rung
    return replace(state, rung=state.next, next=None, streak=0), changed


# --- the schedule's evidence -------------------------------------------------------------


def _pairs(samples: Iterable[Sample]) -> dict[str, dict[str, Sample]]:
    halves: dict[str, dict[str, Sample]] = {}
    for s in samples:
        if s.pair_id is not None:
            halves.setdefault(s.pair_id, {})[s.arm] = s
    return {pid: arms for pid, arms in halves.items() if all(a in arms for a in ARMS)}


class LevelPairs:
    """Mirrored pairs of the configured drafter, kept per band of the drafter half's
    in-flight count (the newest ``per_band`` of each), across windows: a band reaches the
    judge's sample minimum sooner than one window would give it.

    Only counted windows' pairs belong here: a window that spans a disturbance or whose
    drafter arm did not do what its rung asks (``RungNotInEffect``, ``NothingToPropose``,
    ``SpeculationOff``, ...) says nothing about the configured drafter. The controller
    judges a window on :meth:`with_pairs` (a copy) and keeps that copy only once the
    decision counted the window."""

    def __init__(self, per_band: int) -> None:
        self.per_band = per_band
        self._bands: dict[tuple[int, int], list[tuple[Sample, Sample]]] = {}

    def with_pairs(self, samples: Iterable[Sample]) -> LevelPairs:
        """A copy holding ``samples``' pairs too (this one unchanged)."""
        out = LevelPairs(self.per_band)
        out._bands = {band: list(pairs) for band, pairs in self._bands.items()}
        out.add(samples)
        return out

    def add(self, samples: Iterable[Sample]) -> None:
        for arms in _pairs(samples).values():
            spec = arms["speculative"]
            band = self._bands.setdefault(stratum_of(spec.concurrency), [])
            band.append((spec, arms["baseline"]))
            del band[: max(0, len(band) - self.per_band)]

    def clear(self) -> None:
        self._bands.clear()

    def __len__(self) -> int:
        return sum(len(band) for band in self._bands.values())

    def verdicts(self, settings: JudgeSettings, window_end: float | None) -> list[Level]:
        """Each band judged on its pairs (the load check is the router's: pairs are
        matched in flight by construction, and a band is one level of it). No guard: only
        the window's overall verdict's guards act."""
        plain = dataclasses.replace(settings, concurrency_match="off", guards=())
        out = []
        for (low, high), band in sorted(self._bands.items()):
            verdict = judge([s for pair in band for s in pair], plain)
            conc = verdict.concurrency.get("speculative")
            in_flight = float(conc) if conc is not None else float(low)
            out.append(
                Level(
                    low,
                    high,
                    in_flight,
                    verdict.outcome,
                    verdict.ratio,
                    verdict.ci_low,
                    verdict.ci_high,
                    verdict.n_pairs,
                    window_end,
                )
            )
        return out


def merge_levels(old: Sequence[Level], new: Sequence[Level]) -> tuple[Level, ...]:
    """``old`` with each band's newest judged verdict from ``new`` (an inconclusive band
    keeps what was known), at most :data:`MAX_LEVELS` bands, lowest first."""
    by_band = {(lv.low, lv.high): lv for lv in old}
    for lv in new:
        if lv.outcome != "inconclusive":
            by_band[(lv.low, lv.high)] = lv
    ordered = sorted(by_band.values(), key=lambda lv: lv.low)
    return tuple(ordered[:MAX_LEVELS])


def derive_schedule(
    levels: Sequence[Level], k: int, max_batch: int = MAX_BATCH
) -> tuple[list[list[int]] | None, str]:
    """``num_speculative_tokens_per_batch_size`` from the bands' verdicts: k up to the
    crossing, 0 above (None, and why, when it cannot be derived)."""
    gains = [
        LevelGain(
            max(1, round(lv.in_flight)),
            None if lv.ratio is None or lv.ratio <= 0 else 1.0 / lv.ratio - 1.0,
            loses=lv.outcome == "regressed",
            no_gain=lv.outcome == "neutral" or (lv.ratio is not None and lv.ratio >= 1.0),
        )
        for lv in levels
        if lv.outcome != "inconclusive"
    ]
    found = crossing(gains)
    if found.step is None:
        return None, "no in-flight band where the configured drafter loses"
    limit = schedule_limit(gains, found, max_batch)
    if limit is None:
        return None, (
            f"no in-flight band below {found.step} where the configured drafter is faster"
        )
    return schedule_ranges(k, limit, max_batch), ""


def describe(rung: Rung, method: str, k: int | None) -> str:
    """The rung in words, for Events and ``kubectl specguard``."""
    draft = f"{method} k={k}" if k is not None else method
    if rung.name == "adaptive":
        return f"adaptive ({draft}, adaptive verification)"
    if rung.name == "schedule" and rung.schedule:
        parts = ", ".join(f"{lo}-{hi}: k={kk}" for lo, hi, kk in rung.schedule)
        return f"schedule ({method}, in flight {parts})"
    return f"configured ({draft})"


__all__ = [
    "MAX_BATCH",
    "RUNG_CONFIGURED",
    "LadderState",
    "Level",
    "LevelPairs",
    "Loss",
    "Rung",
    "after_loss",
    "climb_back",
    "derive_schedule",
    "describe",
    "merge_levels",
    "rung_order",
    "settle",
    "shadow_window",
]
