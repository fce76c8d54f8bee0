"""The demo's accounting (realized vs always / never / per-window best) and the decisions'
timing, by exact equality on hand-made windows."""

from __future__ import annotations

from dataclasses import replace

import pytest

from specguard._args import UsageError
from specguard.demo._accounting import (
    ClientRecord,
    Window,
    borrow_ratios,
    cut,
    lagged_best,
    measure,
    served_ratios,
    totals,
    windows_between,
    with_inflight,
)
from specguard.demo._report import (
    decisions,
    in_swaps,
    side_by_side,
    summarize,
    summary_json,
    summary_lines,
)
from specguard.demo._schedule import Phase, format_schedule, parse_schedule, spans
from specguard.judge._sample import Sample

T0 = 1000.0
SCHEDULE = (Phase("math", 4, 40), Phase("tool_call", 144, 100), Phase("math", 4, 25))


def window(phase: int, tokens: int, realized: float, ratio: float | None, share: float,
           *, borrowed: bool = False) -> Window:  # fmt: skip
    """A window where the client got ``tokens`` decode tokens at ``realized`` s per token and
    the drafter arm served ``share`` of them."""
    served = 1000
    return Window(
        phase, 0.0, 10.0, tokens=tokens, decode_s=realized * tokens,
        served_spec_tokens=int(served * share), served_base_tokens=served - int(served * share),
        ratio=ratio, borrowed=borrowed,
    )  # fmt: skip


def test_windows_restart_at_every_phase_and_the_last_one_may_be_short() -> None:
    cuts = [(w.phase, w.start - T0, w.end - T0) for w in cut(spans(SCHEDULE), T0, 10.0)]
    assert cuts[:4] == [(0, 0.0, 10.0), (0, 10.0, 20.0), (0, 20.0, 30.0), (0, 30.0, 40.0)]
    assert cuts[4] == (1, 40.0, 50.0)
    assert cuts[-3:] == [(2, 140.0, 150.0), (2, 150.0, 160.0), (2, 160.0, 165.0)]
    assert len(cuts) == 4 + 10 + 3


def test_the_arm_that_served_is_what_the_client_got_the_other_is_scaled_by_the_pairs() -> None:
    # The drafter served (share 1) at 0.25 s per token, and on the pairs it took half the
    # baseline's time: never drafter would have been 0.5.
    assert window(0, 100, 0.25, 0.5, 1.0).arms_s() == (0.25, 0.5)
    # Rolled back (share 0): the baseline served at 0.5; the drafter is twice as slow.
    assert window(1, 100, 0.5, 2.0, 0.0).arms_s() == (1.0, 0.5)
    # A swap: half the tokens from each arm. R = ½·6 + ½·2 = 4 with ratio 3.
    assert window(1, 100, 4.0, 3.0, 0.5).arms_s() == (6.0, 2.0)
    # No ratio (no pairs in the phase) or no served tokens: nothing to say.
    assert window(1, 100, 4.0, None, 0.5).arms_s() is None
    assert replace(window(1, 100, 4.0, 3.0, 0.5), served_spec_tokens=0,
                   served_base_tokens=0).arms_s() is None  # fmt: skip


def test_totals_are_token_weighted_over_the_windows() -> None:
    found = totals([
        window(0, 100, 0.25, 0.5, 1.0),   # math, drafter serves: best
        window(1, 400, 1.0, 2.0, 1.0),    # tool calls, drafter still serves: the worse arm
        window(1, 400, 0.5, 2.0, 0.0),    # rolled back: best
        window(2, 100, 0.5, 0.5, 0.0),    # math again, not yet re-promoted: the worse arm
        window(2, 0, 0.0, 0.5, 0.0),      # no client tokens: no weight
    ])  # fmt: skip
    assert found is not None
    assert found.tokens == 1000
    assert found.realized_s == 0.675  # (25 + 400 + 200 + 50) / 1000
    assert found.always_s == 0.85  # (25 + 400 + 400 + 25) / 1000
    assert found.never_s == 0.5  # (50 + 200 + 200 + 50) / 1000
    assert found.best_s == 0.45  # (25 + 200 + 200 + 25) / 1000
    assert found.regret == 0.675 / 0.45 - 1
    assert found.vs_always == 0.675 / 0.85 - 1
    assert found.vs_never == 0.675 / 0.5 - 1
    assert (found.windows, found.borrowed, found.left_out) == (4, 0, 0)


