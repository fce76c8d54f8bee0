"""The decision policy as a state machine: K windows, cooldown, stricter re-promotion, flaps,
dry run, off, pin and retry, guardrails; the stored state's wire form."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from specguard._arms import Arm
from specguard.judge._evidence import ArmErrors, ArmLoad, DraftCounters, Evidence, Startup
from specguard.judge._guardrails import (
    Trip,
    error_rate_exceeded,
    overload_guardrail,
    speculation_guardrail,
)
from specguard.judge._policy import Decision, PolicyState, step
from specguard.judge._settings import PolicySettings
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
        state, d = step(state, settings, t0 + (i + 1) * WINDOW, Evidence(verdict=v))
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


def test_inconclusive_windows_break_the_streak_and_are_no_evidence() -> None:
    streak_only = PolicySettings(consecutive_windows=3, windows_per_false_alarm=0)
    assert actions(run("RR?RR?RR", streak_only)[1]) == "........"
    s = PolicySettings(consecutive_windows=3)
    assert actions(run("????????????", s)[1]) == "." * 12
    # The cumulative evidence holds across a window without evidence: four windows 30%
    # slower around one inconclusive window are a sustained loss.
    _, ds = run("RR?R", s)
    assert actions(ds) == "...B" and ds[-1].reason.startswith("sustained loss: evidence of a loss")
    assert ds[-1].cumulative is not None and ds[-1].cumulative.windows == 3
    # K windows in a row without evidence clear it.
    assert actions(run("RR???RR", s)[1]) == "......."


def test_a_window_that_spans_a_swap_restart_or_resize_never_counts() -> None:
    """Judged and reported, but no evidence: it neither completes a streak nor adds to the
    cumulative evidence (the issue's window across a swap, 'improved 0.572' on 28 pairs,
    counted toward a re-promotion)."""
    s = PolicySettings(consecutive_windows=3, windows_per_false_alarm=0)
    state, _ = run("RR", s)
    for what in ("a swap", "an operator restart", "a change in the pods (baseline 1→0 ready)"):
        spanning = Evidence(verdict("regressed"), spans=what)
        after, d = step(state, s, 1000.0, spanning)
        assert (d.action, after.streak) == ("hold", 0), what
        assert d.reason.startswith(f"window not counted: it spans {what}")
    # The cumulative evidence: the window adds nothing (a gap), however slow it looks.
    on = PolicySettings(consecutive_windows=3)
    state, _ = run("RR", on)
    after, _ = step(state, on, 1000.0, Evidence(verdict("regressed"), spans="a swap"))
    assert after.cumulative == replace(state.cumulative, gap=1) and after.streak == 0
    # Re-promotion: after a rollback and the cooldown, improved windows; the one spanning a
    # swap does not complete the K + 1 = 3.
    s2 = PolicySettings(consecutive_windows=2, cooldown_s=0, windows_per_false_alarm=0)
    state, _ = run("RR", s2)
    state, _ = run("II", s2, state, t0=2 * WINDOW)
    after, d = step(state, s2, 10 * WINDOW, Evidence(verdict("improved"), spans="a swap"))
    assert d.action == "hold" and after.mode == "baseline"
    assert step(state, s2, 10 * WINDOW, Evidence(verdict("improved")))[1].action == "repromote"


def test_between_windows_the_streak_stands() -> None:
    """No verdict (no window ended at this tick) neither counts nor breaks a streak: the
    operator steps every second, a window ends every minute."""
    s = PolicySettings(consecutive_windows=3)
    state, ds = run("RR--R", s)
    assert actions(ds) == "....B" and state.mode == "baseline"
    assert [d.reason for d in ds[2:4]] == ["no window ended"] * 2
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
    s = PolicySettings(consecutive_windows=2, cooldown_s=0, windows_per_false_alarm=0)
    state, _ = run("RR", s)  # re-promotion needs 3 in a row
    state, ds = run("IINIIN", s, state, t0=2 * WINDOW)
    assert actions(ds) == "......" and state.mode == "baseline"
    # With the cumulative rule, four windows 30% faster of five are a sustained gain (it
    # needs K + 1 = 3 windows at least and ln(10) more evidence than a loss).
    on = PolicySettings(consecutive_windows=2, cooldown_s=0)
    state, _ = run("RR", on)
    state, ds = run("IINIIN", on, state, t0=2 * WINDOW)
    assert actions(ds) == "....S." and ds[4].reason.startswith("sustained gain after cooldown")


def test_repromotion_confidence_floor() -> None:
    s = PolicySettings(consecutive_windows=1, cooldown_s=0, repromote_confidence=0.999)
    state, _ = run("R", s)
    for i in range(5):
        state, d = step(state, s, 100.0 + i, Evidence(verdict("improved", confidence=0.99)))
        assert d.action == "hold" and "needs 99.9%" in d.reason
    for i in range(2):
        state, d = step(state, s, 200.0 + i, Evidence(verdict("improved", confidence=0.999)))
    assert d.action == "repromote"


def test_manual_repromote_setting_only_notifies() -> None:
    s = PolicySettings(consecutive_windows=1, cooldown_s=0, repromote="manual")
    state, _ = run("R", s)
    state, ds = run("II", s, state, t0=WINDOW)
    assert actions(ds) == ".n" and state.mode == "baseline"
    assert "would re-promote" in ds[-1].reason


def test_a_new_retry_re_promotes_from_baseline_at_once_and_clears_flaps() -> None:
    s = PolicySettings(consecutive_windows=1, cooldown_s=0, max_flaps=1)
    state, _ = run("R", s)
    assert state.halted
    state, d = step(state, s, 1000.0, Evidence(retry="t1"))
    assert (d.action, d.cause, d.command, d.target) == ("repromote", "Retry", "repromote",
                                                        "speculative")  # fmt: skip
    assert state == PolicyState(mode="speculative", since=1000.0, retry_seen="t1")
    # the same value again is no command
    again, d = step(state, s, 1001.0, Evidence(retry="t1"))
    assert again == state and d.command is None and d.action == "hold"


def test_flap_limit_stops_automatic_changes_with_a_warning() -> None:
    s = PolicySettings(consecutive_windows=1, cooldown_s=0, max_flaps=3, repromote_windows=1)
    state, ds = run("RIRIRI", s)
    assert actions(ds)[:3] == "BSB"
    assert ds[2].warning and "automatic changes stop" in ds[2].reason
    assert state.halted and state.mode == "baseline"
    assert all(d.action in ("notify", "hold") for d in ds[3:])
    notified = [d for d in ds[3:] if d.action == "notify"]
    assert notified and all(d.warning for d in notified)
    # a retry lets it act again
    state, d = step(state, s, 10_000.0, Evidence(verdict("improved"), retry="x"))
    assert (d.action, d.command, state.halted) == ("repromote", "repromote", False)
    # from speculative, a retry clears the stop and the window counts at once
    halted = PolicyState(halted=True, flap_times=(9_000.0,), streak=0)
    state, d = step(halted, s, 10_000.0, Evidence(verdict("regressed"), retry="y"))
    assert (d.action, d.command, state.mode) == ("rollback", "reset", "baseline")


def test_flaps_outside_the_window_are_forgotten() -> None:
    s = PolicySettings(
        consecutive_windows=1, cooldown_s=0, max_flaps=2, flap_window_s=100, repromote_windows=1
    )
    state = PolicyState()
    state, d = step(state, s, 0.0, Evidence(verdict("regressed")))
    assert d.action == "rollback" and d.flaps == 1
    state, d = step(state, s, 500.0, Evidence(verdict("improved")))
    assert d.action == "repromote" and d.flaps == 1 and not state.halted


def test_dry_run_reports_would_roll_back_and_keeps_mode() -> None:
    s = PolicySettings(policy="notify", consecutive_windows=3)
    state, ds = run("RRRRRR", s)
    assert actions(ds) == "..n..n"
    assert ds[2].reason.startswith("would roll back (dry run)")
    assert state.mode == "speculative" and state.flap_times == ()
    assert (ds[2].cause, ds[2].target) == ("WouldRollBack", "speculative")


LATE = Startup(ready=False, since=0.0)


def test_policy_off_never_acts_even_on_guardrails_but_says_which_tripped() -> None:
    s = PolicySettings(policy="off", consecutive_windows=1, startup_deadline_s=60)
    state, d = step(PolicyState(), s, 1e6, Evidence(verdict("regressed"), startup=LATE))
    assert (d.action, d.reason, state.mode) == ("hold", "policy off", "speculative")
    assert d.trip is not None and d.trip.cause == "DrafterStartupFailed" and not d.guardrail


def test_startup_deadline_guardrail_acts_at_once() -> None:
    s = PolicySettings(startup_deadline_s=1200)
    late = Evidence(startup=Startup(ready=False, since=100.0))
    _, d = step(PolicyState(), s, 1299.0, late)
    assert d.action == "hold"
    state, d = step(PolicyState(), s, 1300.0, late)
    assert d == Decision(
        "rollback",
        "guardrail: drafter pods not ready 1200s after start (startup deadline 1200s)",
        "baseline",
        "baseline",
        "DrafterStartupFailed",
        warning=True,
        trip=Trip("startup", "DrafterStartupFailed",
                  "drafter pods not ready 1200s after start (startup deadline 1200s)"),
        flaps=1,
    )  # fmt: skip
    assert d.guardrail and state.mode == "baseline"
    ready = Evidence(startup=Startup(ready=True, since=100.0))
    assert step(PolicyState(), s, 1e6, ready)[1].action == "hold"


def test_guardrail_acts_even_when_halted_but_dry_run_only_notifies() -> None:
    late = Evidence(startup=LATE)
    halted = PolicyState(halted=True)
    _, d = step(halted, PolicySettings(), 1e5, late)
    assert d.action == "rollback"
    _, d = step(PolicyState(), PolicySettings(policy="notify"), 1e5, late)
    assert d.action == "notify" and d.guardrail and d.cause == "DrafterStartupFailed"


def test_guardrails_wait_while_the_drafter_does_not_serve() -> None:
    state = PolicyState(mode="baseline", since=0.0)
    _, d = step(state, PolicySettings(), 1e5, Evidence(startup=LATE))
    assert d.action == "hold" and d.trip is None


def test_a_pin_holds_everything_and_targets_the_pin() -> None:
    s = PolicySettings(consecutive_windows=1)
    state = PolicyState(streak=0)
    new, d = step(state, s, 10.0, Evidence(verdict("regressed"), startup=LATE, pin="baseline"))
    assert new == state
    assert (d.action, d.mode, d.target, d.cause) == ("hold", "speculative", "baseline", "Pinned")


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
    e = ArmErrors(
        spec_errors=spec[0], spec_requests=spec[1], base_errors=base[0], base_requests=base[1]
    )
    assert (error_rate_exceeded(e, PolicySettings()) is not None) == trips


def test_error_guardrail_rolls_back_and_blocks_repromotion() -> None:
    s = PolicySettings(consecutive_windows=1, cooldown_s=0, repromote_windows=1)
    bad = ArmErrors(spec_errors=20, spec_requests=100, base_errors=0, base_requests=100)
    state, d = step(PolicyState(), s, 10.0, Evidence(verdict("improved"), errors=bad))
    assert (d.action, d.cause, state.mode) == ("rollback", "DrafterErrors", "baseline")
    state = PolicyState(mode="baseline", since=0.0)
    state, d = step(state, s, 10.0, Evidence(verdict("improved"), errors=bad))
    assert d.action == "hold" and "error rate" in d.reason and state.mode == "baseline"


def test_error_counts_from_a_verdict() -> None:
    v = replace(
        verdict("neutral"),
        requests={"speculative": 100, "baseline": 80},
        errors={"speculative": 9, "baseline": 0},
    )
    assert ArmErrors.of(v) == ArmErrors(100, 9, 80, 0)
    assert error_rate_exceeded(ArmErrors.of(v), PolicySettings()) is not None


def speculation(counters: DraftCounters, served: int) -> Trip | None:
    evidence = Evidence(speculation=counters, errors=ArmErrors(spec_requests=served))
    return speculation_guardrail(evidence, PolicySettings(speculation_min_requests=50), 0.0)


def test_speculation_off_and_collapsed() -> None:
    off = speculation(DraftCounters(pods=2, exporting=0, drafts=0, accepted=0), served=300)
    assert off is not None and off.cause == "SpeculationOff"
    assert "none of its 2 pods exports spec-decode counters" in off.message
    none = speculation(DraftCounters(pods=2, exporting=2, drafts=0, accepted=0), served=300)
    why = "the drafter arm served 300 requests with 0 drafts over the window"
    assert none == Trip("speculation", "SpeculationOff", why)
    collapsed = speculation(DraftCounters(2, 2, drafts=1000, accepted=20), served=10)
    assert collapsed == Trip(
        "speculation",
        "AcceptanceCollapsed",
        "mean acceptance length 1.020 over 1000 drafts (1.000 = no draft token accepted; "
        "threshold 1.05)",
    )


def test_healthy_idle_or_thin_speculation_evidence_is_not_tripped() -> None:
    assert speculation(DraftCounters(2, 2, drafts=1000, accepted=2500), served=300) is None
    assert speculation(DraftCounters(2, 0, 0, 0), served=10) is None  # too few requests
    assert speculation(DraftCounters(0, 0, 0, 0), served=300) is None  # no pod read twice
    assert speculation(DraftCounters(2, 2, drafts=50, accepted=0), served=10) is None
    s = PolicySettings()
    assert speculation_guardrail(Evidence(), s, 0.0) is None


def test_speculation_guardrail_rolls_back_through_step() -> None:
    s = PolicySettings(speculation_min_requests=50)
    evidence = Evidence(verdict("neutral"), errors=ArmErrors(spec_requests=300),
                        speculation=DraftCounters(2, 0, 0, 0))  # fmt: skip
    state, d = step(PolicyState(), s, 10.0, evidence)
    assert (d.action, d.cause, state.mode) == ("rollback", "SpeculationOff", "baseline")


def load(
    spec: tuple[float, float],
    base: tuple[float, float],
    rule: str = "arrivals",
    last: tuple[float, float] | None = None,
) -> Evidence:
    """Evidence of the arms' engine load: (start, end) requests per pod of each arm, and
    (drafter, baseline) at the operator's last look in the window, if any."""
    arms = ArmLoad(
        start={"speculative": spec[0], "baseline": base[0]},
        end={"speculative": spec[1], "baseline": base[1]},
        pods={"speculative": 2, "baseline": 1},
        rule=rule,  # type: ignore[arg-type]
        last={} if last is None else {"speculative": last[0], "baseline": last[1]},
    )
    return Evidence(verdict("improved"), load=arms)


