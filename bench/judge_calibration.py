"""Calibration of specguard's judge on traffic that looks like production.

    .venv/bin/python bench/judge_calibration.py [--aa 200] [--power 40] [--sizes 200,1000]
                                                [--shapes sigma0.2,sigma0.35,sigma0.5,heavy]
                                                [--pairings unpaired,paired] [--seed 1]
    .venv/bin/python bench/judge_calibration.py --cases [NAME,...] [--windows 200] [--seed 1]

Windows come from specguard_testkit._traffic, a generator written apart from the judge:
per-token latency 12 ms × (1 + c/16) with the in-flight count c uniform on 1..64 per request
(so it grows with load and the mix varies between windows), a log-normal prompt effect of
log-spread σ (heavy: Student-t(3) in log space plus 3% stragglers 2–10×, at σ 0.35), three
pods per arm with a per-pod bias of σ 0.05, per-request noise σ 0.08. Paired windows measure
each prompt on both arms (each at its own concurrency and pod); unpaired ones draw each
arm's requests independently. The judge runs at the resource's defaults (tolerance 0.03,
confidence 0.99, 2000 resamples), with min_requests_per_arm = 90% of the window size.

Columns, per size × pairing × shape (each a share of windows, with its standard error):
- ``excl@0``: A/A windows whose 99% CI excludes 1 (nominal 1%; coverage is 1 minus it),
  i.e. tolerance 0; ``(k/N)`` the count;
- ``CI``: the typical half-width of the 99% interval, sqrt(high / low) − 1, averaged over the
  A/A windows (the effect a window can resolve scales with it; it shrinks as 1/sqrt(n));
- ``reg``, ``imp``: A/A windows judged regressed / improved at tolerance 0.03;
- ``+5%``, ``+10%``, ``+20%``: windows judged regressed when the drafter makes every
  request's per-token latency that much slower (power).

Every cell has its own random stream (from --seed, the size, the pairing and the shape), so
a cell's figures do not depend on which other cells run: ``--sizes 1000 --pairings paired
--shapes sigma0.35`` reproduces that row of a full run.

``--cases``: the shapes where the judge's assumptions bend (issue 28, and the pooled comparison
of issue 25), each with the verdict that would be wrong on it, side by side from one run:
``wrong`` is the share of windows judged the wrong way (the wrong direction, or regressed
when nothing changed, or any actionable verdict where the data cannot support one), beside
the share of each outcome; A/A rows also give ``excl@0`` (the 99% interval excludes 1).
Each case × effect has its own random stream (from --seed and the row), so a row is
reproduced by running that case alone.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from specguard.judge import Sample, parse_lines
from specguard.judge._verdict import JudgeSettings, Verdict, judge
from specguard_testkit._synthetic import samples as fixed_samples
from specguard_testkit._traffic import Load, Traffic, banded, window

SHAPES: dict[str, Traffic] = {
    "sigma0.2": Traffic(sigma=0.2),
    "sigma0.35": Traffic(sigma=0.35),
    "sigma0.5": Traffic(sigma=0.5),
    "heavy": Traffic(sigma=0.35, heavy=True),
    # σ 0.35 with pods alike, and with each pod's bias its own (one arm's pods may be slower
    # on average than the other's): the centred pods above are balanced between the arms by
    # construction, which no window can tell from these.
    "pods-alike": Traffic(sigma=0.35, pod_bias=0.0),
    "pods-apart": Traffic(sigma=0.35, pod_centred=False),
    # pods of one model differing by 2% (σ), not centred
    "pods-mild": Traffic(sigma=0.35, pod_centred=False, pod_bias=0.02),
}
# The table's default shapes (the pod variants: --shapes pods-alike,pods-apart).
TABLE_SHAPES = ("sigma0.2", "sigma0.35", "sigma0.5", "heavy")
EFFECTS = (1.05, 1.10, 1.20)


def _share(hits: int, total: int, digits: int = 1) -> str:
    """hits/total as a percentage with its standard error (binomial); none or all: the count."""
    if not total:
        return "-"
    p = hits / total
    if hits in (0, total):
        return f"{p:.0%} ({hits}/{total})"
    return f"{p:.{digits}%} ±{math.sqrt(p * (1 - p) / total):.{digits}%}"


def _cell(
    traffic: Traffic, n: int, paired: bool, *, aa: int, power: int, rng: np.random.Generator
) -> list[str]:
    # A few requests of a window may be unusable (a straggler past the plausible range):
    # 90% of the window is the minimum, as a user would set it for this window size.
    settings = JudgeSettings(min_requests_per_arm=int(0.9 * n))
    excluded = regressed = improved = 0
    half_widths = []
    for _ in range(aa):
        v = judge(window(rng, n, traffic, paired=paired), settings)
        if v.ci_low is None or v.ci_high is None:
            raise SystemExit(f"no interval on an A/A window: {v.sentence()}")
        excluded += not (v.ci_low <= 1.0 <= v.ci_high)
        regressed += v.outcome == "regressed"
        improved += v.outcome == "improved"
        half_widths.append(math.sqrt(v.ci_high / v.ci_low) - 1.0)
    row = [
        _share(excluded, aa, 2) + ("" if excluded in (0, aa) else f" ({excluded}/{aa})"),
        f"±{np.mean(half_widths):.1%}" if aa else "-",
        _share(regressed, aa, 2),
        _share(improved, aa, 2),
    ]
    for effect in EFFECTS:
        hits = sum(
            judge(window(rng, n, traffic, paired=paired, effect=effect), settings).outcome
            == "regressed"
            for _ in range(power)
        )
        row.append(_share(hits, power))
    return row


LOW_BAND, HIGH_BAND = (4, 8), (28, 41)
DEFAULTS = JudgeSettings()


@dataclass(frozen=True)
class Case:
    """One shape: ``make(rng, effect)`` draws a window, ``wrong(effect)`` the outcomes that are
    wrong on it at that true effect (speculative ÷ baseline per token, at every load)."""

    name: str
    what: str
    make: Callable[[np.random.Generator, float], list[Sample]]
    effects: tuple[float, ...]
    settings: JudgeSettings = DEFAULTS


def _direction(effect: float) -> set[str]:
    """Wrong outcomes at a true effect: the opposite direction, and regressed when nothing
    changed (improved at no change is a false alarm too)."""
    if effect < 1.0:
        return {"regressed"}
    if effect > 1.0:
        return {"improved"}
    return {"regressed", "improved"}


def _bands(spec_high: bool, share: float) -> Callable[[np.random.Generator, float], list[Sample]]:
    spec_band, base_band = (HIGH_BAND, LOW_BAND) if spec_high else (LOW_BAND, HIGH_BAND)
    spec_load: Load = banded(spec_band, base_band, share)
    base_load: Load = banded(base_band, spec_band, share)

    def make(rng: np.random.Generator, effect: float) -> list[Sample]:
        return window(rng, 200, Traffic(), effect=effect, spec_load=spec_load, base_load=base_load)

    return make


def _paired(traffic: Traffic, n: int) -> Callable[[np.random.Generator, float], list[Sample]]:
    def make(rng: np.random.Generator, effect: float) -> list[Sample]:
        return window(rng, n, traffic, paired=True, effect=effect)

    return make


def _unpaired(traffic: Traffic, n: int) -> Callable[[np.random.Generator, float], list[Sample]]:
    def make(rng: np.random.Generator, effect: float) -> list[Sample]:
        return window(rng, n, traffic, effect=effect)

    return make


def _no_measurement(rng: np.random.Generator, effect: float) -> list[Sample]:
    """Chunk-counted on both arms (the drafter packs 3 tokens per chunk), read from records
    that lack the ``measurement`` field."""
    chunks = Traffic(measurement={"speculative": "stream_chunks", "baseline": "stream_chunks"})
    lines = []
    for sample in window(rng, 300, chunks, effect=effect):
        record = sample.to_dict()
        del record["measurement"]
        lines.append(json.dumps(record))
    return list(parse_lines(lines))


def _milliseconds(rng: np.random.Generator, effect: float) -> list[Sample]:
    """The drafter arm's TPOT written in milliseconds, e2e in seconds."""
    drawn = window(rng, 300, paired=True, effect=effect)
    return [
        replace(s, tpot_s=(s.tpot_s or 0.0) * 1000) if s.arm == "speculative" else s for s in drawn
    ]


