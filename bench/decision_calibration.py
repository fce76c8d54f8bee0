"""Evidence across windows on realistic traffic: the policy's false actions and the windows a
sustained loss takes, the cumulative rule beside "K regressed windows in a row".

    .venv/bin/python bench/decision_calibration.py [--days 1] [--windows-per-day 1440]
        [--runs 40] [--max-windows 40] [--n 200] [--shape sigma0.35] [--pairing paired]
        [--consecutive 3] [--budget 10000] [--seed 1]

Windows come from specguard_testkit._traffic (written apart from the judge) and are judged by
the real judge at the resource's defaults (tolerance 0.03, confidence 0.99, 2000 resamples,
``min_requests_per_arm`` 200). On top of one window's traffic (log-normal prompt spread or
heavy tails with stragglers, per-token latency that grows with the in-flight count, per-
request noise), a *day* of windows moves as a day does:

- the load: each window's in-flight counts are uniform on 1..(8 + 56·d), d the time of day
  (0 at night, 1 at the afternoon peak, a cosine);
- the traffic: a window holds ``n`` · (0.6 + 0.8·d) · exp(N(0, 0.1)) mirrored pairs
  (``--n`` the day's mean), so night windows fall below the 200 the judge needs and are
  inconclusive (gaps, as in production);
- the pods: three per arm, each with a bias exp(N(0, 0.05)) drawn once for the day and kept
  for all its windows (centred within each arm, so the arms are equal on average: the A/A
  case); the pods' shares of a window vary by chance.

Then the policy itself (``judge.step``) runs over the day's windows (the drafter serving,
the loss direction), once as the resource configures it — K = ``consecutiveWindows`` regressed
windows in a row, or the cumulative rule (``judge._cumulative``: a CUSUM of each window's
log-likelihood ratio, ``--budget`` windows per false alarm at the tolerance, at most 1/K of it
per window) — and once with K regressed windows in a row alone (the rule before).
After an action the evidence starts again (as after a rollback), so every window can act.

Rows:
- ``calibration``: z = (x − ln effect) / s over the A/A windows (x the window's log ratio, s
  its standard error from the interval): its standard deviation (1 if the intervals are
  right) and the between-window spread of x that the intervals do not show;
- ``A/A`` and ``at tolerance`` (every request 1.03× slower, what a drafter exactly at the
  tolerance or a persistently slower shadow pod of +3% does): actions per window and per day
  of ``--windows-per-day`` windows, with the count and a 95% upper bound, for the cumulative
  rule at ``--budget`` and at 1000 and 100 windows per false alarm (the budget is an upper
  bound on the rate at the tolerance: a small one shows it is not empty), and the most
  evidence it reached (against its threshold, ln(budget));
- ``+5%`` … ``+20%``: ``--runs`` runs from the loss's first window (the day's peak hour,
  ``--n`` pairs per window), windows until the action: median, 90th percentile, and the
  share acted on within 4, 10 and ``--max-windows`` windows.

Every part has its own random stream from --seed, so a row is reproduced alone.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from functools import partial
from itertools import islice
from typing import Protocol

import numpy as np

from specguard.judge import Evidence, PolicySettings, PolicyState, Sample, step
from specguard.judge._verdict import JudgeSettings, Verdict, judge
from specguard_testkit._traffic import Traffic, pod_factors, window

SHAPES: dict[str, Traffic] = {
    "sigma0.2": Traffic(sigma=0.2, pod_bias=0.0),
    "sigma0.35": Traffic(sigma=0.35, pod_bias=0.0),
    "sigma0.5": Traffic(sigma=0.5, pod_bias=0.0),
    "heavy": Traffic(sigma=0.35, heavy=True, pod_bias=0.0),
}
POD_BIAS = 0.05
EFFECTS = (1.05, 1.08, 1.10, 1.20)
SETTINGS = JudgeSettings()


@dataclass(frozen=True, slots=True)
class Day:
    """The day's shape: its traffic, mean pairs per window and pairing."""

    traffic: Traffic
    n: int
    paired: bool
    windows: int


def _level(i: int, windows: int) -> float:
    """Time of day of window i as the load level d: 0 at night, 1 at the peak."""
    return 0.5 - 0.5 * math.cos(2 * math.pi * i / windows)


def _slower(s: Sample, factor: float) -> Sample:
    return replace(
        s,
        tpot_s=None if s.tpot_s is None else s.tpot_s * factor,
        ttft_s=None if s.ttft_s is None else s.ttft_s * factor,
        e2e_s=s.e2e_s * factor,
    )


