"""DeepSeek-V4-like profile: the published high-concurrency shape of fixed-length vs
adaptive verification, measured by a lean streaming client (aiohttp, raw SSE).

Throughput is decode throughput at exactly ``c`` streams: every request asks for more
tokens than the window lasts, so all ``c`` decode together and no prefill falls inside
the window. Time scale 2 (3 without a drafter, which sends one chunk per token) keeps
the server's chunk rate under ~2.7k chunks/s, well within what one core serves while
the client shares the CPU; at scale 1 the no-speculation run at 256 streams can lose
5-14% to CPU contention. The scales differ on purpose: the ratios do not depend on it.

Margins in the model (docs/simulator.md): fixed peak at 64 is 21% above 128; fixed at
128 is 10% above no-spec; fixed at 256 is 36% below no-spec; adaptive is within 2.5%
of fixed up to 64. Measurement noise over the windows below is ~1-1.5%.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from specguard._exposition import Acceptance, acceptance_between
from specguard.sim._launch import start_sim
from specguard_testkit._loadclient import closed_loop, read_reading

SCALE = 2.0
CONCURRENCY = (16, 64, 128, 256)
# Seconds of window per concurrency: enough draft steps (>= ~2,000 sequence-steps, so
# acceptance noise is ~1.2%) for the 5% adaptive-vs-fixed comparison at 16 and 64.
WINDOW = {16: 6.0, 64: 2.4, 128: 2.4, 256: 2.4}
CONFIGS: dict[str, dict[str, object] | None] = {
    "none": None,
    "fixed": {"method": "dspark", "model": "org/dsv4-dspark", "num_speculative_tokens": 7},
    "adaptive": {
        "method": "dspark",
        "model": "org/dsv4-dspark",
        "num_speculative_tokens": 7,
        "enable_adaptive_verification": True,
    },
}


def _length(delta: Acceptance | None) -> float:
    """Mean acceptance length of a counter delta (NaN: nothing drafted)."""
    length = delta.length if delta is not None else None
    return float("nan") if length is None else length


def _measure(spec: dict[str, object] | None) -> tuple[dict[int, float], dict[int, float]]:
    """Simulated tok/s and acceptance length (from the server's counters) per concurrency."""
    # no drafter emits a chunk per token: a slower clock keeps its chunk rate low too
    scale = SCALE if spec is not None else 1.5 * SCALE
    args = ["--profile", "deepseek-v4", "--time-scale", str(scale), "--seed", "5"]
    if spec is not None:
        args += ["--speculative-config", json.dumps(spec)]
    throughput: dict[int, float] = {}
    acceptance: dict[int, float] = {}
    with start_sim(args) as sim:
        for c in CONCURRENCY:
            before = read_reading(sim.url)
            load = closed_loop(
                sim.url,
                concurrency=c,
                duration=WINDOW[c],
                warmup=0.8,
                max_tokens=8000,
                domain="chat",
            )
            result = asyncio.run(load)
            throughput[c] = result.stream_throughput * scale
            if spec is not None:
                acceptance[c] = _length(acceptance_between(before, read_reading(sim.url)))
    return throughput, acceptance


@pytest.mark.slow
def test_deepseek_fixed_vs_adaptive_shape() -> None:
    none, _ = _measure(CONFIGS["none"])
    fixed, fixed_len = _measure(CONFIGS["fixed"])
    adaptive, adaptive_len = _measure(CONFIGS["adaptive"])
    table = {c: (round(none[c]), round(fixed[c]), round(adaptive[c])) for c in CONCURRENCY}
    print("c: (no-spec, fixed-7, adaptive) tok/s", table)
    print("acceptance length fixed", fixed_len, "adaptive", adaptive_len)
    # fixed-length verification peaks around 64 and falls after it
    assert fixed[64] > fixed[16]
    assert fixed[64] > fixed[128] > fixed[256]
    # the crossover with no speculation lies between 128 and 256
    assert fixed[128] > none[128]
    assert 0.47 <= fixed[256] / none[256] <= 0.87  # published: 13-53% below
    # adaptive verification: within 5% of fixed up to 64, beats no-spec at 256 (+41%)
    for c in (16, 64):
        assert adaptive[c] == pytest.approx(fixed[c], rel=0.05)
    assert 1.2 <= adaptive[256] / none[256] <= 1.8
    # its accepted length falls with the batch (published 3.44 at 1 -> 2.65 at 256)
    assert fixed_len[256] == pytest.approx(3.44, rel=0.05)
    assert adaptive_len[16] == pytest.approx(3.44, rel=0.05)
    assert adaptive_len[256] == pytest.approx(2.65, rel=0.08)
