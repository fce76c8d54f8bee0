"""How often each window's clients are told right: ``judge.client_loop_over`` on the plant's
serving requests, for clients the follow-up statistic alone cannot read, before and after
the overload reading.

    .venv/bin/python bench/client_kinds.py [--seconds 200] [--seeds 4] [--window 10]
                                           [--only NAME,...] [--replay DIR ...]

The plant (tests/router/plant.py: clients, two routers with the real ``router.Topology``,
two serving pods with a queue, a drafter whose throughput peaks) runs each case with the
routers on ``in_flight``; every ``--window`` seconds after a 30 s warm-up the serving
requests that ended in the last windows are classified as the operator does (two windows,
or two minutes when those tell neither way). Printed per case: the share of windows read
closed, open and unknown, with the follow-up statistic only (*before*: ``climb_groups=0``)
and with the overload reading (*after*: ``LoopSettings()``), and what the case should read.

``--replay DIR`` also replays a run's ``samples.jsonl`` (``bench/regret.py --out OUT`` writes
OUT/open, OUT/closed) the same way, windows by completion time from its first completion.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "router"))

from plant import DRAFTER, TOOL_DRAFTER, Plant, run

from specguard.judge import LoopSettings, Sample, client_loop_over, parse_lines

WARMUP_S = 30.0
BEFORE = LoopSettings(climb_groups=0)
AFTER = LoopSettings()
GUIDELLM = {"think_s": 0.42, "think_sigma": 0.8}  # guidellm's dispatch delay at 384 streams


@dataclass(frozen=True)
class Case:
    name: str
    plant: Plant
    truth: str  # what the windows should read


CASES = (
    Case(
        "closed, 8 streams, dispatch 0.42 s",
        Plant(clients="closed", streams=8, **GUIDELLM),
        "closed or unknown, never open",
    ),
    Case(
        "closed, 384 streams, dispatch 0.42 s, 20 s ramp",
        Plant(clients="closed", streams=384, ramp_s=20.0, **GUIDELLM),
        "closed or unknown, never open",
    ),
    Case(
        "closed, 280 streams, 20 s ramp",
        Plant(clients="closed", streams=280, ramp_s=20.0),
        "closed",
    ),
    Case(
        "open, 8/s per pod, tool drafter (85% of its peak)",
        Plant(clients="open", rate=8.0, serving=TOOL_DRAFTER),
        "open",
    ),
    Case(
        "open, 10/s per pod, tool drafter (5% past its peak)",
        Plant(clients="open", rate=10.0, serving=TOOL_DRAFTER),
        "open",
    ),
    Case(
        "open, 16/s per pod, drafter (90% of its peak)",
        Plant(clients="open", rate=16.0, serving=DRAFTER),
        "open",
    ),
    Case(
        "open, 18.8/s per pod, drafter (5% past its peak)",
        Plant(clients="open", rate=18.8, serving=DRAFTER),
        "open",
    ),
    Case(
        "rate-capped 10/s per pod, at most 150 in flight per pod, tool drafter",
        Plant(clients="open", rate=10.0, cap=300, cap_turnaround=True, serving=TOOL_DRAFTER),
        "open while it climbs to the cap, then closed or unknown",
    ),
)


def by_window(samples: Sequence[Sample], first: float, window: float,
              end: float) -> list[tuple[float, list[Sample]]]:  # fmt: skip
    """The serving samples by the window they ended in, from ``first`` to ``end``."""
    out: list[tuple[float, list[Sample]]] = []
    start = first
    while start + window <= end + 1e-9:
        out.append((start, [s for s in samples if s.role == "serving"
                            and start <= s.started_at + s.e2e_s < start + window]))  # fmt: skip
        start += window
    return out


def kinds(windows: list[tuple[float, list[Sample]]], window: float, settings: LoopSettings,
          since: float) -> list[str]:  # fmt: skip
    """Each window's reading from ``since`` on, as the operator makes it."""
    found: list[str] = []
    for k in range(len(windows)):
        end = windows[k][0] + window
        if end > since:
            found.append(client_loop_over(windows[: k + 1], end, settings).kind)
    return found


def shares(found: list[str]) -> str:
    n = max(1, len(found))
    return "  ".join(f"{k} {found.count(k) / n:4.0%}" for k in ("closed", "open", "unknown"))


def line(found: list[str]) -> str:
    return "".join(k[0] for k in found)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=200.0)
    p.add_argument("--seeds", type=int, default=4)
    p.add_argument("--window", type=float, default=10.0)
    p.add_argument("--only", default="", help="comma-separated case numbers (1-based)")
    p.add_argument("--replay", type=Path, nargs="*", default=[])
    args = p.parse_args(argv)
    chosen = [int(x) for x in args.only.split(",") if x.strip()] or range(1, len(CASES) + 1)
    print(f"{args.seeds} seeds × {args.seconds:.0f} s, {args.window:.0f} s windows after "
          f"{WARMUP_S:.0f} s; per window: c closed, o open, u unknown")  # fmt: skip
    for number in chosen:
        case = CASES[number - 1]
        print(f"\n{number}. {case.name} (should read: {case.truth})")
        for label, settings in (("before", BEFORE), ("after", AFTER)):
            every: list[str] = []
            rows = []
            for seed in range(args.seeds):
                result = run(replace(case.plant), seconds=args.seconds, warmup=0.0, seed=seed)
                windows = by_window(result.samples, 0.0, args.window, args.seconds)
                found = kinds(windows, args.window, settings, WARMUP_S)
                every += found
                rows.append(line(found))
            print(f"  {label:>6}: {shares(every)}   {' '.join(rows)}")
    for folder in args.replay:
        samples = list(parse_lines((folder / "samples.jsonl").read_text().splitlines()))
        ends = [s.started_at + s.e2e_s for s in samples if s.role == "serving"]
        first, last = float(np.min(ends)), float(np.max(ends))
        windows = by_window(samples, first, args.window, last)
        print(f"\nreplay {folder} ({len(windows)} windows)")
        for label, settings in (("before", BEFORE), ("after", AFTER)):
            found = kinds(windows, args.window, settings, first)
            print(f"  {label:>6}: {shares(found)}   {line(found)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