def test_windows_without_a_ratio_are_left_out_and_counted() -> None:
    found = totals([window(0, 100, 0.25, 0.5, 1.0), window(1, 300, 1.0, None, 1.0)])
    assert found is not None
    assert (found.realized_s, found.always_s, found.never_s, found.best_s) == (
        0.25,
        0.25,
        0.5,
        0.25,
    )
    assert (found.windows, found.left_out) == (1, 1)
    assert totals([window(1, 300, 1.0, None, 1.0)]) is None


def test_a_swap_window_borrows_the_nearest_ratio_of_its_phase_earlier_first() -> None:
    ws = [
        window(1, 1, 1.0, 2.0, 1.0),
        window(1, 1, 1.0, None, 0.5),  # swap: neighbours at distance 1 on both sides
        window(1, 1, 1.0, 4.0, 0.0),
        window(1, 1, 1.0, None, 0.0),  # nearest: the one before
        window(2, 1, 1.0, None, 0.0),  # a phase without pairs borrows nothing
        window(2, 1, 1.0, 8.0, 0.0),  # ...except from its own phase
    ]
    ratios = [(w.ratio, w.borrowed) for w in borrow_ratios(ws)]
    assert ratios == [(2.0, False), (2.0, True), (4.0, False), (4.0, True), (8.0, True),
                      (8.0, False)]  # fmt: skip
    assert [w.ratio for w in borrow_ratios([window(3, 1, 1.0, None, 0.0)])] == [None]


def _sample(arm: str, role: str, started: float, tpot: float, *, tokens: int = 65,
            pair: str | None = None, status: int = 200) -> Sample:  # fmt: skip
    return Sample(
        arm=arm, role=role, pod=f"{arm}-0", domain="math", started_at=started, concurrency=4,  # type: ignore[arg-type]
        output_tokens=tokens, e2e_s=1.0, ttft_s=0.1, tpot_s=tpot, pair_id=pair, status=status,
    )  # fmt: skip


def test_measure_takes_client_tokens_pairs_and_served_shares_per_window() -> None:
    windows = cut(spans((Phase("math", 4, 20),)), T0, 10.0)
    client = [
        ClientRecord(T0 + 1, 65, 64 * 0.25),  # 64 decode tokens at 0.25
        ClientRecord(T0 + 2, 33, 32 * 0.5),  # 32 at 0.5
        ClientRecord(T0 + 3, 1, 0.0),  # one token: no per-token latency
        ClientRecord(T0 + 4, 65, 1.0, ok=False),  # failed
        ClientRecord(T0 + 11, 17, 16 * 0.125),
        ClientRecord(T0 - 5, 65, 64.0),  # before the schedule
    ]
    samples = [
        # a pair in window 0: drafter 0.25, baseline 1.0 per token
        _sample("speculative", "serving", T0 + 1, 0.25, pair="a"),
        _sample("baseline", "shadow", T0 + 1.01, 1.0, pair="a"),
        # another: drafter 0.5 over 32 tokens, baseline 1.0
        _sample("speculative", "serving", T0 + 2, 0.5, tokens=33, pair="b"),
        _sample("baseline", "shadow", T0 + 2, 1.0, tokens=33, pair="b"),
        # served but not mirrored; a lone shadow half; a failed half
        _sample("speculative", "serving", T0 + 3, 0.25),
        _sample("baseline", "shadow", T0 + 4, 1.0, pair="lonely"),
        _sample("speculative", "serving", T0 + 5, 0.25, pair="c", status=500),
        _sample("baseline", "shadow", T0 + 5, 1.0, pair="c"),
        # window 1: the baseline serves (rolled back), a pair whose halves straddle the cut
        _sample("baseline", "serving", T0 + 9.99, 0.5, tokens=17, pair="d"),
        _sample("speculative", "shadow", T0 + 10.01, 1.5, tokens=17, pair="d"),
        _sample("baseline", "serving", T0 + 12, 0.5, tokens=17),
    ]
    w0, w1 = measure(windows, client, samples)
    assert (w0.tokens, w0.decode_s) == (96, 64 * 0.25 + 32 * 0.5)
    # The pairs a, b and d (d counts in the window of its earlier half); c's drafter half
    # failed and "lonely" has one half.
    assert w0.pairs == 3
    assert (w0.spec_tokens, w0.spec_decode_s) == (64 + 32 + 16, 64 * 0.25 + 32 * 0.5 + 16 * 1.5)
    assert (w0.base_tokens, w0.base_decode_s) == (64 + 32 + 16, 64 * 1.0 + 32 * 1.0 + 16 * 0.5)
    assert w0.ratio == (56.0 / 112) / (104.0 / 112)
    # Served halves count where they started: a, b, the unmirrored one; d's baseline half.
    assert (w0.served_spec_tokens, w0.served_base_tokens) == (64 + 32 + 64, 16)
    assert (w1.tokens, w1.decode_s) == (16, 2.0)
    assert (w1.served_spec_tokens, w1.served_base_tokens) == (0, 16)
    assert (w1.pairs, w1.ratio, w1.borrowed) == (0, w0.ratio, True)


