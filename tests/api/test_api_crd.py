"""The generated CRD: committed copy up to date, structural, described, CEL by version."""

from __future__ import annotations

import copy
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from specguard.api._crd import crd, node_at, open_api_schema, parse_kube_version
from specguard.api._rules import QUANTITY_SINCE, RULES
from specguard.api._spec import Spec
from specguard.commands.crd import crd_yaml, main

from .conftest import BASE_SPEC, resource

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "crds" / "specguard.io_speculativedeployments.yaml"
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))


def walk(node: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    found = [(path, node)]
    for name, child in node.get("properties", {}).items():
        found += walk(child, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        found += walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        found += walk(node["additionalProperties"], f"{path}{{}}")
    return found


def test_committed_crd_matches_models() -> None:
    assert COMMITTED.read_text() == crd_yaml(), (
        "crds/ is stale: run `specguard crd > crds/specguard.io_speculativedeployments.yaml`"
    )


def test_schema_is_structural() -> None:
    schema = open_api_schema()
    for path, node in walk(schema):
        assert "$ref" not in node and "allOf" not in node and "title" not in node, path
        assert node.get("additionalProperties") not in (True, False), path
        if "anyOf" in node:
            # Only int-or-string may use anyOf, and only with types in the branches.
            assert node.get("x-kubernetes-int-or-string") is True, path
            assert node["anyOf"] == [{"type": "integer"}, {"type": "string"}], path
        elif not node.get("x-kubernetes-preserve-unknown-fields"):
            assert node.get("type") in {
                "object",
                "array",
                "string",
                "integer",
                "number",
                "boolean",
            }, path
        assert not ("properties" in node and "additionalProperties" in node), path


def test_every_field_is_described() -> None:
    schema = open_api_schema()
    undescribed = [
        path
        for path, node in walk(schema)
        if path.count(".") >= 1
        and not path.endswith(("[]", "{}"))
        and path not in {".metadata"}
        and not node.get("description")
    ]
    assert undescribed == []


def test_defaults_mirror_the_models() -> None:
    spec_schema = open_api_schema()["properties"]["spec"]
    assert spec_schema["properties"]["runtime"]["default"] == {}
    assert spec_schema["properties"]["evaluation"]["properties"]["window"]["default"] == "1m"
    assert (
        spec_schema["properties"]["rollback"]["properties"]["startupDeadline"]["default"] == "20m"
    )
    assert spec_schema["properties"]["runtime"]["properties"]["tensorParallelSize"]["enum"] == [
        1,
        2,
        4,
        8,
    ]
    # Defaulting as the API server does it gives what pydantic gives.
    defaulted = apply_defaults(spec_schema, copy.deepcopy(BASE_SPEC))
    model = Spec.model_validate(BASE_SPEC).to_wire()
    assert_defaults_within(defaulted, model, "spec")


def assert_defaults_within(defaulted: Any, model: Any, path: str) -> None:
    """Every value the API server would fill in equals the model's (the models may also
    fill empty lists and maps, which the CRD leaves absent)."""
    if isinstance(defaulted, dict):
        for key, value in defaulted.items():
            assert key in model, f"{path}.{key}"
            assert_defaults_within(value, model[key], f"{path}.{key}")
    else:
        assert defaulted == model, path


def apply_defaults(schema: dict[str, Any], value: Any) -> Any:
    if isinstance(value, dict):
        for name, child in schema.get("properties", {}).items():
            if name not in value and "default" in child:
                value[name] = copy.deepcopy(child["default"])
            if name in value:
                value[name] = apply_defaults(child, value[name])
    return value


def count_rules(schema: dict[str, Any]) -> list[dict[str, Any]]:
    return [rule for _, node in walk(schema) for rule in node.get("x-kubernetes-validations", [])]


@pytest.mark.parametrize(
    ("version", "cel", "field_path"),
    [
        ("1.20", False, False),
        ("1.24", False, False),
        ("1.25", True, False),
        ("1.27", True, False),
        ("1.28", True, True),
        ("v1.33.1", True, True),
    ],
)
def test_cel_rules_follow_server_version(version: str, cel: bool, field_path: bool) -> None:
    rules = count_rules(crd(version)["spec"]["versions"][0]["schema"]["openAPIV3Schema"])
    server = parse_kube_version(version)
    with_cel = [rule for rule in RULES if rule.cel is not None and rule.since <= server]
    assert len(rules) == (len(with_cel) + 1 if cel else 0)
    # The quantity bounds need the quantity library (Kubernetes >= 1.30).
    assert any("quantity(" in rule["rule"] for rule in rules) == (server >= QUANTITY_SINCE)
    assert any("fieldPath" in rule for rule in rules) == field_path
    for rule in rules:
        assert rule["message"].split(":")[0].startswith(("spec", "metadata"))


def test_names_columns_and_subresource() -> None:
    obj = crd()
    names = obj["spec"]["names"]
    assert obj["metadata"]["name"] == "speculativedeployments.specguard.io"
    assert (names["kind"], names["plural"], names["shortNames"]) == (
        "SpeculativeDeployment",
        "speculativedeployments",
        ["sd"],
    )
    assert "specguard" in names["categories"]
    version = obj["spec"]["versions"][0]
    assert version["name"] == "v1alpha1" and version["subresources"] == {"status": {}}
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert list(columns) == [
        "Mode", "Drafter", "Rung", "Ratio", "Concurrency", "Ready", "Swapping", "Halted", "Age"
    ]  # fmt: skip
    # A halt shows in `kubectl get sd` (it showed only in describe and one sentence of why).
    assert columns["Halted"] == '.status.conditions[?(@.type=="Halted")].status'
    schema = version["schema"]["openAPIV3Schema"]
    # Every column's path exists in the schema (or is standard metadata).
    for path in columns.values():
        if path.startswith(".metadata"):
            continue
        node = schema
        for part in re.sub(r"\[.*?\]", "[]", path).lstrip(".").split("."):
            node = node["properties"][part.removesuffix("[]")]
            if part.endswith("[]"):
                node = node["items"]
    conditions = schema["properties"]["status"]["properties"]["conditions"]
    assert conditions["x-kubernetes-list-type"] == "map"


def _validator() -> jsonschema.Draft4Validator:
    # OpenAPI v3.0 schemas are close to draft 4 (boolean exclusiveMinimum); the x-kubernetes
    # keys are ignored, so this checks shapes, enums, bounds and patterns.
    return jsonschema.Draft4Validator(open_api_schema())


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_examples_fit_the_schema(path: Path) -> None:
    errors = list(_validator().iter_errors(yaml.safe_load(path.read_text())))
    assert errors == []


@pytest.mark.parametrize(
    ("section", "value"),
    [
        ("runtime", {"tensorParallelSize": 3}),
        ("evaluation", {"tolerance": 0.6}),
        ("evaluation", {"confidence": 1.0}),
        ("evaluation", {"window": "1d"}),
        ("drafter", {"numSpeculativeTokens": 33}),
        ("drafter", {"method": "medusa"}),
        ("runtime", {"shmSize": "lots"}),
        ("evaluation", {"concurrencyMatch": 0}),
        ("evaluation", {"window": " 60s"}),
        ("drafter", {"adaptiveVerification": "true"}),
        ("drafter", {"numSpeculativeTokens": "8"}),
        ("runtime", {"env": [{"name": "A", "value": 1}]}),
        ("runtime", {"shmSize": "-1Gi"}),
        ("runtime", {"shmSize": -1}),
        ("runtime", {"resources": {"limits": {"memory": "-1"}}}),
        ("runtime", {"gpuResource": "gpu"}),
        ("runtime", {"tolerations": [{"key": 5}]}),
        ("runtime", {"tolerations": [{"key": "a", "operator": "In"}]}),
        ("runtime", {"affinity": {"nodeAffinity": "x"}}),
        ("runtime", {"env": [{"name": "A=B"}]}),
        ("runtime", {"env": [{"name": ""}]}),
        ("runtime", {"env": [{"name": "A", "valueFrom": {"secretKeyRef": {"name": "s"}}}]}),
        ("runtime", {"modelCache": {"claimName": "Cache"}}),
        ("runtime", {"hfTokenSecret": {"name": "hf_token"}}),
    ],
)
def test_schema_refuses_what_models_refuse(section: str, value: dict[str, Any]) -> None:
    spec = copy.deepcopy(BASE_SPEC)
    spec.setdefault(section, {}).update(value)
    assert list(_validator().iter_errors(resource(spec)))
    with pytest.raises(ValueError):
        Spec.model_validate(spec)


def test_crd_command_prints_yaml(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--kube-version", "1.20"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed == crd("1.20")
    assert "x-kubernetes-validations" not in yaml.safe_dump(printed)


def test_crd_command_bad_version_exits_2() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "specguard", "crd", "--kube-version", "twenty"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "specguard crd: --kube-version: invalid Kubernetes version 'twenty': "
        "use MAJOR.MINOR like 1.31"
    ]


def test_crd_is_valid_kubernetes() -> None:
    import kubernetes_validate

    for version in ("1.33", "1.20"):
        kubernetes_validate.validate(crd(version), "1.33", strict=True)


def test_cel_rules_sit_on_nodes_cel_can_see() -> None:
    # The API server hides untyped preserve-unknown-fields nodes from CEL, and maps or
    # lists of them; a rule there would not compile.
    schema = open_api_schema()
    for rule in RULES:
        if rule.cel is None:
            continue
        node = node_at(schema, rule.scope)
        assert node.get("type") in {"object", "array", "string"}, rule.name
        for inner in (node.get("items"), node.get("additionalProperties")):
            if isinstance(inner, dict):
                assert "type" in inner or inner.get("x-kubernetes-int-or-string"), rule.name


def test_field_paths_resolve_in_the_schema() -> None:
    # Kubernetes >= 1.28 refuses a CRD whose rule names a fieldPath the schema lacks.
    schema = open_api_schema("1.28")
    checked = 0
    for _, node in walk(schema):
        for rule in node.get("x-kubernetes-validations", []):
            if "fieldPath" in rule:
                target = node
                for part in rule["fieldPath"].lstrip(".").split("."):
                    target = target["properties"][part]
                checked += 1
    assert checked >= 10
