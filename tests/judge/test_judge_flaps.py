"""The flap rule (judge/_flaps.py): changes that follow the traffic never stop anything;
changes back and forth on one traffic stop automatic changes at ``max_flaps``."""

from __future__ import annotations

import json
from typing import Any

import pytest

from specguard.judge._evidence import Evidence
from specguard.judge._flaps import Traffic, same_traffic, traffic_of
from specguard.judge._policy import PolicyState, step
from specguard.judge._settings import PolicySettings
from specguard.judge._verdict import DomainRatio, Outcome, Verdict

S = PolicySettings(consecutive_windows=1, repromote_windows=1, cooldown_s=0, max_flaps=3)


def verdict(outcome: Outcome, load: float | None, mix: dict[str, int] | None = None) -> Verdict:
    ratio = 1.3 if outcome == "regressed" else 0.7
    return Verdict(
        outcome=outcome, ratio=ratio, ci_low=ratio - 0.05, ci_high=ratio + 0.05,
        confidence=0.99, tolerance=0.03, method="paired", basis="test", median_s={},
        n={"speculative": 200, "baseline": 200},
        concurrency={} if load is None else {"speculative": load, "baseline": load * 0.6},
        domains=tuple(DomainRatio(d, n, n, ratio) for d, n in (mix or {}).items()),
    )  # fmt: skip


def drive(windows: list[tuple[Outcome, float | None, dict[str, int] | None]]) -> PolicyState:
    state = PolicyState(since=0.0)
    for i, (outcome, load, mix) in enumerate(windows):
        state, _ = step(state, S, 60.0 * (i + 1), Evidence(verdict(outcome, load, mix)))
    return state


def test_the_traffic_is_the_heavier_arms_load_and_the_domain_shares() -> None:
    v = verdict("regressed", 40.0, {"math": 30, "tool_call": 90})
    assert traffic_of(v) == Traffic(40.0, {"math": 0.25, "tool_call": 0.75})
    assert traffic_of(None) is None
    assert traffic_of(verdict("regressed", None)) is None  # shows nothing


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        (Traffic(40.0), Traffic(48.0), True),  # within 25%
        (Traffic(40.0), Traffic(56.0), False),
        (Traffic(3.0), Traffic(5.0), True),  # 2 requests apart at most
        (Traffic(3.0), Traffic(5.5), False),
        (Traffic(40.0, {"math": 1.0}), Traffic(40.0, {"math": 0.8, "tool_call": 0.2}), True),
        (Traffic(40.0, {"math": 1.0}), Traffic(40.0, {"math": 0.7, "tool_call": 0.3}), False),
        (Traffic(40.0, {"math": 1.0}), Traffic(40.0), True),  # no mix: the load decides
        (Traffic(None, {"math": 1.0}), Traffic(4.0, {"math": 1.0}), True),
        (None, Traffic(4.0), True),  # unknown: the same (never lets a run through)
    ],
)
def test_same_traffic(a: Traffic | None, b: Traffic | None, same: bool) -> None:
    assert same_traffic(a, b) is same and same_traffic(b, a) is same


def test_following_the_load_never_halts() -> None:
    """Rolled back at 40 per pod, re-promoted at 4: ten changes, each a run of its own."""
    state = drive([("regressed", 40.0, None), ("improved", 4.0, None)] * 5)
    assert not state.halted and state.mode == "speculative" and len(state.flap_times) == 1


def test_following_the_domain_mix_never_halts() -> None:
    """The same 32 per pod, math then tool calls: the drafter wins one, loses the other."""
    tools, math = {"tool_call": 100}, {"math": 100}
    state = drive([("regressed", 32.0, tools), ("improved", 32.0, math)] * 4)
    assert not state.halted and len(state.flap_times) == 1


def test_back_and_forth_on_one_traffic_halts_at_max_flaps() -> None:
    state = drive([("regressed", 40.0, None), ("improved", 44.0, None)])
    assert not state.halted and len(state.flap_times) == 2
    state, d = step(state, S, 1000.0, Evidence(verdict("regressed", 37.0)))
    assert state.halted and d.action == "rollback" and d.flaps == 3 and d.warning
    assert d.reason.endswith(
        "; 3 changes back and forth on the same traffic within 24h: automatic changes stop"
    )
    # Halted: would-be changes are counted, not made.
    state, d = step(state, S, 1060.0, Evidence(verdict("improved", 40.0)))
    assert (d.action, d.cause, state.mode, state.held) == ("notify", "FlapLimit", "baseline", 1)
    state, d = step(state, S, 1120.0, Evidence(verdict("improved", 4.0)))
    assert state.held == 2 and state.halted  # a halt holds until a retry, whatever the traffic
    state, d = step(state, S, 1180.0, Evidence(verdict("improved", 4.0), retry="r"))
    assert (d.action, state.halted, state.held, state.flap_times) == ("repromote", False, 0, ())


def test_a_run_broken_by_other_traffic_starts_again() -> None:
    state = drive([("regressed", 40.0, None), ("improved", 40.0, None),
                   ("regressed", 100.0, None), ("improved", 100.0, None)])  # fmt: skip
    assert not state.halted and len(state.flap_times) == 2


def test_unknown_traffic_counts_as_before() -> None:
    """Windows that show no load (as a guardrail between windows): every change continues
    the run, as every change counted before the rule."""
    state = drive([("regressed", None, None), ("improved", None, None)])
    assert not state.halted
    state = drive([("regressed", None, None), ("improved", None, None), ("regressed", 4.0, None)])
    assert state.halted


def test_the_memory_round_trips_and_bad_memory_names_the_field() -> None:
    state = drive([("regressed", 40.0, {"math": 1, "tool_call": 3})])
    wire = json.loads(json.dumps(state.to_wire()))
    assert wire["flapTraffic"] == {"load": 40.0, "domains": {"math": 0.25, "tool_call": 0.75}}
    assert PolicyState.from_wire(wire).to_wire() == wire
    assert PolicyState.from_wire({"halted": True, "held": 4}).held == 4
    cases: list[tuple[dict[str, Any], str]] = [
        ({"flapTraffic": 3}, "flapTraffic: expected an object, got 3"),
        ({"flapTraffic": {"load": "x"}}, "flapTraffic.load: expected a number >= 0, got 'x'"),
        ({"flapTraffic": {"domains": {"math": 2}}},
         "flapTraffic.domains.math: expected a share 0..1, got 2"),
        ({"held": -1}, "held: expected a whole number >= 0, got -1"),
    ]  # fmt: skip
    for bad, problem in cases:
        with pytest.raises(ValueError) as err:
            PolicyState.from_wire(bad)
        assert str(err.value) == problem
