"""Per-request acceptance spread: where the drafter improves the median and worsens the tail.

    .venv/bin/python bench/acceptance_tails.py                      # kimi-k3-tails, 16 shapes
    .venv/bin/python bench/acceptance_tails.py --spread 0           # the same without spread

Published (Kimi-K3 + DSpark): end-to-end p99 regressed in 8 of 16 workload shapes while the
median per-token latency improved; requests accepting <= 1.1 took 1.97x the median latency.
Measured: the simulator's engine in model time (specguard.sim._virtual, the steps, costs and
draws `specguard sim` serves), a closed loop of c clients, max(400, 8c) chat requests of
512 prompt tokens, DSpark k = 8, with the drafter / without, per workload shape (c, output
tokens). Ratios < 1: the drafter is faster.
"""

from __future__ import annotations

import argparse
import json
import statistics

from specguard.sim._profiles import PROFILES, with_spread
from specguard.sim._specconfig import parse_spec_config
from specguard.sim._virtual import closed_loop

DSPARK = json.dumps({"method": "dspark", "model": "org/kimi-dspark", "num_speculative_tokens": 8})


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--profile", default="kimi-k3-tails", choices=sorted(PROFILES))
    p.add_argument("--spread", type=float, default=None, help="default: the profile's")
    p.add_argument("--concurrency", type=int, nargs="+", default=[4, 16, 64, 128])
    p.add_argument("--output-tokens", type=int, nargs="+", default=[32, 128, 512, 1024])
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    profile = PROFILES[args.profile]
    if args.spread is not None:
        profile = with_spread(profile, args.spread)
    spec = parse_spec_config(DSPARK, default_k=profile.ref_k)
    print(f"{profile.name}, acceptance spread {profile.acceptance_spread:g}, seed {args.seed}:")
    print("    c  out  med TPOT  p99 TPOT  med e2e  p99 e2e  p99 TTFT  low-acc e2e / median")
    tails = 0
    shapes = 0
    for c in args.concurrency:
        for out in args.output_tokens:
            runs = [
                closed_loop(
                    profile,
                    drafter,
                    concurrency=c,
                    requests=max(400, 8 * c),
                    prompt_tokens=512,
                    output_tokens=out,
                    seed=args.seed,
                )
                for drafter in (None, spec)
            ]
            base, spec_run = runs
            r = {
                (m, q): spec_run.quantile(m, q) / base.quantile(m, q)
                for m in ("tpot", "e2e", "ttft")
                for q in (0.5, 0.99)
            }
            low = [x.e2e for x in spec_run.finished if x.acceptance <= 1.1]
            low_text = (
                f"{statistics.fmean(low) / spec_run.quantile('e2e', 0.5):.2f} ({len(low)})"
                if low
                else "-"
            )
            tail = r["tpot", 0.5] < 1 and r["e2e", 0.99] > 1
            tails += tail
            shapes += 1
            print(
                f"  {c:3d} {out:4d}  {r['tpot', 0.5]:8.2f}  {r['tpot', 0.99]:8.2f}  "
                f"{r['e2e', 0.5]:7.2f}  {r['e2e', 0.99]:7.2f}  {r['ttft', 0.99]:8.2f}  "
                f"{low_text}{'  <- median better, e2e p99 worse' if tail else ''}"
            )
    print(f"median TPOT better and e2e p99 worse in {tails} of {shapes} shapes")


if __name__ == "__main__":
    main()
