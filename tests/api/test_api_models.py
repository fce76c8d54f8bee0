"""Shapes, defaults, durations and the single error type of the resource models."""

from __future__ import annotations

import copy
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specguard.api import SpecError, parse_resource, validate_spec
from specguard.api._durations import format_duration, parse_duration
from specguard.api._spec import Spec
from specguard.api._status import Status, Transition, append_transition
from specguard.api._wire import quantity_value
from specguard.api.constants import MAX_TRANSITIONS

from .conftest import BASE_SPEC, resource


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("60s", 60), ("30m", 1800), ("6h", 21600), ("1h30m", 5400), ("1h0m5s", 3605), ("0s", 0)],
)
def test_durations_parse_to_seconds(text: str, seconds: int) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(
    "text", ["", "60", "1d", "1.5h", "30m1h", "-5s", "5 m", "h", " 60s", "60s ", "\t1m", " "]
)
def test_bad_durations_refused(text: str) -> None:
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("quantity", "value"),
    [("64Gi", 64 * 2**30), ("1500m", Decimal("1.5")), (2, 2), ("1e3", 1000), ("+1k", 1000)],
)
def test_quantities_compare_by_value(quantity: str | int, value: Decimal | int) -> None:
    assert quantity_value(quantity) == value


@given(st.integers(min_value=0, max_value=10**7))
def test_duration_format_round_trips(seconds: int) -> None:
    assert parse_duration(format_duration(seconds)) == seconds


def test_defaults_and_both_spellings() -> None:
    spec = Spec.model_validate(
        {"model": {"name": "m"}, "drafter": {"method": "ngram", "numSpeculativeTokens": 4}}
    )
    assert spec.runtime.tensor_parallel_size == 1
    assert spec.runtime.gpu_resource == "nvidia.com/gpu"
    assert spec.evaluation.window == 60
    assert spec.rollback.cooldown == 1800
    assert spec.rollback.startup_deadline == 1200
    assert spec.shadow.schedule == "continuous"
    assert spec.model.effective_served_name == "m"
    snake = Spec.model_validate(
        {"model": {"name": "m", "served_model_name": "x"}, "drafter": {"method": "ngram"}}
    )
    assert snake.model.served_model_name == "x"
    wire = spec.to_wire()
    assert wire["evaluation"]["window"] == "1m"
    assert wire["drafter"]["numSpeculativeTokens"] == 4
    assert Spec.model_validate(wire) == spec


