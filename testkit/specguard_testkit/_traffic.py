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
- ``pod``: a per-pod factor exp(N(0, pod_bias)), ``pods`` per arm (``shadow_pods`` for the
  shadow arm when given); with ``pod_centred`` (the default) centred so
  each arm's pods average 1 in log space (pods balanced between the arms), without it each
  pod's bias is its own, so one arm's pods may be slower on average than the other's, as
  real hardware is; requests are spread over the pods at random, so the pods' shares vary
  between windows;
- ``noise``: exp(N(0, pair_noise)) per request and arm (the batch a request happens to share);
- ``effect``: the speculative arm's true per-token factor at every concurrency (1 = A/A).

Pods whose speed is fixed for a run (the same pods serve every window: :func:`run_pods`
draws each pod's factor once, not centred, so one arm's pods may be slower on average than
the other's; pass them to :func:`window` as ``pods``) replace the per-window draw.
``pair_tokens``: a mirrored request produces the same number of output tokens on both arms
(the same prompt and limits), so the two halves' e2e times differ by the arms' speed and
load, not by the length of the answer.

Paired windows send each prompt to both arms (the same ``pair_id``), each arm measuring it
on its own pod, with its own noise, at its own concurrency: the two arms' in-flight counts
differ by a factor exp(N(0, pair_load_noise)), since a mirror sends the shadow the same
arrivals at the same moment (unless the two arms' loads are given apart); which arm holds the
larger count is random, so on A/A traffic the true ratio is exactly 1. ``shadow_in_flight``
scales the shadow arm's count in each pair (0.85: a shadow 15% lighter in flight than the
serving arm, as a router that copies only while the shadow has room leaves it). Unpaired
windows draw every request independently; :func:`banded` gives an arm most of its requests in
one in-flight band and the rest in another.

Measurement kinds: ``stream_usage`` reports the true TPOT; ``stream_chunks`` counts a chunk
as a token, so an arm that packs ``tokens_per_chunk`` tokens into a chunk (a drafter)
reports that many times its TPOT and that many times fewer output tokens (its chunks);
``non_stream`` reports e2e / tokens, prefill included. Every record is consistent with its own
e2e time: TTFT + TPOT × (tokens − 1) = e2e.

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
    pod_centred: bool = True
    shadow_in_flight: float = 1.0
    shadow_pods: int | None = None
    pair_tokens: bool = False


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


def banded(main: tuple[int, int], other: tuple[int, int], share: float) -> Load:
    """A load with ``share`` of the requests spread evenly over the in-flight levels of
    ``main`` and the rest over those of ``other`` (both ranges inclusive)."""
    load: dict[int, float] = {}
    for (low, high), weight in ((main, share), (other, 1.0 - share)):
        for level in range(low, high + 1):
            load[level] = load.get(level, 0.0) + weight / (high - low + 1)
    return load


def pods_of(traffic: Traffic, arm: Arm) -> int:
    """The arm's pods: ``pods``, or ``shadow_pods`` for the shadow arm when given (the
    operator's default is two serving pods and one shadow)."""
    if arm != traffic.serving and traffic.shadow_pods is not None:
        return traffic.shadow_pods
    return traffic.pods


def pod_factors(traffic: Traffic, rng: np.random.Generator, arm: Arm = "speculative") -> FloatArray:
    logs = rng.normal(0.0, traffic.pod_bias, pods_of(traffic, arm))
    if traffic.pod_centred:
        logs = logs - logs.mean()
    factors: FloatArray = np.exp(logs)
    return factors


def run_pods(traffic: Traffic, rng: np.random.Generator) -> dict[Arm, FloatArray]:
    """Each arm's pod factors for a whole run: exp(N(0, ``pod_bias``)) per pod, drawn once
    and not centred (whatever ``pod_centred`` says): the arms' pods are not balanced."""
    arms: tuple[Arm, ...] = ("speculative", "baseline")
    return {arm: np.exp(rng.normal(0.0, traffic.pod_bias, pods_of(traffic, arm))) for arm in arms}


def _tokens(n: int, rng: np.random.Generator) -> IntArray:
    return np.exp(rng.uniform(np.log(32), np.log(1024), n)).astype(np.int64)


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
    pods: FloatArray | None = None,
    tokens: IntArray | None = None,
) -> list[Sample]:
    n = prompt.size
    if pods is None:
        pods = pod_factors(traffic, rng, arm)
    which = rng.integers(0, pods.size, size=n)
    noise = np.exp(rng.normal(0.0, traffic.pair_noise, n))
    tpot = BASE_TPOT_S * (1 + conc / LOAD_SCALE) * prompt * pods[which] * noise * effect
    if tokens is None:
        tokens = _tokens(n, rng)
    ttft = 0.05 + rng.exponential(0.3, n)
    e2e = ttft + tpot * (tokens - 1)
    measurement = traffic.measurement.get(arm, "stream_usage")
    counted = tokens
    if measurement == "stream_chunks":
        # A chunk counted as a token: the decode time over the chunks.
        per_chunk = traffic.tokens_per_chunk if arm == "speculative" else 1.0
        counted = np.maximum(2, np.rint((tokens - 1) / per_chunk).astype(np.int64) + 1)
        reported = tpot * (tokens - 1) / (counted - 1)
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
            output_tokens=int(counted[i]),
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
    pods: Mapping[Arm, FloatArray] | None = None,
    unmirrored: int = 0,
) -> list[Sample]:
    """One window: n requests per arm (n pairs when ``paired``), the speculative arm's
    per-token latency ``effect`` × the baseline's at every concurrency. ``pods``: each arm's
    pod factors, fixed for a run (:func:`run_pods`); by default drawn for this window.
    ``unmirrored``: the serving arm also served this many requests that were not copied (no
    pair id; at its own load), as when fewer shadow pods get a share of the serving arm's
    requests (one drafter pod beside three baseline pods gets a third of them copied)."""
    traffic = traffic or Traffic()
    apart = spec_load is not None or base_load is not None
    spec_load = traffic.load if spec_load is None else spec_load
    base_load = traffic.load if base_load is None else base_load
    spec_conc = concurrencies(spec_load, n, rng)
    if paired and not apart:
        # One arm sees the drawn in-flight count, the other that × a jitter; which arm is
        # which is random, so neither arm is the more loaded one (A/A is exactly A/A).
        jitter = np.exp(rng.normal(0.0, traffic.pair_load_noise, n))
        other = np.maximum(1, np.rint(spec_conc * jitter)).astype(np.int64)
        swap = rng.random(n) < 0.5
        base_conc = np.where(swap, spec_conc, other)
        spec_conc = np.where(swap, other, spec_conc)
        if traffic.shadow_in_flight != 1.0:
            shadow = base_conc if traffic.serving == "speculative" else spec_conc
            shadow[:] = np.maximum(1, np.rint(shadow * traffic.shadow_in_flight))
    else:
        base_conc = concurrencies(base_load, n, rng)
    if paired:
        prompt = prompts(traffic, n, rng)
        ids: list[str] | None = [f"w{start:g}-{i}" for i in range(n)]
        spec_prompt, base_prompt = prompt, prompt
    else:
        ids = None
        spec_prompt, base_prompt = prompts(traffic, n, rng), prompts(traffic, n, rng)
    tokens = _tokens(n, rng) if paired and traffic.pair_tokens else None
    fixed = pods or {}
    spec = _arm(
        "speculative", traffic, spec_prompt, spec_conc, effect=effect, rng=rng,
        pair_ids=ids, start=start, duration=duration, pods=fixed.get("speculative"),
        tokens=tokens,
    )  # fmt: skip
    base = _arm(
        "baseline", traffic, base_prompt, base_conc, effect=1.0, rng=rng,
        pair_ids=ids, start=start, duration=duration, pods=fixed.get("baseline"),
        tokens=tokens,
    )  # fmt: skip
    if unmirrored <= 0:
        return spec + base
    arm = traffic.serving
    load = spec_load if arm == "speculative" else base_load
    extra = _arm(
        arm, traffic, prompts(traffic, unmirrored, rng), concurrencies(load, unmirrored, rng),
        effect=effect if arm == "speculative" else 1.0, rng=rng, pair_ids=None, start=start,
        duration=duration, pods=fixed.get(arm),
    )  # fmt: skip
    return spec + base + extra


__all__ = [
    "BASE_TPOT_S",
    "LOAD_SCALE",
    "Load",
    "Traffic",
    "banded",
    "concurrencies",
    "pod_factors",
    "prompts",
    "run_pods",
    "window",
]