def _arrivals_apart(rng: np.random.Generator, effect: float) -> list[Sample]:
    """Issue 25: 300 drafter requests at 2 in flight, 1200 baseline requests at 8 (4× the
    arrivals per pod), per-token latency 12 ms × (1 + in-flight/16) × the effect."""
    spec = 0.012 * (1 + 2 / 16) * effect * np.exp(rng.normal(0.0, 0.35, 300))
    base = 0.012 * (1 + 8 / 16) * np.exp(rng.normal(0.0, 0.35, 1200))
    return fixed_samples("speculative", spec, concurrency=2) + fixed_samples(
        "baseline", base, concurrency=8
    )


CASES: dict[str, Case] = {
    case.name: case
    for case in (
        Case("bands90-high", "unpaired 200, 90% in own band, drafter high", _bands(True, 0.9),
             (0.9, 1.0)),
        Case("bands95-high", "unpaired 200, 95% in own band, drafter high", _bands(True, 0.95),
             (0.9, 1.0)),
        Case("bands90-low", "unpaired 200, 90% in own band, drafter low", _bands(False, 0.9),
             (1.0, 1.1)),
        Case("bands95-low", "unpaired 200, 95% in own band, drafter low", _bands(False, 0.95),
             (1.0, 1.1)),
        Case("shadow0.85", "paired 200, shadow 15% lighter in flight, pods alike",
             _paired(Traffic(shadow_in_flight=0.85, pod_bias=0.0), 200), (1.0, 1.1)),
        Case("shadow0.93", "paired 200, shadow 7% lighter in flight, pods alike",
             _paired(Traffic(shadow_in_flight=0.93, pod_bias=0.0), 200), (1.0, 1.1)),
        Case("pods-paired", "paired 200, pod biases not balanced (σ 0.05)",
             _paired(Traffic(pod_centred=False), 200), (1.0, 1.1, 1.2)),
        Case("pods-paired1000", "paired 1000, pod biases not balanced (σ 0.05)",
             _paired(Traffic(pod_centred=False), 1000), (1.0, 1.1, 1.2)),
        Case("pods-unpaired", "unpaired 200, pod biases not balanced (σ 0.05)",
             _unpaired(Traffic(pod_centred=False), 200), (1.0, 1.2)),
        Case("no-measurement", "chunk-counted records without measurement", _no_measurement,
             (0.7, 1.0)),
        Case("tpot-ms", "drafter TPOT in ms, e2e in s (paired 300)", _milliseconds, (1.0,)),
        Case("arrivals-4x", "pooled: 300 at 2 in flight vs 1200 at 8", _arrivals_apart,
             (1.0, 1.3)),
    )
}  # fmt: skip