def test_decisions_count_windows_from_the_start_of_their_phase() -> None:
    found = decisions(
        [(T0 + 71.0, "baseline", "Regressed"), (T0 + 190.0, "speculative", "Improved"),
         (T0 - 30.0, "speculative", "Improved")],  # before the traffic: not counted
        [(T0 + 60.0, "speculative"), (T0 + 90.0, "baseline"), (T0 + 215.0, "speculative")],
        spans((Phase("math", 4, 40), Phase("tool_call", 144, 100), Phase("math", 4, 90))),
        T0, 10.0,
    )  # fmt: skip
    assert [(d.to_mode, d.phase, d.windows, d.swap_windows) for d in found] == [
        ("baseline", 1, 3.1, 5.0),
        ("speculative", 2, 5.0, 7.5),
    ]
    assert found[0].rollback and not found[1].rollback
    assert windows_between(T0, T0 + 25.0, 10.0) == 2.5


def test_summary_says_whether_the_goal_is_met() -> None:
    ws = [window(0, 100, 0.25, 0.5, 1.0), window(1, 400, 0.5, 2.0, 0.0)]
    summary = summarize(ws, spans(SCHEDULE[:2]), [], requests=12, errors=1)
    assert summary.goal == {"within_5pct_of_best": True, "better_than_always": True,
                            "better_than_never": True}  # fmt: skip
    text = "\n".join(summary_lines(summary, time_scale=2.0, window_s=10.0))
    assert "regret +0.0%" in text and "12 client requests, 1 errors" in text
    assert "none: the operator did not change the mode" in text
    assert "best after" not in text  # no lag given
    lagged = summarize(ws, spans(SCHEDULE[:2]), [], requests=12, errors=1, lag=(2, 3))
    # The drafter serves both windows (the baseline was faster in one only): 0.25, then 1.0.
    assert lagged.lagged_best_s == (100 * 0.25 + 400 * 1.0) / 500
    text = "\n".join(summary_lines(lagged, time_scale=2.0, window_s=10.0))
    assert "  best after 2/3 windows    850.00                  specguard −47.1%; it is " \
           "+88.9% of the per-window best\n" in text  # fmt: skip
    report = summary_json(lagged, {})
    assert (report["lagged_best_s"], report["lag_windows"]) == (0.85, [2, 3])
    late = summarize([window(1, 400, 1.0, 2.0, 1.0)], spans(SCHEDULE[:2]), [], requests=1,
                     errors=0)  # fmt: skip
    assert late.goal == {"within_5pct_of_best": False, "better_than_always": False,
                         "better_than_never": False}  # fmt: skip


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("math:4", "phase 1 'math:4': expected DOMAIN:PER_POD:SECONDS"),
        (
            "math:4:40,chat:4:10",
            "phase 2: domain must be one of math, tool_call, mixed, agents, got 'chat'",
        ),
        ("math:0:40", "phase 1: streams per pod must be 1..512 (or RATE/s for an open loop), "
                      "got '0'"),
        ("math:4:soon", "phase 1: seconds must be 1..3600, got 'soon'"),
        ("math:0/s:40", "phase 1: requests per second per pod must be 0.01..1000, got '0'"),
        ("math:fast/s:40", "phase 1: requests per second per pod must be 0.01..1000, got 'fast'"),
        ("math:nan/s:40", "phase 1: requests per second per pod must be 0.01..1000, got 'nan'"),
        ("math:4s:40", "phase 1: streams per pod must be 1..512 (or RATE/s for an open loop), "
                       "got '4s'"),
    ],
)
def test_bad_schedules_are_one_line_naming_the_phase(text: str, message: str) -> None:
    with pytest.raises(UsageError) as error:
        parse_schedule(text)
    assert str(error.value) == f"--schedule: {message}"


