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
throughput is its in-flight count ÷ its request time):

- **in-flight copies** put the shadow at the serving pods' in-flight count. "The shadow is
  faster there" is the closed-loop answer. It is the open-loop answer too when the shadow
  also takes no longer per request (its paired end-to-end time no more than the serving
  half's, within the tolerance): then it carries the serving pods' arrivals at that
  in-flight count, so at those arrivals it would settle at no more in flight, where it is no
  slower per token. Shadow faster per token but slower per request (longer first tokens, a
  drafter past its throughput peak) holds only for a closed loop.
- **arrivals copies** give the shadow the serving pods' arrivals: the open-loop answer only.
  Against a closed loop it is wrong in either direction.

So a window whose estimate points toward a change (the shadow faster: a loss while the
drafter serves, a gain while the baseline does) counts toward it only where that holds for
the clients as the window tells them (``LoopEvidence.kind`` of the window and its history):

- under ``in_flight``: always for clients told closed; otherwise only when the shadow's
  requests were no slower end to end (the paired median, ``e2e_ratio``);
- under ``arrivals``: only for clients told open by this window.

A window pointing the other way (the serving arm faster) argues for what is in effect and
always counts: holding on is never the flip this guards against. A window that does not
count is shown with its verdict and why (the policy's hold reason).

Pure.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from specguard._arms import ARM_SPECULATIVE, Arm, ClientLoop, LoadMatch
from specguard.judge._sample import Sample
from specguard.judge._verdict import Verdict


@dataclass(frozen=True, slots=True)
class Matching:
    """How a window's shadow was loaded and what its clients were told to be.

    ``rule``: the load match the routers copied by over the window; ``clients``: the kind
    the window (with its history) told, ``"unknown"`` when it told neither way or had no
    per-request samples; ``e2e_ratio``: the paired median ratio of end-to-end request time,
    shadow half ÷ serving half (None: too few pairs); ``pairs``: how many it rests on."""

    rule: LoadMatch
    clients: ClientLoop = "unknown"
    e2e_ratio: float | None = None
    pairs: int = 0


# Pairs needed before the paired e2e ratio speaks (the judge's own paired minimum is higher;
# this only vouches for a direction the verdict already shows).
MIN_E2E_PAIRS = 30


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
    """Why this window's verdict does not count toward a change (module doc), or None when
    it counts. No matching (a source without mirrored requests): it counts."""
    if matching is None or not toward_change(verdict, serving):
        return None
    told = matching.clients
    if matching.rule == "arrivals":
        if told == "open":
            return None
        return (
            "the shadow got a serving pod's arrivals, which is what it would get only from "
            f"clients that arrive at their own pace, and this window's clients read {told}: "
            "a faster shadow there may be an artefact of the load match"
        )
    if told == "closed":
        return None
    ratio = matching.e2e_ratio
    if ratio is None:
        return (
            "the clients were not told closed-loop, and too few mirrored pairs "
            f"({matching.pairs} of {MIN_E2E_PAIRS}) show whether the shadow, faster per token "
            "at the serving pods' in-flight, also keeps up with their arrivals"
        )
    if ratio > 1.0 + verdict.tolerance:
        return (
            "the shadow is faster per token at the serving pods' in-flight but slower per "
            f"request ({ratio:.2f}× end to end over {matching.pairs} pairs): for clients "
            f"that wait for their answers it would win, for clients that arrive at their own "
            f"pace it would not keep up, and this window's clients read {told}"
        )
    return None


__all__ = ["MIN_E2E_PAIRS", "Matching", "paired_e2e_ratio", "toward_change", "uncounted"]
