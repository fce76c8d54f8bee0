"""The kimi-k3-published simulator profile against the table it is calibrated to.

    .venv/bin/python bench/kimi_published.py          # the table, ~2 s
    .venv/bin/python bench/kimi_published.py --fit    # re-derive the fitted parameters, ~2 min

Published (AMD-AGI/Infera PR #74: Kimi-K3 + DSpark on vLLM, MI355X TP8, 1024 input / 128
output tokens): output tokens/s with DSpark / without, per benchmark concurrency. Measured:
the same ratio from the simulator's engine run in model time (specguard.sim._virtual: the
Engine steps, step costs and acceptance draws `specguard sim` serves), a closed loop of
``c`` clients with max(256, 8c) requests, chat-domain acceptance, DSpark k = 8.

--fit: starting from the kimi-k3 profile's cost model, the three parameters the profile's
comments name (per_seq_ms, draft_knee_tokens, draft_overload_ms) minimise the squared log
error of the five ratios (Nelder-Mead through the same engine runs), then every duration is
scaled so that the no-speculation run at c = 4 gives the published 56.8 tok/s.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import replace

from specguard.sim._profiles import (
    KIMI_K3,
    KIMI_K3_PUBLISHED,
    PUBLISHED_KIMI_K3,
    CostModel,
    Profile,
    scaled,
)
from specguard.sim._specconfig import SpecConfig, parse_spec_config
from specguard.sim._virtual import speedup

PROMPT, OUTPUT = PUBLISHED_KIMI_K3.prompt_tokens, PUBLISHED_KIMI_K3.output_tokens


def dspark(profile: Profile) -> SpecConfig:
    text = '{"method": "dspark", "model": "bench/dspark", "num_speculative_tokens": %d}'
    return parse_spec_config(text % profile.ref_k, default_k=profile.ref_k)


def ratios(profile: Profile, seed: int = 0) -> dict[int, tuple[float, float, float]]:
    """c -> (tok/s without, tok/s with DSpark, ratio)."""
    spec = dspark(profile)
    out = {}
    for c in PUBLISHED_KIMI_K3.ratios:
        base, spec_run = speedup(
            profile, spec, concurrency=c, prompt_tokens=PROMPT, output_tokens=OUTPUT, seed=seed
        )
        a, b = base.output_throughput, spec_run.output_throughput
        out[c] = (a, b, b / a)
    return out


def table(profile: Profile, seeds: int) -> int:
    pub = PUBLISHED_KIMI_K3.ratios
    runs = [ratios(profile, seed) for seed in range(seeds)]
    print(f"{profile.name}: DSpark k={profile.ref_k} / no speculation, {PROMPT} in / {OUTPUT} out,"
          f" seeds 0..{seeds - 1}")  # fmt: skip
    print(f"  published: {PUBLISHED_KIMI_K3.source}")
    print(f"  {'c':>3} {'published':>9} {'simulated':>9} {'error':>7} {'worst seed':>10}"
          f" {'no-spec tok/s':>13} {'DSpark tok/s':>12}")  # fmt: skip
    worst_all = 0.0
    for c, want in pub.items():
        got = [r[c][2] for r in runs]
        mean = sum(got) / len(got)
        worst = max((g / want - 1 for g in got), key=abs)
        worst_all = max(worst_all, abs(worst))
        a, b = runs[0][c][0], runs[0][c][1]
        print(f"  {c:>3} {want:>9.2f} {mean:>9.3f} {mean / want - 1:>+7.1%} {worst:>+10.1%}"
              f" {a:>13.1f} {b:>12.1f}")  # fmt: skip
    print(f"  worst error over seeds and concurrencies: {worst_all:.1%}")
    return 0


def fit() -> int:
    """Nelder-Mead over (per_seq_ms, draft_knee_tokens, draft_overload_ms), log error."""
    pub = PUBLISHED_KIMI_K3.ratios

    def profile_of(x: list[float]) -> Profile:
        cost = replace(KIMI_K3.cost, per_seq_ms=x[0], draft_knee_tokens=x[1],
                       draft_overload_ms=x[2])  # fmt: skip
        return replace(KIMI_K3, name="fit", cost=cost, rates={})

    def error(x: list[float]) -> float:
        if min(x) < 0:
            return math.inf
        got = ratios(profile_of(x))
        return sum(math.log(got[c][2] / want) ** 2 for c, want in pub.items())

    started = time.monotonic()
    points = [[10.0, 30.0, 5.0], [5.0, 30.0, 5.0], [10.0, 60.0, 5.0], [10.0, 30.0, 2.0]]
    scores = [error(p) for p in points]
    for _ in range(120):
        order = sorted(range(4), key=lambda i: scores[i])
        points, scores = [points[i] for i in order], [scores[i] for i in order]
        centre = [sum(p[j] for p in points[:3]) / 3 for j in range(3)]
        worst = points[3]
        reflect = [centre[j] + (centre[j] - worst[j]) for j in range(3)]
        r = error(reflect)
        if r < scores[0]:
            expand = [centre[j] + 2 * (centre[j] - worst[j]) for j in range(3)]
            e = error(expand)
            points[3], scores[3] = (expand, e) if e < r else (reflect, r)
        elif r < scores[2]:
            points[3], scores[3] = reflect, r
        else:
            inner = [centre[j] + 0.5 * (worst[j] - centre[j]) for j in range(3)]
            i = error(inner)
            if i < scores[3]:
                points[3], scores[3] = inner, i
            else:
                for n in (1, 2, 3):
                    points[n] = [points[0][j] + 0.5 * (points[n][j] - points[0][j])
                                 for j in range(3)]  # fmt: skip
                    scores[n] = error(points[n])
    best = points[min(range(4), key=lambda i: scores[i])]
    fitted = profile_of(best)
    base, _ = speedup(fitted, dspark(fitted), concurrency=4, prompt_tokens=PROMPT,
                      output_tokens=OUTPUT)  # fmt: skip
    scale = base.output_throughput / PUBLISHED_KIMI_K3.baseline_c4
    print(
        f"fit in {time.monotonic() - started:.0f}s: per_seq_ms={best[0]:.4f} "
        f"draft_knee_tokens={best[1]:.2f} draft_overload_ms={best[2]:.4f} "
        f"(squared log error {min(scores):.5f})"
    )
    print(f"time scale to no-spec c=4 = {PUBLISHED_KIMI_K3.baseline_c4} tok/s: x{scale:.4f}")
    cost: CostModel = scaled(fitted.cost, scale)
    print("scaled:", cost)
    return 0


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--fit", action="store_true", help="re-derive the fitted parameters")
    p.add_argument("--seeds", type=int, default=5, help="acceptance seeds for the table")
    args = p.parse_args(argv)
    return fit() if args.fit else table(KIMI_K3_PUBLISHED, args.seeds)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
