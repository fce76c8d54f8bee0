"""How soon the operator puts the routers on the right load-match rule: regret-bench runs
replayed through the operator's client classification, the hysteresis before and after
``unknown`` stopped resetting the count, side by side.

    .venv/bin/python bench/load_match_replay.py DIR [DIR ...] [--window 10] [--horizon 60]
                                                [--offsets 0,3,6,9]

Each DIR holds a ``samples.jsonl`` that ``bench/regret.py --out OUT`` (OUT/open,
OUT/closed) or ``specguard demo --out`` wrote. The replay does what the operator's window loop
does with the serving requests (``ResourceLoop._clients``): windows of ``--window`` seconds
by completion time, each classified by ``judge.client_loop`` together with the window
before, and the rule moved by the hysteresis, starting on ``in_flight``. The operator's
windows start wherever its first tick fell, so each run is replayed at several alignments
(``--offsets``: seconds the first window starts before the first completion).

Printed per rule: how many replays reached the rule the clients ask for (``arrivals`` for a
DIR whose name ends in ``open``, ``in_flight`` for ``closed``) within ``--horizon`` seconds,
the median window it was reached in, how many replays left it again later, and how many
windows read the wrong kind (an open-loop DIR read closed, or the reverse) over the whole
run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from specguard.judge import (
    LoadMatch,
    LoadMatchState,
    LoopEvidence,
    LoopSettings,
    Sample,
    client_loop,
    next_load_match,
    parse_lines,
)

Hysteresis = Callable[[LoadMatchState, LoopEvidence], LoadMatchState]


def resetting(state: LoadMatchState, evidence: LoopEvidence) -> LoadMatchState:
    """The hysteresis before: a window that tells neither way resets the count."""
    wanted = evidence.rule
    if wanted is None or wanted == state.rule:
        return LoadMatchState(state.rule, 0)
    if state.streak + 1 >= LoopSettings().windows:
        return LoadMatchState(wanted, 0)
    return LoadMatchState(state.rule, state.streak + 1)


RULES: dict[str, Hysteresis] = {
    "unknown resets (before)": resetting,
    "unknown keeps (now)": next_load_match,
}


def replay(
    serving: Sequence[Sample], offset: float, window: float, step: Hysteresis
) -> list[tuple[str, LoadMatch]]:
    """(kind read, rule after) per window."""
    ends = sorted(s.started_at + s.e2e_s for s in serving)
    t0 = ends[0] - offset
    state = LoadMatchState()
    previous: list[Sample] = []
    out: list[tuple[str, LoadMatch]] = []
    k = 0
    while t0 + k * window <= ends[-1]:
        a, b = t0 + k * window, t0 + (k + 1) * window
        current = [s for s in serving if a <= s.started_at + s.e2e_s < b]
        since = a - window if previous else a
        evidence = client_loop((*previous, *current), start=since, end=b)
        state = step(state, evidence)
        out.append((evidence.kind, state.rule))
        previous = current
        k += 1
    return out


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dirs", nargs="+", type=Path)
    p.add_argument("--window", type=float, default=10.0)
    p.add_argument("--horizon", type=float, default=60.0)
    p.add_argument("--offsets", default="0,3,6,9")
    args = p.parse_args(argv)
    offsets = [float(x) for x in args.offsets.split(",")]
    runs: list[tuple[str, list[Sample]]] = []
    for d in args.dirs:
        kind = "open" if d.name.endswith("open") else "closed" if d.name.endswith("closed") else ""
        if not kind:
            print(f"{d}: the folder's name must end in open or closed", file=sys.stderr)
            return 2
        path = d / "samples.jsonl"
        if not path.is_file():
            print(f"{path}: no such file", file=sys.stderr)
            return 2
        with path.open() as f:
            runs.append((kind, [s for s in parse_lines(f) if s.role == "serving"]))
    within = int(args.horizon / args.window)
    print(f"{len(runs)} runs x {len(offsets)} alignments, windows of {args.window:g} s")
    for name, step in RULES.items():
        for kind in ("open", "closed"):
            these = [samples for k, samples in runs if k == kind]
            if not these:
                continue
            target: LoadMatch = "arrivals" if kind == "open" else "in_flight"
            wrong = "closed" if kind == "open" else "open"
            reached: list[int] = []
            replays = misread = windows = left = 0
            for samples in these:
                for offset in offsets:
                    seen = replay(samples, offset, args.window, step)
                    replays += 1
                    windows += len(seen)
                    misread += sum(read == wrong for read, _ in seen)
                    first = next((i + 1 for i, (_, r) in enumerate(seen) if r == target), None)
                    if first is not None and first <= within:
                        reached.append(first)
                    if first is not None:
                        left += any(r != target for _, r in seen[first:])
            median = f"{statistics.median(reached):g}" if reached else "-"
            print(
                f"  {name:24s} {kind:6s} on {target} within {args.horizon:g} s: "
                f"{len(reached)}/{replays} (median window {median}), left it later: {left}; "
                f"windows read {wrong}: {misread}/{windows}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