# Cases whose data cannot support a verdict (a wrong recorder, an unknown kind, arms loaded
# apart): the interval's coverage is not the question there.
_DATA = ("tpot-ms", "no-measurement", "arrivals-4x")


def _row(case: Case, effect: float, windows: int, seed: int) -> str:
    rng = np.random.default_rng([seed, zlib.crc32(case.name.encode()), round(effect * 1000)])
    wrong_outcomes = _direction(effect)
    if case.name in _DATA:
        # Data that cannot support a regression: any regressed verdict is wrong, and for
        # arms loaded apart (or a wrong recorder) any actionable one.
        wrong_outcomes = {"regressed"} | ({"improved"} if case.name != "no-measurement" else set())
    counts = dict.fromkeys(("regressed", "improved", "neutral", "inconclusive"), 0)
    excluded = 0
    for _ in range(windows):
        v: Verdict = judge(case.make(rng, effect), case.settings)
        counts[v.outcome] += 1
        if v.ci_low is not None and v.ci_high is not None:
            excluded += not (v.ci_low <= 1.0 <= v.ci_high)
    wrong = sum(counts[o] for o in wrong_outcomes)
    cells = [
        f"{case.name:<16}",
        f"{effect:>5.2f}",
        f"{windows:>6}",
        f"{_share(wrong, windows, 2):>17}",
        *(f"{_share(counts[o], windows):>15}" for o in counts),
        f"{_share(excluded, windows, 2) if effect == 1.0 and case.name not in _DATA else '':>15}",
    ]
    return " ".join(cells)


