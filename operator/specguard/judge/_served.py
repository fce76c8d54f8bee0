"""What each arm gave the clients when it served: evidence a shadow's verdict cannot overrule.

A shadow verdict is a counterfactual: what the other arm *would* do with these clients,
measured on copies under a load match. What an arm actually gave the clients when it served
at this load is no counterfactual at all. The policy keeps, per arm, the serving requests'
figures of the windows it served (``Served``: arrivals and in-flight per serving pod, the
median per-token latency the clients got, the mix of request domains), merged over windows
at one load, for ``SERVED_MEMORY_S``.

Before a statistical change toward an arm (a rollback toward the baseline, a re-promotion
toward the drafter), the policy looks for that arm's record at a comparable load (the same
domains within ``DOMAIN_BAND``, and the same arrivals or the same in-flight per serving pod
within ``LOAD_BAND``: whatever kind the clients are, one of the two is theirs) and holds the
change when the clients got more than ``tolerance + MARGIN`` slower per token from that arm
than they get now, or when its engines fell behind there (``DrafterOverloaded``): the shadow's
measurement is then contradicted by what the clients saw, most likely because the load match
does not fit these clients. The record keeps holding until it is older than
``SERVED_MEMORY_S`` or the load moves out of its band. Guardrails, retries and pins are never
held by it.

A drafter record also keeps the drafter's mean acceptance length while it served (from the
spec-decode counters): the traffic's fingerprint for the drafter. Text of one domain label can
change under the drafter (sampled answers, then greedy ones; a new prompt template): a
record whose acceptance length differs from the drafter's now (as the shadow) by more than
``ACCEPTANCE_BAND`` was made on other traffic for the drafter and does not speak.

``MARGIN`` covers what differs between two times beyond the arm: other pods (docs/judge.md:
pods differ by a log-σ of 0.05) and the traffic within one domain.

Pure.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from specguard._arms import ARM_SPECULATIVE, ARMS, Arm
from specguard._times import parse_time, rfc3339
from specguard.judge._sample import Sample

# Two loads are comparable when their arrivals, or their in-flight counts, per serving pod
# are within this factor of each other.
LOAD_BAND = 0.15
# ... and their domain mixes differ by at most this total variation (half the sum of the
# shares' differences).
DOMAIN_BAND = 0.2
# Slower by more than the tolerance and this: what separates the arm from its pods and time.
MARGIN = 0.10
# Two mean acceptance lengths of the drafter are of one traffic when within this factor of
# each other (a window's counters hold hundreds of drafts or more: a few percent apart).
ACCEPTANCE_BAND = 0.25
# How long a record speaks.
SERVED_MEMORY_S = 3600.0
# Records kept (oldest dropped first).
MAX_SERVED = 8
# Serving requests a window needs to make or extend a record.
MIN_SERVED_REQUESTS = 50
# Outputs shorter than this say little about per-token latency (the judge's own default).
MIN_TOKENS = 16


@dataclass(frozen=True, slots=True)
class Served:
    """What the clients got from ``arm`` while it served, over ``windows`` windows at one
    load, the last ending at ``at`` (Unix seconds): ``arrivals`` serving requests per second
    per serving pod, ``in_flight`` the median requests in flight per serving pod at their
    start, ``tpot_s`` their median per-token latency, ``requests`` how many it rests on,
    ``domains`` each request domain's share; ``fell_behind``: the arm's engines fell behind
    these arrivals while it served (the overload guardrail rolled it back); ``config``: the
    drafter configuration in force (``spec.drafter`` and the ladder's rung, as the controller
    names it): a record of the drafter arm speaks only for the configuration it measured;
    ``acceptance``: the drafter's mean acceptance length while it served (None: not known, or
    the baseline's record)."""

    arm: Arm
    at: float
    arrivals: float
    in_flight: float
    tpot_s: float
    requests: int
    domains: tuple[tuple[str, float], ...] = ()
    windows: int = 1
    fell_behind: bool = False
    config: str = ""
    acceptance: float | None = None

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "arm": self.arm,
            "at": rfc3339(self.at),
            "arrivalsPerPod": round(self.arrivals, 3),
            "inFlightPerPod": round(self.in_flight, 2),
            "tpotMs": round(self.tpot_s * 1000, 3),
            "requests": self.requests,
            "windows": self.windows,
            "domains": {d: round(share, 3) for d, share in self.domains},
        }
        if self.fell_behind:
            out["fellBehind"] = True
        if self.config:
            out["config"] = self.config
        if self.acceptance is not None:
            out["acceptanceLength"] = round(self.acceptance, 3)
        return out

    @classmethod
    def from_wire(cls, data: Any, key: str = "served") -> Served:
        """ValueError names the field that is wrong."""
        if not isinstance(data, Mapping):
            raise ValueError(f"{key}: expected an object, got {data!r}")
        arm = data.get("arm")
        if arm not in ARMS:
            raise ValueError(f"{key}.arm: expected speculative or baseline, got {arm!r}")
        at = parse_time(data.get("at")) if isinstance(data.get("at"), str) else None
        if at is None:
            raise ValueError(f"{key}.at: expected an RFC 3339 time, got {data.get('at')!r}")
        domains = data.get("domains", {})
        if not isinstance(domains, Mapping):
            raise ValueError(f"{key}.domains: expected an object, got {domains!r}")
        fell = data.get("fellBehind", False)
        if not isinstance(fell, bool):
            raise ValueError(f"{key}.fellBehind: expected true or false, got {fell!r}")
        config = data.get("config", "")
        if not isinstance(config, str):
            raise ValueError(f"{key}.config: expected a string, got {config!r}")
        raw = data.get("acceptanceLength")
        acceptance = None if raw is None else _positive(f"{key}.acceptanceLength", raw)
        return cls(
            arm=ARM_SPECULATIVE if arm == ARM_SPECULATIVE else "baseline",
            at=at,
            arrivals=_positive(f"{key}.arrivalsPerPod", data.get("arrivalsPerPod")),
            in_flight=_positive(f"{key}.inFlightPerPod", data.get("inFlightPerPod")),
            tpot_s=_positive(f"{key}.tpotMs", data.get("tpotMs")) / 1000,
            requests=int(_positive(f"{key}.requests", data.get("requests"))),
            domains=tuple(
                sorted((str(d), _positive(f"{key}.domains.{d}", v)) for d, v in domains.items())
            ),
            windows=max(1, int(_positive(f"{key}.windows", data.get("windows", 1)))),
            fell_behind=fell,
            config=config,
            acceptance=acceptance,
        )

    def describe(self, now: float) -> str:
        """E.g. "at 9.6 requests/s and 192 in flight per serving pod, 3 min ago"."""
        return (
            f"at {_num(self.arrivals)} requests/s and {_num(self.in_flight)} in flight per "
            f"serving pod, {_ago(now - self.at)}"
        )