@pytest.mark.parametrize(
    ("spec", "base", "rule", "trips"),
    [
        # The bench's open-loop run, the window the pairs still read "improved -37%": the
        # drafter went 88 -> 271 per pod while the baseline at its arrivals held 184 -> 190.
        ((88, 271), (184, 190), "arrivals", True),
        # A look a quarter window in: still short of the baseline's count, then past it.
        ((93, 182), (156, 178), "arrivals", False),
        ((93, 230), (156, 180), "arrivals", True),
        # The same numbers by the in-flight rule: the clients set the count, never trips.
        ((88, 271), (184, 190), "in_flight", False),
        # A step up in arrivals: both climb (the faster drafter holds fewer, or nearly as
        # many): a ramp is left to the statistics.
        ((10, 92), (10, 164), "arrivals", False),
        ((5, 150), (15, 164), "arrivals", False),
        # A baseline shadow drained by the router (its copy budget full) is no yardstick.
        ((100, 160), (200, 0), "arrivals", False),
        # A drafter shadow filling up from empty (after a drain, a new rung) that settles
        # below the baseline: it keeps up.
        ((2, 60), (80, 80), "arrivals", False),
        ((5, 110), (150, 150), "arrivals", False),
        # A stable drafter slower end to end: holds more, but steady...
        ((60, 62), (40, 41), "arrivals", False),
        # ... or growing with the arrivals as a constant multiple of the baseline's count:
        # only the quotient's rise tells these apart from a runaway.
        ((100, 150), (100, 125), "arrivals", False),
        ((100, 160), (100, 100), "arrivals", True),
        # A queue fluctuating: 13 up is within a 20-30 queue's noise.
        ((20, 33), (10, 10), "arrivals", False),
        # Climbs past a steady baseline by less than the margin (25% and 8 per pod).
        ((10, 19), (10, 10), "arrivals", False),
        ((10, 30), (10, 10), "arrivals", True),
        # Holds more and falls further behind, but no longer grows (it drains).
        ((300, 280), (190, 120), "arrivals", False),
    ],
)
def test_overload_rule(
    spec: tuple[float, float], base: tuple[float, float], rule: str, trips: bool
) -> None:
    trip = overload_guardrail(load(spec, base, rule), PolicySettings(), 0.0)
    assert (trip is not None) == trips, trip


