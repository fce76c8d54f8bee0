"""`specguard judge SAMPLES.jsonl`: retrospective verdicts on recorded samples, to calibrate
tolerance, confidence and consecutive windows before enforcing them.

Without --window the whole file is one window. With --window SECONDS the samples are cut into
fixed windows by ``started_at`` and each gets a verdict, then the decision policy is replayed
over them as a dry run ("would roll back at window 5").
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from specguard._args import ArgumentParser
from specguard.judge.policy import PolicySettings, PolicyState, step
from specguard.judge.sample import ARMS, Sample, SampleError, parse_lines
from specguard.judge.verdict import JudgeSettings, Verdict, judge


def _parser() -> argparse.ArgumentParser:
    d = JudgeSettings()
    p = ArgumentParser(prog="specguard judge", description=__doc__.split("\n\n")[0])
    p.add_argument("samples", help="JSONL file of sample records (docs/samples.md); - for stdin")
    p.add_argument(
        "--tolerance",
        type=float,
        default=d.tolerance,
        help=f"δ: changes within ±δ are not acted on (default {d.tolerance})",
    )
    p.add_argument(
        "--confidence",
        type=float,
        default=d.confidence,
        help=f"confidence of the interval (default {d.confidence})",
    )
    p.add_argument(
        "--window",
        type=float,
        default=None,
        metavar="SECONDS",
        help="cut the samples into windows of this length and replay the policy",
    )
    p.add_argument(
        "--min-requests",
        type=int,
        default=d.min_requests_per_arm,
        help=f"minimum usable requests per arm (default {d.min_requests_per_arm})",
    )
    p.add_argument(
        "--min-tokens",
        type=int,
        default=d.min_output_tokens,
        help=f"minimum output tokens per request (default {d.min_output_tokens})",
    )
    p.add_argument(
        "--resamples",
        type=int,
        default=d.resamples,
        help=f"bootstrap resamples (default {d.resamples})",
    )
    p.add_argument("--seed", type=int, default=d.seed, help="bootstrap seed (default 0)")
    p.add_argument(
        "--consecutive",
        type=int,
        default=PolicySettings().consecutive_windows,
        help="windows in a row before a rollback, for the replay (default 3)",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    return p


# JudgeSettings field → the flag that sets it, so errors name what the user typed.
_FLAGS = {
    "tolerance": "--tolerance",
    "confidence": "--confidence",
    "min_requests_per_arm": "--min-requests",
    "min_output_tokens": "--min-tokens",
    "resamples": "--resamples",
    "seed": "--seed",
    "consecutive_windows": "--consecutive",
}


def _load(path: str) -> list[Sample]:
    if path == "-":
        return list(parse_lines(sys.stdin))
    with Path(path).open(encoding="utf-8") as handle:
        return list(parse_lines(handle))


def _windows(samples: Sequence[Sample], seconds: float) -> list[tuple[float, list[Sample]]]:
    if not samples:
        return []
    start = min(s.started_at for s in samples)
    buckets: dict[int, list[Sample]] = {}
    for s in samples:
        buckets.setdefault(int((s.started_at - start) // seconds), []).append(s)
    last = max(buckets)
    return [(start + i * seconds, buckets.get(i, [])) for i in range(last + 1)]


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.2f}"


def _table(verdict: Verdict, samples: Sequence[Sample]) -> str:
    rows = [
        f"{'arm':<12} {'used':>6} {'requests':>8} {'errors':>6} {'median ms':>9}"
        f" {'p90 ms':>8} {'conc/pod':>8}"
    ]
    for arm in ARMS:
        tpots = [s.tpot_s for s in samples if s.arm == arm and s.ok and s.tpot_s]
        p90 = float(np.quantile(tpots, 0.9)) if tpots else None
        conc = verdict.concurrency.get(arm)
        rows.append(
            f"{arm:<12} {verdict.n.get(arm, 0):>6} {verdict.requests.get(arm, 0):>8}"
            f" {verdict.errors.get(arm, 0):>6} {_ms(verdict.median_s.get(arm)):>9}"
            f" {_ms(p90):>8} {'-' if conc is None else f'{conc:.1f}':>8}"
        )
    if verdict.strata:
        cells = ", ".join(f"{s.label}: {s.speculative}/{s.baseline}" for s in verdict.strata)
        rows.append(f"concurrency strata (speculative/baseline): {cells}")
    domains = [d for d in verdict.domains if d.ratio is not None]
    if domains:
        cells = ", ".join(
            f"{d.domain} {d.ratio:.3f} (n {d.speculative}/{d.baseline})" for d in domains
        )
        rows.append(f"per-domain ratio of medians: {cells}")
    if verdict.excluded:
        rows.append(
            "not used: " + ", ".join(f"{k} {v}" for k, v in sorted(verdict.excluded.items()))
        )
    return "\n".join(rows)


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    try:
        settings = JudgeSettings(
            tolerance=args.tolerance,
            confidence=args.confidence,
            min_requests_per_arm=args.min_requests,
            min_output_tokens=args.min_tokens,
            resamples=args.resamples,
            seed=args.seed,
        )
        policy = PolicySettings(policy="notify", consecutive_windows=args.consecutive)
        if args.window is not None and not (math.isfinite(args.window) and args.window > 0):
            raise ValueError(f"--window: must be a positive number of seconds, got {args.window}")
    except ValueError as exc:
        field, _, problem = str(exc).partition(": ")
        print(f"specguard judge: {_FLAGS.get(field, field)}: {problem}", file=sys.stderr)
        return 2
    try:
        samples = _load(args.samples)
    except OSError as exc:
        print(f"specguard judge: {args.samples}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    except (SampleError, UnicodeDecodeError) as exc:
        print(f"specguard judge: {args.samples}: {exc}", file=sys.stderr)
        return 2

    if args.window is None:
        verdict = judge(samples, settings)
        if args.json:
            print(json.dumps(verdict.to_dict(), indent=2))
        else:
            print(verdict.sentence())
            print(_table(verdict, samples))
        return 0

    state = PolicyState()
    report = []
    for index, (start, chunk) in enumerate(_windows(samples, args.window)):
        verdict = judge(chunk, settings)
        state, decision = step(state, policy, start + args.window, verdict=verdict)
        report.append((index, start, verdict, decision))
    if args.json:
        print(
            json.dumps(
                [
                    {"window": i, "start": start, "verdict": v.to_dict(), "decision": d.to_dict()}
                    for i, start, v, d in report
                ],
                indent=2,
            )
        )
        return 0
    for i, _start, verdict, decision in report:
        ci = (
            ""
            if verdict.ci_low is None or verdict.ci_high is None
            else f" CI {verdict.ci_low:.3f}–{verdict.ci_high:.3f}"
        )
        ratio = "" if verdict.ratio is None else f" ratio {verdict.ratio:.3f}"
        n = f"n {verdict.n.get('speculative', 0)}/{verdict.n.get('baseline', 0)}"
        line = f"window {i:>3}: {verdict.outcome:<12}{ratio}{ci} {n}"
        if decision.action == "notify":
            line += f"  → {decision.reason.split(':')[0]}"
        print(line)
    flips = [i for i, _, _, d in report if d.action == "notify"]
    print(
        f"policy replay (dry run, {args.consecutive} consecutive windows): "
        + (
            f"would roll back at window(s) {', '.join(map(str, flips))}"
            if flips
            else "would not act"
        )
    )
    return 0