@pytest.mark.parametrize(
    ("section", "value", "path", "fragment"),
    [
        ("runtime", {"tensorParallelSize": 3}, "spec.runtime.tensorParallelSize", "1, 2, 4 or 8"),
        ("runtime", {"port": 0}, "spec.runtime.port", "greater than or equal to 1"),
        ("runtime", {"shmSize": "lots"}, "spec.runtime.shmSize", "invalid quantity"),
        ("runtime", {"extraArgs": [""]}, "spec.runtime.extraArgs[0]", "at least 1 character"),
        ("runtime", {"shmSize": "-1Gi"}, "spec.runtime.shmSize", "non-negative"),
        ("runtime", {"shmSize": -1}, "spec.runtime.shmSize", "must not be negative"),
        (
            "runtime",
            {"resources": {"requests": {"cpu": "-500m"}}},
            "spec.runtime.resources.requests.cpu",
            "invalid quantity",
        ),
        ("runtime", {"gpuResource": "gpu"}, "spec.runtime.gpuResource", "should match pattern"),
        ("runtime", {"gpuResource": "nvidia/gpu"}, "spec.runtime.gpuResource", "pattern"),
        ("runtime", {"tolerations": [{"key": 5}]}, "spec.runtime.tolerations[0].key", "string"),
        (
            "runtime",
            {"tolerations": [{"key": "a", "operator": "In"}]},
            "spec.runtime.tolerations[0].operator",
            "'Exists' or 'Equal'",
        ),
        (
            "runtime",
            {"tolerations": [{"key": "a", "effect": "NoRun"}]},
            "spec.runtime.tolerations[0].effect",
            "NoExecute",
        ),
        (
            "runtime",
            {"tolerations": [{"key": "a", "effect": "NoExecute", "tolerationSeconds": "30"}]},
            "spec.runtime.tolerations[0].tolerationSeconds",
            "integer",
        ),
        (
            "runtime",
            {"tolerations": [{"key": "a b"}]},
            "spec.runtime.tolerations[0].key",
            "pattern",
        ),
        (
            "runtime",
            {"affinity": {"nodeAffinity": "x"}},
            "spec.runtime.affinity.nodeAffinity",
            "dictionary",
        ),
        (
            "runtime",
            {"affinity": {"nodeAfinity": {}}},
            "spec.runtime.affinity.nodeAfinity",
            "unknown field",
        ),
        ("runtime", {"affinity": ["x"]}, "spec.runtime.affinity", "dictionary"),
        (
            "runtime",
            {"env": [{"name": "A", "valueFrom": {"x": 1}}]},
            "spec.runtime.env[0].valueFrom.x",
            "unknown field",
        ),
        (
            "runtime",
            {"env": [{"name": "A", "valueFrom": {"secretKeyRef": {"name": "s"}}}]},
            "spec.runtime.env[0].valueFrom.secretKeyRef.key",
            "required",
        ),
        (
            "runtime",
            {"env": [{"name": "A", "valueFrom": {"configMapKeyRef": {"name": "C", "key": "k"}}}]},
            "spec.runtime.env[0].valueFrom.configMapKeyRef.name",
            "pattern",
        ),
        (
            "runtime",
            {"env": [{"name": "A", "valueFrom": {"fieldRef": {}}}]},
            "spec.runtime.env[0].valueFrom.fieldRef.fieldPath",
            "required",
        ),
        ("runtime", {"env": [{"name": "A=B"}]}, "spec.runtime.env[0].name", "pattern"),
        ("runtime", {"env": [{"name": ""}]}, "spec.runtime.env[0].name", "at least 1 character"),
        (
            "runtime",
            {"modelCache": {"claimName": "Cache_1"}},
            "spec.runtime.modelCache.claimName",
            "pattern",
        ),
        (
            "runtime",
            {"hfTokenSecret": {"name": "hf token"}},
            "spec.runtime.hfTokenSecret.name",
            "pattern",
        ),
        (
            "runtime",
            {"hfTokenSecret": {"name": "hf", "key": "a/b"}},
            "spec.runtime.hfTokenSecret.key",
            "pattern",
        ),
        # Strict types, as the CRD's schema: no quiet conversion of strings.
        (
            "drafter",
            {"adaptiveVerification": "true"},
            "spec.drafter.adaptiveVerification",
            "valid boolean",
        ),
        ("drafter", {"numSpeculativeTokens": "8"}, "spec.drafter.numSpeculativeTokens", "integer"),
        ("runtime", {"env": [{"name": "A", "value": 1}]}, "spec.runtime.env[0].value", "string"),
        ("evaluation", {"tolerance": "0.1"}, "spec.evaluation.tolerance", "valid number"),
        ("drafter", {"method": "medusa"}, "spec.drafter.method", "dspark"),
        (
            "drafter",
            {"numSpeculativeTokens": 0},
            "spec.drafter.numSpeculativeTokens",
            "greater than or equal to 1",
        ),
        ("drafter", {"numSpeculativeTokens": 33}, "spec.drafter.numSpeculativeTokens", "32"),
        (
            "drafter",
            {"numSpeculativeToken": 3},
            "spec.drafter.numSpeculativeToken",
            "unknown field",
        ),
        ("evaluation", {"tolerance": 0.6}, "spec.evaluation.tolerance", "0.5"),
        ("runtime", {"tensorParallelSize": True}, "spec.runtime.tensorParallelSize", "boolean"),
        (
            "evaluation",
            {"windowsPerFalseAlarm": 10**12 + 1},
            "spec.evaluation.windowsPerFalseAlarm",
            "less than or equal to 1000000000000",
        ),
        (
            "evaluation",
            {"windowsPerFalseAlarm": 1.5},
            "spec.evaluation.windowsPerFalseAlarm",
            "integer",
        ),
        ("evaluation", {"tolerance": -0.1}, "spec.evaluation.tolerance", "0"),
        ("evaluation", {"confidence": 1.0}, "spec.evaluation.confidence", "0.999"),
        ("evaluation", {"confidence": 0.4}, "spec.evaluation.confidence", "0.5"),
        ("evaluation", {"window": "1d"}, "spec.evaluation.window", "invalid duration '1d'"),
        ("evaluation", {"window": 60.5}, "spec.evaluation.window", "a duration is a string"),
        ("evaluation", {"window": " 60s"}, "spec.evaluation.window", "invalid duration ' 60s'"),
        ("evaluation", {"window": 60}, "spec.evaluation.window", "got int 60"),
        ("rollback", {"cooldown": True}, "spec.rollback.cooldown", "got bool True"),
        ("evaluation", {"minOutputTokens": 1}, "spec.evaluation.minOutputTokens", "2"),
        ("rollback", {"policy": "maybe"}, "spec.rollback.policy", "auto"),
        (
            "metricsSource",
            {"type": "prometheus", "prometheusUrl": "p:9090"},
            "spec.metricsSource.prometheusUrl",
            "http",
        ),
    ],
)
def test_shape_errors_name_the_field(
    section: str, value: dict[str, Any], path: str, fragment: str
) -> None:
    spec = copy.deepcopy(BASE_SPEC)
    spec.setdefault(section, {}).update(value)
    with pytest.raises(SpecError) as caught:
        validate_spec(spec)
    messages = [str(p) for p in caught.value.problems]
    assert any(m.startswith(f"{path}: ") and fragment.lower() in m.lower() for m in messages), (
        messages
    )


