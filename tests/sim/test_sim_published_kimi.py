"""The kimi-k3-published profile reproduces the table it is calibrated to.

Published (AMD-AGI/Infera PR #74, Kimi-K3 + DSpark on vLLM, MI355X TP8, 1024 input / 128
output tokens): output tokens/s with DSpark / without, per benchmark concurrency. The ratio
is computed through the simulator's own engine (the steps, step costs and acceptance draws
`specguard sim` serves) run in model time: a closed loop of ``c`` clients, as the benchmark
ran. Each must be within 5% of the table, for two acceptance seeds.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from specguard.sim._profiles import PROFILES, Profile
from specguard.sim._specconfig import parse_spec_config
from specguard.sim._virtual import closed_loop, speedup

PUBLISHED = {4: 2.60, 8: 1.36, 16: 1.10, 32: 0.99, 64: 0.90}
DSPARK_K8 = json.dumps(
    {"method": "dspark", "model": "org/kimi-dspark", "num_speculative_tokens": 8}
)


def _ratios(profile: Profile, seed: int) -> dict[int, float]:
    spec = parse_spec_config(DSPARK_K8, default_k=profile.ref_k)
    out = {}
    for c in PUBLISHED:
        base, spec_run = speedup(
            profile, spec, concurrency=c, prompt_tokens=1024, output_tokens=128, seed=seed
        )
        out[c] = spec_run.output_throughput / base.output_throughput
    return out


def _errors(profile: Profile, seed: int) -> dict[int, float]:
    return {c: got / PUBLISHED[c] - 1 for c, got in _ratios(profile, seed).items()}


@pytest.mark.parametrize("seed", [0, 1])
def test_kimi_published_reproduces_the_ratios(seed: int) -> None:
    errors = _errors(PROFILES["kimi-k3-published"], seed)
    assert all(abs(e) <= 0.05 for e in errors.values()), errors


def test_kimi_published_no_speculation_at_c4_is_the_published_figure() -> None:
    # the published 56.8 tok/s sets the profile's time scale
    run = closed_loop(PROFILES["kimi-k3-published"], None, concurrency=4, requests=256,
                      prompt_tokens=1024, output_tokens=128)  # fmt: skip
    assert run.output_throughput == pytest.approx(56.8, rel=0.02)
    assert run.output_tokens == 256 * 128


def test_a_broken_profile_fails_the_check() -> None:
    """The check can fail: kimi-k3 (crossover near 145) and kimi-k3-published without its
    drafter knee are both far off at some concurrency."""
    published = PROFILES["kimi-k3-published"]
    no_knee = replace(published, cost=replace(published.cost, draft_overload_ms=0.0), rates={})
    for profile in (PROFILES["kimi-k3"], no_knee):
        errors = _errors(profile, 0)
        assert max(abs(e) for e in errors.values()) > 0.25, (profile.name, errors)