def test_schedule_phases() -> None:
    phases = parse_schedule("math:4:40,tool_call:144:100.5")
    assert phases == (Phase("math", 4, 40.0), Phase("tool_call", 144, 100.5))
    assert [(s.start, s.end) for s in spans(phases)] == [(0.0, 40.0), (40.0, 140.5)]
    assert phases[1].streams(2) == 288
    (mixed,) = parse_schedule("mixed:160:60")
    assert [mixed.domain_of(i) for i in range(4)] == ["math", "tool_call", "math", "tool_call"]
    assert phases[1].domain_of(3) == "tool_call" and mixed.label() == "math + tool calls"
    (agents,) = parse_schedule("agents:64:60")
    assert [agents.domain_of(i) for i in range(8)] == ["math", *["tool_call"] * 3] * 2


def test_open_loop_phases() -> None:
    """``RATE/s``: Poisson arrivals at RATE per serving pod, whatever the answers."""
    phases = parse_schedule("math:2/s:30,tool_call:80/s:90,math:4:20")
    assert phases == (
        Phase("math", 0, 30.0, 2.0),
        Phase("tool_call", 0, 90.0, 80.0),
        Phase("math", 4, 20.0),
    )
    assert [p.open for p in phases] == [True, True, False]
    assert format_schedule(phases) == "math:2/s:30,tool_call:80/s:90,math:4:20"
    assert phases[1].load_text(2) == (
        "160 requests/s arriving at their own pace (80 per serving pod)"
    )
    assert phases[2].load_text(2) == "8 streams (4 per serving pod)"
    assert [p.per_pod_text() for p in phases] == ["2/s/pod", "80/s/pod", "4/pod"]
    assert phases[1].streams(2) == 0


def test_in_flight_per_arm_is_the_mean_of_the_pod_readings_in_each_window() -> None:
    windows = cut(spans((Phase("tool_call", 144, 20),)), T0, 10.0)
    loads = [(T0 + 1, "speculative", 140.0), (T0 + 1, "speculative", 160.0),
             (T0 + 3, "baseline", 100.0), (T0 + 12, "baseline", 240.0),
             (T0 + 30, "baseline", 9.0)]  # fmt: skip
    w0, w1 = with_inflight(windows, loads)
    assert (w0.spec_inflight, w0.base_inflight) == (150.0, 100.0)
    assert (w1.spec_inflight, w1.base_inflight) == (None, 240.0)


def test_served_ratios_compare_the_arms_where_each_served_the_client() -> None:
    ws = [
        window(1, 100, 1.5, 0.5, 1.0),  # the drafter serves at 1.5 s per token
        window(1, 300, 1.5, 0.5, 1.0),
        window(1, 100, 1.2, 0.5, 0.5),  # a swap: neither arm wholly
        window(1, 200, 1.0, 0.5, 0.0),  # the baseline serves at 1.0
        window(2, 100, 0.5, 0.25, 1.0),  # a phase where only the drafter served
    ]
    found = served_ratios(ws)
    assert [w.ratio for w in found] == [1.5, 1.5, 1.5, 1.5, 0.25]
    t = totals(found)
    assert t is not None
    # Phase 1: always 1.5 where it served and 1.5·1.0 after; never 1.5/1.5 and 1.0.
    assert found[2].arms_s() == (1.2 / 1.25 * 1.5, 1.2 / 1.25)
    assert (t.always_s, t.never_s) == (
        (150 + 450 + 100 * 1.2 / 1.25 * 1.5 + 300 + 50) / 800,
        (100 + 300 + 100 * 1.2 / 1.25 + 200 + 200) / 800,
    )


