"""Evidence across windows with pods whose speed is fixed for a run, and paired windows whose
arms are loaded apart (issue 34 item 3).

    .venv/bin/python bench/pod_offset.py [--runs 100] [--windows 60] [--power-runs 40]
        [--apart-windows 400] [--pod-bias 0.05] [--effects 1.1,1.2] [--seed 1]

Windows come from specguard_testkit._traffic (written apart from the judge): mirrored pairs,
heavy-tailed per-request latency (Student-t(3) prompts in log space, 3% stragglers 2–10×
slower), per-token latency that grows with the in-flight count, each request's output length
the same on both arms (``pair_tokens``). Each window holds 160–240 pairs at an in-flight
range of 1..(8–64) drawn per window. Three pods per arm with a speed factor exp(N(0, 0.05))
each, drawn once per run and kept for all its windows, **not** balanced between the arms
(``run_pods``): one arm's pods may be a few percent slower than the other's for reasons that
have nothing to do with the drafter. Every window is judged by the real judge at the
resource's defaults, and the policy (``judge.step``, the drafter serving, K 3, the
cumulative rule at 10 000 windows per false alarm) runs over each run's windows.

Rows:

- ``A/A``: runs (of ``--windows`` windows, an unchanged drafter) in which a rule rolled back
  at least once: *after* — the policy as it is (the pods' offset carried once in the
  evidence across windows, ``judge._cumulative.pods_clear``); *before* — the same windows'
  evidence with the pods' offset left out (the rule before: each window's sampling error
  alone, summed as if the windows were independent); *3 in a row* — K regressed windows in
  a row alone. With the offset each run's arms differ by, and what the evidence showed.
- ``+10%``, ``+20%`` (``--effects``): runs from the loss's first window, windows until each
  rule acts (median, p90, share within 10 and within ``--windows``).
- ``loaded apart``: paired windows in which one arm's pods are loaded apart from the other's
  (in-flight ranges that differ per arm at the same arrivals per pod; a drafter on one pod
  beside three baseline pods, a third of the requests copied): the share judged the wrong
  way (an unchanged drafter called regressed or improved). Run this file against an older
  checkout (``PYTHONPATH=<it>/operator``) for the judge before; the evidence rows print
  both from one run.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

import numpy as np

from specguard.judge import Evidence, PolicySettings, PolicyState, Sample, Verdict, step
from specguard.judge._cumulative import Cumulative, add, reached, weigh
from specguard.judge._verdict import JudgeSettings, judge
from specguard_testkit._traffic import Load, Traffic, run_pods, window

TRAFFIC = Traffic(sigma=0.35, heavy=True, pods=3, pod_bias=0.05, pair_tokens=True)
SETTINGS = JudgeSettings()
K = 3


def run_verdicts(
    rng: np.random.Generator, effect: float, windows: int, traffic: Traffic | None = None
) -> tuple[float, Iterator[Verdict]]:
    """(the run's pod offset, log ratio of the arms' mean pod factors; its judged windows)."""
    traffic = traffic or TRAFFIC
    pods = run_pods(traffic, rng)
    offset = float(np.mean(np.log(pods["speculative"])) - np.mean(np.log(pods["baseline"])))

    def verdicts() -> Iterator[Verdict]:
        for i in range(windows):
            d = float(rng.uniform())
            n = int(rng.integers(160, 241))
            shaped = replace(traffic, load=(1, 8 + round(56 * d)))
            samples = window(rng, n, shaped, effect=effect, paired=True, start=60.0 * i, pods=pods)
            yield judge(samples, SETTINGS)

    return offset, verdicts()


class After:
    """The policy itself (``judge.step``) while the drafter serves; after a rollback it starts
    again from a fresh state."""

    def __init__(self) -> None:
        self.settings = PolicySettings(consecutive_windows=K)
        self.state = PolicyState()
        self.now = 0.0

    def __call__(self, verdict: Verdict) -> bool:
        self.now += 60.0
        self.state, decision = step(self.state, self.settings, self.now, Evidence(verdict))
        if decision.action == "rollback":
            self.state = PolicyState()
            return True
        return False


class Before:
    """K regressed in a row, or the cumulative evidence with the pods' offset left out (the
    rule before this change)."""

    def __init__(self) -> None:
        self.settings = PolicySettings(consecutive_windows=K).cumulative
        self.evidence = Cumulative()
        self.streak = 0

    def __call__(self, verdict: Verdict) -> bool:
        self.streak = self.streak + 1 if verdict.outcome == "regressed" else 0
        weight = weigh(verdict, "loss", self.settings)
        self.evidence = add(self.evidence, weight, "loss", self.settings)
        if self.streak >= K or reached(replace(self.evidence, pods=0.0), "loss", self.settings):
            self.evidence, self.streak = Cumulative(), 0
            return True
        return False


class Streak:
    def __init__(self) -> None:
        self.streak = 0

    def __call__(self, verdict: Verdict) -> bool:
        self.streak = self.streak + 1 if verdict.outcome == "regressed" else 0
        if self.streak >= K:
            self.streak = 0
            return True
        return False


RULES = (("after", After), ("before", Before), (f"{K} in a row", Streak))


def aa(runs: int, windows: int, seed: int, traffic: Traffic) -> None:
    acted = {name: 0 for name, _ in RULES}
    offsets: dict[str, list[float]] = {name: [] for name, _ in RULES}
    started = time.perf_counter()
    for r in range(runs):
        offset, verdicts = run_verdicts(np.random.default_rng([seed, 0, r]), 1.0, windows, traffic)
        rules = [make() for _, make in RULES]
        hit = [False] * len(rules)
        for v in verdicts:
            for j, rule in enumerate(rules):
                hit[j] = rule(v) or hit[j]
        for j, (name, _) in enumerate(RULES):
            if hit[j]:
                acted[name] += 1
                offsets[name].append(offset)
    print(f"A/A, {runs} runs of {windows} windows, pods fixed per run (log-σ "
          f"{traffic.pod_bias:g}, 3 + 3, not balanced): runs with a rollback "
          f"({time.perf_counter() - started:.0f} s)")  # fmt: skip
    for name, _ in RULES:
        seen = ", ".join(f"{math.expm1(o) * 100:+.1f}%" for o in sorted(offsets[name])[-6:])
        upper = _upper(acted[name], runs)
        print(f"  {name:<12} {acted[name]:>3} of {runs} (≤{upper:.1%}, 95%)"
              + (f"; pod offsets of those runs: {seen}" if seen else ""))  # fmt: skip


def _upper(hits: int, total: int) -> float:
    """A 95% upper bound on a rate (3/N when none; else the normal approximation)."""
    if total == 0:
        return 1.0
    p = hits / total
    return 3.0 / total if hits == 0 else min(1.0, p + 1.96 * math.sqrt(p * (1 - p) / total))


def power(effect: float, runs: int, windows: int, seed: int, traffic: Traffic) -> None:
    found: dict[str, list[int | None]] = {name: [] for name, _ in RULES}
    for r in range(runs):
        _, verdicts = run_verdicts(np.random.default_rng([seed, 1, round(effect * 1000), r]),
                                   effect, windows, traffic)  # fmt: skip
        rules = [make() for _, make in RULES]
        when: list[int | None] = [None] * len(rules)
        for w, v in enumerate(verdicts, start=1):
            for j, rule in enumerate(rules):
                if when[j] is None and rule(v):
                    when[j] = w
            if all(x is not None for x in when):
                break
        for j, (name, _) in enumerate(RULES):
            found[name].append(when[j])
    print(f"{(effect - 1) * 100:+.0f}%, {runs} runs, pods fixed per run (log-σ "
          f"{traffic.pod_bias:g}): windows to act")  # fmt: skip
    for name, _ in RULES:
        print(f"  {name:<12} {_summary(found[name], windows)}")


def _summary(values: Sequence[int | None], windows: int) -> str:
    done = sorted(v for v in values if v is not None)
    n = len(values)

    def quantile(q: float) -> str:
        k = math.ceil(q * n) - 1
        return str(done[k]) if k < len(done) else f">{windows}"

    within = sum(v <= 10 for v in done) / n
    return (f"median {quantile(0.5):>4}, p90 {quantile(0.9):>4}; by 10: {within:.0%}, "
            f"by {windows}: {len(done) / n:.0%}")  # fmt: skip


@dataclass(frozen=True)
class Apart:
    """One kind of loaded-apart paired window."""

    name: str
    traffic: Traffic
    spec_load: Load
    base_load: Load
    unmirrored: int = 0


ONE_DRAFTER_POD = replace(TRAFFIC, serving="baseline", shadow_pods=1)
APART: tuple[Apart, ...] = (
    Apart("drafter arm heavier, 3 + 3 pods", TRAFFIC, (10, 20), (6, 12)),
    Apart("baseline arm heavier, 3 + 3 pods", TRAFFIC, (6, 12), (10, 20)),
    Apart("drafter arm heavier by a third, 3 + 3 pods", TRAFFIC, (8, 16), (6, 12)),
    Apart("one drafter pod (shadow) vs 3 baseline pods, a third copied", ONE_DRAFTER_POD,
          (12, 24), (6, 14), unmirrored=400),
    Apart("one drafter pod (shadow) vs 3 baseline pods, drafter lighter", ONE_DRAFTER_POD,
          (4, 10), (10, 20), unmirrored=400),
)  # fmt: skip


def apart_window(case: Apart, rng: np.random.Generator, n: int = 200) -> list[Sample]:
    return window(rng, n, case.traffic, paired=True, spec_load=case.spec_load,
                  base_load=case.base_load, unmirrored=case.unmirrored)  # fmt: skip


def loaded_apart(windows: int, seed: int) -> None:
    print(f"loaded apart, paired A/A windows (200 pairs), {windows} per case: judged the wrong "
          "way (regressed or improved), inconclusive, neutral")  # fmt: skip
    for c, case in enumerate(APART):
        outcomes = [
            judge(apart_window(case, np.random.default_rng([seed, 2, c, w])), SETTINGS).outcome
            for w in range(windows)
        ]
        wrong = sum(o in ("regressed", "improved") for o in outcomes)
        print(f"  {case.name:<62} wrong {wrong / windows:6.1%} ({wrong}/{windows}, "
              f"≤{_upper(wrong, windows):.1%}), inconclusive "
              f"{outcomes.count('inconclusive') / windows:.0%}, neutral "
              f"{outcomes.count('neutral') / windows:.0%}")  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=100, help="A/A runs")
    parser.add_argument("--windows", type=int, default=60, help="windows per run")
    parser.add_argument("--power-runs", type=int, default=40, help="runs per effect")
    parser.add_argument("--effects", default="1.1,1.2")
    parser.add_argument("--apart-windows", type=int, default=400, help="windows per case")
    parser.add_argument(
        "--pod-bias",
        type=float,
        default=0.05,
        help="log-σ of each pod's speed, fixed per run (0: pods alike)",
    )
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    traffic = replace(TRAFFIC, pod_bias=args.pod_bias)
    if min(args.runs, args.windows, args.power_runs, args.apart_windows) < 0:
        print("pod_offset: counts must be >= 0", file=sys.stderr)
        return 2
    started = time.perf_counter()
    if args.apart_windows:
        loaded_apart(args.apart_windows, args.seed)
    if args.runs:
        aa(args.runs, args.windows, args.seed, traffic)
    for effect in (float(e) for e in args.effects.split(",") if e):
        if args.power_runs:
            power(effect, args.power_runs, args.windows, args.seed, traffic)
    print(f"({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
