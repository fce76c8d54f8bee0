"""Regret on both kinds of client: what specguard's decisions cost against always drafter,
never drafter and the per-window best, for closed-loop and open-loop clients, side by side.

    .venv/bin/python bench/regret.py [--out DIR] [--closed SCHEDULE] [--open SCHEDULE]
                                     [--kinds closed,open] [--window 10] [--cooldown 30]
                                     [--consecutive-windows 2] [--closed-time-scale 2]
                                     [--open-time-scale 4] [--hosts idle,busy]
                                     [--tables DIR]   # only print the table of earlier runs

Each kind runs ``specguard demo`` once (the local control plane, the chart, the operator,
the DeepSeek-V4-like simulator with DSpark k=7, 2 serving pods + 1 shadow, two routers),
with the demo's client following the schedule:

- **closed**: ``STREAMS`` streams per serving pod, each sending its next request when its
  last is answered (the demo's default schedule: math 4/pod, tool calls 144/pod past the
  drafter's crossover, math 4/pod);
- **open**: ``RATE/s`` Poisson arrivals per serving pod, sent whatever the answers: math at a
  low rate (the drafter ~3× faster per token), tool calls at a rate the drafter cannot keep
  up with (its throughput peaks near 96 in flight per engine; the baseline's keeps growing),
  math again.

Every figure is the demo's accounting (``specguard.demo._accounting``, tested by exact
equality), from the raw mirrored pairs: per window, the drafter ÷ baseline ratio on the
pairs, the client's realized per-token latency and the share the drafter served give "always
drafter", "never drafter" and the per-window best; token-weighted over the schedule. Two
more references: the per-phase best on/off (the better arm of each phase), and the best
after K windows (``accounting.lagged_best``: the best on/off policy that switches after
``--consecutive-windows`` K windows in a row showed the other arm faster, K + 1 to bring the
drafter back, with no swap to wait for) — the reference for an operator that acts on K
windows in a row. The goal (issue 34): realized within 1% of the best after K windows and
below both always and never, on each kind and host; the per-window best, which no policy
that must first see a window can reach, stays printed.

``--hosts idle,busy`` runs each kind on an idle host and on a busy one: ``busy`` keeps one of
the machine's cores busy with another process (a Python loop spinning for the whole run),
as a shared CI runner or a laptop doing other work would. Each run's files (summary.json,
samples.jsonl, client.jsonl, timeline.png) stay in ``--out``/KIND (``KIND-busy`` on the
busy host); ``--tables`` prints the table again from them.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from specguard.demo._report import side_by_side
from specguard.demo._schedule import DEFAULT_SCHEDULE, parse_schedule

# Open loop, requests per second per serving pod at time scale 4 (the machine's 2 cores keep
# the simulators' step times at this rate; at scale 2 the same load starved them; the closed
# run keeps the demo's scale 2, where its math windows hold enough requests), the closed
# schedule's shape: math at 5/s (~4 in flight, as its 4 streams); tool calls (44 tokens on
# average) at 40/s, past the drafter arm's tool-call peak (~38/s per pod at this scale, near
# 96 in flight: fixed-k verification turns compute-bound; the baseline's capacity is ~45/s):
# the drafter falls behind, its queue grows and it must be rolled back; math again. (Below
# its peak the drafter holds these arrivals on the stable side, where it is faster than the
# baseline at the same arrivals: no loss to undo. Near the peak, at 34/s, a bench run saw
# its shadow settle at ~60 in flight, 0.48×, for two windows and then collapse again.)
OPEN_SCHEDULE = "math:5/s:30,tool_call:40/s:90,math:5/s:100"
GOAL = 0.01
# What keeps one core busy on the busy host: another process, spinning for the whole run.
SPIN = "while True: pass"


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=Path("regret-bench"))
    p.add_argument("--closed", default=DEFAULT_SCHEDULE, help="closed-loop schedule")
    p.add_argument("--open", default=OPEN_SCHEDULE, help="open-loop schedule")
    p.add_argument("--kinds", default="closed,open", help="which client kinds to run")
    p.add_argument("--window", type=int, default=10)
    p.add_argument("--cooldown", type=int, default=30)
    p.add_argument("--consecutive-windows", type=int, default=2)
    p.add_argument("--closed-time-scale", type=float, default=2.0,
                   help="the simulator's time scale for the closed-loop run (the demo's)")
    p.add_argument("--open-time-scale", type=float, default=4.0,
                   help="... for the open-loop run (its arrivals do not slow down when the "
                   "2 cores fall behind; at 2 the same rates starved the simulators)")
    p.add_argument("--hosts", default="idle",
                   help="idle and/or busy (one core kept busy by another process)")
    p.add_argument("--tables", type=Path, help="print the table of the runs in this directory")
    args = p.parse_args(argv)
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    if not set(kinds) <= {"closed", "open"}:
        p.error(f"--kinds: closed and/or open, got {args.kinds!r}")
    hosts = [h.strip() for h in args.hosts.split(",") if h.strip()]
    if not hosts or not set(hosts) <= {"idle", "busy"}:
        p.error(f"--hosts: idle and/or busy, got {args.hosts!r}")
    cases = [(kind, host) for kind in kinds for host in hosts]
    schedules = {"closed": args.closed, "open": args.open}
    scales = {"closed": args.closed_time_scale, "open": args.open_time_scale}
    for kind in kinds:
        parse_schedule(schedules[kind], f"--{kind}")  # one line naming the flag if bad
    where = args.tables or args.out
    if args.tables is None:
        for kind, host in cases:
            out = args.out / _dir(kind, host)
            began = time.monotonic()
            print(f"[{kind}, {host} host] specguard demo --schedule {schedules[kind]} --out {out}",
                  flush=True)  # fmt: skip
            spinner = subprocess.Popen([sys.executable, "-c", SPIN]) if host == "busy" else None
            try:
                proc = subprocess.run(
                    [sys.executable, "-m", "specguard", "demo", "--schedule", schedules[kind],
                     "--out", str(out), "--window", str(args.window), "--cooldown",
                     str(args.cooldown), "--consecutive-windows", str(args.consecutive_windows),
                     "--time-scale", f"{scales[kind]:g}", "--no-build"],
                    check=False,
                )  # fmt: skip
            finally:
                if spinner is not None:
                    spinner.kill()
                    spinner.wait()
            print(f"[{kind}, {host} host] exit {proc.returncode} in "
                  f"{time.monotonic() - began:.0f}s", flush=True)  # fmt: skip
            if proc.returncode != 0:
                return proc.returncode
    runs = []
    for kind, host in cases:
        summary = where / _dir(kind, host) / "summary.json"
        if not summary.exists():
            print(f"{summary}: missing (run without --tables first)", file=sys.stderr)
            return 2
        label = ("closed loop" if kind == "closed" else "open loop") + f", {host}"
        runs.append((label, json.loads(summary.read_text())))
    print()
    print(f"Regret on both client kinds (per-token latency, wall-clock ms at the simulator's "
          f"time scale {' / '.join(f'{scales[k]:g}' for k in kinds)}; always/never/best from "
          f"the mirrored pairs; goal: within {GOAL:.0%} of the best after K windows and below "
          "both always and never)")  # fmt: skip
    for row in side_by_side(runs, goal=GOAL):
        print(row)
    return 0


def _dir(kind: str, host: str) -> str:
    return kind if host == "idle" else f"{kind}-{host}"


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