def test_failed_requests_are_counted_in_swaps_from_decision_to_serving() -> None:
    found = decisions(
        [(T0 + 70.0, "baseline", "Regressed")], [(T0 + 80.0, "baseline")],
        spans((Phase("math", 4, 40), Phase("tool_call", 144, 100))), T0, 10.0,
    )  # fmt: skip
    ends = [T0 + 69.9, T0 + 70.0, T0 + 80.0, T0 + 82.0, T0 + 82.1]
    assert in_swaps(ends, found) == 3
    assert in_swaps(ends, [replace(found[0], swap_done=None)]) == 4


def _report(realized: float, always: float, never: float, best: float) -> dict[str, object]:
    figures = {"realized_s": realized, "always_s": always, "never_s": never, "best_s": best}
    return {
        "settings": {"schedule": "math:4:30"},
        "overall": figures,
        "served": {**figures, "realized_s": realized * 1.01},
        "load_match": [[0.0, "in_flight"], [25.4, "arrivals"]],
        "clients": [[-0.5, ""], [12.0, "unknown"], [22.1, "open"]],
        "decisions": [{"to_mode": "baseline", "windows": 1.5, "phase": 2},
                      {"to_mode": "speculative", "windows": 3.2, "phase": 3}],
        "requests": 1000,
        "errors": 0,
    }  # fmt: skip


def test_the_regret_bench_table_puts_the_kinds_side_by_side() -> None:
    """bench/regret.py's table, from summary.json reports: the figures, realized against
    each, the rule's changes, the decisions, and the goal (within 1% of the best after K
    windows, below both always and never; n/a for a report without that reference)."""
    met = {**_report(0.0390, 0.0420, 0.0400, 0.0380), "lagged_best_s": 0.0392,
           "lag_windows": [2, 3]}
    missed = {**_report(0.0400, 0.0390, 0.0500, 0.0380), "load_match": [[0.0, "in_flight"]],
              "phase_best_s": 0.0385, "lagged_best_s": 0.0392, "lag_windows": [2, 3]}
    old = {**_report(0.0390, 0.0420, 0.0400, 0.0380)}  # written before the lagged best
    rows = side_by_side([("closed loop", met), ("open loop", missed), ("old", old)])
    w = 39  # the widest cell and 2

    def row(name: str, a: str, b: str, c: str) -> str:
        return f"{name:<24}{a:>{w}}{b:>{w}}{c:>{w}}"

    assert rows == [
        row("", "closed loop", "open loop", "old"),
        row("schedule", "math:4:30", "math:4:30", "math:4:30"),
        row("realized (specguard)", "39.00 ms", "40.00 ms", "39.00 ms"),
        row("always drafter", "42.00 ms (−7.1%)", "39.00 ms (+2.6%)", "42.00 ms (−7.1%)"),
        row("never drafter", "40.00 ms (−2.5%)", "50.00 ms (−20.0%)", "40.00 ms (−2.5%)"),
        row("per-window best", "38.00 ms (+2.6%)", "38.00 ms (+5.3%)", "38.00 ms (+2.6%)"),
        row("per-phase best on/off", "n/a", "38.50 ms (+3.9%)", "n/a"),
        row("best after K windows", "39.20 ms after 2/3 (−0.5%)", "39.20 ms after 2/3 (+2.0%)",
            "n/a"),
        row("regret, served estimate", "+3.7%", "+6.3%", "+3.7%"),
        row("load match", "in_flight→arrivals@25s", "in_flight", "in_flight→arrivals@25s"),
        row("clients found", "unknown→open@22s", "unknown→open@22s", "unknown→open@22s"),
        row("decisions (windows)", "rollback 1.5/p2, back 3.2/p3",
            "rollback 1.5/p2, back 3.2/p3", "rollback 1.5/p2, back 3.2/p3"),
        row("requests, errors", "1000, 0", "1000, 0", "1000, 0"),
        row("goal (≤1% of K, < both)", "met", "missed: >1% of best after K, ≥ always", "n/a"),
    ]