def test_replicas_must_be_an_integer() -> None:
    # A top-level field: validated on its own too (for the rules), and strictly there.
    with pytest.raises(SpecError) as caught:
        validate_spec({**copy.deepcopy(BASE_SPEC), "replicas": "4", "shadow": {"replicas": 9}})
    assert [str(p) for p in caught.value.problems] == [
        "spec.replicas: Input should be a valid integer"
    ]


def test_all_problems_reported_at_once() -> None:
    spec = copy.deepcopy(BASE_SPEC)
    spec["evaluation"] = {"tolerance": 2}  # shape error in one section ...
    spec["drafter"]["method"] = "eagle3"  # ... cross-field errors in others
    spec["runtime"]["extraArgs"] = ["-tp=2"]
    spec["shadow"] = {"replicas": 9}
    obj = resource(spec)
    obj["kind"] = "Deployment"
    with pytest.raises(SpecError) as caught:
        parse_resource(obj)
    paths = [p.path for p in caught.value.problems]
    assert paths == [
        "kind",
        "spec.evaluation.tolerance",
        "spec.drafter.adaptiveVerification",
        "spec.runtime.extraArgs",
        "spec.shadow.replicas",
    ]
    assert str(caught.value).splitlines()[0] == (
        "kind: must be SpeculativeDeployment, got 'Deployment'"
    )