@pytest.mark.parametrize(
    ("spec", "base", "last", "trips"),
    [
        # Runs away: climbed since the window opened and since the last look.
        ((88, 271), (184, 190), (200, 188), True),
        # Filling up after a change in load and settling above the baseline: it climbed
        # since the window opened (which alone trips) but hardly since the last look.
        ((30, 70), (55, 56), None, True),
        ((30, 70), (55, 56), (68, 55), False),
        # A climb since the last look within a queue's noise (one standard deviation).
        ((88, 271), (184, 190), (260, 188), False),
        # The baseline drained by the router and refilled since the last look.
        ((100, 180), (150, 140), (150, 60), False),
    ],
)
def test_overload_needs_the_climb_to_go_on_since_the_last_look(
    spec: tuple[float, float], base: tuple[float, float], last: tuple[float, float] | None,
    trips: bool,
) -> None:
    trip = overload_guardrail(load(spec, base, last=last), PolicySettings(), 0.0)
    assert (trip is not None) == trips, trip


@pytest.mark.parametrize(
    ("spec", "base", "done", "last", "trips"),
    [
        # The regret bench's open loop read unknown (the routers by in-flight count, the
        # shadow overfed from both serving pods' arrivals to the drafter's count): the
        # drafter took 400 per pod and finished 140, the baseline shadow finished 420.
        ((129, 389), (128, 385), (140, 420), None, True),
        # One router, one shadow pod: the copies cap the shadow at a serving pod's arrivals
        # (it holds steady, finishing them all) while the drafter falls behind.
        ((96, 300), (184, 190), (196, 394), (200, 188), True),
        # Both arms past their peak (A/A): the shadow, fed to the drafter's count, finishes
        # no more than the drafter; neither keeps up.
        ((100, 300), (100, 290), (200, 210), None, False),
        # A closed loop's streams joining (A/A): both climb, both finish alike.
        ((20, 60), (20, 58), (200, 205), None, False),
        # ... and with a drafter past the crossover: at the same count the baseline finishes
        # more, each request taking it less time (the in-flight counterfactual agrees).
        ((20, 60), (20, 60), (200, 300), None, True),
        # The drafter faster: the baseline finishes less than the drafter's arrivals.
        ((100, 300), (100, 300), (300, 250), None, False),
        # The drafter steady: nothing runs away.
        ((100, 110), (100, 100), (400, 600), None, False),
        # Climbing since the window opened but no longer since the last look.
        ((96, 300), (184, 190), (196, 394), (298, 190), False),
        # The shadow's finished count not read (a pod without the histogram): no trip.
        ((96, 300), (184, 190), (196, None), None, False),
    ],
)
def test_overload_by_the_in_flight_rule_reads_what_the_engines_finished(
    spec: tuple[float, float], base: tuple[float, float], done: tuple[float, float | None],
    last: tuple[float, float] | None, trips: bool,
) -> None:
    evidence = load(spec, base, "in_flight", last)
    finished: dict[Arm, float] = {"speculative": done[0]}
    if done[1] is not None:
        finished["baseline"] = done[1]
    assert evidence.load is not None
    arms = replace(evidence.load, done=finished)
    trip = overload_guardrail(replace(evidence, load=arms), PolicySettings(), 0.0)
    assert (trip is not None) == trips, trip
    if trips:  # routes by domain give the arms different traffic: never a yardstick
        split = replace(arms, split=True)
        assert overload_guardrail(replace(evidence, load=split), PolicySettings(), 0.0) is None


