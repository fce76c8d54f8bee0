"""Does the verdict depend on which arm serves, with a real client and real parts? NVIDIA's
aiperf drives the real router (its own process) in front of two real simulators, once with
the drafter serving and the baseline as the shadow, once the other way round; the router's
samples are cut into windows and each window is judged by the real judge.

    nice -n 5 .venv/bin/python bench/serving_swap_aiperf.py [--seconds 33] [--window 10]
                                                          [--only 1,3] [--rules in_flight]

bench/serving_swap.py asks the same question of the plant (modelled clients, routers and
pods, the operator's automatic rule); this one has no model of the client: aiperf's own
closed loop (``--concurrency``) and open loop (``--request-rate``, Poisson), through
``specguard router`` (static mode, ``--mirror-share 1``, ``--serving-arm``) to two
``specguard sim`` processes (kimi-k3, DSpark k = 8 on one, no drafter on the other; every
request a tool call by ``X-Specguard-Domain``, where the drafter accepts 3.33 tokens per
step and its crossover is near 96 running sequences; 16 prompt words, 32 output tokens).

The static router keeps the load-match rule it is started with (the operator's ``auto``
needs Kubernetes mode), so every scenario runs under both rules, ``in_flight`` (the rule
for closed-loop clients) and ``arrivals`` (open-loop clients), and prints both: four runs
per scenario. aiperf runs ``--seconds`` of load each time (``--benchmark-duration``); the
windows are ``--window`` wall seconds from the first request, after ``WARMUP_S``, the last
one ending by the load's end. A request is in the window it ended in, a mirrored pair in
the window its later half ended in (as bench/serving_swap.py). Each window: the real
``judge.judge`` at its default settings (200 requests per arm, tolerance 3%, 99%) with the
run's rule as its load check. The simulators are time-scaled per scenario so that a window
holds enough pairs while the two cores keep up (the time scale changes no ratio).

Printed per scenario and rule: each serving arm's windows as letters ("D" improved: the
drafter faster, "B" regressed: the baseline faster, "n" neutral, "?" inconclusive or too
few requests), their counts, and over the windows where either arm's verdict points
somewhere: the share where the two do not point opposite ways ("agree") and the windows
where they do ("flips"); then per run the requests served, copies judged as pairs, median
in flight per arm, each window's ratio (speculative ÷ baseline, as the judge gives it), and
for each window that points nowhere why: a neutral one's interval, else the judge's first
reason. ``truth``: which arm these clients
are better off with (closed: at their in-flight; open: at these arrivals, where a drafter
past its throughput peak falls behind).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from serving_swap import Direction, agreement
from specguard.judge import JudgeSettings, LoadMatch, Sample, judge
from specguard.sim._filler import WORDS
from specguard.sim._launch import start_sim
from specguard.sources import parse_samples
from specguard.sources._router_feed import RouterFeed
from specguard_testkit._aiperf import aiperf_version, find_aiperf, make_tokenizer
from specguard_testkit._routerproc import router_process

MODEL = "m"
DRAFTER = {"method": "dspark", "model": "org/kimi-k3-dspark", "num_speculative_tokens": 8}
DOMAIN = "tool_call"
ISL, OSL = 16, 32
WARMUP_S = 3.0
RULES: tuple[LoadMatch, ...] = ("in_flight", "arrivals")
Letter = Literal["D", "B", "n", "?"]


@dataclass(frozen=True)
class Scenario:
    name: str
    kind: Literal["closed", "open"]
    load: float  # closed: aiperf --concurrency; open: --request-rate (per wall second)
    scale: float  # the simulators' --time-scale
    truth: Direction


# kimi-k3 on tool calls, one pod per arm (model time; the scale divides every rate):
# per token, baseline 9.7 ms and drafter 5.4 ms at 8 running, 26.3 and 41.3 ms at 192; the
# drafter's throughput peaks near 5,500 tokens/s (~96 running), the baseline's passes 6,800.
SCENARIOS = (
    Scenario("closed, --concurrency 8 (below the crossover)", "closed", 8, 0.75, "D"),
    Scenario("closed, --concurrency 192 (past the crossover)", "closed", 192, 4.0, "B"),
    # 48/s at scale 2: 96 requests/s, ~3,100 tokens/s of model time (drafter ~24 running).
    Scenario("open, --request-rate 48 (the drafter serves it well)", "open", 48, 2.0, "D"),
    # 50/s at scale 4: 200 requests/s, ~6,400 tokens/s: 16% past the drafter's peak, the
    # baseline at ~137 running.
    Scenario("open, --request-rate 50 (past the drafter's peak)", "open", 50, 4.0, "B"),
)


@dataclass
class Run:
    letters: list[Letter]
    ratios: list[float | None]
    served: int
    pairs: int
    in_flight: dict[str, float]
    errors: int
    notes: list[str]  # why a window points nowhere: the judge's first reason
    copies: str = ""  # the router's copy counters at the run's end


def sim_args(scale: float, drafter: bool) -> list[str]:
    args = [MODEL, "--profile", "kimi-k3", "--time-scale", f"{scale:g}", "--seed", "5"]
    return [*args, "--speculative-config", json.dumps(DRAFTER)] if drafter else args


def aiperf_argv(aiperf: str, url: str, scenario: Scenario, *, seconds: float, tokenizer: Path,
                artifacts: Path) -> list[str]:  # fmt: skip
    load = (["--concurrency", f"{scenario.load:g}"] if scenario.kind == "closed" else
            ["--request-rate", f"{scenario.load:g}", "--request-rate-mode", "poisson"])  # fmt: skip
    return [
        aiperf, "profile", "--model", MODEL, "--url", url, "--endpoint-type", "chat",
        "--streaming", "--tokenizer", str(tokenizer), "--isl", str(ISL), "--osl", str(OSL),
        "--header", f"X-Specguard-Domain:{DOMAIN}", "--benchmark-duration", f"{seconds:g}",
        "--benchmark-grace-period", "0", "--random-seed", "1", "--ui-type", "none",
        "--artifact-dir", str(artifacts), *load,
    ]  # fmt: skip


async def read_samples(url: str) -> list[Sample]:
    async with RouterFeed([url]) as feed:
        read = await feed.poll()
    if not read.complete or read.missed:
        raise RuntimeError(f"the router's samples were not read whole: {read.failed} "
                           f"{read.unfinished}, {read.missed} evicted")  # fmt: skip
    return read.samples


def windows_of(samples: list[Sample], window_s: float, seconds: float) -> list[list[Sample]]:
    """The samples per window from the first request's start plus ``WARMUP_S``: a request in
    the window it ended in, a mirrored pair in the window its later half ended in."""
    t0 = min(s.started_at for s in samples if s.role == "serving")
    later: dict[str, float] = {}
    for s in samples:
        if s.pair_id is not None:
            later[s.pair_id] = max(later.get(s.pair_id, 0.0), s.started_at + s.e2e_s)
    ends = [later[s.pair_id] if s.pair_id in later else s.started_at + s.e2e_s for s in samples]
    out = []
    start = WARMUP_S
    while start + window_s <= seconds + 1e-9:
        lo, hi = t0 + start, t0 + start + window_s
        out.append([s for s, end in zip(samples, ends, strict=True) if lo <= end < hi])
        start += window_s
    return out


def letter(outcome: str) -> Letter:
    return "D" if outcome == "improved" else "B" if outcome == "regressed" else (
        "n" if outcome == "neutral" else "?")  # fmt: skip


def one_run(aiperf: str, tokenizer: Path, scenario: Scenario, rule: LoadMatch, *,
            drafter_serves: bool, seconds: float, window_s: float) -> Run:  # fmt: skip
    with (
        tempfile.TemporaryDirectory(prefix="serving-swap-aiperf-") as tmp,
        start_sim(sim_args(scenario.scale, drafter=True)) as spec,
        start_sim(sim_args(scenario.scale, drafter=False)) as base,
    ):
        serving, shadow = (spec, base) if drafter_serves else (base, spec)
        arm = "speculative" if drafter_serves else "baseline"
        flags = ("--serving-arm", arm, "--load-match", rule, "--mirror-share", "1.0",
                 "--shadow-max-in-flight", "2048")  # fmt: skip
        with router_process([serving.url], [shadow.url], *flags) as url:
            argv = aiperf_argv(aiperf, url, scenario, seconds=seconds, tokenizer=tokenizer,
                               artifacts=Path(tmp) / "out")  # fmt: skip
            done = subprocess.run(argv, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise RuntimeError(f"aiperf exited {done.returncode}: {done.stdout[-3000:]}")
            samples = asyncio.run(read_samples(url))
            copies = copy_counters(url)
        export = json.loads((Path(tmp) / "out" / "profile_export_aiperf.json").read_text())
    errors = sum(int(e.get("count", 0)) for e in export.get("error_summary") or [])
    settings = JudgeSettings(concurrency_match=rule)
    letters: list[Letter] = []
    ratios: list[float | None] = []
    notes: list[str] = []
    for number, window in enumerate(windows_of(samples, window_s, seconds), 1):
        verdict = judge(window, settings)
        letters.append(letter(verdict.outcome))
        ratios.append(verdict.ratio)
        if letters[-1] == "n" and verdict.ci_low is not None and verdict.ci_high is not None:
            low, high = verdict.ci_low, verdict.ci_high
            notes.append(f"window {number} neutral: {low:.3f}..{high:.3f} at "
                         f"{verdict.confidence:.0%} does not clear "
                         f"±{verdict.tolerance:.0%}")  # fmt: skip
        elif letters[-1] in ("n", "?"):
            why = verdict.reasons[0] if verdict.reasons else verdict.basis
            notes.append(f"window {number} {verdict.outcome}: {why}")
    in_flight = {
        a: statistics.median([s.concurrency for s in samples if s.arm == a] or [0])
        for a in ("speculative", "baseline")
    }
    halves = Counter(s.pair_id for s in samples if s.pair_id is not None)
    return Run(letters, ratios, sum(s.role == "serving" for s in samples),
               sum(n == 2 for n in halves.values()), in_flight, errors, notes,
               copies)  # fmt: skip


def copy_counters(url: str) -> str:
    """The router's copy counters (``specguard_router_mirror*``): copies delivered, turns
    deferred (the in-flight rule's target already waiting), ballast, dropped by reason."""
    found = parse_samples(httpx.get(url + "/metrics", timeout=10).text)
    total: Counter[str] = Counter()
    for (name, labels), value in found.items():
        if not name.startswith("specguard_router_mirror") or not name.endswith("_total"):
            continue
        key = name.removeprefix("specguard_router_").removesuffix("_total")
        reason = dict(labels).get("reason")
        total[f"{key}[{reason}]" if reason else key] += int(value)
    return ", ".join(f"{k} {v}" for k, v in sorted(total.items()) if v)


def directions(letters: list[Letter]) -> list[Direction]:
    return ["D" if x == "D" else "B" if x == "B" else "." for x in letters]


def counts(letters: list[Letter]) -> str:
    c = Counter(letters)
    return f"{c['D']} improved, {c['B']} regressed, {c['n']} neutral, {c['?']} not judged"


def ratio_text(ratios: list[float | None]) -> str:
    return " ".join("-" if r is None else f"{r:.2f}" for r in ratios)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=33.0, help="aiperf load per run (wall s)")
    p.add_argument("--window", type=float, default=10.0, help="window length (wall s)")
    p.add_argument("--only", default="", help="comma-separated scenario numbers (1-based)")
    p.add_argument("--rules", default=",".join(RULES), help="load-match rules to run")
    args = p.parse_args(argv)
    aiperf = find_aiperf()
    if aiperf is None:
        print("aiperf not installed: run scripts/setup.sh --cluster", file=sys.stderr)
        return 2
    chosen = [int(x) for x in args.only.split(",") if x.strip()] or range(1, len(SCENARIOS) + 1)
    rules = [r for r in RULES if r in args.rules.split(",")]
    began = time.monotonic()
    print(f"aiperf {aiperf_version(aiperf)}; kimi-k3 simulators, {DOMAIN}, isl {ISL} "
          f"osl {OSL}; {args.seconds:g} s per run, {args.window:g} s windows after "
          f"{WARMUP_S:g} s")  # fmt: skip
    total_judged = total_flips = 0
    with tempfile.TemporaryDirectory(prefix="serving-swap-tokenizer-") as tmp:
        tokenizer = make_tokenizer(aiperf, Path(tmp) / "tokenizer", WORDS)
        for number in chosen:
            scenario = SCENARIOS[number - 1]
            print(f"\n{number}. {scenario.name}, time scale {scenario.scale:g} "
                  f"(truth: {scenario.truth} faster)")  # fmt: skip
            for rule in rules:
                runs = {
                    serves: one_run(aiperf, tokenizer, scenario, rule,
                                    drafter_serves=serves == "drafter", seconds=args.seconds,
                                    window_s=args.window)
                    for serves in ("drafter", "baseline")
                }  # fmt: skip
                judged, flips = agreement(directions(runs["drafter"].letters),
                                          directions(runs["baseline"].letters))  # fmt: skip
                total_judged, total_flips = total_judged + judged, total_flips + flips
                share = 1.0 - flips / judged if judged else 1.0
                print(f"  {rule:>9}: agree {share:6.1%} of {judged} judged windows, "
                      f"{flips} flips")  # fmt: skip
                for serves, r in runs.items():
                    print(f"     {serves:>8} serving: {''.join(r.letters):<6} "
                          f"({counts(r.letters)}); ratios {ratio_text(r.ratios)}; "
                          f"{r.served} served, {r.pairs} pairs, in flight drafter "
                          f"{r.in_flight['speculative']:g} / baseline "
                          f"{r.in_flight['baseline']:g}, {r.errors} client errors")  # fmt: skip
                    print(f"       router: {r.copies or 'no copy counted'}")
                    for note in r.notes:
                        print(f"       {note}")
                sys.stdout.flush()
    share = 1.0 - total_flips / total_judged if total_judged else 1.0
    print(f"\nall: agree {share:.1%} of {total_judged} judged windows, {total_flips} flips; "
          f"{time.monotonic() - began:.0f} s")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