@pytest.mark.parametrize(
    ("obj", "path"),
    [
        ([], "(root)"),
        (
            {
                "apiVersion": "v1",
                "kind": "SpeculativeDeployment",
                "metadata": {"name": "a"},
                "spec": BASE_SPEC,
            },
            "apiVersion",
        ),
        (
            {
                "apiVersion": "specguard.io/v1alpha1",
                "kind": "SpeculativeDeployment",
                "spec": BASE_SPEC,
            },
            "metadata.name",
        ),
        (
            {
                "apiVersion": "specguard.io/v1alpha1",
                "kind": "SpeculativeDeployment",
                "metadata": {"name": "a"},
            },
            "spec",
        ),
        (
            {
                "apiVersion": "specguard.io/v1alpha1",
                "kind": "SpeculativeDeployment",
                "metadata": {"name": "a"},
                "spec": [],
            },
            "spec",
        ),
        (
            {
                "apiVersion": "specguard.io/v1alpha1",
                "kind": "SpeculativeDeployment",
                "metadata": {"name": "a"},
                "spec": {"drafter": {"method": "ngram"}},
            },
            "spec.model",
        ),
    ],
)
def test_envelope_problems(obj: Any, path: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_resource(obj)
    assert [p.path for p in caught.value.problems] == [path]


@pytest.mark.parametrize(
    ("metadata", "expected"),
    [
        ({"name": 5}, "metadata.name: must be a string, got 5"),
        ({"namespace": "llm"}, "metadata.name: required field is missing"),
        ("qwen", "metadata: must be a mapping, got 'qwen'"),
    ],
)
def test_bad_metadata_says_what_is_wrong(metadata: Any, expected: str) -> None:
    obj = {**resource(copy.deepcopy(BASE_SPEC)), "metadata": metadata}
    with pytest.raises(SpecError) as caught:
        parse_resource(obj)
    assert [str(p) for p in caught.value.problems] == [expected]


def test_resource_keeps_metadata_and_status() -> None:
    obj = resource(copy.deepcopy(BASE_SPEC))
    obj["metadata"].update({"uid": "u-1", "generation": 3, "resourceVersion": "7"})
    obj["status"] = {
        "observedGeneration": 3,
        "mode": "baseline",
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "ArmsReady",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }
        ],
        "lastVerdict": {
            "outcome": "regressed",
            "ratio": 1.12,
            "ciLower": 1.05,
            "ciUpper": 1.2,
            "samples": {"speculative": 300, "baseline": 280},
            "concurrency": {"speculative": 41.5, "baseline": 40.2},
            "domains": {"tool_call": 1.3},
        },
        "transitions": [
            {
                "time": "2026-01-01T00:00:00Z",
                "from": "speculative",
                "to": "baseline",
                "reason": "Regressed",
            }
        ],
        "arms": {
            "serving": {
                "arm": "baseline",
                "deployment": "qwen-base",
                "replicas": 4,
                "readyReplicas": 4,
            },
            "shadow": {
                "arm": "speculative",
                "deployment": "qwen-spec",
                "replicas": 1,
                "readyReplicas": 1,
            },
            "mirrorShare": 0.25,
        },
    }
    sd = parse_resource(obj)
    assert (sd.name, sd.namespace, sd.metadata.uid, sd.metadata.generation) == (
        "qwen",
        "llm",
        "u-1",
        3,
    )
    assert sd.status is not None and sd.status.mode == "baseline"
    assert sd.status.arms is not None and sd.status.arms.serving.deployment == "qwen-base"
    assert sd.status.transitions[0].from_mode == "speculative"
    assert sd.status.to_wire()["transitions"][0]["from"] == "speculative"
    assert sd.status.to_wire() == Status.model_validate(sd.status.to_wire()).to_wire()


def test_bad_status_is_reported_with_path() -> None:
    obj = resource(copy.deepcopy(BASE_SPEC))
    obj["status"] = {"mode": "turbo", "arms": {"mirrorShare": 2}}
    with pytest.raises(SpecError) as caught:
        parse_resource(obj)
    paths = {p.path for p in caught.value.problems}
    assert {"status.mode", "status.arms.mirrorShare", "status.arms.serving"} <= paths


def test_transitions_are_bounded() -> None:
    history: list[Transition] = []
    for i in range(MAX_TRANSITIONS + 5):
        t = Transition.model_validate(
            {
                "time": f"2026-01-01T00:00:{i % 60:02d}Z",
                "from": "speculative",
                "to": "baseline",
                "reason": f"R{i}",
            }
        )
        history = append_transition(history, t)
    assert len(history) == MAX_TRANSITIONS
    assert history[0].reason == "R5" and history[-1].reason == f"R{MAX_TRANSITIONS + 4}"
    with pytest.raises(ValueError, match="at most"):
        Status.model_validate({"transitions": [t.to_wire()] * (MAX_TRANSITIONS + 1)})