def test_overload_by_the_in_flight_rule_says_what_each_arm_finished() -> None:
    evidence = load((129, 389), (128, 385), "in_flight")
    assert evidence.load is not None
    arms = replace(evidence.load, done={"speculative": 140.0, "baseline": 420.0})
    trip = overload_guardrail(replace(evidence, load=arms), PolicySettings(), 0.0)
    assert trip == Trip(
        "overload",
        "DrafterOverloaded",
        "the drafter arm cannot keep up with its arrivals: requests in its engines grew from "
        "129 to 389 per pod since the window opened, finishing 140 of the 400 that arrived "
        "per pod, while the baseline arm finished 420 per pod (the load match was by "
        "in-flight count: what each arm's engines finished tells which keeps up with these "
        "arrivals)",
    )


def test_overload_trips_say_the_numbers_and_act_through_step() -> None:
    s = PolicySettings(consecutive_windows=2)
    evidence = load((88, 271), (184, 190))
    assert overload_guardrail(evidence, s, 0.0) == Trip(
        "overload",
        "DrafterOverloaded",
        "the drafter arm cannot keep up with its arrivals: requests in its engines grew from "
        "88 to 271 per pod since the window opened, while the baseline, at the same arrivals "
        "per pod, held 184 to 190 (at equal arrivals, more requests held is a longer wait: "
        "Little's law)",
    )
    state, d = step(PolicyState(), s, 10.0, evidence)
    assert (d.action, d.cause, state.mode) == ("rollback", "DrafterOverloaded", "baseline")
    # Off by the setting; and absent evidence (no pod read at both ends) never trips.
    off = PolicySettings(overload_guardrail=False)
    assert step(PolicyState(), off, 10.0, evidence)[1].action == "hold"
    one_arm = replace(evidence.load, end={"speculative": 270.0})  # type: ignore[type-var]
    assert overload_guardrail(replace(evidence, load=one_arm), s, 0.0) is None


