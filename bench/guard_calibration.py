"""False actions of the guards beside the median (judge._guards) on A/A windows.

    .venv/bin/python bench/guard_calibration.py [--windows 200] [--sizes 500,2000]
                                                [--shapes sigma0.35,heavy] [--pod-bias 0.05]
                                                [--seed 1] [--effect 1.0]
                                                [--shadow-in-flight 1.0]

Windows come from specguard_testkit._traffic (written apart from the judge): paired,
per-token latency 12 ms × (1 + c/16) with c uniform on 1..64, a log-normal prompt effect of
log-spread 0.35 (heavy: Student-t(3) in log space plus 3% stragglers 2–10×), output lengths
32–1024 tokens shared by a pair's halves, TTFT 50 ms + an exponential of mean 300 ms per
request, three pods per arm, each with its own speed exp(N(0, pod bias)) drawn for the
window and not centred (one arm's pods may be slower on average than the other's, as real
hardware is), and per-request noise 0.08. Both arms are the same (A/A): any regressed guard
is a false action. The judge runs at the resource's defaults (confidence 0.99, the guards'
default tolerances and minimum pairs, every guard on: the TTFT guards too, which are off by
default).

Columns, per size × shape: each guard's share of windows judged regressed, with its count,
then ``any``: windows where at least one guard was regressed (what the policy counts as a
regressed window; it acts after consecutiveWindows of them in a row). ``too few`` marks a
guard the window size leaves without enough pairs.

``--effect F``: power instead: the drafter's half of every pair takes F × its time to first
token and F × its per-token latency (its e2e time follows), so every guard's true ratio is
about F; the columns are then the share of windows each guard catches.

``--shadow-in-flight F``: the drafter arm serves and its baseline shadow holds F × the
drafter's in-flight count in each pair (0.75: the drafter arm +33% heavier, inside the in-flight
load match's allowance), latency following load (12 ms × (1 + c/16)). Each cell then prints a
second row, ``as measured``: the same windows' guards on the same pairs without the in-flight
correction the median's pairs get (the judge before the guards did alike), side by side.
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import replace

import numpy as np

from specguard.judge import DEFAULT_GUARDS, JudgeSettings, Sample, judge, judge_guards
from specguard_testkit import _traffic as traffic

GUARDS = tuple(replace(g, enabled=True) for g in DEFAULT_GUARDS)


def shape_traffic(shape: str, pod_bias: float, shadow_in_flight: float) -> traffic.Traffic:
    if shape == "heavy":
        return traffic.Traffic(heavy=True, pod_bias=pod_bias, pair_tokens=True,
                               shadow_in_flight=shadow_in_flight)  # fmt: skip
    if shape.startswith("sigma"):
        sigma = float(shape.removeprefix("sigma"))
        return traffic.Traffic(sigma=sigma, pod_bias=pod_bias, pair_tokens=True,
                               shadow_in_flight=shadow_in_flight)  # fmt: skip
    raise SystemExit(f"--shapes: unknown shape {shape!r}")


def slowed(s: Sample, effect: float) -> Sample:
    """The drafter's half ``effect`` × slower to its first token and per token."""
    if s.arm != "speculative" or effect == 1.0:
        return s
    ttft, tpot = (s.ttft_s or 0.0) * effect, (s.tpot_s or 0.0) * effect
    return replace(s, ttft_s=ttft, tpot_s=tpot, e2e_s=ttft + tpot * (s.output_tokens - 1))


def cell(
    size: int, shape: str, *, windows: int, pod_bias: float, seed: int, effect: float,
    shadow_in_flight: float,
) -> str:  # fmt: skip
    rng = np.random.default_rng([seed, size, sum(map(ord, shape))])
    kind = shape_traffic(shape, pod_bias, shadow_in_flight)
    settings = JudgeSettings(min_requests_per_arm=int(0.9 * size), guards=GUARDS)
    regressed = dict.fromkeys((g.name for g in GUARDS), 0)
    too_few = dict.fromkeys(regressed, 0)
    measured = dict.fromkeys(regressed, 0)
    anywhere = measured_anywhere = 0
    for _ in range(windows):
        pods = traffic.run_pods(kind, rng)
        samples = [
            slowed(x, effect) for x in traffic.window(rng, size, kind, paired=True, pods=pods)
        ]
        verdict = judge(samples, settings)
        for g in verdict.guards:
            regressed[g.name] += g.regressed
            too_few[g.name] += g.outcome == "too_few"
        anywhere += bool(verdict.regressed_guards)
        if shadow_in_flight != 1.0 and verdict.guards:
            base = {x.pair_id: x for x in samples if x.arm == "baseline"}
            pairs = [(x, base[x.pair_id]) for x in samples if x.arm == "speculative"]
            raw = judge_guards(pairs, GUARDS, confidence=settings.confidence,
                               pod_variance=verdict.pod_variance or 0.0)  # fmt: skip
            for g in raw:
                measured[g.name] += g.regressed
            measured_anywhere += any(g.regressed for g in raw)

    def share(k: int) -> str:
        p = k / windows
        se = math.sqrt(max(p * (1 - p), 1.0 / windows) / windows)
        return f"{p:6.1%} ±{se:4.1%} ({k}/{windows})"

    parts = [
        "too few".ljust(22) if too_few[name] == windows else share(regressed[name]).ljust(22)
        for name in regressed
    ]
    row = f"{size:>6} {shape:<10} " + " ".join(parts) + " " + share(anywhere)
    if shadow_in_flight == 1.0:
        return row
    parts = [
        "too few".ljust(22) if too_few[name] == windows else share(measured[name]).ljust(22)
        for name in regressed
    ]
    return row + f"\n{'':>6} {'measured':<10} " + " ".join(parts) + " " + share(measured_anywhere)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--windows", type=int, default=200)
    parser.add_argument("--sizes", default="500,2000")
    parser.add_argument("--shapes", default="sigma0.35,heavy")
    parser.add_argument("--pod-bias", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--effect", type=float, default=1.0)
    parser.add_argument("--shadow-in-flight", type=float, default=1.0)
    args = parser.parse_args()
    started = time.monotonic()
    names = [g.name for g in GUARDS]
    what = "A/A" if args.effect == 1.0 else f"drafter ×{args.effect:g} (power)"
    load = (
        ""
        if args.shadow_in_flight == 1.0
        else f"; the baseline shadow at {args.shadow_in_flight:g}× the drafter's in-flight "
        "(second row: as measured, no in-flight correction)"
    )
    print(f"{what} windows per cell: {args.windows}; pod bias {args.pod_bias}; seed {args.seed}"
          f"{load}")  # fmt: skip
    print(f"{'pairs':>6} {'shape':<10} " + " ".join(n.ljust(22) for n in names) + " any")
    for size in (int(s) for s in args.sizes.split(",")):
        for shape in args.shapes.split(","):
            row = cell(
                size, shape, windows=args.windows, pod_bias=args.pod_bias, seed=args.seed,
                effect=args.effect, shadow_in_flight=args.shadow_in_flight,
            )  # fmt: skip
            print(row, flush=True)
    print(f"({time.monotonic() - started:.0f}s)")


if __name__ == "__main__":
    main()