def _positive(key: str, value: Any) -> float:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or value < 0:
        raise ValueError(f"{key}: expected a number >= 0, got {value!r}")
    return float(value)


def _num(value: float) -> str:
    return f"{value:.0f}" if value >= 10 else f"{value:.1f}"


def _ago(seconds: float) -> str:
    if seconds < 90:
        return f"{max(seconds, 0):.0f} s ago"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min ago"
    return f"{seconds / 3600:.1f} h ago"


def served_figures(
    samples: Iterable[Sample], arm: Arm, start: float, end: float, config: str = ""
) -> Served | None:
    """What the clients got from ``arm`` serving over the window ``[start, end)``: its
    serving-role samples (ok, with a per-token latency and at least ``MIN_TOKENS`` output
    tokens), or None with fewer than ``MIN_SERVED_REQUESTS`` of them. ``config``: the drafter
    configuration in force (``Served.config``)."""
    served = [
        s
        for s in samples
        if s.arm == arm
        and s.role == "serving"
        and s.ok
        and s.tpot_s is not None
        and math.isfinite(s.tpot_s)
        and s.tpot_s > 0
        and s.output_tokens >= MIN_TOKENS
    ]
    span = end - start
    if len(served) < MIN_SERVED_REQUESTS or span <= 0:
        return None
    pods = len({s.pod for s in served})
    counts: dict[str, int] = {}
    for s in served:
        counts[s.domain] = counts.get(s.domain, 0) + 1
    return Served(
        arm=arm,
        at=end,
        arrivals=len(served) / pods / span,
        in_flight=float(np.median([s.concurrency for s in served])),
        tpot_s=float(np.median([s.tpot_s or 0.0 for s in served])),
        requests=len(served),
        domains=tuple(sorted((d, n / len(served)) for d, n in counts.items())),
        config=config,
    )


def _within(a: float, b: float, band: float) -> bool:
    return a > 0 and b > 0 and max(a, b) / min(a, b) <= 1.0 + band


def comparable(a: Served, b: Served) -> bool:
    """One load: the same domains (within ``DOMAIN_BAND``) and the same arrivals or the
    same in-flight per serving pod (within ``LOAD_BAND``)."""
    shares_a, shares_b = dict(a.domains), dict(b.domains)
    apart = sum(abs(shares_a.get(d, 0.0) - shares_b.get(d, 0.0))
                for d in {*shares_a, *shares_b}) / 2  # fmt: skip
    if apart > DOMAIN_BAND:
        return False
    same_arrivals = _within(a.arrivals, b.arrivals, LOAD_BAND)
    return same_arrivals or _within(a.in_flight, b.in_flight, LOAD_BAND)


