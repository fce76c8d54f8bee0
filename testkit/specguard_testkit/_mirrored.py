"""A router's recorded feed over time: mirrored requests as a router records them, for the
window source's tests (tests/sources) and bench/feed_read.py (test support: nothing in the
operator uses it).

Requests arrive as a Poisson stream at ``rate`` per second. Each is served by one arm and,
with probability ``mirror``, copied to the other (the same ``pair_id`` on both samples; the
copy starts 1-20 ms later, when the router's task runs). Output lengths are log-normal
(median ``tokens``, log-spread 0.7, 8 to 2000 tokens), so request times are heavy-tailed and
many requests span a window's end. Per-token latency is a request's own pace (log-spread
0.2: prompt, domain, acceptance) times its arm's pace (the shadow's ``ratio`` times the
serving arm's) times per-arm noise (log-spread ``noise``: the batch each half shares); the
shadow's TTFT adds an exponential queueing delay (mean ``queue_s``): copies wait when the
shadow is busy. So the two halves of one request end apart by up to seconds, as on a loaded
shadow.

Cut-offs, as a router sees them: a share ``cut`` of mirrored requests lose their serving
half (the client went away: the router records nothing), a share ``lost`` their copy (the
copy failed without a record), leaving the other half alone.

``feed`` returns the samples in the order a router records them (by end time), each with
the time it is recorded; every record's times add up (TTFT + TPOT × (tokens − 1) ≤ e2e).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from specguard.judge import Arm, Role, Sample


@dataclass(frozen=True)
class Mirrored:
    """The shape of the stream (see the module docstring)."""

    rate: float = 30.0
    mirror: float = 0.9
    tokens: float = 180.0
    tpot_s: float = 0.030
    ratio: float = 1.25
    noise: float = 0.2
    queue_s: float = 0.4
    cut: float = 0.02
    lost: float = 0.01
    serving: Arm = "speculative"
    pods: int = 2


def feed(shape: Mirrored, seconds: float, start: float, seed: int = 0) -> list[Sample]:
    """The samples of the requests that start in ``[start, start + seconds)``, in the
    order they end (a router records each when it ends)."""
    rng = np.random.default_rng(seed)
    n = int(rng.poisson(shape.rate * seconds))
    starts = start + np.sort(rng.uniform(0.0, seconds, n))
    tokens = np.clip(rng.lognormal(np.log(shape.tokens), 0.7, n), 8, 2000).astype(int)
    pace = shape.tpot_s * np.exp(rng.normal(0.0, 0.2, n))
    mirrored = rng.random(n) < shape.mirror
    fate = rng.random(n)
    serves = ~(mirrored & (fate < shape.cut))
    copied = mirrored & ~((shape.cut <= fate) & (fate < shape.cut + shape.lost))
    shadow_arm: Arm = "baseline" if shape.serving == "speculative" else "speculative"
    out: list[Sample] = []
    halves: tuple[tuple[Arm, Role, Any, Any], ...] = (
        (shape.serving, "serving", serves, np.zeros(n)),
        (shadow_arm, "shadow", copied, rng.uniform(0.001, 0.020, n)),
    )
    for arm, role, present, lag in halves:
        ratio = shape.ratio if role == "shadow" else 1.0
        tpot = pace * ratio * np.exp(rng.normal(0.0, shape.noise, n))
        ttft = rng.uniform(0.05, 0.3, n)
        if role == "shadow":
            ttft = ttft + rng.exponential(shape.queue_s, n)
        e2e = ttft + tpot * (tokens - 1) + 0.002
        pods = rng.integers(shape.pods, size=n)
        for i in np.flatnonzero(present):
            out.append(Sample(arm=arm, role=role, pod=f"{arm}-{pods[i]}", domain="chat",
                              started_at=float(starts[i] + lag[i]), concurrency=1,
                              output_tokens=int(tokens[i]), e2e_s=float(e2e[i]),
                              ttft_s=float(ttft[i]), tpot_s=float(tpot[i]),
                              measurement="stream_usage",
                              pair_id=f"{seed}-{i}" if mirrored[i] else None))  # fmt: skip
    out.sort(key=lambda s: s.started_at + s.e2e_s)
    return out


def ended(sample: Sample) -> float:
    """When the router recorded ``sample``: its request's end."""
    return sample.started_at + sample.e2e_s


__all__ = ["Mirrored", "ended", "feed"]
