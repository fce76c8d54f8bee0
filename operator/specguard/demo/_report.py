"""The demo's summary: the decisions and how long each took, the accounting's figures, and
the text and JSON the demo prints and writes (pure: no I/O)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from specguard.api import constants as c
from specguard.demo._accounting import Totals, Window, lagged_best, served_ratios, totals
from specguard.demo._schedule import Span

GOAL_REGRET = 0.05  # within 5% of the per-window best


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
    # The same figures with each phase's served ratio (accounting.served_ratios)
    served: Totals | None = None
    # accounting.lagged_best: the on/off reference that switches after ``lag`` windows in a
    # row showing the other arm faster (rollback, re-promotion), with no swap to wait for
    lagged_best_s: float | None = None
    lag: tuple[int, int] | None = None

    @property
    def phase_best_s(self) -> float | None:
        """The better of always and never in each phase, token-weighted over the phases: what
        an on/off policy that knew the schedule would realize, switching at each phase's
        start with no swap to wait for. Unlike the per-window best it cannot take a window
        that only looked good because of load the arm had not caught up with yet (an
        open-loop queue still growing): a phase is served by one arm."""
        kept = [pt for _, pt in self.phases if pt is not None]
        tokens = sum(pt.tokens for pt in kept)
        if not tokens:
            return None
        return sum(min(pt.always_s, pt.never_s) * pt.tokens for pt in kept) / tokens

    @property
    def goal(self) -> dict[str, bool] | None:
        """The issue's goal by the pairs' figures (``goal_served``: by the served windows')."""
        return None if self.overall is None else _goal(self.overall)

    @property
    def goal_served(self) -> dict[str, bool] | None:
        return None if self.served is None else _goal(self.served)


def summarize(
    windows: Sequence[Window],
    spans: Sequence[Span],
    found: Sequence[Decision],
    *,
    requests: int,
    errors: int,
    errors_in_swaps: int = 0,
    lag: tuple[int, int] | None = None,
) -> Summary:
    """``lag``: the windows of evidence the operator needs (to roll back, to re-promote),
    for the lagged best (``Summary.lagged_best_s``); None leaves it out."""
    phases = tuple((s, totals(w for w in windows if w.phase == s.index)) for s in spans)
    lagged = None if lag is None else lagged_best(
        windows, rollback_after=lag[0], repromote_after=lag[1]
    )  # fmt: skip
    return Summary(
        totals(windows), phases, tuple(found), requests, errors, sum(w.pairs for w in windows),
        errors_in_swaps, totals(served_ratios(windows)), lagged, lag,
    )  # fmt: skip


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


def _change(a: float, b: float) -> str:
    change = (a / b - 1.0) * 100.0
    return f"{'+' if change >= 0 else '−'}{abs(change):.1f}%"


def _goal(t: Totals) -> dict[str, bool]:
    return {
        "within_5pct_of_best": t.regret <= GOAL_REGRET,
        "better_than_always": t.realized_s < t.always_s,
        "better_than_never": t.realized_s < t.never_s,
    }


def _goal_text(t: Totals) -> str:
    g = _goal(t)
    yes = {True: "yes", False: "no"}
    return (
        f"within {GOAL_REGRET:.0%} of the best {yes[g['within_5pct_of_best']]}, better than "
        f"always {yes[g['better_than_always']]}, better than never {yes[g['better_than_never']]}"
    )


def summary_lines(s: Summary, *, time_scale: float, window_s: float) -> list[str]:
    lines = [
        "Per-token latency over the schedule, token-weighted over the client's requests "
        f"(wall-clock ms; the simulator runs at time scale {time_scale:g}). The other arm's "
        "figure comes from the mirrored pairs (the shadow at the serving pods' in-flight "
        "count for closed-loop clients, at their arrivals for open-loop ones), or from the "
        "windows that arm served the client itself:"
    ]
    t, v = s.overall, s.served
    if t is None:
        return [*lines, "  no window has both client tokens and paired measurements"]

    def row(label: str, a: float, b: float | None, note: str = "") -> str:
        second = "" if b is None else f"{b * 1000:>10.2f}"
        return f"  {label:<22}{a * 1000:>10.2f}{second:>16}  {note}".rstrip()

    lines.append(f"  {'':<22}{'pairs':>10}{'served':>16}")
    lines.append(row("specguard (realized)", t.realized_s, None if v is None else v.realized_s))
    for label, a, b in (
        ("always drafter", t.always_s, None if v is None else v.always_s),
        ("never drafter", t.never_s, None if v is None else v.never_s),
    ):
        lines.append(row(label, a, b, f"specguard {_change(t.realized_s, a)}"
                         + ("" if b is None else f" / {_change(t.realized_s, b)}")))  # fmt: skip
    lines.append(row("per-window best", t.best_s, None if v is None else v.best_s,
                     f"regret {_change(t.realized_s, t.best_s)}"
                     + ("" if v is None else f" / {_change(v.realized_s, v.best_s)}")))  # fmt: skip
    if s.phase_best_s is not None:
        lines.append(row("per-phase best on/off", s.phase_best_s, None,
                         f"specguard {_change(t.realized_s, s.phase_best_s)}"))  # fmt: skip
    if s.lagged_best_s is not None and s.lag is not None:
        note = (
            f"specguard {_change(t.realized_s, s.lagged_best_s)}; it is "
            f"{_change(s.lagged_best_s, t.best_s)} of the per-window best"
        )
        lines.append(row(f"best after {s.lag[0]}/{s.lag[1]} windows", s.lagged_best_s, None, note))
    for span, pt in s.phases:
        if pt is None:
            continue
        p = span.phase
        lines.append(
            f"  phase {span.index + 1} {p.label()} ({p.per_pod_text()}, {p.seconds:g}s), pairs: "
            f"realized {_ms(pt.realized_s)}, always {_ms(pt.always_s)}, never "
            f"{_ms(pt.never_s)}, best {_ms(pt.best_s)}"
        )
    lines.append(
        f"  {t.windows} windows of {window_s:g}s ({t.borrowed} during swaps with the phase's "
        f"nearest measured ratio, {t.left_out} left out); {s.pairs} mirrored pairs; "
        f"{s.requests} client requests, {s.errors} errors ({s.errors_in_swaps} of them ended "
        "during a swap)"
    )
    lines.append("Decisions:")
    if not s.decisions:
        lines.append("  none: the operator did not change the mode during the schedule")
    for d in s.decisions:
        what = "rolled back to baseline" if d.rollback else "re-promoted the drafter"
        done = "" if d.swap_windows is None else f", serving after {d.swap_windows:.1f}"
        lines.append(
            f"  {what} ({d.reason}): decided {d.windows:.1f} windows after phase {d.phase + 1} "
            f"began{done}"
        )
    lines.append(f"Goal, by the pairs: {_goal_text(t)}")
    if v is not None:
        lines.append(f"Goal, by the served windows: {_goal_text(v)}")
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
        "window (overall), or from the phase's windows each arm served (served); best = "
        "per-window minimum",
        "overall": figures(s.overall),
        "served": figures(s.served),
        "phase_best_s": s.phase_best_s,
        "lagged_best_s": s.lagged_best_s,
        "lag_windows": None if s.lag is None else list(s.lag),
        "errors_in_swaps": s.errors_in_swaps,
        "phases": [
            {
                "phase": span.index + 1,
                "domain": span.phase.domain,
                "per_pod": span.phase.per_pod,
                "rate_per_pod": span.phase.rate,
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
        "goal_served": s.goal_served,
    }


def side_by_side(
    runs: Sequence[tuple[str, Mapping[str, Any]]], *, goal: float = 0.01
) -> list[str]:
    """The regret bench's table (bench/regret.py): one column per run, each a label and the
    ``summary.json`` the demo wrote for it. Per-token latency (ms) realized by the operator,
    always drafter, never drafter and the per-window best from the mirrored pairs, realized
    against each, the per-phase best on/off (``Summary.phase_best_s``), the best after K
    windows (``Summary.lagged_best_s``), the served estimate's regret, the load-match rule
    over time, the decisions, and whether the goal holds: within ``goal`` of the best after
    K windows — the reference for an operator that acts on K windows in a row — and below
    both always and never (the per-window best, which no policy that must see a window
    first can reach, stays printed)."""
    rows: list[tuple[str, Sequence[str]]] = [("", [label for label, _ in runs])]

    def line(name: str, cells: Sequence[str]) -> None:
        rows.append((name, cells))

    def figure(report: Mapping[str, Any], key: str, vs: str | None = None) -> str:
        o = report.get("overall")
        if not o:
            return "n/a"
        text = f"{o[key] * 1000:.2f} ms"
        if vs is not None:
            text += f" ({_change(o['realized_s'], o[vs])})"
        return text

    reports = [r for _, r in runs]
    line("schedule", [str(r.get("settings", {}).get("schedule", "?")) for r in reports])
    line("realized (specguard)", [figure(r, "realized_s") for r in reports])
    line("always drafter", [figure(r, "always_s", "always_s") for r in reports])
    line("never drafter", [figure(r, "never_s", "never_s") for r in reports])
    line("per-window best", [figure(r, "best_s", "best_s") for r in reports])
    line("per-phase best on/off", [
        "n/a" if not r.get("overall") or r.get("phase_best_s") is None else
        f"{_ms(r['phase_best_s'])} ({_change(r['overall']['realized_s'], r['phase_best_s'])})"
        for r in reports
    ])  # fmt: skip
    line("best after K windows", [_lagged(r) for r in reports])
    line("regret, served estimate", [
        "n/a" if not r.get("served") else
        _change(r["served"]["realized_s"], r["served"]["best_s"]) for r in reports
    ])  # fmt: skip
    line("load match", [_rules(r.get("load_match") or []) for r in reports])
    line("clients found", [_rules(r.get("clients") or []) for r in reports])
    line("decisions (windows)", [_decided(r.get("decisions") or []) for r in reports])
    line("requests, errors", [f"{r.get('requests', 0)}, {r.get('errors', 0)}" for r in reports])
    verdicts = []
    for r in reports:
        o, lagged = r.get("overall"), r.get("lagged_best_s")
        if not o or lagged is None:
            verdicts.append("n/a")
            continue
        ok = (o["realized_s"] <= (1 + goal) * lagged, o["realized_s"] < o["always_s"],
              o["realized_s"] < o["never_s"])  # fmt: skip
        names = (f">{goal:.0%} of best after K", "≥ always", "≥ never")
        verdicts.append("met" if all(ok) else "missed: " + ", ".join(
            what for what, fine in zip(names, ok, strict=True) if not fine))  # fmt: skip
    line(f"goal (≤{goal:.0%} of K, < both)", verdicts)
    width = 2 + max(len(cell) for _, cells in rows for cell in cells)
    return [f"{name:<24}" + "".join(f"{cell:>{width}}" for cell in cells) for name, cells in rows]


def _lagged(report: Mapping[str, Any]) -> str:
    """The lagged best's cell: ``37.89 ms after 2/3 (+1.2%)``, realized against it."""
    o, lagged, lag = report.get("overall"), report.get("lagged_best_s"), report.get("lag_windows")
    if not o or lagged is None or not lag:
        return "n/a"
    return f"{_ms(lagged)} after {lag[0]}/{lag[1]} ({_change(o['realized_s'], lagged)})"


def _rules(changes: Sequence[Sequence[Any]]) -> str:
    """``[[t, value], ...]`` → ``in_flight`` or ``in_flight→arrivals@25s`` (empty values,
    before status had one, left out)."""
    changes = [c for c in changes if c[1]]
    if not changes:
        return "?"
    first, *rest = changes
    return str(first[1]) + "".join(f"→{rule}@{t:.0f}s" for t, rule in rest)


def _decided(found: Sequence[Mapping[str, Any]]) -> str:
    if not found:
        return "none"
    return ", ".join(
        f"{'rollback' if d['to_mode'] == c.ARM_BASELINE else 'back'} {d['windows']:.1f}"
        f"/p{d['phase']}" for d in found
    )


__all__ = [
    "GOAL_REGRET",
    "Decision",
    "Summary",
    "decisions",
    "in_swaps",
    "side_by_side",
    "summarize",
    "summary_json",
    "summary_lines",
]
