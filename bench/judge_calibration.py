"""Calibration of specguard's judge on traffic that looks like production.

    .venv/bin/python bench/judge_calibration.py [--aa 40] [--power 15] [--sizes 200,1000]
                                                [--shapes sigma0.2,sigma0.35,sigma0.5,heavy]
                                                [--pairings unpaired,paired]
                                                [--seed 1]

Windows come from specguard.testing._traffic, a generator written apart from the judge:
per-token latency 12 ms × (1 + c/16) with the in-flight count c uniform on 1..64 per request
(so it grows with load and the mix varies between windows), a log-normal prompt effect of
log-spread σ (heavy: Student-t(3) in log space plus 3% stragglers 2–10×, at σ 0.35), three
pods per arm with a per-pod bias of σ 0.05, per-request noise σ 0.08. Paired windows measure
each prompt on both arms (each at its own concurrency and pod); unpaired ones draw each
arm's requests independently. The judge runs at the resource's defaults (tolerance 0.03,
confidence 0.99, 2000 resamples), with min_requests_per_arm = 90% of the window size.

Columns, per size × pairing × shape:
- ``excl@0``: share of A/A windows whose 99% CI excludes 1 (nominal 1%; coverage is 1 minus
  it), i.e. tolerance 0;
- ``reg``, ``imp``: share of A/A windows judged regressed / improved at tolerance 0.03;
- ``+5%``, ``+10%``, ``+20%``: share of windows judged regressed when the drafter makes
  every request's per-token latency that much slower (power).

The default run takes a few minutes on one core; more windows narrow the figures (the
docs' table: --aa 1000 --power 100).
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from specguard.judge._verdict import JudgeSettings, judge
from specguard.testing._traffic import Traffic, window

SHAPES: dict[str, Traffic] = {
    "sigma0.2": Traffic(sigma=0.2),
    "sigma0.35": Traffic(sigma=0.35),
    "sigma0.5": Traffic(sigma=0.5),
    "heavy": Traffic(sigma=0.35, heavy=True),
}
EFFECTS = (1.05, 1.10, 1.20)


def _cell(
    traffic: Traffic, n: int, paired: bool, *, aa: int, power: int, rng: np.random.Generator
) -> list[float]:
    # A few requests of a window may be unusable (a straggler past the plausible range):
    # 90% of the window is the minimum, as a user would set it for this window size.
    settings = JudgeSettings(min_requests_per_arm=int(0.9 * n))
    excluded = regressed = improved = 0
    for _ in range(aa):
        v = judge(window(rng, n, traffic, paired=paired), settings)
        if v.ci_low is None or v.ci_high is None:
            raise SystemExit(f"no interval on an A/A window: {v.sentence()}")
        excluded += not (v.ci_low <= 1.0 <= v.ci_high)
        regressed += v.outcome == "regressed"
        improved += v.outcome == "improved"
    row = [excluded / aa, regressed / aa, improved / aa]
    for effect in EFFECTS:
        hits = sum(
            judge(window(rng, n, traffic, paired=paired, effect=effect), settings).outcome
            == "regressed"
            for _ in range(power)
        )
        row.append(hits / power if power else float("nan"))
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--aa", type=int, default=40, help="A/A windows per cell")
    parser.add_argument("--power", type=int, default=15, help="windows per cell and effect")
    parser.add_argument("--sizes", default="200,1000", help="requests (pairs) per arm")
    parser.add_argument("--shapes", default=",".join(SHAPES), help="of " + ", ".join(SHAPES))
    parser.add_argument("--pairings", default="unpaired,paired", help="unpaired, paired or both")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    try:
        sizes = [int(s) for s in args.sizes.split(",")]
        shapes = [SHAPES[s] for s in args.shapes.split(",")]
    except (ValueError, KeyError) as exc:
        print(f"judge_calibration: --sizes/--shapes: {exc}", file=sys.stderr)
        return 2
    names = args.shapes.split(",")
    rng = np.random.default_rng(args.seed)
    header = f"{'n/arm':>5} {'pairing':<9} {'shape':<10} {'excl@0':>7} {'reg':>6} {'imp':>6}"
    header += "".join(f" {f'+{round((e - 1) * 100)}%':>6}" for e in EFFECTS)
    print(f"A/A {args.aa} windows, power {args.power} windows per effect, per cell")
    print(header)
    started = time.perf_counter()
    for n in sizes:
        for paired in [p == "paired" for p in args.pairings.split(",")]:
            for name, traffic in zip(names, shapes, strict=True):
                row = _cell(traffic, n, paired, aa=args.aa, power=args.power, rng=rng)
                cells = "".join(f" {x:>6.1%}" for x in row[1:])
                pairing = "paired" if paired else "unpaired"
                print(f"{n:>5} {pairing:<9} {name:<10} {row[0]:>7.1%}{cells}", flush=True)
    print(f"({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
