"""`specguard judge SAMPLES.jsonl`: retrospective verdicts on recorded samples, to calibrate
tolerance, confidence and consecutive windows before enforcing them.

Without --window the whole file is one window. With --window SECONDS the samples are cut into
fixed windows by ``started_at`` and each gets a verdict, then the decision policy is replayed
over them as a dry run ("would roll back at window 5"). A run of windows without samples is
one line and one policy step (it resets a streak like one empty window), so time and memory
grow with the samples, not with the time they span.

Defaults are the resource's (spec.evaluation and spec.rollback).
Exit status: 0 a verdict was reached (in at least one window); 3 inconclusive everywhere
(too few usable requests, all errors, no samples, arms measured differently, arms loaded
differently, records that contradict their own e2e time); 2 bad input, bad flag or
unwritable output (one line on stderr).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from specguard._args import ArgumentParser, UsageError
from specguard.judge import (
    ARMS,
    Evidence,
    PolicySettings,
    PolicyState,
    Sample,
    SampleError,
    Verdict,
    add_judge_flags,
    flag_message,
    judge,
    judge_settings_from_args,
    parse_lines,
    read_lines,
    step,
)

# --window bounds: below a millisecond no window holds two requests; above a year is no window.
MIN_WINDOW_S = 0.001
MAX_WINDOW_S = 31_536_000.0
# Samples spanning more windows than this have a wrong clock (window numbers past 10^18 are
# also where a float stops counting windows exactly).
MAX_WINDOWS = 1e18
EXIT_VERDICT, EXIT_USAGE, EXIT_INCONCLUSIVE = 0, 2, 3


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(
        prog="specguard judge",
        description=__doc__.split("\n\n")[0],
        epilog="Defaults are the resource's (spec.evaluation, spec.rollback). Exit status: 0 a "
        "verdict was reached; 3 inconclusive (too few usable requests, all errors, no samples, "
        "arms measured differently); 2 bad input or flag. See docs/judge.md.",
    )
    p.add_argument("samples", help="JSONL file of sample records (docs/samples.md); - for stdin")
    add_judge_flags(p, "--tolerance", "--confidence")
    p.add_argument(
        "--window",
        type=float,
        default=None,
        metavar="SECONDS",
        help="cut the samples into windows of this length and replay the policy "
        f"({MIN_WINDOW_S:g} to {MAX_WINDOW_S:g})",
    )
    add_judge_flags(p, "--min-requests", "--min-tokens", "--resamples", "--seed")
    p.add_argument(
        "--consecutive",
        type=int,
        default=PolicySettings().consecutive_windows,
        help="windows in a row before a rollback, for the replay "
        f"(default {PolicySettings().consecutive_windows})",
    )
    p.add_argument(
        "--windows-per-false-alarm",
        type=float,
        default=PolicySettings().windows_per_false_alarm,
        help="the replay's cumulative evidence across windows: its error budget, 0 off "
        f"(default {PolicySettings().windows_per_false_alarm:g})",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    return p


def _load(path: str) -> list[Sample]:
    if path == "-":
        return list(parse_lines(read_lines(sys.stdin)))
    with Path(path).open(encoding="utf-8") as handle:
        return list(parse_lines(read_lines(handle)))


def _windows(samples: Sequence[Sample], seconds: float) -> list[tuple[int, int, list[Sample]]]:
    """(first index, last index, samples) per window that has samples, and one entry per run
    of empty windows between them (with no samples): as many entries as samples at most."""
    if not samples:
        return []
    start = min(s.started_at for s in samples)
    buckets: dict[int, list[Sample]] = {}
    for s in samples:
        buckets.setdefault(int((s.started_at - start) // seconds), []).append(s)
    out: list[tuple[int, int, list[Sample]]] = []
    previous = -1
    for index in sorted(buckets):
        if index > previous + 1:
            out.append((previous + 1, index - 1, []))
        out.append((index, index, buckets[index]))
        previous = index
    return out


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
    if verdict.method == "stratified" and verdict.ratio is not None:
        counts = " and ".join(
            f"{arm} {verdict.matched.get(arm, 0)} of {verdict.n.get(arm, 0)}" for arm in ARMS
        )
        levels = ", ".join(
            str(low) if low == high else f"{low}-{high}" for low, high in verdict.matched_levels
        )
        rows.append(
            f"compared in {verdict.matched_strata} group(s) of in-flight levels ({levels}): "
            f"{counts} requests"
        )
    if verdict.load_slope is not None:
        rows.append(
            "in-flight gap inside pairs corrected by the window's slope of log latency on log "
            f"in-flight: {verdict.load_slope:.2f}"
        )
    if verdict.pod_spread:
        rows.append(f"spread between pods (in the interval): {verdict.pod_spread:.1%}")
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
    # A domain or pod name the terminal cannot show (a lone surrogate from a JSON escape, a
    # non-UTF-8 locale) is written escaped, not raised.
    reconfigure = getattr(sys.stdout, "reconfigure", None)
    if reconfigure is not None:
        with contextlib.suppress(ValueError, OSError):
            reconfigure(errors="backslashreplace")
    try:
        code = _main(argv)
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        # The reader went away (`| head`): say so once.
        _drop_stdout()
        print("specguard judge: output closed before the report was written", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:
        # The output cannot be written (a full disk, /dev/full).
        _drop_stdout()
        print(f"specguard judge: cannot write the report: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_USAGE


def _drop_stdout() -> None:
    """Point stdout at /dev/null, so that Python does not complain again when it flushes what
    is left of the report at exit."""
    with contextlib.suppress(OSError, ValueError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _main(argv: list[str]) -> int:
    try:
        args = build_parser().parse_args(argv)
    except UsageError as exc:
        print(f"specguard judge: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        settings = judge_settings_from_args(args)
        policy = PolicySettings(
            policy="notify",
            consecutive_windows=args.consecutive,
            windows_per_false_alarm=args.windows_per_false_alarm,
        )
        if args.window is not None and not (
            math.isfinite(args.window) and MIN_WINDOW_S <= args.window <= MAX_WINDOW_S
        ):
            raise ValueError(
                f"--window: must be {MIN_WINDOW_S:g} to {MAX_WINDOW_S:g} seconds, got {args.window}"
            )
    except ValueError as exc:
        print(f"specguard judge: {flag_message(exc)}", file=sys.stderr)
        return EXIT_USAGE
    try:
        samples = _load(args.samples)
    except OSError as exc:
        print(f"specguard judge: {args.samples}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_USAGE
    except SampleError as exc:
        print(f"specguard judge: {args.samples}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except UnicodeDecodeError as exc:
        print(f"specguard judge: {args.samples}: not UTF-8 text ({exc.reason})", file=sys.stderr)
        return EXIT_USAGE

    if args.window is None:
        verdict = judge(samples, settings)
        if args.json:
            print(json.dumps(verdict.to_dict(), indent=2))
        else:
            print(verdict.sentence())
            print(_table(verdict, samples))
        return EXIT_INCONCLUSIVE if verdict.outcome == "inconclusive" else EXIT_VERDICT

    start0 = min((s.started_at for s in samples), default=0.0)
    spanned = max((s.started_at for s in samples), default=0.0) - start0
    if not spanned / args.window <= MAX_WINDOWS:
        print(
            f"specguard judge: --window: the samples span {spanned:.3g} s, more than "
            f"{MAX_WINDOWS:.0e} windows of {args.window:g} s (is a started_at wrong?)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    state = PolicyState()
    report = []
    for first, last, chunk in _windows(samples, args.window):
        verdict = judge(chunk, settings)
        end = start0 + (last + 1) * args.window
        state, decision = step(state, policy, end, Evidence(verdict=verdict))
        report.append((first, last, start0 + first * args.window, verdict, decision))
    reached = any(v.outcome != "inconclusive" for *_, v, _ in report)
    code = EXIT_VERDICT if reached else EXIT_INCONCLUSIVE
    if args.json:
        print(
            json.dumps(
                [
                    {
                        "window": first,
                        "last_window": last,
                        "start": start,
                        "verdict": v.to_dict(),
                        "decision": d.to_dict(),
                    }
                    for first, last, start, v, d in report
                ],
                indent=2,
            )
        )
        return code
    for first, last, _start, verdict, decision in report:
        if not verdict.requests.get("speculative") and not verdict.requests.get("baseline"):
            span = f"{first}" if first == last else f"{first}–{last}"
            print(f"window {span:>3}: no samples")
            continue
        ci = (
            ""
            if verdict.ci_low is None or verdict.ci_high is None
            else f" CI {verdict.ci_low:.3f}–{verdict.ci_high:.3f}"
        )
        ratio = "" if verdict.ratio is None else f" ratio {verdict.ratio:.3f}"
        n = f"n {verdict.n.get('speculative', 0)}/{verdict.n.get('baseline', 0)}"
        line = f"window {first:>3}: {verdict.outcome:<12}{ratio}{ci} {n}"
        if decision.action == "notify":
            line += f"  → {decision.headline}"
            if decision.cumulative is not None:
                line += " (sustained loss: the cumulative evidence)"
        print(line)
    flips = [first for first, _, _, _, d in report if d.action == "notify"]
    budget = (
        f"cumulative evidence at {policy.windows_per_false_alarm:g} windows per false alarm"
        if policy.cumulative.enabled
        else "no cumulative evidence"
    )
    print(
        f"policy replay (dry run, {args.consecutive} consecutive windows, {budget}): "
        + (
            f"would roll back at window(s) {', '.join(map(str, flips))}"
            if flips
            else "would not act"
        )
    )
    return code
