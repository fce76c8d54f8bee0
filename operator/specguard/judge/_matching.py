"""Which windows count toward a change: a verdict whose direction does not depend on which
arm serves.

The shadow measures what the other arm would do with *these* clients only under the load
match that fits them (``judge.client_loop``): the serving pods' in-flight count for clients
that wait for their answers (closed loop), their arrivals for clients that come at their own
pace (open loop). When the clients cannot be told apart (a benchmarking client's own dispatch
delay, a client that caps its rate, a stale finding), the two counterfactuals can disagree,
and a verdict read under the wrong one flips with the serving arm: under ``arrivals`` a
closed loop's shadow, fed the serving arm's throughput, settles far below the serving
in-flight and looks several times faster whichever arm it is (tests/router/
test_router_load_match.py).

What every window can be trusted with (per-token latency grows with load; a pod's
throughput is its in-flight count ÷ its request time; a server without a drafter gets more
throughput from a bigger batch up to its limit, while a drafter's fixed-length verification
can turn compute-bound and lose throughput past a peak):

- **in-flight copies** put the shadow at the serving pods' in-flight count, the closed-loop
  counterfactual. For clients that arrive at their own pace:
  - a shadow faster per token there, and no slower per request end to end (its paired
    end-to-end time within the tolerance of the serving half's), carries the serving pods'
    arrivals at that count, so at those arrivals it would settle at no more in flight,
    where it is no slower per token: faster for either kind;
  - a *baseline* shadow slower per token there, and no faster per request, cannot carry the
    arrivals with fewer requests (its throughput only grows with the batch): slower for
    either kind;
  - a *drafter* shadow slower there may be past its throughput peak at the baseline's
    in-flight count and still faster at the arrivals, where it would hold far fewer
    (tests/router/test_router_load_match.py): that holds only for a closed loop.
- **arrivals copies** give the shadow the serving pods' arrivals: the open-loop
  counterfactual only. Against a closed loop it is wrong in either direction. And it is a
  steady state: a shadow whose in-flight count still climbs within the window (filling up
  after the routers drained it, or running away past its peak) is measured before its queue
  is what these arrivals make it, so it looks faster than it will be — a drafter past its
  peak read 0.91 in the window after the drain and 1.24, 1.46 in the next two (the plant).
  A faster shadow counts only when its in-flight count held (the second half of the window
  within ``CLIMB`` of the first).

So a window's verdict counts (toward a change, or against one) only where it holds for the
clients as the window tells them (``LoopEvidence.kind`` of the window and its history):
under ``in_flight``, always for clients told closed, otherwise as above; under ``arrivals``,
only for clients told open by this window (and a faster shadow only at a steady count). A
window that does not count brings no evidence either way (it breaks a streak, and the
cumulative evidence gets a gap), and the policy's hold says why.

Pure.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from specguard._arms import ARM_BASELINE, ARM_SPECULATIVE, Arm, ClientLoop, LoadMatch
from specguard.judge._sample import Sample
from specguard.judge._verdict import Verdict


@dataclass(frozen=True, slots=True)
class Matching:
    """How a window's shadow was loaded and what its clients were told to be.

    ``rule``: the load match the routers copied by over the window; ``clients``: the kind
    the window (with its history) told, ``"unknown"`` when it told neither way or had no
    per-request samples; ``e2e_ratio``: the paired median ratio of end-to-end request time,
    shadow half ÷ serving half (None: too few pairs); ``pairs``: how many it rests on;
    ``shadow_in_flight``: the shadow requests' median in-flight count in the first and the
    second half of the window (by their start; None: too few)."""

    rule: LoadMatch
    clients: ClientLoop = "unknown"
    e2e_ratio: float | None = None
    pairs: int = 0
    shadow_in_flight: tuple[float, float] | None = None

    @property
    def climbing(self) -> bool:
        """Did the shadow's in-flight count climb within the window (by ``CLIMB`` and at
        least ``CLIMB_MIN`` requests)?"""
        if self.shadow_in_flight is None:
            return False
        first, second = self.shadow_in_flight
        return second >= CLIMB * first and second - first >= CLIMB_MIN


# Pairs needed before the paired e2e ratio speaks (the judge's own paired minimum is higher;
# this only vouches for a direction the verdict already shows).
MIN_E2E_PAIRS = 30
# A shadow whose median in-flight count in the window's second half is this much above the
# first half's, and by at least CLIMB_MIN requests, had not settled.
CLIMB = 1.25
CLIMB_MIN = 2.0
# Shadow requests each half needs for its median to speak.
MIN_HALF = 10


def shadow_in_flight(
    samples: Iterable[Sample], start: float, end: float
) -> tuple[float, float] | None:
    """The shadow requests' median in-flight count (``Sample.concurrency``) among those that
    started in the first half of ``[start, end)`` and in the second; None when a half has
    fewer than ``MIN_HALF``."""
    middle = (start + end) / 2
    halves: tuple[list[int], list[int]] = ([], [])
    for s in samples:
        if s.role == "shadow" and start <= s.started_at < end:
            halves[s.started_at >= middle].append(s.concurrency)
    if min(len(h) for h in halves) < MIN_HALF:
        return None
    return float(np.median(halves[0])), float(np.median(halves[1]))


def paired_e2e_ratio(samples: Iterable[Sample]) -> tuple[float | None, int]:
    """(the median over mirrored pairs of the shadow half's end-to-end time ÷ the serving
    half's, the pairs it rests on); None with fewer than ``MIN_E2E_PAIRS`` pairs. Only ok
    halves with a positive time count."""
    halves: dict[str, dict[str, float]] = {}
    for s in samples:
        if s.pair_id is None or not s.ok or not (s.e2e_s > 0 and math.isfinite(s.e2e_s)):
            continue
        halves.setdefault(s.pair_id, {})[s.role] = s.e2e_s
    logs = [
        math.log(both["shadow"]) - math.log(both["serving"])
        for both in halves.values()
        if len(both) == 2
    ]
    if len(logs) < MIN_E2E_PAIRS:
        return None, len(logs)
    return math.exp(float(np.median(logs))), len(logs)


def toward_change(verdict: Verdict, serving: Arm) -> bool:
    """Does the window's estimate point toward a change: the shadow faster (a ratio above 1
    while the drafter serves, below 1 while the baseline does)?"""
    if verdict.ratio is None:
        return False
    return verdict.ratio > 1.0 if serving == ARM_SPECULATIVE else verdict.ratio < 1.0


def uncounted(matching: Matching | None, verdict: Verdict, serving: Arm) -> str | None:
    """Why this window's verdict does not count (module doc), or None when it counts. No
    matching (a source without mirrored requests): it counts."""
    if matching is None or verdict.ratio is None:
        return None
    told = matching.clients
    if matching.rule == "arrivals":
        if told == "open":
            if matching.climbing and toward_change(verdict, serving):
                first, second = matching.shadow_in_flight or (0.0, 0.0)
                return (
                    f"the shadow's in-flight count climbed within the window ({first:.0f} → "
                    f"{second:.0f}): measured before it settled at these arrivals (filling up "
                    "after a drain, or falling behind), it looks faster than it will be"
                )
            return None
        return (
            "the shadow got a serving pod's arrivals, which is what it would get only from "
            f"clients that arrive at their own pace, and this window's clients read {told}: "
            "its verdict may be an artefact of the load match"
        )
    if told == "closed":
        return None
    ratio, tolerance = matching.e2e_ratio, verdict.tolerance
    if ratio is None:
        return (
            "the clients were not told closed-loop, and too few mirrored pairs "
            f"({matching.pairs} of {MIN_E2E_PAIRS}) show how long the shadow's requests took "
            "end to end, which says whether its verdict at the serving pods' in-flight holds "
            "at their arrivals too"
        )
    if toward_change(verdict, serving):
        if ratio > 1.0 + tolerance:
            return (
                "the shadow is faster per token at the serving pods' in-flight but slower per "
                f"request ({ratio:.2f}× end to end over {matching.pairs} pairs): for clients "
                "that wait for their answers it would win, for clients that arrive at their "
                f"own pace it would not keep up, and this window's clients read {told}"
            )
        return None
    if serving == ARM_BASELINE:
        return (
            "the drafter shadow is slower at the baseline's in-flight, but a drafter past its "
            "throughput peak there may still be faster at the baseline's arrivals, where it "
            "would hold far fewer requests: that holds for clients that wait for their "
            f"answers, and this window's clients read {told}"
        )
    if ratio < 1.0 - tolerance:
        return (
            "the baseline shadow is slower per token at the drafter's in-flight but faster per "
            f"request ({ratio:.2f}× end to end over {matching.pairs} pairs), so at the "
            f"drafter's arrivals it would hold fewer requests, and this window's clients read "
            f"{told}"
        )
    return None


__all__ = [
    "CLIMB",
    "CLIMB_MIN",
    "MIN_E2E_PAIRS",
    "Matching",
    "paired_e2e_ratio",
    "shadow_in_flight",
    "toward_change",
    "uncounted",
]