def cases(names: list[str], windows: int, seed: int) -> None:
    """The issue-28 shapes, one row per case and effect."""
    head = ["case", "truth", "N", "wrong", "regressed", "improved", "neutral", "inconclusive",
            "excl@0"]  # fmt: skip
    widths = [16, 5, 6, 17, 15, 15, 15, 15, 15]
    print(f"{windows} windows per row, seed {seed}")
    print(" ".join(f"{h:<{w}}" if i == 0 else f"{h:>{w}}" for i, (h, w) in
                   enumerate(zip(head, widths, strict=True))))  # fmt: skip
    for name in names:
        for effect in CASES[name].effects:
            print(_row(CASES[name], effect, windows, seed), flush=True)
    print("; ".join(f"{c.name}: {c.what}" for c in (CASES[n] for n in names)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--aa", type=int, default=200, help="A/A windows per cell")
    parser.add_argument("--power", type=int, default=40, help="windows per cell and effect")
    parser.add_argument("--sizes", default="200,1000", help="requests (pairs) per arm")
    parser.add_argument("--shapes", default=",".join(TABLE_SHAPES), help="of " + ", ".join(SHAPES))
    parser.add_argument("--pairings", default="unpaired,paired", help="unpaired, paired or both")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--cases", nargs="?", const=",".join(CASES), default=None,
        help="the issue-28 shapes instead of the table: all, or of " + ", ".join(CASES),
    )  # fmt: skip
    parser.add_argument("--windows", type=int, default=200, help="windows per case and effect")
    args = parser.parse_args()
    if args.cases is not None:
        chosen = args.cases.split(",")
        unknown = [c for c in chosen if c not in CASES]
        if unknown or args.windows < 1:
            print(f"judge_calibration: --cases/--windows: unknown {unknown}", file=sys.stderr)
            return 2
        started = time.perf_counter()
        cases(chosen, args.windows, args.seed)
        print(f"({time.perf_counter() - started:.0f} s)")
        return 0
    try:
        sizes = [int(s) for s in args.sizes.split(",")]
        names = args.shapes.split(",")
        shapes = [SHAPES[s] for s in names]
        pairings = args.pairings.split(",")
        if not set(pairings) <= {"unpaired", "paired"} or min(args.aa, args.power) < 0:
            raise ValueError(f"{args.pairings!r}, --aa {args.aa}, --power {args.power}")
    except (ValueError, KeyError) as exc:
        print(f"judge_calibration: --sizes/--shapes/--pairings: {exc}", file=sys.stderr)
        return 2
    columns = ["excl@0 (k/N)", "CI", "reg", "imp", *(f"+{round((e - 1) * 100)}%" for e in EFFECTS)]
    widths = [26, 6, 14, 14, 13, 13, 13]
    print(f"A/A {args.aa} windows, power {args.power} per effect, per cell, seed {args.seed}")
    heads = "".join(f" {c:>{w}}" for c, w in zip(columns, widths, strict=True))
    print(f"{'n/arm':>5} {'pairing':<9} {'shape':<10}{heads}")
    started = time.perf_counter()
    for n in sizes:
        for pairing in pairings:
            for name, traffic in zip(names, shapes, strict=True):
                paired = pairing == "paired"
                rng = np.random.default_rng([args.seed, n, int(paired), list(SHAPES).index(name)])
                row = _cell(traffic, n, paired, aa=args.aa, power=args.power, rng=rng)
                cells = "".join(f" {x:>{w}}" for x, w in zip(row, widths, strict=True))
                print(f"{n:>5} {pairing:<9} {name:<10}{cells}", flush=True)
    print(f"({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
