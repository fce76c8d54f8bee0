"""One set of evaluation settings: the resource's spec.evaluation/spec.rollback convert to the
judge's and the policy's settings, for every spec the API accepts, with the resource's
defaults (specguard.judge.settings_from_spec)."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specguard.api import SpecError, validate_spec
from specguard.judge import JudgeSettings, PolicySettings, settings_from_spec

SPEC: dict[str, Any] = {
    "model": {"name": "Qwen/Qwen3.6-35B-A3B"},
    "replicas": 2,
    "drafter": {"method": "ngram", "numSpeculativeTokens": 4},
}


def test_the_resource_defaults_are_the_judge_and_policy_defaults() -> None:
    judge, policy = settings_from_spec(validate_spec(SPEC))
    assert judge == JudgeSettings()
    assert policy == PolicySettings()


def test_each_field_maps_to_its_setting() -> None:
    raw = copy.deepcopy(SPEC)
    raw["evaluation"] = {
        "window": "2m",
        "minRequestsPerArm": 2,
        "minOutputTokens": 2,
        "tolerance": 0.5,
        "confidence": 0.999,
        "consecutiveWindows": 7,
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
    assert (judge.concurrency_match, judge.concurrency_tolerance) == ("load", 1.0)
    assert (policy.policy, policy.repromote, policy.consecutive_windows) == ("notify", "manual", 7)
    assert (policy.cooldown_s, policy.startup_deadline_s, policy.max_flaps) == (0.0, 3600.0, 9)


def _duration() -> st.SearchStrategy[str]:
    return st.builds(
        lambda n, unit: f"{n}{unit}",
        st.integers(min_value=0, max_value=200_000),
        st.sampled_from(["s", "m", "h"]),
    )


_NUMBER = st.one_of(
    st.integers(min_value=-3, max_value=1000),
    st.floats(min_value=-1.0, max_value=2.0, allow_nan=False),
)

EVALUATION = st.fixed_dictionaries(
    {},
    optional={
        "window": _duration(),
        "minRequestsPerArm": st.integers(min_value=-2, max_value=100_000),
        "minOutputTokens": st.integers(min_value=-2, max_value=10_000),
        "tolerance": _NUMBER,
        "confidence": _NUMBER,
        "consecutiveWindows": st.integers(min_value=-2, max_value=200),
        "concurrencyMatch": _NUMBER,
    },
)
ROLLBACK = st.fixed_dictionaries(
    {},
    optional={
        "policy": st.sampled_from(["auto", "notify", "off"]),
        "repromote": st.sampled_from(["auto", "manual"]),
        "cooldown": _duration(),
        "startupDeadline": _duration(),
        "maxFlaps": st.integers(min_value=-2, max_value=200),
    },
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(evaluation=EVALUATION, rollback=ROLLBACK)
def test_every_spec_the_api_accepts_converts(
    evaluation: dict[str, Any], rollback: dict[str, Any]
) -> None:
    raw = {**copy.deepcopy(SPEC), "evaluation": evaluation, "rollback": rollback}
    try:
        spec = validate_spec(raw)
    except SpecError:
        return  # refused by the API: nothing to convert
    judge, policy = settings_from_spec(spec)  # must not raise
    assert judge.min_requests_per_arm == spec.evaluation.min_requests_per_arm
    assert judge.concurrency_tolerance == spec.evaluation.concurrency_match
    assert policy.cooldown_s == spec.rollback.cooldown
    assert policy.consecutive_windows == spec.evaluation.consecutive_windows
