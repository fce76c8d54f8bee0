"""The demo's summary: the decisions and how long each took, the accounting's figures, and
the text and JSON the demo prints and writes (pure: no I/O)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from specguard.api import constants as c
from specguard.demo.accounting import Totals, Window, load_matched, totals
from specguard.demo.schedule import Span

GOAL_REGRET = 0.05  # within 5% of the per-window best
# Arms whose in-flight requests per pod differ by more than this are not load-matched (the
# judge's default concurrencyMatch on arrivals is the same 25%).
LOAD_BOUND = 0.25


@dataclass(frozen=True, slots=True)
class Decision:
    """One mode change the operator decided while the schedule ran."""

    to_mode: str
    reason: str
    at: float  # epoch seconds (the transition's time in status)
    phase: int  # the phase it was decided in
    windows: float  # evaluation windows from that phase's start to the decision
    swap_done: float | None  # when the new mode served with every pod ready
    swap_windows: float | None  # windows from the phase's start to that

    @property
    def rollback(self) -> bool:
        return self.to_mode == c.ARM_BASELINE


def decisions(
    transitions: Sequence[tuple[float, str, str]],
    settled: Sequence[tuple[float, str]],
    spans: Sequence[Span],
    t0: float,
    window_s: float,
) -> list[Decision]:
    """Mode changes during the schedule: ``transitions`` (time, to mode, reason) from status,
    ``settled`` (time, mode) whenever the resource was seen settled (no swap) in a mode."""
    out = []
    end = t0 + (spans[-1].end if spans else 0.0)
    for at, to_mode, reason in sorted(transitions):
        if not t0 <= at <= end:
            continue
        span = next((s for s in spans if t0 + s.start <= at < t0 + s.end), spans[-1])
        start = t0 + span.start
        done = next((t for t, mode in sorted(settled) if t >= at and mode == to_mode), None)
        out.append(
            Decision(
                to_mode,
                reason,
                at,
                span.index,
                (at - start) / window_s,
                done,
                None if done is None else (done - start) / window_s,
            )
        )
    return out


def in_swaps(times: Sequence[float], found: Sequence[Decision], margin: float = 2.0) -> int:
    """How many of ``times`` (e.g. when failed requests ended) fall in a swap: from a decision
    to ``margin`` seconds after its new mode served (to the end, if it never did)."""
    spans_ = [(d.at, math.inf if d.swap_done is None else d.swap_done + margin) for d in found]
    return sum(any(a <= t <= b for a, b in spans_) for t in times)


@dataclass(frozen=True, slots=True)
class Summary:
    overall: Totals | None
    phases: tuple[tuple[Span, Totals | None], ...]
    decisions: tuple[Decision, ...]
    requests: int
    errors: int
    pairs: int
    errors_in_swaps: int = 0
    # The same figures with only load-matched windows' ratios (accounting.load_matched),
    # and how many windows with pairs were not matched.
    matched: Totals | None = None
    mismatched: int = 0

    @property
    def goal(self) -> dict[str, bool] | None:
        t = self.overall
        if t is None:
            return None
        return {
            "within_5pct_of_best": t.regret <= GOAL_REGRET,
            "better_than_always": t.realized_s < t.always_s,
            "better_than_never": t.realized_s < t.never_s,
        }


def summarize(
    windows: Sequence[Window],
    spans: Sequence[Span],
    found: Sequence[Decision],
    *,
    requests: int,
    errors: int,
    errors_in_swaps: int = 0,
) -> Summary:
    phases = tuple((s, totals(w for w in windows if w.phase == s.index)) for s in spans)
    mismatched = sum(
        1
        for w in windows
        if w.tokens and w.pairs and ((gap := w.load_gap()) is None or gap > LOAD_BOUND)
    )
    return Summary(
        totals(windows), phases, tuple(found), requests, errors, sum(w.pairs for w in windows),
        errors_in_swaps, totals(load_matched(windows, LOAD_BOUND)), mismatched,
    )  # fmt: skip


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


def _change(a: float, b: float) -> str:
    change = (a / b - 1.0) * 100.0
    return f"{'+' if change >= 0 else '−'}{abs(change):.1f}%"


def summary_lines(s: Summary, *, time_scale: float, window_s: float) -> list[str]:
    lines = [
        "Per-token latency over the schedule, token-weighted over the client's requests "
        f"(wall-clock; the simulator runs at time scale {time_scale:g}):"
    ]
    t = s.overall
    if t is None:
        return [*lines, "  no window has both client tokens and paired measurements"]
    lines += [
        f"  specguard (realized)  {_ms(t.realized_s):>10}",
        f"  always drafter        {_ms(t.always_s):>10}   specguard "
        f"{_change(t.realized_s, t.always_s)}",
        f"  never drafter         {_ms(t.never_s):>10}   specguard "
        f"{_change(t.realized_s, t.never_s)}",
        f"  per-window best       {_ms(t.best_s):>10}   regret {_change(t.realized_s, t.best_s)}",
    ]
    for span, pt in s.phases:
        if pt is None:
            continue
        p = span.phase
        lines.append(
            f"  phase {span.index + 1} {p.label()} ({p.per_pod}/pod, {p.seconds:g}s): realized "
            f"{_ms(pt.realized_s)}, always {_ms(pt.always_s)}, never {_ms(pt.never_s)}, "
            f"best {_ms(pt.best_s)}"
        )
    lines.append(
        f"  {t.windows} windows of {window_s:g}s ({t.borrowed} during swaps with the phase's "
        f"nearest measured ratio, {t.left_out} left out); {s.pairs} mirrored pairs; "
        f"{s.requests} client requests, {s.errors} errors ({s.errors_in_swaps} of them ended "
        "during a swap)"
    )
    m = s.matched
    if m is not None:
        lines.append(
            f"  shadow load: in {s.mismatched} of {t.windows} windows the arms' requests in "
            f"flight per pod differed by more than {LOAD_BOUND:.0%}; with the ratios of "
            f"load-matched windows only: always {_ms(m.always_s)}, never {_ms(m.never_s)}, "
            f"best {_ms(m.best_s)}, regret {_change(m.realized_s, m.best_s)} "
            f"({m.windows} windows, {m.left_out} left out)"
        )
    lines.append("Decisions:")
    if not s.decisions:
        lines.append("  none: the operator did not change the mode during the schedule")
    for d in s.decisions:
        what = "rolled back to baseline" if d.rollback else "re-promoted the drafter"
        span_label = f"phase {d.phase + 1}"
        done = "" if d.swap_windows is None else f", serving after {d.swap_windows:.1f}"
        lines.append(
            f"  {what} ({d.reason}): decided {d.windows:.1f} windows after {span_label} began{done}"
        )
    goal = s.goal or {}
    lines.append(
        f"Goal: within {GOAL_REGRET:.0%} of the per-window best: "
        f"{'yes' if goal.get('within_5pct_of_best') else 'no'}; better than always: "
        f"{'yes' if goal.get('better_than_always') else 'no'}; better than never: "
        f"{'yes' if goal.get('better_than_never') else 'no'}"
    )
    return lines


def summary_json(s: Summary, settings: Mapping[str, Any]) -> dict[str, Any]:
    def figures(t: Totals | None) -> dict[str, Any] | None:
        if t is None:
            return None
        return {**asdict(t), "regret": t.regret, "vs_always": t.vs_always, "vs_never": t.vs_never}

    return {
        "settings": dict(settings),
        "aggregation": "token-weighted per-token latency over the client's requests "
        "(Σ decode time ÷ Σ decode tokens); always/never from the mirrored pairs' ratio per "
        "window; best = per-window minimum",
        "overall": figures(s.overall),
        "load_matched": figures(s.matched),
        "load_mismatched_windows": s.mismatched,
        "errors_in_swaps": s.errors_in_swaps,
        "phases": [
            {
                "phase": span.index + 1,
                "domain": span.phase.domain,
                "per_pod": span.phase.per_pod,
                "seconds": span.phase.seconds,
                "figures": figures(pt),
            }
            for span, pt in s.phases
        ],
        "decisions": [{**asdict(d), "phase": d.phase + 1} for d in s.decisions],
        "requests": s.requests,
        "errors": s.errors,
        "pairs": s.pairs,
        "goal": s.goal,
    }


__all__ = [
    "GOAL_REGRET",
    "LOAD_BOUND",
    "Decision",
    "Summary",
    "decisions",
    "in_swaps",
    "summarize",
    "summary_json",
    "summary_lines",
]
