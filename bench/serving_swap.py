"""Does the verdict depend on which arm serves? The same clients with the drafter serving and
with the baseline serving, under each kind of client and load, window by window, the
operator's rules before and after this wave side by side.

    .venv/bin/python bench/serving_swap.py [--seconds 300] [--window 10] [--seeds 1]
                                           [--only NAME,...]

The plant (tests/router/plant.py: clients, routers with the real ``router.Topology``, pods
with a throughput peak for the drafter) runs each scenario twice: the drafter serving and
the baseline shadow, then the other way round. Every ``--window`` seconds the routers' rule
is moved as the operator moves it (``rule="auto"``), and each window's samples — the
requests that ended in it, a mirrored pair in the window its later half ended in — are
judged by the real judge with the load check of the rule in force. Then the window's
*counted direction*: which arm it says is faster, where its verdict counts toward (or
against) a change.

- **before**: the clients classified over the last two windows with an open reading at a
  50 ms lag, a rule kept however long the clients tell neither way, every verdict counted;
- **after**: the clients classified over two windows, or two minutes when those cannot
  tell, an open reading only at 0.5 s (``judge.client_loop_over``); a rule kept through
  three windows that tell neither way is stale and arrivals falls back to in_flight
  (``judge.next_load_match``); a verdict toward a change counts only where it holds for the
  clients as told (``judge._matching.uncounted``).

Printed per scenario and rule set: each serving arm's counted directions ("D" the drafter
faster, "B" the baseline faster, "." neither: neutral, inconclusive or not counted), and
over the windows where either arm's verdict points somewhere: the share where the two point
the same way or one of them nowhere ("agree"), and where they point opposite ways ("flip").
The goal: agree in at least 95% of judged windows in every scenario. ``truth`` is which arm
these clients are better off with (closed: at the serving in-flight; open: at these
arrivals, where a drafter past its peak falls behind).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "router"))

from plant import BASELINE, DRAFTER, TOOL_DRAFTER, Engine, Plant, Run, run

from specguard.judge import (
    JudgeSettings,
    LoadMatch,
    LoopSettings,
    Sample,
    judge,
    paired_e2e_ratio,
    shadow_in_flight,
)
from specguard.judge._matching import Matching, uncounted

Direction = Literal["D", "B", "."]
WARMUP_S = 30.0
GOAL = 0.95

# Before this wave: open at a 50 ms lag, the last two windows only, never stale.
BEFORE = LoopSettings(min_open_lag_s=0.05, history_s=20.0, stale_windows=10**9)
AFTER = LoopSettings()


@dataclass(frozen=True)
class Scenario:
    name: str
    plant: Plant
    truth: Direction
    drafter: Engine = DRAFTER
    window_s: float | None = None  # light loads: longer windows, to hold enough pairs


SCENARIOS = (
    Scenario(
        "closed, 4 per pod (below the crossover)",
        Plant(clients="closed", streams=8),
        "D",
        window_s=30.0,
    ),
    Scenario(
        "closed, 140 per pod (past the crossover)",
        Plant(clients="closed", streams=280, ramp_s=20.0),
        "B",
    ),
    Scenario(
        "open, 16/s per pod (the drafter wins at these arrivals)",
        Plant(clients="open", rate=16.0),
        "D",
    ),
    Scenario(
        "open, 10/s per pod (past the tool drafter's peak)",
        Plant(clients="open", rate=10.0),
        "B",
        TOOL_DRAFTER,
    ),
    Scenario(
        "guidellm-like dispatch 0.42 s, 140 per pod",
        Plant(clients="closed", streams=280, ramp_s=20.0, think_s=0.42, think_sigma=0.8),
        "B",
    ),
    Scenario(
        "guidellm-like dispatch 0.42 s, 4 per pod",
        Plant(clients="closed", streams=8, think_s=0.42, think_sigma=0.8),
        "D",
        window_s=30.0,
    ),
    Scenario(
        "guidellm-like, 140 per pod, rule left on arrivals",
        Plant(clients="closed", streams=280, ramp_s=20.0, think_s=0.42, think_sigma=0.8,
              start_rule="arrivals"),
        "B",
    ),
    Scenario(
        "rate-capped: 16/s per pod, at most 150 in flight per pod",
        Plant(clients="open", rate=16.0, cap=300),
        "D",
    ),
)


def windows_of(result: Run, window_s: float, seconds: float) -> list[tuple[float, list[Sample]]]:
    """(start, samples) per window after the warm-up: a request in the window it ended in, a
    mirrored pair in the window its later half ended in."""
    later: dict[str, float] = {}
    for s in result.samples:
        if s.pair_id is not None:
            later[s.pair_id] = max(later.get(s.pair_id, 0.0), s.started_at + s.e2e_s)
    out: list[tuple[float, list[Sample]]] = []
    start = WARMUP_S
    while start + window_s <= seconds:
        end = start + window_s
        chosen = [s for s in result.samples
                  if start <= (later[s.pair_id] if s.pair_id in later else
                               s.started_at + s.e2e_s) < end]  # fmt: skip
        out.append((start, chosen))
        start = end
    return out


def rule_at(result: Run, t: float) -> LoadMatch:
    return next(r for at, r in reversed(result.rules) if at <= t)


def direction(result: Run, index: int, start: float, samples: list[Sample], *,
              counting: bool, window_s: float) -> Direction:  # fmt: skip
    """Which arm the window says is faster, where its verdict counts."""
    rule = rule_at(result, start)
    settle = next((at for at, _ in reversed(result.rules) if at <= start + window_s), 0.0)
    kept = [s for s in samples if s.started_at >= settle + 3.0] if settle > 0 else samples
    settings = JudgeSettings(min_requests_per_arm=30, resamples=500, concurrency_match=rule)
    verdict = judge(kept, settings)
    if verdict.outcome not in ("regressed", "improved"):
        return "."
    serving = "speculative" if any(
        s.role == "serving" and s.arm == "speculative" for s in kept
    ) else "baseline"  # fmt: skip
    if counting:
        # The window's clients as the operator told them at its end (the plant's reading).
        evidence = result.evidence[index] if index < len(result.evidence) else None
        told = evidence.kind if evidence is not None else "unknown"
        ratio, pairs = paired_e2e_ratio(kept)
        halves = shadow_in_flight(kept, start, start + window_s)
        if uncounted(Matching(rule, told, ratio, pairs, halves), verdict, serving) is not None:
            return "."
    return "B" if verdict.outcome == "regressed" else "D"


def directions(scenario: Scenario, drafter_serves: bool, loop: LoopSettings, *, counting: bool,
               seconds: float, window_s: float, seed: int) -> list[Direction]:  # fmt: skip
    drafter = scenario.drafter
    plant = replace(
        scenario.plant,
        serving=drafter if drafter_serves else BASELINE,
        shadow=BASELINE if drafter_serves else drafter,
        rule="auto",
        window_s=window_s,
        loop=loop,
    )
    result = run(plant, seconds=seconds, warmup=0.0, seed=seed)
    # The plant's evidence[k] is its reading at the end of the window ending at (k + 1)·w.
    return [
        direction(result, round((start + window_s) / window_s) - 1, start, samples,
                  counting=counting, window_s=window_s)
        for start, samples in windows_of(result, window_s, seconds)
    ]  # fmt: skip


def agreement(a: Sequence[Direction], b: Sequence[Direction]) -> tuple[int, int]:
    """(windows where either points somewhere, of which they point opposite ways)."""
    judged = flips = 0
    for x, y in zip(a, b, strict=False):
        if x != "." or y != ".":
            judged += 1
            flips += "." not in (x, y) and x != y
    return judged, flips


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=300.0)
    p.add_argument("--window", type=float, default=10.0)
    p.add_argument("--seeds", type=int, default=1)
    p.add_argument("--only", default="", help="comma-separated scenario numbers (1-based)")
    args = p.parse_args(argv)
    chosen = [int(x) for x in args.only.split(",") if x.strip()] or range(1, len(SCENARIOS) + 1)
    began = time.monotonic()
    worst = {"before": 1.0, "after": 1.0}
    for number in chosen:
        scenario = SCENARIOS[number - 1]
        print(f"\n{number}. {scenario.name} (truth: {scenario.truth} faster)")
        for label, loop, counting in (("before", BEFORE, False), ("after", AFTER, True)):
            judged = flips = 0
            lines = []
            for seed in range(args.seeds):
                window_s = scenario.window_s or args.window
                rows = {
                    serves: directions(scenario, serves == "drafter", loop, counting=counting,
                                       seconds=args.seconds, window_s=window_s, seed=seed)
                    for serves in ("drafter", "baseline")
                }  # fmt: skip
                j, f = agreement(rows["drafter"], rows["baseline"])
                judged, flips = judged + j, flips + f
                lines += [f"     {serves:>8} serving: {''.join(d)}" for serves, d in rows.items()]
            share = 1.0 - flips / judged if judged else 1.0
            worst[label] = min(worst[label], share)
            print(f"  {label:>6}: agree {share:6.1%} of {judged} judged windows, {flips} flips")
            print("\n".join(lines))
    print(f"\nworst agreement: before {worst['before']:.1%}, after {worst['after']:.1%} "
          f"(goal ≥ {GOAL:.0%}); {time.monotonic() - began:.0f} s")  # fmt: skip
    return 0 if worst["after"] >= GOAL else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
