"""One set of evaluation settings: the resource's spec.evaluation/spec.rollback convert to the
judge's and the policy's settings, for every spec the API accepts, with the resource's
defaults (specguard.controller._settings: the one conversion)."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from specguard.api import Guards, Spec, SpecError, validate_spec
from specguard.controller._conditions import GUARD_WIRE
from specguard.controller._settings import judge_settings, policy_settings
from specguard.judge import JudgeSettings, PolicySettings


def settings_from_spec(spec: Spec) -> tuple[JudgeSettings, PolicySettings]:
    return judge_settings(spec), policy_settings(spec)


SPEC: dict[str, Any] = {
    "model": {"name": "Qwen/Qwen3.6-35B-A3B"},
    "replicas": 2,
    "drafter": {"method": "ngram", "numSpeculativeTokens": 4},
}


def test_the_resource_defaults_are_the_judge_and_policy_defaults() -> None:
    judge, policy = settings_from_spec(validate_spec(SPEC))
    assert judge == JudgeSettings()
    assert policy == PolicySettings()
    assert policy.speculation_min_requests == judge.min_requests_per_arm


def test_each_field_maps_to_its_setting() -> None:
    raw = copy.deepcopy(SPEC)
    raw["evaluation"] = {
        "window": "2m",
        "minRequestsPerArm": 2,
        "minOutputTokens": 2,
        "tolerance": 0.5,
        "confidence": 0.999,
        "consecutiveWindows": 7,
        "windowsPerFalseAlarm": 123,
        "concurrencyMatch": 1.0,
    }
    raw["rollback"] = {
        "policy": "notify",
        "repromote": "manual",
        "cooldown": "0s",
        "startupDeadline": "1h",
        "maxFlaps": 9,
    }
    judge, policy = settings_from_spec(validate_spec(raw))
    assert (judge.min_requests_per_arm, judge.min_output_tokens) == (2, 2)
    assert (judge.tolerance, judge.confidence) == (0.5, 0.999)
    assert (judge.concurrency_match, judge.concurrency_tolerance) == ("in_flight", 1.0)
    assert (policy.policy, policy.repromote, policy.consecutive_windows) == ("notify", "manual", 7)
    assert policy.windows_per_false_alarm == 123.0
    assert (policy.cumulative.min_windows, policy.cumulative.min_windows_gain) == (7, 8)
    assert (policy.cooldown_s, policy.startup_deadline_s, policy.max_flaps) == (0.0, 3600.0, 9)


def test_each_guard_is_spelled_on_the_wire_as_status_and_metrics_spell_it() -> None:
    """``rollback.guards.e2eP99`` (not to_camel's ``e2EP99``) switches the e2e guard off; the
    spec's keys are the names status.lastVerdict.guards and the metrics report."""
    raw = copy.deepcopy(SPEC)
    raw["rollback"] = {"guards": {"e2eP99": {"enabled": False}}}
    judge, _ = settings_from_spec(validate_spec(raw))
    assert {g.name for g in judge.guards if g.enabled} == {"tpot_p99"}
    raw["rollback"] = {"guards": {"ttftP50": {"enabled": True}}}
    judge, _ = settings_from_spec(validate_spec(raw))
    assert {g.name for g in judge.guards if g.enabled} == {"tpot_p99", "ttft_p50", "e2e_p99"}
    assert sorted(GUARD_WIRE.values()) == ["e2eP99", "tpotP99", "ttftP50", "ttftP99"]
    assert set(Guards().to_wire()) == set(GUARD_WIRE.values())


def _duration(low: int, high: int) -> st.SearchStrategy[str]:
    """Durations mostly within [low, high] seconds, sometimes anywhere."""
    anywhere = st.builds(
        lambda n, unit: f"{n}{unit}",
        st.integers(min_value=0, max_value=200_000),
        st.sampled_from(["s", "m", "h"]),
    )
    within = st.integers(min_value=low, max_value=high).map(lambda n: f"{n}s")
    return st.one_of(within, within, within, anywhere)


def _count(low: int, high: int) -> st.SearchStrategy[int]:
    # The edges of every bound as often as the rest.
    return st.one_of(
        st.integers(min_value=low - 2, max_value=low + 2),
        st.integers(min_value=low, max_value=high + 2),
    )


def _fraction(low: float, high: float) -> st.SearchStrategy[float]:
    anything = st.one_of(
        st.integers(min_value=-3, max_value=1000),
        st.floats(min_value=-1.0, max_value=2.0, allow_nan=False),
    )
    return st.one_of(
        st.floats(min_value=low, max_value=high), st.sampled_from([low, high]), anything
    )


EVALUATION_FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "window": _duration(10, 86_400),
    "minRequestsPerArm": _count(2, 100_000),
    "minOutputTokens": _count(2, 10_000),
    "tolerance": _fraction(0.0, 0.5),
    "confidence": _fraction(0.5, 0.999),
    "consecutiveWindows": _count(1, 100),
    "windowsPerFalseAlarm": st.one_of(_count(0, 12), _count(10, 10**12)),
    "concurrencyMatch": _fraction(0.0, 1.0),
}
ROLLBACK_FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "policy": st.sampled_from(["auto", "notify", "off"]),
    "repromote": st.sampled_from(["auto", "manual"]),
    "cooldown": _duration(0, 604_800),
    "startupDeadline": _duration(60, 86_400),
    "maxFlaps": _count(1, 100),
}
EVALUATION = st.fixed_dictionaries({}, optional=EVALUATION_FIELDS)
ROLLBACK = st.fixed_dictionaries({}, optional=ROLLBACK_FIELDS)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(evaluation=EVALUATION, rollback=ROLLBACK)
def test_every_spec_the_api_accepts_converts(
    evaluation: dict[str, Any], rollback: dict[str, Any]
) -> None:
    raw = {**copy.deepcopy(SPEC), "evaluation": evaluation, "rollback": rollback}
    try:
        spec = validate_spec(raw)
    except SpecError:
        event("refused by the API")
        return  # nothing to convert
    event("accepted by the API")
    judge, policy = settings_from_spec(spec)  # must not raise
    assert judge.min_requests_per_arm == spec.evaluation.min_requests_per_arm
    assert judge.concurrency_tolerance == spec.evaluation.concurrency_match
    assert policy.cooldown_s == spec.rollback.cooldown
    assert policy.consecutive_windows == spec.evaluation.consecutive_windows
    assert policy.windows_per_false_alarm == spec.evaluation.windows_per_false_alarm


# One field at a time, the others at their defaults: every bound of every field is reached.
ONE_FIELD: dict[tuple[str, str], st.SearchStrategy[Any]] = {
    **{("evaluation", k): v for k, v in EVALUATION_FIELDS.items()},
    **{("rollback", k): v for k, v in ROLLBACK_FIELDS.items()},
}


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), where=st.sampled_from(sorted(ONE_FIELD)))
def test_each_accepted_field_value_converts(data: st.DataObject, where: tuple[str, str]) -> None:
    section, name = where
    value = data.draw(ONE_FIELD[where], label=name)
    raw = {**copy.deepcopy(SPEC), section: {name: value}}
    try:
        spec = validate_spec(raw)
    except SpecError:
        event(f"{name}: refused")
        return
    event(f"{name}: accepted")
    settings_from_spec(spec)  # must not raise