def day_verdicts(
    day: Day, effect: float, rng: np.random.Generator, *, start: int = 0, fixed_n: bool = False
) -> Iterator[Verdict]:
    """The day's windows, judged, from window ``start`` (endless: the day repeats)."""
    pods = {arm: pod_factors(Traffic(pods=day.traffic.pods, pod_bias=POD_BIAS), rng)
            for arm in ("speculative", "baseline")}  # fmt: skip
    i = start
    while True:
        d = _level(i % day.windows, day.windows)
        n = day.n if fixed_n else round(day.n * (0.6 + 0.8 * d) * math.exp(rng.normal(0, 0.1)))
        traffic = replace(day.traffic, load=(1, 8 + round(56 * d)))
        samples = window(rng, max(n, 2), traffic, effect=effect, paired=day.paired,
                         start=60.0 * i)  # fmt: skip
        # A slower pod is slower at everything: its TTFT, TPOT and e2e time scale together
        # (scaling TPOT alone made records whose TPOT × tokens exceeds their own e2e time,
        # which the judge leaves out as impossible).
        biased = [_slower(s, float(pods[s.arm][int(s.pod.rsplit("-", 1)[1])])) for s in samples]
        yield judge(biased, SETTINGS)
        i += 1


class Rule(Protocol):
    """A policy's rollback direction over successive windows: True when it acts."""

    def __call__(self, verdict: Verdict) -> bool: ...


class CumulativeRule:
    """The policy itself (``judge.step``) while the drafter serves: K regressed windows in a
    row, or the cumulative evidence (``judge._cumulative``). After an action it starts again
    from a fresh state, as after a rollback."""

    def __init__(self, k: int, budget: float) -> None:
        self.settings = PolicySettings(consecutive_windows=k, windows_per_false_alarm=budget)
        self.state = PolicyState()
        self.now = 0.0
        self.peak = 0.0  # the most evidence seen (before an action cleared it)

    def __call__(self, verdict: Verdict) -> bool:
        self.now += 60.0
        self.state, decision = step(self.state, self.settings, self.now, Evidence(verdict))
        self.peak = max(self.peak, self.state.cumulative.total)
        if decision.action == "rollback":
            self.state = PolicyState()
            return True
        return False


class StreakRule:
    """K regressed windows in a row alone (the policy before the cumulative rule)."""

    def __init__(self, k: int) -> None:
        self.k = k
        self.streak = 0

    def __call__(self, verdict: Verdict) -> bool:
        self.streak = self.streak + 1 if verdict.outcome == "regressed" else 0
        if self.streak >= self.k:
            self.streak = 0
            return True
        return False


def _rate(hits: int, total: int) -> str:
    if not total:
        return "-"
    p = hits / total
    upper = 3.0 / total if hits == 0 else p + 2 * math.sqrt(p * (1 - p) / total)
    return f"{p:.2e} ({hits}/{total}, ≤{upper:.1e})"


def judged_days(day: Day, effect: float, *, days: int, seed: Sequence[int]) -> list[list[Verdict]]:
    """``days`` days of judged windows (a fresh day each: its own pods)."""
    return [
        list(islice(day_verdicts(day, effect, np.random.default_rng([*seed, d])), day.windows))
        for d in range(days)
    ]


def replay(days: Sequence[Sequence[Verdict]], make: Callable[[], Rule]) -> tuple[int, float]:
    """A rule over each day from a fresh start: its actions, and (the cumulative rule) the
    most evidence it reached."""
    hits, peak = 0, 0.0
    for verdicts in days:
        rule = make()
        hits += sum(rule(v) for v in verdicts)
        peak = max(peak, getattr(rule, "peak", 0.0))
    return hits, peak