def test_an_overloaded_drafter_shadow_is_not_re_promoted() -> None:
    """The baseline serves; the drafter, measured as the shadow by arrivals, reads improved
    per token on the requests that ended, but its engines fall behind: held back."""
    s = PolicySettings(consecutive_windows=1, cooldown_s=0, repromote_windows=1)
    state = PolicyState(mode="baseline", since=0.0)
    state, d = step(state, s, 10.0, load((88, 271), (184, 190)))
    assert d.action == "hold" and "cannot keep up" in d.reason and state.mode == "baseline"
    state, d = step(state, s, 20.0, load((60, 50), (160, 170)))
    assert d.action == "repromote", d.reason


def test_an_overloaded_drafter_shadow_is_not_re_promoted_by_the_in_flight_rule() -> None:
    """The baseline serves; the drafter, the shadow fed to the serving baseline's count by
    the in-flight rule, reads improved per token on the requests that ended, but its count
    climbs while the baseline finishes more than it was given: held back, the hold naming
    the overload. The same window re-promotes without the guardrail, and once the drafter
    keeps up."""
    s = PolicySettings(consecutive_windows=1, cooldown_s=0, repromote_windows=1)
    evidence = load((40, 120), (120, 124), "in_flight")
    assert evidence.load is not None
    arms = replace(evidence.load, done={"speculative": 150.0, "baseline": 260.0})
    behind = replace(evidence, load=arms)
    state = PolicyState(mode="baseline", since=0.0)
    held, d = step(state, s, 10.0, behind)
    assert d.action == "hold" and held.mode == "baseline", d.reason
    assert d.reason.startswith("improved") and "cannot keep up with its arrivals" in d.reason
    assert "finished 260 per pod" in d.reason  # what the engines finished, not the counts
    off = PolicySettings(consecutive_windows=1, cooldown_s=0, repromote_windows=1,
                         overload_guardrail=False)  # fmt: skip
    assert step(state, off, 10.0, behind)[1].action == "repromote"
    steady = replace(evidence, load=replace(arms, end={"speculative": 42.0, "baseline": 124.0}))
    held, d = step(held, s, 20.0, steady)
    assert d.action == "repromote", d.reason


