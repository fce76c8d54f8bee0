"""The mirror share: which fraction of the serving arm's requests each router copies to the
shadow arm, so that a shadow pod gets the arrival rate of a serving pod.

Pure. The law is feed-forward plus a small correction:

- **Open loop**: a router mirrors each request with probability ``share`` (error diffusion,
  exact over any run) to the shadow arm's ready pods, and sends every request to one of the
  serving arm's ready pods. A shadow pod therefore gets ``share × serving ready ÷ shadow
  ready`` times a serving pod's arrivals, and ``share = shadow ready ÷ serving ready``
  matches them exactly, whatever the load, the latency of either arm or the backlog of the
  shadow. It follows the ready pods at once (the routers count the same ready pods).
- **Correction** for what the routers fail to mirror (a mirror dropped when a router's shadow
  budget is full or it sees no ready shadow pod): measured from the **serving** arm's
  samples only — of the serving requests that ended in the window, the fraction that carry a
  ``pair_id`` is the fraction the routers actually mirrored when they arrived (only requests
  that started ``MIRROR_SETTLE_S`` after the share last changed count: the routers read it
  every 2 s, and a request that started before was mirrored at the old share). Shadow samples
  are not used: the shadow's completions lag its arrivals when it is slow or backlogged,
  and an integral law on them (the one this replaces) reads an overloaded shadow as an
  underfed one and feeds it more. The evidence adds up over the windows since the share
  last changed; the correction factor moves only when the realized fraction is off by more
  than ``MIRROR_DEADBAND`` and than ``MIRROR_SIGMAS`` binomial standard errors (which of
  the window's requests end inside it is random, so a window's fraction is noisy), by a
  damped step (``(wanted ÷ realized) ** MIRROR_GAIN``), and it is bounded to
  ``[1, MIRROR_MAX_BOOST]``: it never mirrors less than the open-loop share (a router
  cannot mirror more than asked) and at most half as much again. A router whose shadow
  budget is full drops mirrors whatever the share; there the correction goes to its bound
  and stays (a dropped mirror costs nothing), and the judge reports the lighter shadow
  load as "mismatched load".

The factor is not stored: it is the stored share divided by the open-loop share of the
ready counts stored beside it in ``status.arms`` (a restarted operator continues with it).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from specguard.judge import Sample

MIRROR_MIN_REQUESTS = 20  # serving requests in a window before it corrects the share
MIRROR_DEADBAND = 0.05  # relative error of the realized fraction below which it is left alone
MIRROR_SIGMAS = 3.0  # ... and the error must exceed this many binomial standard errors
MIRROR_GAIN = 0.5  # damping: a one-window lag (requests in flight, router polls) stays stable
MIRROR_MAX_BOOST = 1.5  # the correction's upper bound (its lower bound is 1)
MIRROR_SETTLE_S = 4.0  # after a share change: the routers' 2 s status poll, and margin


@dataclass(frozen=True, slots=True)
class MirrorEvidence:
    """What the routers did with the serving requests that ended in one window."""

    serving: int  # serving-role requests (all of them: errors too)
    mirrored: int  # of those, the ones copied to the shadow arm (they carry a pair_id)

    @property
    def realized(self) -> float | None:
        return self.mirrored / self.serving if self.serving else None

    def __add__(self, other: MirrorEvidence) -> MirrorEvidence:
        return MirrorEvidence(self.serving + other.serving, self.mirrored + other.mirrored)


NO_EVIDENCE = MirrorEvidence(0, 0)


def mirror_evidence(samples: Iterable[Sample], since: float) -> MirrorEvidence:
    """The serving requests that started at ``since`` (epoch seconds) or later."""
    serving = mirrored = 0
    for sample in samples:
        if sample.role == "serving" and sample.started_at >= since:
            serving += 1
            mirrored += sample.pair_id is not None
    return MirrorEvidence(serving, mirrored)


def open_loop_share(shadow_ready: int, serving_ready: int) -> float:
    """The share that gives each ready shadow pod a ready serving pod's arrivals."""
    if serving_ready <= 0 or shadow_ready <= 0:
        return 0.0
    return min(1.0, shadow_ready / serving_ready)


def correction_of(share: float, open_loop: float) -> float:
    """The correction factor a stored share carries over the open-loop share."""
    if open_loop <= 0.0 or share <= 0.0:
        return 1.0
    return min(MIRROR_MAX_BOOST, max(1.0, share / open_loop))


def mirror_share(open_loop: float, correction: float) -> float:
    return round(min(1.0, open_loop * correction), 3)


def next_correction(
    correction: float,
    open_loop: float,
    evidence: MirrorEvidence | None,
    minimum: int = MIRROR_MIN_REQUESTS,
) -> float:
    """The correction after a window (``evidence``: since the share last changed): a damped
    step toward ``realized == open_loop`` when the error is clearly more than noise.

    No evidence, too few serving requests, or nothing mirrored at all (no shadow pod the
    routers could reach: a larger share would not help) leaves it as it is."""
    realized = None if evidence is None or evidence.serving < minimum else evidence.realized
    if not realized or open_loop <= 0.0 or evidence is None:
        return correction
    error = abs(realized - open_loop)
    noise = MIRROR_SIGMAS * math.sqrt(open_loop * (1.0 - open_loop) / evidence.serving)
    if error <= max(MIRROR_DEADBAND * open_loop, noise):
        return correction
    wanted = correction * float((open_loop / realized) ** MIRROR_GAIN)
    return round(min(MIRROR_MAX_BOOST, max(1.0, wanted)), 3)


def next_share(
    stored_share: float,
    stored_ready: tuple[int, int] | None,
    ready: tuple[int, int],
    evidence: MirrorEvidence | None,
) -> float:
    """The share to write now: the open-loop share of ``ready`` (shadow, serving ready pods)
    times the correction the stored share carries over the open-loop share of the ready pods
    stored with it (``stored_ready``; None: start again from 1, e.g. after a swap), stepped
    by the ``evidence`` gathered since the share last changed, when a window ended. The
    caller starts gathering again (``NO_EVIDENCE``) when the share it writes changes."""
    open_loop = open_loop_share(*ready)
    correction = 1.0
    if stored_ready is not None:
        correction = correction_of(stored_share, open_loop_share(*stored_ready))
    correction = next_correction(correction, open_loop, evidence)
    return mirror_share(open_loop, correction)
