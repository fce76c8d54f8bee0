"""Synthetic windows of samples with known truth, for validating the judge (A/A false alarm
rates, power against injected regressions) in tests/judge/test_judge_statistics.py. Optimistic
shapes (log-spread 0.10, one concurrency); realistic traffic: specguard_testkit._traffic.

Shapes of per-request TPOT at one concurrency (median about 30 ms):

- ``lognormal``: exp(N(log 30 ms, 0.10)) — requests in one batch share step times, so the
  spread between requests is about ±10% (one sigma).
- ``bimodal``: 75% around 27 ms, 25% around 38 ms (each log-sigma 0.06) — two request
  populations, e.g. short and long contexts, or two domains with different acceptance.
- ``bimodal-valley``: the same modes split 60/40, which puts the median on the edge of the
  valley between them where there are few requests; any median is then noisy (bench only:
  unpaired power at a 10% regression and 200 requests per arm is about 55%).
- ``heavy``: 30 ms × exp(0.06 · t with 3 degrees of freedom), plus 3% stragglers 2–10× slower
  (preemptions, retries): heavy tails on both sides.

Unpaired windows draw each arm independently. Paired windows draw one prompt effect per
request from the shape and measure it on both arms with independent noise (log-sigma 0.08,
the batch a request happens to share), which is how mirrored requests behave.

A regression of ``factor`` multiplies every speculative TPOT by it; ``spread_factor``
multiplies the speculative arm's log-spread around the median (a variance-only change).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import numpy.typing as npt

from specguard.judge import Arm, Role, Sample

Shape = Literal["lognormal", "bimodal", "heavy", "bimodal-valley"]
SHAPES: tuple[Shape, ...] = ("lognormal", "bimodal", "heavy")
MEDIAN_S = 0.030
PAIR_NOISE = 0.08


def draws(shape: Shape, n: int, rng: np.random.Generator) -> npt.NDArray[np.float64]:
    """n per-request TPOTs (seconds) of the given shape."""
    if shape == "lognormal":
        return MEDIAN_S * np.exp(rng.normal(0.0, 0.10, n))
    if shape in ("bimodal", "bimodal-valley"):
        slow = rng.random(n) < (0.25 if shape == "bimodal" else 0.4)
        centre = np.where(slow, 0.038, 0.027)
        return centre * np.exp(rng.normal(0.0, 0.06, n))
    if shape == "heavy":
        values = MEDIAN_S * np.exp(0.06 * rng.standard_t(3, n))
        stragglers = rng.random(n) < 0.03
        return np.where(stragglers, values * rng.uniform(2.0, 10.0, n), values)
    raise ValueError(f"shape: unknown {shape!r}")


def _spread(values: npt.NDArray[np.float64], factor: float) -> npt.NDArray[np.float64]:
    if factor == 1.0:
        return values
    centre = float(np.median(values))
    return np.asarray(centre * np.exp(factor * np.log(values / centre)), dtype=np.float64)


def samples(
    arm: Arm,
    tpots: npt.NDArray[np.float64],
    *,
    concurrency: int = 8,
    pair_prefix: str | None = None,
    domain: str = "chat",
    pods: int = 2,
) -> list[Sample]:
    """Sample records for given TPOTs (role: speculative serves, baseline is the shadow)."""
    role: Role = "serving" if arm == "speculative" else "shadow"
    return [
        Sample(
            arm=arm,
            role=role,
            pod=f"{arm}-{i % pods}",
            domain=domain,
            started_at=float(i),
            concurrency=concurrency,
            output_tokens=256,
            e2e_s=0.2 + 255 * float(v),
            ttft_s=0.2,
            tpot_s=float(v),
            measurement="stream_usage",
            pair_id=None if pair_prefix is None else f"{pair_prefix}{i}",
        )
        for i, v in enumerate(tpots)
    ]


def window(
    shape: Shape,
    n: int,
    rng: np.random.Generator,
    *,
    factor: float = 1.0,
    spread_factor: float = 1.0,
    paired: bool = False,
    concurrency: int = 8,
) -> list[Sample]:
    """One window: n requests per arm, the speculative arm slowed by ``factor``."""
    if paired:
        prompt = draws(shape, n, rng)
        spec = prompt * np.exp(rng.normal(0.0, PAIR_NOISE, n))
        base = prompt * np.exp(rng.normal(0.0, PAIR_NOISE, n))
        prefix: str | None = "p"
    else:
        spec, base = draws(shape, n, rng), draws(shape, n, rng)
        prefix = None
    spec = factor * _spread(spec, spread_factor)
    return samples("speculative", spec, concurrency=concurrency, pair_prefix=prefix) + samples(
        "baseline", base, concurrency=concurrency, pair_prefix=prefix
    )


__all__ = ["MEDIAN_S", "SHAPES", "Shape", "draws", "samples", "window"]