def test_state_round_trips_through_the_wire() -> None:
    s = PolicySettings(consecutive_windows=1, cooldown_s=0)
    state, _ = run("RI", s)
    state = replace(state, retry_seen="r1")
    wire = json.loads(json.dumps(state.to_wire()))
    assert wire == {
        "mode": "baseline",
        "lastChange": "1970-01-01T00:01:00Z",
        "flapTimes": ["1970-01-01T00:01:00Z"],
        "halted": False,
        "retrySeen": "r1",
        "evidence": {
            "toward": "speculative",
            "inARow": 1,
            "cumulative": round(state.cumulative.total, 4),
            "windows": 1,
            "gap": 0,
            "ratio": 0.7,
            "weight": round(state.cumulative.weight, 1),
        },
    }
    back = PolicyState.from_wire(wire)
    assert back.to_wire() == wire  # a fixed point: what is stored reads back the same
    assert replace(back, cumulative=state.cumulative) == state
    assert back.cumulative.total == pytest.approx(state.cumulative.total, abs=1e-4)
    assert PolicyState.from_wire({}) == PolicyState()
    assert PolicyState.from_wire({"newerField": 1, "halted": True}) == PolicyState(halted=True)


def test_no_evidence_shows_no_evidence_object() -> None:
    """describe showed 'Streak: 0' beside 'Streak Outcome: regressed': the memory now says
    nothing when there is no evidence toward a change."""
    assert PolicyState(mode="baseline", since=60.0).to_wire() == {
        "mode": "baseline", "lastChange": "1970-01-01T00:01:00Z", "flapTimes": [],
        "halted": False,
    }  # fmt: skip
    s = PolicySettings()
    state, _ = run("RRR", s)  # rolled back; the drafter, now the shadow, is still slower
    state, _ = run("RR", s, state, t0=3 * WINDOW)
    assert "evidence" not in state.to_wire() and state.streak == 0


