"""Power curve and A/A false-alarm rates of specguard's judge on synthetic windows.

    .venv/bin/python bench/judge_power.py [--windows 200] [--n 200] [--seed 1]

For each latency shape (specguard.testing.synthetic) and pairing, prints the share of windows
judged regressed as the injected per-token regression grows (0% is the A/A false alarm rate),
at the default settings (tolerance 3%, confidence 99%, 2000 resamples), plus the A/A rate
with tolerance 0 (only the CI counts) and the A/A "improved" rate.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from specguard.judge.verdict import JudgeSettings, judge
from specguard.testing.synthetic import SHAPES, Shape, window

FACTORS = (1.0, 1.02, 1.04, 1.06, 1.08, 1.10, 1.15, 1.20)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--windows", type=int, default=200, help="windows per cell")
    parser.add_argument("--n", type=int, default=200, help="requests per arm per window")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    settings = JudgeSettings(min_requests_per_arm=min(200, args.n))
    shapes: tuple[Shape, ...] = (*SHAPES, "bimodal-valley")
    print(
        f"{args.windows} windows per cell, {args.n} requests per arm, tolerance "
        f"{settings.tolerance}, confidence {settings.confidence}, {settings.resamples} resamples"
    )
    header = " ".join(f"{f - 1:>+6.0%}" for f in FACTORS)
    print(f"{'shape':<15} {'pairing':<8} {header}   A/A@δ=0  A/A improved")
    started = time.perf_counter()
    verdicts = 0
    for shape in shapes:
        for paired in (False, True):
            rng = np.random.default_rng(args.seed)
            cells = []
            aa_strict = aa_improved = 0
            for factor in FACTORS:
                hits = 0
                for _ in range(args.windows):
                    v = judge(window(shape, args.n, rng, factor=factor, paired=paired), settings)
                    verdicts += 1
                    hits += v.outcome == "regressed"
                    if factor == 1.0:
                        aa_strict += v.ci_low is not None and v.ci_low > 1.0
                        aa_improved += v.outcome == "improved"
                cells.append(hits / args.windows)
            row = " ".join(f"{c:>6.1%}" for c in cells)
            print(
                f"{shape:<15} {'paired' if paired else 'unpaired':<8} {row}   "
                f"{aa_strict / args.windows:>7.1%}  {aa_improved / args.windows:>7.1%}"
            )
    elapsed = time.perf_counter() - started
    print(f"{verdicts} verdicts in {elapsed:.1f}s ({1000 * elapsed / verdicts:.1f} ms each)")


if __name__ == "__main__":
    main()
