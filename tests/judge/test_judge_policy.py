"""The decision policy as a state machine: K windows, cooldown, stricter re-promotion, flaps,
dry run, off, manual commands, guardrails."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from specguard.judge._policy import (
    Decision,
    Guardrails,
    PolicySettings,
    PolicyState,
    error_guardrail,
    step,
)
from specguard.judge._verdict import Outcome, Verdict

WINDOW = 60.0


def verdict(outcome: Outcome, confidence: float = 0.99) -> Verdict:
    ratio = {"regressed": 1.3, "improved": 0.7, "neutral": 1.0, "inconclusive": None}[outcome]
    return Verdict(
        outcome=outcome,
        ratio=ratio,
        ci_low=None if ratio is None else ratio - 0.05,
        ci_high=None if ratio is None else ratio + 0.05,
        confidence=confidence,
        tolerance=0.03,
        method="none" if ratio is None else "stratified",
        basis="test",
        median_s={},
        n={"speculative": 200, "baseline": 200},
        reasons=("too few usable requests",) if ratio is None else (),
    )


def run(
    outcomes: str, settings: PolicySettings, state: PolicyState | None = None, t0: float = 0.0
) -> tuple[PolicyState, list[Decision]]:
    """Feed a string of outcomes (R regressed, I improved, N neutral, ? inconclusive, - none)."""
    names: dict[str, Outcome] = {
        "R": "regressed",
        "I": "improved",
        "N": "neutral",
        "?": "inconclusive",
    }
    state = state or PolicyState(since=t0)
    decisions = []
    for i, ch in enumerate(outcomes):
        v = None if ch == "-" else verdict(names[ch])
        state, d = step(state, settings, t0 + (i + 1) * WINDOW, verdict=v)
        decisions.append(d)
    return state, decisions


def actions(decisions: list[Decision]) -> str:
    return "".join(
        {"hold": ".", "rollback": "B", "repromote": "S", "notify": "n"}[d.action] for d in decisions
    )


def test_rolls_back_after_k_agreeing_windows_only() -> None:
    s = PolicySettings(consecutive_windows=3)
    assert actions(run("RRNRR", s)[1]) == "....."
    state, ds = run("RRR", s)
    assert actions(ds) == "..B"
    assert state.mode == "baseline" and ds[-1].mode == "baseline"
    assert "regressed 3 windows in a row" in ds[-1].reason
    assert "1.300" in ds[-1].reason  # the verdict's numbers travel with the decision


def test_inconclusive_or_missing_windows_reset_the_streak_and_never_roll_back() -> None:
    s = PolicySettings(consecutive_windows=3)
    assert actions(run("RR?RR-RR", s)[1]) == "........"
    assert actions(run("????????????", s)[1]) == "." * 12
    assert actions(run("------------", s)[1]) == "." * 12


def test_repromotion_needs_cooldown_and_k_plus_one_windows() -> None:
    s = PolicySettings(consecutive_windows=2, cooldown_s=10 * WINDOW)
    state, ds = run("RR", s)
    assert state.mode == "baseline"
    # Improved windows every minute after the rollback at t=120; the cooldown ends at t=720,
    # so windows ending at 180..660 (9 of them) do not count, then 720, 780, 840 do.
    state, ds = run("IIIIIIIIIIII", s, state, t0=2 * WINDOW)
    assert actions(ds) == "." * 11 + "S"
    assert "cooldown" in ds[0].reason
    assert state.mode == "speculative"
    assert s.windows_to_repromote == 3


def test_cooldown_counts_from_a_transition_at_time_zero() -> None:
    # A replayed or synthetic clock may start at 0: a rollback at t=0 is still a transition.
    s = PolicySettings(consecutive_windows=1, cooldown_s=10 * WINDOW)
    state = PolicyState(mode="baseline", since=0.0)
    state, ds = run("III", s, state, t0=0.0)
    assert actions(ds) == "..." and state.mode == "baseline"
    assert "cooldown" in ds[0].reason


def test_repromotion_streak_breaks_on_neutral() -> None:
    s = PolicySettings(consecutive_windows=2, cooldown_s=0)  # re-promotion needs 3
    state, _ = run("RR", s)
    state, ds = run("IINIIN", s, state, t0=2 * WINDOW)
    assert actions(ds) == "......" and state.mode == "baseline"


def test_repromotion_confidence_floor() -> None:
    s = PolicySettings(consecutive_windows=1, cooldown_s=0, repromote_confidence=0.999)
    state, _ = run("R", s)
    for i in range(5):
        state, d = step(state, s, 100.0 + i, verdict=verdict("improved", confidence=0.99))
        assert d.action == "hold" and "needs 99.9%" in d.reason
    for i in range(2):
        state, d = step(state, s, 200.0 + i, verdict=verdict("improved", confidence=0.999))
    assert d.action == "repromote"


def test_manual_repromote_setting_only_notifies() -> None:
    s = PolicySettings(consecutive_windows=1, cooldown_s=0, repromote="manual")
    state, _ = run("R", s)
    state, ds = run("II", s, state, t0=WINDOW)
    assert actions(ds) == ".n" and state.mode == "baseline"
    assert "would re-promote" in ds[-1].reason


def test_manual_repromote_command_acts_at_once_and_clears_flaps() -> None:
    s = PolicySettings(consecutive_windows=1, cooldown_s=0, max_flaps=1)
    state, _ = run("R", s)
    assert state.halted
    state, d = step(state, s, 1000.0, command="repromote")
    assert d.action == "repromote" and state.mode == "speculative"
    assert not state.halted and state.transitions == ()


def test_flap_limit_stops_automatic_changes_with_a_warning() -> None:
    s = PolicySettings(consecutive_windows=1, cooldown_s=0, max_flaps=3, repromote_windows=1)
    state, ds = run("RIRIRI", s)
    assert actions(ds)[:3] == "BSB"
    assert ds[2].warning and "automatic changes stop" in ds[2].reason
    assert state.halted and state.mode == "baseline"
    assert all(d.action in ("notify", "hold") for d in ds[3:])
    notified = [d for d in ds[3:] if d.action == "notify"]
    assert notified and all(d.warning for d in notified)
    # reset lets it act again
    state, d = step(state, s, 10_000.0, command="reset", verdict=verdict("improved"))
    assert d.action == "repromote"


def test_flaps_outside_the_window_are_forgotten() -> None:
    s = PolicySettings(
        consecutive_windows=1, cooldown_s=0, max_flaps=2, flap_window_s=100, repromote_windows=1
    )
    state = PolicyState()
    state, d = step(state, s, 0.0, verdict=verdict("regressed"))
    assert d.action == "rollback" and d.flaps == 1
    state, d = step(state, s, 500.0, verdict=verdict("improved"))
    assert d.action == "repromote" and d.flaps == 1 and not state.halted


def test_dry_run_reports_would_roll_back_and_keeps_mode() -> None:
    s = PolicySettings(policy="notify", consecutive_windows=3)
    state, ds = run("RRRRRR", s)
    assert actions(ds) == "..n..n"
    assert ds[2].reason.startswith("would roll back (dry run)")
    assert state.mode == "speculative" and state.transitions == ()


def test_policy_off_never_acts_even_on_guardrails() -> None:
    s = PolicySettings(policy="off", consecutive_windows=1)
    g = Guardrails(drafter_ready=False, drafter_since=0.0)
    state, d = step(PolicyState(), s, 1e6, verdict=verdict("regressed"), guardrails=g)
    assert d.action == "hold" and d.reason == "policy off" and state.mode == "speculative"


def test_startup_deadline_guardrail_acts_at_once() -> None:
    s = PolicySettings(startup_deadline_s=1200)
    g = Guardrails(drafter_ready=False, drafter_since=100.0)
    _, d = step(PolicyState(), s, 1299.0, guardrails=g)
    assert d.action == "hold"
    state, d = step(PolicyState(), s, 1300.0, guardrails=g)
    assert d.action == "rollback" and d.guardrail and d.warning
    assert "not ready 1200s after start" in d.reason
    assert state.mode == "baseline"
    ready = Guardrails(drafter_ready=True, drafter_since=100.0)
    assert step(PolicyState(), s, 1e6, guardrails=ready)[1].action == "hold"


def test_guardrail_acts_even_when_halted_but_dry_run_only_notifies() -> None:
    g = Guardrails(drafter_ready=False, drafter_since=0.0)
    halted = PolicyState(halted=True)
    _, d = step(halted, PolicySettings(), 1e5, guardrails=g)
    assert d.action == "rollback"
    _, d = step(PolicyState(), PolicySettings(policy="notify"), 1e5, guardrails=g)
    assert d.action == "notify" and d.guardrail


@pytest.mark.parametrize(
    ("spec", "base", "trips"),
    [
        ((10, 100), (1, 100), True),  # 10% vs 1%: 10× and +9 points
        ((10, 100), (3, 100), False),  # 10% vs 3%: only 3.3×
        ((6, 100), (0, 100), True),  # 6% vs 0%: +6 points
        ((4, 100), (0, 100), False),  # only 4 errors: below the minimum count
        ((3, 40), (0, 100), False),  # only 40 requests
        ((12, 200), (0, 0), True),  # no baseline observed: rate taken as 0, margin applies
        ((40, 100), (10, 100), False),  # 40% vs 10%: 4×
    ],
)
def test_error_guardrail_rule(spec: tuple[int, int], base: tuple[int, int], trips: bool) -> None:
    g = Guardrails(
        spec_errors=spec[0], spec_requests=spec[1], base_errors=base[0], base_requests=base[1]
    )
    assert (error_guardrail(g, PolicySettings()) is not None) == trips


def test_error_guardrail_blocks_repromotion() -> None:
    s = PolicySettings(consecutive_windows=1, cooldown_s=0, repromote_windows=1)
    state = PolicyState(mode="baseline", since=0.0)
    bad = Guardrails(spec_errors=20, spec_requests=100, base_errors=0, base_requests=100)
    state, d = step(state, s, 10.0, verdict=verdict("improved"), guardrails=bad)
    assert d.action == "hold" and "error rate" in d.reason and state.mode == "baseline"


def test_guardrails_from_verdict_counts() -> None:
    v = replace(
        verdict("neutral"),
        requests={"speculative": 100, "baseline": 80},
        errors={"speculative": 9, "baseline": 0},
    )
    g = Guardrails.from_verdict(v, drafter_ready=True, drafter_since=5.0)
    assert (g.spec_requests, g.spec_errors, g.base_requests, g.base_errors) == (100, 9, 80, 0)
    assert error_guardrail(g, PolicySettings()) is not None


def test_state_round_trips_through_json() -> None:
    s = PolicySettings(consecutive_windows=1, cooldown_s=0)
    state, _ = run("RI", s)
    again = PolicyState.from_dict(json.loads(json.dumps(state.to_dict())))
    assert again == state
    with pytest.raises(ValueError, match="mode"):
        PolicyState.from_dict({"mode": "weird"})


def test_settings_are_validated() -> None:
    with pytest.raises(ValueError, match="policy"):
        PolicySettings(policy="sometimes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="consecutive_windows"):
        PolicySettings(consecutive_windows=0)