def test_a_status_written_before_this_operator_still_reads() -> None:
    """Unix times, streak and streakOutcome (the memory before this change) read as before;
    the next write replaces them with the new form."""
    old = {
        "mode": "speculative", "streak": 2, "streakOutcome": "regressed",
        "since": 1_800_000_000.5, "flapTimes": [1_799_990_000, 1_800_000_000.5],
        "halted": False, "retrySeen": "x",
    }  # fmt: skip
    state = PolicyState.from_wire(old)
    assert state == PolicyState(
        mode="speculative", streak=2, since=1_800_000_000.5,
        flap_times=(1_799_990_000.0, 1_800_000_000.5), retry_seen="x",
    )  # fmt: skip
    assert state.to_wire()["lastChange"] == "2027-01-15T08:00:00Z"
    assert state.to_wire()["flapTimes"] == ["2027-01-15T05:13:20Z", "2027-01-15T08:00:00Z"]
    # A streak of the other outcome (regressed windows while the baseline serves) was no
    # evidence toward a change: none now.
    stale = PolicyState.from_wire({"mode": "baseline", "streak": 0, "streakOutcome": "regressed"})
    assert stale == PolicyState(mode="baseline")
    # Evidence stored toward the mode in effect (from before a change): none.
    assert (
        PolicyState.from_wire(
            {"mode": "speculative", "evidence": {"toward": "speculative", "inARow": 2}}
        )
        == PolicyState()
    )


@pytest.mark.parametrize(
    ("wire", "problem"),
    [
        ({"mode": "weird"}, "mode: expected speculative or baseline, got 'weird'"),
        ({"streak": -1}, "streak: expected a whole number >= 0, got -1"),
        ({"streak": True}, "streak: expected a whole number >= 0, got True"),
        ({"since": "yesterday"}, "since: expected an RFC 3339 time, got 'yesterday'"),
        ({"lastChange": 1e400}, "lastChange: expected an RFC 3339 time, got inf"),
        ({"flapTimes": 3}, "flapTimes: expected a list of RFC 3339 times, got 3"),
        ({"flapTimes": ["x"]}, "flapTimes: expected an RFC 3339 time, got 'x'"),
        ({"halted": "yes"}, "halted: expected true or false, got 'yes'"),
        ({"evidence": 3}, "evidence: expected an object, got 3"),
        ({"evidence": {"inARow": -2}}, "evidence.inARow: expected a whole number >= 0, got -2"),
        ({"evidence": {"ratio": 0}}, "evidence.ratio: expected a number > 0, got 0.0"),
        ({"evidence": {"cumulative": "x"}}, "evidence.cumulative: expected a number >= 0, got 'x'"),
    ],
)
def test_a_bad_stored_state_names_the_field(wire: dict[str, object], problem: str) -> None:
    with pytest.raises(ValueError) as info:
        PolicyState.from_wire(wire)
    assert str(info.value) == problem


def test_settings_are_validated() -> None:
    with pytest.raises(ValueError, match="policy"):
        PolicySettings(policy="sometimes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="consecutive_windows"):
        PolicySettings(consecutive_windows=0)
