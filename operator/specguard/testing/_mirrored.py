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
    shadow_arm: Arm = "baseline" if shape.serving == "speculative" else "speculative"
    out: list[Sample] = []
    for i in range(n):
        pair = f"{seed}-{i}" if mirrored[i] else None
        halves: list[tuple[Arm, Role, float, float]] = []
        if not (mirrored[i] and fate[i] < shape.cut):
            halves.append((shape.serving, "serving", float(starts[i]), 1.0))
        if mirrored[i] and not (shape.cut <= fate[i] < shape.cut + shape.lost):
            lag = float(rng.uniform(0.001, 0.020))
            halves.append((shadow_arm, "shadow", float(starts[i]) + lag, shape.ratio))
        for arm, role, began, ratio in halves:
            tpot = float(pace[i] * ratio * np.exp(rng.normal(0.0, shape.noise)))
            ttft = float(rng.uniform(0.05, 0.3))
            if role == "shadow":
                ttft += float(rng.exponential(shape.queue_s))
            e2e = ttft + tpot * (int(tokens[i]) - 1) + 0.002
            pod = f"{arm}-{int(rng.integers(shape.pods))}"
            out.append(Sample(arm=arm, role=role, pod=pod, domain="chat",
                              started_at=began, concurrency=1, output_tokens=int(tokens[i]),
                              e2e_s=e2e, ttft_s=ttft, tpot_s=tpot, measurement="stream_usage",
                              pair_id=pair))  # fmt: skip
    out.sort(key=lambda s: s.started_at + s.e2e_s)
    return out


def ended(sample: Sample) -> float:
    """When the router recorded ``sample``: its request's end."""
    return sample.started_at + sample.e2e_s


__all__ = ["Mirrored", "ended", "feed"]
