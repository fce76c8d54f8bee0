"""Sample windows with known truth that look like production traffic, for the judge's tests
and bench/judge_calibration.py (test support: nothing in the operator uses it).

Per-token latency (TPOT) of one request on one arm::

    tpot = BASE_TPOT_S · (1 + c / LOAD_SCALE) · prompt · pod · noise · effect

- ``c``: requests in flight on the pod when the request started, drawn per arm from a
  :data:`Load` (a uniform integer range, or a mix of levels with weights), so per-token
  latency grows with load (12 ms at c = 0, 60 ms at c = 64) and a window's mix of
  concurrencies varies from window to window;
- ``prompt``: log-normal with log-spread ``sigma`` (0.2 / 0.35 / 0.5: prompt length, domain,
  acceptance), or with ``heavy`` a Student-t(3) in log space plus 3% stragglers 2–10× slower
  (preemptions, retries);
- ``pod``: a per-pod factor exp(N(0, pod_bias)), centred so each arm's pods average 1 in log
  space (hardware differs between pods, not between the arms in an A/A test); requests are
  spread over the pods at random, so the pods' shares vary between windows;
- ``noise``: exp(N(0, pair_noise)) per request and arm (the batch a request happens to share);
- ``effect``: the speculative arm's true per-token factor at every concurrency (1 = A/A).

Paired windows send each prompt to both arms (the same ``pair_id``), each arm measuring it
on its own pod, with its own noise, at its own concurrency: the shadow's in-flight count is
the serving pod's × exp(N(0, pair_load_noise)), since a mirror sends the shadow the same
arrivals at the same moment (unless the two arms' loads are given apart). Unpaired windows
draw every request independently.

Measurement kinds: ``stream_usage`` reports the true TPOT; ``stream_chunks`` counts a chunk
as a token, so an arm that packs ``tokens_per_chunk`` tokens into a chunk (a drafter)
reports that many times its TPOT; ``non_stream`` reports e2e / tokens, prefill included.

This generator is written apart from the judge (it shares only the Sample record), so the
figures it gives are a check of the judge, not of itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from specguard.judge import Arm, Measurement, Role, Sample

BASE_TPOT_S = 0.012
LOAD_SCALE = 16.0
# A uniform integer range (low, high), both included, or {level: weight}.
Load = tuple[int, int] | Mapping[int, float]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Traffic:
    """The shape of one kind of window (see the module docstring)."""

    sigma: float = 0.35
    heavy: bool = False
    load: Load = (1, 64)
    pods: int = 3
    pod_bias: float = 0.05
    pair_noise: float = 0.08
    pair_load_noise: float = 0.15
    measurement: Mapping[str, Measurement] = field(
        default_factory=lambda: {"speculative": "stream_usage", "baseline": "stream_usage"}
    )
    tokens_per_chunk: float = 3.0
    serving: Arm = "speculative"


def concurrencies(load: Load, n: int, rng: np.random.Generator) -> IntArray:
    """n in-flight counts drawn from ``load``."""
    if isinstance(load, tuple):
        low, high = load
        return rng.integers(low, high + 1, size=n).astype(np.int64)
    levels = np.asarray(list(load), dtype=np.int64)
    weights = np.asarray([load[int(c)] for c in levels], dtype=np.float64)
    return np.asarray(rng.choice(levels, size=n, p=weights / weights.sum()), dtype=np.int64)


def prompts(traffic: Traffic, n: int, rng: np.random.Generator) -> FloatArray:
    """n per-prompt factors (median 1)."""
    if not traffic.heavy:
        return np.exp(rng.normal(0.0, traffic.sigma, n))
    # t(3) has variance 3: scaled so its interquartile range matches a normal of sigma.
    # Clipped at ±8 (a factor of ~8 at σ 0.35): beyond it a t(3) draw is no latency.
    values = np.exp(traffic.sigma * 0.75 * np.clip(rng.standard_t(3, n), -8.0, 8.0))
    stragglers = rng.random(n) < 0.03
    return np.where(stragglers, values * rng.uniform(2.0, 10.0, n), values)


def pod_factors(traffic: Traffic, rng: np.random.Generator) -> FloatArray:
    logs = rng.normal(0.0, traffic.pod_bias, traffic.pods)
    factors: FloatArray = np.exp(logs - logs.mean())
    return factors


def _arm(
    arm: Arm,
    traffic: Traffic,
    prompt: FloatArray,
    conc: IntArray,
    *,
    effect: float,
    rng: np.random.Generator,
    pair_ids: list[str] | None,
    start: float,
    duration: float,
) -> list[Sample]:
    n = prompt.size
    pods = pod_factors(traffic, rng)
    which = rng.integers(0, traffic.pods, size=n)
    noise = np.exp(rng.normal(0.0, traffic.pair_noise, n))
    tpot = BASE_TPOT_S * (1 + conc / LOAD_SCALE) * prompt * pods[which] * noise * effect
    tokens = np.exp(rng.uniform(np.log(32), np.log(1024), n)).astype(np.int64)
    ttft = 0.05 + rng.exponential(0.3, n)
    e2e = ttft + tpot * (tokens - 1)
    measurement = traffic.measurement.get(arm, "stream_usage")
    if measurement == "stream_chunks":
        per_chunk = traffic.tokens_per_chunk if arm == "speculative" else 1.0
        reported = tpot * per_chunk
    elif measurement == "non_stream":
        reported = e2e / tokens
    else:
        reported = tpot
    role: Role = "serving" if arm == traffic.serving else "shadow"
    started = start + rng.uniform(0.0, duration, n)
    return [
        Sample(
            arm=arm,
            role=role,
            pod=f"{arm}-{which[i]}",
            domain="chat",
            started_at=float(started[i]),
            concurrency=int(conc[i]),
            output_tokens=int(tokens[i]),
            e2e_s=float(e2e[i]),
            ttft_s=None if measurement == "non_stream" else float(ttft[i]),
            tpot_s=float(reported[i]),
            measurement=measurement,
            pair_id=None if pair_ids is None else pair_ids[i],
        )
        for i in range(n)
    ]


def window(
    rng: np.random.Generator,
    n: int,
    traffic: Traffic | None = None,
    *,
    effect: float = 1.0,
    paired: bool = False,
    spec_load: Load | None = None,
    base_load: Load | None = None,
    start: float = 0.0,
    duration: float = 60.0,
) -> list[Sample]:
    """One window: n requests per arm (n pairs when ``paired``), the speculative arm's
    per-token latency ``effect`` × the baseline's at every concurrency."""
    traffic = traffic or Traffic()
    apart = spec_load is not None or base_load is not None
    spec_load = traffic.load if spec_load is None else spec_load
    base_load = traffic.load if base_load is None else base_load
    spec_conc = concurrencies(spec_load, n, rng)
    if paired and not apart:
        jitter = np.exp(rng.normal(0.0, traffic.pair_load_noise, n))
        base_conc = np.maximum(1, np.rint(spec_conc * jitter)).astype(np.int64)
    else:
        base_conc = concurrencies(base_load, n, rng)
    if paired:
        prompt = prompts(traffic, n, rng)
        ids: list[str] | None = [f"w{start:g}-{i}" for i in range(n)]
        spec_prompt, base_prompt = prompt, prompt
    else:
        ids = None
        spec_prompt, base_prompt = prompts(traffic, n, rng), prompts(traffic, n, rng)
    spec = _arm(
        "speculative", traffic, spec_prompt, spec_conc, effect=effect, rng=rng,
        pair_ids=ids, start=start, duration=duration,
    )  # fmt: skip
    base = _arm(
        "baseline", traffic, base_prompt, base_conc, effect=1.0, rng=rng,
        pair_ids=ids, start=start, duration=duration,
    )  # fmt: skip
    return spec + base


__all__ = [
    "BASE_TPOT_S",
    "LOAD_SCALE",
    "Load",
    "Traffic",
    "concurrencies",
    "pod_factors",
    "prompts",
    "window",
]