def test_the_per_phase_best_takes_the_better_arm_of_each_phase_token_weighted() -> None:
    """What an on/off policy that knew the schedule would realize: per phase, the better of
    always and never, weighted by the phase's tokens. In the tool-call phase the drafter's
    first window looks better (a queue not yet grown) and the per-window best takes it; a
    phase is served by one arm, and here the baseline is the better one over the phase."""
    ws = [
        window(0, 100, 1.0, 0.5, 1.0),  # math: the drafter twice as fast
        window(1, 300, 0.6, 0.5, 1.0),  # tool calls: the drafter ahead while its queue grows
        window(1, 300, 2.0, 2.0, 1.0),  # ... then 2x behind: over the phase never is better
    ]
    s = summarize(ws, spans((Phase("math", 4, 10), Phase("tool_call", 144, 20))), [],
                  requests=3, errors=0)  # fmt: skip
    (_, math_totals), (_, tool_totals) = s.phases
    assert math_totals is not None and tool_totals is not None
    assert (tool_totals.always_s, tool_totals.never_s) == ((180 + 600) / 600, (360 + 300) / 600)
    assert s.phase_best_s == (100 * 1.0 + (360 + 300)) / 700
    assert s.overall is not None and s.overall.best_s == (100 * 1.0 + 180 + 300) / 700
    assert summarize([], [], [], requests=0, errors=0).phase_best_s is None


def test_the_lagged_best_switches_after_k_windows_showing_the_other_arm_faster() -> None:
    """The best on/off policy that must see its evidence first: it serves the drafter until
    the baseline was faster in ``rollback_after`` windows in a row, then the baseline until
    the drafter was faster in ``repromote_after``; a window where the served arm was faster
    breaks the count, a window without figures neither counts nor breaks it."""
    ws = [
        window(0, 100, 1.0, 0.5, 1.0),  # math: drafter 1.0, baseline 2.0 -> serves 1.0
        window(1, 100, 2.0, 2.0, 1.0),  # tool calls: drafter 2.0, baseline 1.0 (1 in a row)
        window(1, 100, 0.5, 0.5, 1.0),  # the drafter faster again: the count breaks
        window(1, 100, 2.0, 2.0, 1.0),  # 1
        window(1, 100, 1.0, None, 1.0),  # no ratio: left out, the count stays
        window(1, 100, 2.0, 2.0, 1.0),  # 2: rolls back after this window
        window(1, 100, 1.0, 2.0, 0.0),  # the baseline serves 1.0
        window(2, 100, 2.0, 0.5, 0.0),  # math: the baseline 2.0, the drafter 1.0 (1)
        window(2, 100, 2.0, 0.5, 0.0),  # 2
        window(2, 100, 2.0, 0.5, 0.0),  # 3: re-promoted after this window
        window(2, 100, 1.0, 0.5, 1.0),  # the drafter serves 1.0
    ]
    served = [1.0, 2.0, 0.5, 2.0, 2.0, 1.0, 2.0, 2.0, 2.0, 1.0]
    assert lagged_best(ws, rollback_after=2, repromote_after=3) == sum(
        100 * x for x in served) / 1000  # fmt: skip
    # Acting on every window: one window late at each change (the drafter in the tool calls'
    # first window, the baseline in the drafter's good one, the drafter in the next, the
    # baseline in the math's first).
    quick = [1.0, 2.0, 1.0, 2.0, 1.0, 1.0, 2.0, 1.0, 1.0, 1.0]
    assert lagged_best(ws, rollback_after=1, repromote_after=1) == sum(
        100 * x for x in quick) / 1000  # fmt: skip
    found, quickest = totals(ws), lagged_best(ws, rollback_after=1, repromote_after=1)
    assert found is not None and quickest is not None and found.best_s < quickest
    assert lagged_best([window(1, 100, 1.0, None, 1.0)], rollback_after=2,
                       repromote_after=3) is None  # fmt: skip
    with pytest.raises(ValueError, match="at least 1"):
        lagged_best(ws, rollback_after=0, repromote_after=3)