def acceptance_apart(a: float | None, b: float | None) -> bool:
    """Are two mean acceptance lengths of the drafter from different traffic (both known and
    more than ``ACCEPTANCE_BAND`` apart)?"""
    return a is not None and b is not None and not _within(a, b, ACCEPTANCE_BAND)


def remember(history: Sequence[Served], window: Served, now: float) -> tuple[Served, ...]:
    """``history`` with one more served window: merged into the last record when that is
    the same arm's at a comparable load (figures weighted by requests; per-token latency
    as a geometric mean), else appended; records older than ``SERVED_MEMORY_S`` and beyond
    ``MAX_SERVED`` dropped."""
    kept = [r for r in history if now - r.at <= SERVED_MEMORY_S]
    last = kept[-1] if kept else None
    same = (
        last is not None
        and (last.arm, last.config) == (window.arm, window.config)
        and not acceptance_apart(last.acceptance, window.acceptance)
    )
    if last is not None and same and comparable(last, window):
        n, m = last.requests, window.requests
        total = n + m

        def mix(x: float, y: float) -> float:
            return (x * n + y * m) / total

        domains = {d: mix(dict(last.domains).get(d, 0.0), dict(window.domains).get(d, 0.0))
                   for d in {*dict(last.domains), *dict(window.domains)}}  # fmt: skip
        kept[-1] = replace(
            last,
            at=window.at,
            arrivals=mix(last.arrivals, window.arrivals),
            in_flight=mix(last.in_flight, window.in_flight),
            tpot_s=math.exp(mix(math.log(last.tpot_s), math.log(window.tpot_s))),
            requests=total,
            domains=tuple(sorted(domains.items())),
            windows=last.windows + 1,
            acceptance=last.acceptance if window.acceptance is None
            else window.acceptance if last.acceptance is None
            else mix(last.acceptance, window.acceptance),
        )  # fmt: skip
    else:
        kept.append(window)
    return tuple(kept[-MAX_SERVED:])


def fell_behind(history: Sequence[Served], arm: Arm) -> tuple[Served, ...]:
    """``history`` with ``arm``'s latest record marked: its engines fell behind there."""
    for i in range(len(history) - 1, -1, -1):
        if history[i].arm == arm:
            return (*history[:i], replace(history[i], fell_behind=True), *history[i + 1 :])
    return tuple(history)


def contradiction(
    history: Sequence[Served],
    now_served: Served,
    toward: Arm,
    tolerance: float,
    now: float,
    *,
    acceptance: float | None = None,
) -> str | None:
    """Why a change toward ``toward`` is held by what the clients got from it (module doc),
    or None. ``now_served``: what the arm serving now gives them this window (its ``config``
    is the drafter configuration in force now: a drafter record made under another one, a
    rung lost since or an edited ``spec.drafter``, does not speak for this one);
    ``acceptance``: the drafter's mean acceptance length over this window (None: not known):
    a drafter record made at another one was made on other traffic and does not speak."""
    for record in reversed(history):
        if record.arm != toward or now - record.at > SERVED_MEMORY_S:
            continue
        if toward == ARM_SPECULATIVE and record.config != now_served.config:
            continue
        if toward == ARM_SPECULATIVE and acceptance_apart(record.acceptance, acceptance):
            continue
        if not comparable(record, now_served):
            continue
        if record.fell_behind:
            return (
                f"when the {toward} arm served {record.describe(now)}, its engines fell "
                "behind the arrivals (DrafterOverloaded): a shadow measured as faster there "
                "is not what clients would get"
            )
        if record.tpot_s > now_served.tpot_s * (1.0 + tolerance + MARGIN):
            return (
                f"when the {toward} arm served {record.describe(now)}, clients got "
                f"{record.tpot_s * 1000:.1f} ms per token; the {now_served.arm} arm gives them "
                f"{now_served.tpot_s * 1000:.1f} ms now: a shadow measured as faster there is "
                "contradicted by what clients got"
            )
        return None  # the latest comparable record speaks
    return None


__all__ = [
    "ACCEPTANCE_BAND",
    "DOMAIN_BAND",
    "LOAD_BAND",
    "MARGIN",
    "MAX_SERVED",
    "MIN_SERVED_REQUESTS",
    "SERVED_MEMORY_S",
    "Served",
    "acceptance_apart",
    "comparable",
    "contradiction",
    "fell_behind",
    "remember",
    "served_figures",
]