def to_action(
    day: Day,
    effect: float,
    *,
    runs: int,
    max_windows: int,
    rules: Sequence[Callable[[], Rule]],
    seed: Sequence[int],
) -> list[list[int | None]]:
    """Windows from the loss's start until each rule acts (None: not within max_windows)."""
    result: list[list[int | None]] = [[] for _ in rules]
    for r in range(runs):
        rng = np.random.default_rng([*seed, r])
        steps = [make() for make in rules]
        acted: list[int | None] = [None] * len(rules)
        verdicts = day_verdicts(day, effect, rng, start=day.windows // 2, fixed_n=True)
        for w, v in zip(range(1, max_windows + 1), verdicts, strict=False):
            for j, rule in enumerate(steps):
                if acted[j] is None and rule(v):
                    acted[j] = w
            if all(a is not None for a in acted):
                break
        for j, a in enumerate(acted):
            result[j].append(a)
    return result


def _windows_summary(values: list[int | None], max_windows: int) -> str:
    done = sorted(v for v in values if v is not None)
    n = len(values)

    def within(w: int) -> str:
        return f"{sum(v <= w for v in done) / n:.0%}"

    def quantile(q: float) -> str:
        k = math.ceil(q * n) - 1
        return str(done[k]) if k < len(done) else f">{max_windows}"

    return (f"median {quantile(0.5):>4}, p90 {quantile(0.9):>4}; by 4: {within(4):>4}, "
            f"by 10: {within(10):>4}, by {max_windows}: {within(max_windows):>4}")  # fmt: skip


def calibration(verdicts: Sequence[Verdict], effect: float) -> str:
    xs, ss = [], []
    for v in verdicts:
        if v.outcome == "inconclusive" or v.ratio is None or v.ci_low is None or v.ci_high is None:
            continue
        z = 2.5758293035489004  # 99%
        xs.append(math.log(v.ratio))
        ss.append((math.log(v.ci_high) - math.log(v.ci_low)) / (2 * z))
    if len(xs) < 10:
        return "too few windows with an interval"
    x, s = np.asarray(xs), np.asarray(ss)
    zs = (x - math.log(effect)) / s
    extra = max(0.0, float(np.var(x - math.log(effect)) - np.mean(s**2)))
    outside = float(np.mean(np.abs(zs) > 2.5758))
    return (
        f"{len(xs)} windows: sd(z) {np.std(zs):.3f}, |z|>2.576 {outside:.2%}, "
        f"s {np.median(s):.4f} (median), spread beyond s {math.sqrt(extra):.4f}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--days", type=int, default=1, help="A/A and at-tolerance days")
    parser.add_argument("--windows-per-day", type=int, default=1440)
    parser.add_argument("--runs", type=int, default=40, help="runs per effect")
    parser.add_argument("--max-windows", type=int, default=40)
    parser.add_argument("--n", type=int, default=200, help="mean mirrored pairs per window")
    parser.add_argument("--shape", default="sigma0.35", choices=list(SHAPES))
    parser.add_argument("--pairing", default="paired", choices=("paired", "unpaired"))
    parser.add_argument(
        "--pair-noise",
        type=float,
        default=None,
        help="per-request noise (log σ; the shape's 0.08 by default): 0.2 makes windows as "
        "wide as a real CPU-vLLM run's (±6%% at 200 pairs)",
    )
    parser.add_argument("--consecutive", type=int, default=3, help="consecutiveWindows K")
    parser.add_argument("--budget", type=float, default=10_000.0, help="windowsPerFalseAlarm")
    parser.add_argument("--effects", default=",".join(f"{e:g}" for e in EFFECTS))
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    try:
        effects = [float(e) for e in args.effects.split(",") if e]
        if min(args.days, args.runs, args.max_windows, args.windows_per_day, args.n) < 0:
            raise ValueError("counts must be >= 0")
        PolicySettings(windows_per_false_alarm=args.budget, consecutive_windows=args.consecutive)
    except ValueError as exc:
        print(f"decision_calibration: {exc}", file=sys.stderr)
        return 2
    traffic = SHAPES[args.shape]
    if args.pair_noise is not None:
        traffic = replace(traffic, pair_noise=args.pair_noise)
    day = Day(traffic, args.n, args.pairing == "paired", args.windows_per_day)
    k, budget = args.consecutive, args.budget
    rules: list[Callable[[], Rule]] = [partial(CumulativeRule, k, budget), partial(StreakRule, k)]
    names = (f"cumulative (budget {args.budget:g}, K {args.consecutive})",
             f"{args.consecutive} in a row")  # fmt: skip
    print(
        f"{args.shape}, {args.pairing}, per-request noise {traffic.pair_noise:g}, mean {args.n} "
        f"pairs per window, {args.windows_per_day} windows per day, seed {args.seed}"
    )
    started = time.perf_counter()
    shape_id = list(SHAPES).index(args.shape)
    budgets = sorted({budget, 1000.0, 100.0}, reverse=True)
    for label, effect, part in (("A/A", 1.0, 0), ("at tolerance (+3%)", 1.03, 1)):
        if not args.days:
            continue
        seed = (args.seed, part, shape_id, int(day.paired), args.n)
        days = judged_days(day, effect, days=args.days, seed=seed)
        total = sum(len(d) for d in days)
        every = [v for d in days for v in d]
        print(f"{label}: {args.days} day(s), {total} windows; calibration: "
              f"{calibration(every, effect)}")  # fmt: skip
        replays: list[tuple[str, Callable[[], Rule]]] = [
            (f"cumulative (budget {b:g}, K {k})", partial(CumulativeRule, k, b)) for b in budgets
        ]
        replays.append((f"{k} in a row", partial(StreakRule, k)))
        for name, make in replays:
            hits, peak = replay(days, make)
            most = f", most evidence {peak:.1f}" if name.startswith("cumulative") else ""
            print(f"  {name:<34} per window {_rate(hits, total):<32} per day "
                  f"{hits / args.days:.3g}{most}")  # fmt: skip
    for e, effect in enumerate(effects):
        if not args.runs:
            continue
        seed = (args.seed, 2 + e, shape_id, int(day.paired), args.n)
        found = to_action(
            day, effect, runs=args.runs, max_windows=args.max_windows, rules=rules, seed=seed
        )
        print(f"+{(effect - 1) * 100:.0f}%, {args.runs} runs at {args.n} pairs per window:")
        for name, values in zip(names, found, strict=True):
            print(f"  {name:<32} windows to act: {_windows_summary(values, args.max_windows)}")
    print(f"({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
