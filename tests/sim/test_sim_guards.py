"""The guards beside the median on the simulator's tails (issue 36): with per-request
acceptance spread (`kimi-k3-tails`), the drafter's median per-token latency improves while its
low-acceptance stragglers make the p99 worse; the judge's median says improved, its p99 guards
say regressed, so the drafter is rolled back. Without the spread no guard acts.

The two arms run the same closed loop in model time (specguard.sim._virtual); the i-th request
to finish on each arm makes the i-th pair (the requests are alike: 512 in, 128 out, chat), as a
mirrored window pairs one request on both arms.
"""

from __future__ import annotations

import json

import pytest

from specguard.judge import JudgeSettings, Sample, Verdict, judge
from specguard.sim._profiles import PROFILES, Profile, with_spread
from specguard.sim._specconfig import parse_spec_config
from specguard.sim._virtual import RequestTimes, closed_loop

TAILS = PROFILES["kimi-k3-tails"]
DSPARK = json.dumps({"method": "dspark", "model": "org/kimi-dspark", "num_speculative_tokens": 8})
CONCURRENCY = 16
OUTPUT = 128


def half(
    arm: str, finished: tuple[RequestTimes, ...], serving: str = "speculative"
) -> list[Sample]:
    """One arm's half of the pairs (``serving``: the arm that serves, the other the shadow)."""
    out = []
    clock = 0.0
    for i, r in enumerate(finished):
        clock += r.e2e / CONCURRENCY
        out.append(
            Sample(
                arm="speculative" if arm == "speculative" else "baseline",
                role="serving" if arm == serving else "shadow",
                pod=f"{arm}-{i % 2}",
                domain="chat",
                started_at=clock,
                concurrency=CONCURRENCY,
                output_tokens=OUTPUT,
                e2e_s=r.e2e,
                ttft_s=r.ttft,
                tpot_s=r.tpot,
                measurement="stream_usage",
                pair_id=f"p-{i}",
                prompt_tokens=512,
            )
        )
    return out


def _window(profile: Profile, seed: int) -> Verdict:
    spec = parse_spec_config(DSPARK, default_k=profile.ref_k)
    base, drafter = (
        closed_loop(
            profile,
            s,
            concurrency=CONCURRENCY,
            requests=1200,
            prompt_tokens=512,
            output_tokens=OUTPUT,
            seed=seed,
        )
        for s in (None, spec)
    )
    n = min(len(base.finished), len(drafter.finished))
    samples = half("speculative", drafter.finished[:n])
    samples += half("baseline", base.finished[:n])
    return judge(samples, JudgeSettings())


@pytest.mark.parametrize("seed", [0, 1])
def test_stragglers_roll_back_a_drafter_the_median_would_keep(seed: int) -> None:
    verdict = _window(TAILS, seed)
    assert verdict.outcome == "improved", verdict
    regressed = {g.name for g in verdict.regressed_guards}
    assert {"tpot_p99", "e2e_p99"} <= regressed, verdict.guards
    assert verdict.guarded_outcome == "regressed"


@pytest.mark.parametrize("seed", [0, 1])
def test_without_spread_no_guard_acts(seed: int) -> None:
    verdict = _window(with_spread(TAILS, 0.0), seed)
    assert verdict.outcome == "improved", verdict
    assert verdict.regressed_guards == (), verdict.guards
    assert verdict.guarded_outcome == "improved"
