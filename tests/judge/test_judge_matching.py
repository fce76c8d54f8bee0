"""Which windows count toward a change (``judge._matching``) and what the clients got from
each arm (``judge._served``), through ``judge.step``, by exact equality.

The failure these guard against (docs/judge.md, "Which verdicts count"): a shadow measured
under a load match that does not fit the clients reads the shadow as faster whichever arm it
is, and the policy follows it back and forth — a losing drafter re-promoted into the traffic
that rolled it back, four times, stopped only by the flap limit.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from specguard.judge import ClientLoop, Sample
from specguard.judge._evidence import ArmLoad, DraftCounters, Evidence
from specguard.judge._matching import MIN_E2E_PAIRS, Matching, paired_e2e_ratio, uncounted
from specguard.judge._policy import Decision, PolicyState, step
from specguard.judge._served import (
    SERVED_MEMORY_S,
    Served,
    comparable,
    contradiction,
    remember,
    served_figures,
)
from specguard.judge._settings import PolicySettings
from specguard.judge._verdict import Verdict

WINDOW = 60.0
SETTINGS = PolicySettings(consecutive_windows=2, repromote_windows=2, cooldown_s=0.0,
                          windows_per_false_alarm=0)


def verdict(ratio: float) -> Verdict:
    outcome = "regressed" if ratio > 1.05 else "improved" if ratio < 0.95 else "neutral"
    return Verdict(
        outcome=outcome,  # type: ignore[arg-type]
        ratio=ratio,
        ci_low=ratio - 0.02,
        ci_high=ratio + 0.02,
        confidence=0.99,
        tolerance=0.03,
        method="paired",
        basis="test",
        median_s={},
        n={"speculative": 200, "baseline": 200},
    )


Domains = tuple[tuple[str, float], ...]


def served(
    arm: str,
    tpot_ms: float,
    *,
    arrivals: float = 9.6,
    in_flight: float = 192.0,
    at: float = 0.0,
    domains: Domains = (("chat", 1.0),),
) -> Served:
    return Served(arm, at, arrivals, in_flight, tpot_ms / 1000, 500, domains)  # type: ignore[arg-type]


# -- which windows count -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("matching", "serving", "ratio", "counted"),
    [
        # in-flight copies, clients told closed: the closed-loop counterfactual itself
        (Matching("in_flight", "closed", 1.30, 200), "baseline", 0.7, True),
        (Matching("in_flight", "closed", 1.50, 200), "baseline", 1.3, True),
        # ... otherwise a shadow faster per token counts when no slower end to end
        (Matching("in_flight", "unknown", 0.95, 200), "baseline", 0.7, True),
        (Matching("in_flight", "open", 1.02, 200), "speculative", 1.3, True),
        (Matching("in_flight", "unknown", 1.30, 200), "baseline", 0.7, False),
        (Matching("in_flight", "unknown", None, 12), "baseline", 0.7, False),
        # ... a baseline shadow slower per token, when no faster end to end
        (Matching("in_flight", "unknown", 1.50, 200), "speculative", 0.7, True),
        (Matching("in_flight", "unknown", 0.80, 200), "speculative", 0.7, False),
        # ... a drafter shadow slower per token: only for clients told closed
        (Matching("in_flight", "unknown", 1.50, 200), "baseline", 1.3, False),
        # arrivals copies: only clients this window told open, either way
        (Matching("arrivals", "open", 2.0, 200), "baseline", 0.4, True),
        (Matching("arrivals", "open", 0.5, 200), "baseline", 1.3, True),
        (Matching("arrivals", "unknown", 0.5, 200), "baseline", 0.4, False),
        (Matching("arrivals", "closed", 0.5, 200), "speculative", 1.3, False),
        (Matching("arrivals", "closed", 2.0, 200), "baseline", 1.3, False),
        # no mirrored samples: every verdict counts
        (None, "baseline", 0.4, True),
    ],
)
def test_which_windows_count(
    matching: Matching | None, serving: str, ratio: float, counted: bool
) -> None:
    why = uncounted(matching, verdict(ratio), serving)  # type: ignore[arg-type]
    assert (why is None) == counted, why


def test_the_reasons_say_why_a_window_does_not_count() -> None:
    assert uncounted(Matching("arrivals", "unknown", 0.5, 200), verdict(0.4), "baseline") == (
        "the shadow got a serving pod's arrivals, which is what it would get only from clients "
        "that arrive at their own pace, and this window's clients read unknown: its verdict "
        "may be an artefact of the load match"
    )
    assert uncounted(Matching("in_flight", "open", 1.3, 180), verdict(0.7), "baseline") == (
        "the shadow is faster per token at the serving pods' in-flight but slower per request "
        "(1.30× end to end over 180 pairs): for clients that wait for their answers it would "
        "win, for clients that arrive at their own pace it would not keep up, and this "
        "window's clients read open"
    )
    assert uncounted(Matching("in_flight", "unknown", 1.4, 180), verdict(1.3), "baseline") == (
        "the drafter shadow is slower at the baseline's in-flight, but a drafter past its "
        "throughput peak there may still be faster at the baseline's arrivals, where it would "
        "hold far fewer requests: that holds for clients that wait for their answers, and this "
        "window's clients read unknown"
    )
    assert uncounted(Matching("in_flight", "unknown", 0.8, 180), verdict(0.7), "speculative") == (
        "the baseline shadow is slower per token at the drafter's in-flight but faster per "
        "request (0.80× end to end over 180 pairs), so at the drafter's arrivals it would hold "
        "fewer requests, and this window's clients read unknown"
    )
    assert uncounted(Matching("in_flight", "unknown", None, 12), verdict(0.7), "baseline") == (
        f"the clients were not told closed-loop, and too few mirrored pairs (12 of "
        f"{MIN_E2E_PAIRS}) show how long the shadow's requests took end to end, which says "
        "whether its verdict at the serving pods' in-flight holds at their arrivals too"
    )


def pair(i: int, serving_e2e: float, shadow_e2e: float) -> list[Sample]:
    def one(role: str, arm: str, e2e: float) -> Sample:
        return Sample(arm, role, "p", "chat", 0.0, 4, 64, e2e, pair_id=f"p{i}")  # type: ignore[arg-type]

    return [one("serving", "baseline", serving_e2e), one("shadow", "speculative", shadow_e2e)]


def test_the_paired_e2e_ratio_is_shadow_over_serving_on_ok_pairs() -> None:
    samples = [s for i in range(40) for s in pair(i, 2.0, 3.0)]
    samples += pair(99, 2.0, 3.0)[:1]  # a half without its twin
    samples += [replace(s, status=500) for s in pair(100, 1.0, 100.0)]  # failed: left out
    ratio, pairs = paired_e2e_ratio(samples)
    assert pairs == 40 and ratio == pytest.approx(1.5)
    assert paired_e2e_ratio(samples[: 2 * (MIN_E2E_PAIRS - 1)]) == (None, MIN_E2E_PAIRS - 1)


Windows = list[tuple[float, Matching | None, Served | None]]


def run(
    windows: Windows, state: PolicyState, t0: float = 1000.0
) -> tuple[PolicyState, list[Decision]]:
    decisions = []
    for i, (ratio, matching, given) in enumerate(windows):
        now = t0 + (i + 1) * WINDOW
        figures = None if given is None else replace(given, at=now)
        evidence = Evidence(verdict=verdict(ratio), matching=matching, served=figures)
        state, decision = step(state, SETTINGS, now, evidence)
        decisions.append(decision)
    return state, decisions


def test_the_flip_from_the_issue_is_not_followed() -> None:
    """guidellm's 384 closed-loop streams after an open-loop phase, the routers still on
    arrivals: after the rollback the drafter shadow, fed a baseline pod's arrivals, reads
    0.40–0.93 in window after window. None counts (the clients read unknown), and the state
    holds no evidence toward a re-promotion."""
    state = PolicyState(mode="baseline", since=0.0)
    arrivals = Matching("arrivals", "unknown", 0.55, 300)
    state, decisions = run([(0.40, arrivals, None), (0.93, arrivals, None),
                            (0.62, arrivals, None), (0.55, arrivals, None)], state)  # fmt: skip
    assert [d.action for d in decisions] == ["hold"] * 4
    assert state.mode == "baseline" and state.streak == 0 and state.cumulative.empty
    assert decisions[0].reason.startswith(
        "improved 0.400, not counted: the shadow got a serving pod's arrivals"
    )
    assert decisions[0].reason.endswith("; holding baseline")
    # The same windows with the clients told open count, and re-promote after K.
    told = Matching("arrivals", "open", 0.55, 300)
    told_windows: Windows = [(0.40, told, None), (0.62, told, None)]
    _, decisions = run(told_windows, PolicyState("baseline", since=0.0))
    assert [d.action for d in decisions] == ["hold", "repromote"]


def test_a_loss_under_in_flight_copies_counts_for_clients_of_either_kind() -> None:
    """The drafter serving past its crossover: the baseline shadow at the serving pods'
    in-flight is faster per token and per request: a rollback whatever the clients are."""
    kinds: tuple[ClientLoop, ...] = ("closed", "open", "unknown")
    for told in kinds:
        matching = Matching("in_flight", told, 0.8, 300)
        _, decisions = run([(1.3, matching, None), (1.3, matching, None)], PolicyState())
        assert [d.action for d in decisions] == ["hold", "rollback"], told


# -- what the clients got ----------------------------------------------------------------


def test_served_figures_from_a_window() -> None:
    def one(i: int) -> Sample:
        domain = "chat" if i % 4 else "tool_call"
        tpot = 0.1 + 0.001 * (i % 5)
        return Sample("speculative", "serving", f"pod-{i % 2}", domain, float(i), 100 + i % 3,
                      64, 5.0, tpot_s=tpot)  # fmt: skip

    samples = [one(i) for i in range(100)]
    samples.append(Sample("baseline", "shadow", "b", "chat", 0.0, 1, 64, 1.0, tpot_s=0.01))
    samples.append(Sample("speculative", "serving", "pod-0", "chat", 0.0, 1, 4, 1.0, tpot_s=0.01))
    figures = served_figures(samples, "speculative", 0.0, 10.0)
    assert figures is not None and figures.tpot_s == pytest.approx(0.102)
    assert replace(figures, tpot_s=0.102) == Served(
        arm="speculative", at=10.0, arrivals=5.0, in_flight=101.0, tpot_s=0.102,
        requests=100, domains=(("chat", 0.75), ("tool_call", 0.25)),
    )  # fmt: skip
    assert served_figures(samples[:49], "speculative", 0.0, 10.0) is None
    assert served_figures(samples, "baseline", 0.0, 10.0) is None


def test_loads_are_comparable_by_arrivals_or_in_flight_with_the_same_domains() -> None:
    base = served("baseline", 90)
    assert comparable(base, served("speculative", 120, arrivals=7.0))  # in flight alike
    assert comparable(base, served("speculative", 120, in_flight=90.0))  # arrivals alike
    assert not comparable(base, served("speculative", 120, arrivals=7.0, in_flight=90.0))
    other = (("chat", 0.7), ("tool_call", 0.3))
    assert not comparable(base, served("speculative", 120, domains=other))


def test_served_windows_merge_at_one_load_and_expire() -> None:
    first = served("speculative", 100, at=0.0)
    history = remember((), first, 0.0)
    history = remember(history, served("speculative", 121, at=60.0, arrivals=9.0), 60.0)
    assert len(history) == 1 and history[0].windows == 2 and history[0].requests == 1000
    assert history[0].tpot_s == pytest.approx((0.100 * 0.121) ** 0.5)
    assert history[0].arrivals == pytest.approx(9.3) and history[0].at == 60.0
    history = remember(history, served("baseline", 90, at=120.0), 120.0)
    assert [r.arm for r in history] == ["speculative", "baseline"]
    later = 120.0 + SERVED_MEMORY_S + 1
    assert remember(history, served("baseline", 90, at=later), later) == (
        served("baseline", 90, at=later),
    )


def test_a_contradiction_names_what_clients_got() -> None:
    history = (served("speculative", 123.5, at=0.0),)
    now = served("baseline", 92.1, at=180.0)
    assert contradiction(history, now, "speculative", 0.03, 180.0) == (
        "when the speculative arm served at 9.6 requests/s and 192 in flight per serving pod, "
        "3 min ago, clients got 123.5 ms per token; the baseline arm gives them 92.1 ms now: a "
        "shadow measured as faster there is contradicted by what clients got"
    )
    # Within the tolerance and margin, another load, another arm, or too old: no hold.
    assert contradiction(history, served("baseline", 115.0), "speculative", 0.03, 180.0) is None
    assert contradiction(history, served("baseline", 92.1, arrivals=20.0, in_flight=400.0),
                         "speculative", 0.03, 180.0) is None  # fmt: skip
    assert contradiction(history, now, "baseline", 0.03, 180.0) is None
    assert contradiction(history, now, "speculative", 0.03, SERVED_MEMORY_S + 1) is None


def test_a_drafter_record_speaks_only_for_the_configuration_it_measured() -> None:
    """The configured rung served and lost; the ladder's adaptive rung is not held by what
    the configured one gave the clients (nor is a drafter edited since), and records of two
    configurations are kept apart."""
    lost = replace(served("speculative", 123.5, at=0.0), config="configured/abc")
    now = replace(served("baseline", 92.1, at=180.0), config="configured/abc")
    assert contradiction((lost,), now, "speculative", 0.03, 180.0) is not None
    for other in ("adaptive/abc", "configured/def"):
        assert contradiction((lost,), replace(now, config=other), "speculative", 0.03,
                             180.0) is None  # fmt: skip
    adaptive = replace(served("speculative", 80.0, at=60.0), config="adaptive/abc")
    assert [r.config for r in remember((lost,), adaptive, 60.0)] == [
        "configured/abc", "adaptive/abc"
    ]
    # The baseline's record holds a rollback whatever the drafter's configuration.
    base = replace(served("baseline", 80.0, at=0.0), config="configured/abc")
    spec_now = replace(served("speculative", 60.0, at=180.0), config="adaptive/abc")
    assert contradiction((base,), spec_now, "baseline", 0.03, 180.0) is not None


def test_the_flip_is_held_by_what_the_clients_got() -> None:
    """The drafter served 384 streams at 123.5 ms per token and was rolled back; the baseline
    gives 92 ms. Shadow verdicts that count say the drafter would be faster: the re-promotion
    is held by the drafter's own record at this load, with the figures (the evidence stays),
    and happens once the load moves away from the record."""
    matching = Matching("in_flight", "closed", 0.9, 300)
    state = PolicyState()
    spec_served = served("speculative", 123.5)
    state, decisions = run([(1.3, matching, spec_served), (1.3, matching, spec_served)], state)
    assert [d.action for d in decisions] == ["hold", "rollback"]
    assert [(r.arm, r.windows) for r in state.served] == [("speculative", 2)]
    base_served = served("baseline", 92.0)
    state, decisions = run([(0.8, matching, base_served), (0.8, matching, base_served),
                            (0.8, matching, base_served)], state, t0=2000.0)  # fmt: skip
    assert [d.action for d in decisions] == ["hold", "hold", "hold"]
    assert decisions[1].reason.startswith(
        "would re-promote (improved 2 windows in a row after cooldown: "
    )
    assert "), held: when the speculative arm served at 9.6 requests/s and 192 in flight per " \
        "serving pod, " in decisions[1].reason
    assert decisions[1].reason.endswith(
        "clients got 123.5 ms per token; the baseline arm gives them 92.0 ms now: a shadow "
        "measured as faster there is contradicted by what clients got"
    )
    assert state.streak == 3  # the evidence stays
    elsewhere = served("baseline", 40.0, arrivals=2.0, in_flight=8.0)
    state, decisions = run([(0.8, matching, elsewhere)], state, t0=2300.0)
    assert [d.action for d in decisions] == ["repromote"]


def _with_drafts(
    windows: list[tuple[float, Served, float]], state: PolicyState, t0: float
) -> tuple[PolicyState, list[Decision]]:
    """``run`` with the drafter arm's counters: each window's (ratio, served, mean acceptance
    length of the drafter)."""
    matching = Matching("in_flight", "closed", 0.9, 300)
    decisions = []
    for i, (ratio, given, length) in enumerate(windows):
        now = t0 + (i + 1) * WINDOW
        drafts = DraftCounters(pods=1, exporting=1, drafts=500.0, accepted=500.0 * (length - 1))
        evidence = Evidence(verdict=verdict(ratio), matching=matching,
                            served=replace(given, at=now), speculation=drafts)  # fmt: skip
        state, decision = step(state, SETTINGS, now, evidence)
        decisions.append(decision)
    return state, decisions


def test_a_drafter_record_made_on_other_traffic_for_the_drafter_does_not_hold() -> None:
    """The drafter served sampled text (mean acceptance length 1.3) and lost; the text turns
    greedy under the same domain label (the shadow drafter now accepts 4.0 per step): its
    record of the sampled text does not hold the re-promotion. At the acceptance it lost at,
    the same record holds it."""
    state = PolicyState()
    spec_served = served("speculative", 123.5)
    state, decisions = _with_drafts([(1.3, spec_served, 1.3), (1.3, spec_served, 1.3)], state,
                                    1000.0)  # fmt: skip
    assert [d.action for d in decisions] == ["hold", "rollback"]
    (record,) = state.served
    assert record.arm == "speculative" and record.acceptance == pytest.approx(1.3)
    base_served = served("baseline", 92.0)
    same, decisions = _with_drafts([(0.8, base_served, 1.35)] * 3, state, 2000.0)
    assert [d.action for d in decisions] == ["hold", "hold", "hold"]
    assert "held: when the speculative arm served" in decisions[-1].reason
    greedy, decisions = _with_drafts([(0.8, base_served, 4.0)] * 2, state, 2000.0)
    assert [d.action for d in decisions] == ["hold", "repromote"]
    assert greedy.mode == "speculative" and same.mode == "baseline"
    # Records at two acceptance lengths are kept apart, and one unknown merges.
    greedy_record = replace(served("speculative", 60.0, at=60.0), acceptance=4.0)
    sampled = replace(served("speculative", 123.5, at=0.0), acceptance=1.3)
    assert len(remember((sampled,), greedy_record, 60.0)) == 2
    assert len(remember((sampled,), replace(greedy_record, acceptance=None), 60.0)) == 1


def test_an_overloaded_drafter_is_remembered_as_having_fallen_behind() -> None:
    """DrafterOverloaded rolls back and marks the drafter's record at that load: a later
    re-promotion at comparable arrivals is held, whatever the shadow shows."""
    state = PolicyState(served=(served("speculative", 80.0, at=1000.0),))
    looks = ArmLoad(start={"speculative": 100.0, "baseline": 50.0},
                    end={"speculative": 300.0, "baseline": 50.0},
                    pods={"speculative": 2, "baseline": 1}, rule="arrivals",
                    last={"speculative": 200.0, "baseline": 50.0})  # fmt: skip
    state, decision = step(state, SETTINGS, 1010.0, Evidence(load=looks))
    assert decision.action == "rollback" and decision.cause == "DrafterOverloaded"
    assert state.served[0].fell_behind
    matching = Matching("in_flight", "closed", 0.9, 300)
    now = served("baseline", 95.0, in_flight=60.0)
    _, decisions = run([(0.8, matching, now), (0.8, matching, now)], state, t0=1100.0)
    assert decisions[-1].action == "hold"
    assert decisions[-1].reason.endswith(
        "its engines fell behind the arrivals (DrafterOverloaded): a shadow measured as faster "
        "there is not what clients would get"
    )


def test_the_served_records_round_trip_through_the_wire() -> None:
    record = replace(served("speculative", 123.456, at=1767225600.0), windows=3, fell_behind=True,
                     acceptance=2.5)  # fmt: skip
    state = PolicyState(served=(record, served("baseline", 92.0, at=1767225660.0)))
    wire = json.loads(json.dumps(state.to_wire()))
    assert wire["served"][0] == {
        "arm": "speculative", "at": "2026-01-01T00:00:00Z", "arrivalsPerPod": 9.6,
        "inFlightPerPod": 192.0, "tpotMs": 123.456, "requests": 500, "windows": 3,
        "domains": {"chat": 1.0}, "fellBehind": True, "acceptanceLength": 2.5,
    }  # fmt: skip
    assert PolicyState.from_wire(wire) == state
    with pytest.raises(ValueError, match=r"served\[0\]\.tpotMs: expected a number >= 0"):
        PolicyState.from_wire({**wire, "served": [{**wire["served"][0], "tpotMs": "fast"}]})
    with pytest.raises(ValueError, match=r"served: expected a list"):
        PolicyState.from_wire({**wire, "served": {}})
