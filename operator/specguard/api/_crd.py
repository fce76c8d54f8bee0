"""The SpeculativeDeployment CRD, generated from the pydantic models.

Pydantic's JSON Schema is turned into a Kubernetes *structural* schema: references
inlined, ``Optional`` unwrapped, titles dropped, every node typed, ``default: {}`` on
sections whose fields all have defaults (so the API server fills them as the models do),
and the CEL twin of every rule in :mod:`specguard.api._rules` placed at its node.

Servers older than 1.25 refuse a CRD carrying ``x-kubernetes-validations``, so
``kube_version`` below 1.25 leaves them out (the operator's pydantic validation is the
guard everywhere); ``fieldPath`` on a rule needs 1.28.
"""

from __future__ import annotations

import copy
from typing import Any, Final

from specguard.api import constants as c
from specguard.api._durations import DURATION_PATTERN, format_duration
from specguard.api._resource import NAME_CEL, NAME_MESSAGE
from specguard.api._rules import CEL_SINCE, RULES
from specguard.api._spec import Spec
from specguard.api._status import Status

DEFAULT_KUBE_VERSION: Final = "1.33"
FIELD_PATH_SINCE: Final = (1, 28)

Schema = dict[str, Any]


def parse_kube_version(text: str) -> tuple[int, int]:
    """ "1.20", "v1.31.2" -> (1, 20), (1, 31); ValueError otherwise."""
    parts = text.strip().removeprefix("v").split(".")
    try:
        major, minor = int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        raise ValueError(
            f"invalid Kubernetes version {text!r}: use MAJOR.MINOR like 1.31"
        ) from None
    return major, minor


def _structural(node: Schema, defs: dict[str, Schema]) -> Schema:
    """One node of pydantic's schema as a structural-schema node (recursively)."""
    node = dict(node)
    if "anyOf" in node:
        options = [option for option in node["anyOf"] if option != {"type": "null"}]
        if len(options) == 1:
            del node["anyOf"]
            node = {**options[0], **node}
        else:
            node["anyOf"] = options
    if "allOf" in node and len(node["allOf"]) == 1:
        inner = node.pop("allOf")[0]
        node = {**inner, **node}
    if "$ref" in node:
        target = defs[node.pop("$ref").rsplit("/", 1)[1]]
        # The field's own description wins over the model's docstring.
        node = {**target, **node}
    for key in ("title", "$defs"):
        node.pop(key, None)
    if node.get("additionalProperties") is False or node.get("additionalProperties") is True:
        del node["additionalProperties"]
    if "const" in node:
        node["enum"] = [node.pop("const")]
    if "exclusiveMinimum" in node:
        node["minimum"] = node["exclusiveMinimum"]
        node["exclusiveMinimum"] = True
    if "exclusiveMaximum" in node:
        node["maximum"] = node["exclusiveMaximum"]
        node["exclusiveMaximum"] = True
    if node.get("default", 0) is None:
        del node["default"]
    if node.get("pattern") == DURATION_PATTERN and isinstance(node.get("default"), int):
        node["default"] = format_duration(node["default"])
    if "properties" in node:
        required = set(node.get("required", ()))
        properties = {}
        for name, child in node["properties"].items():
            converted = _structural(child, defs)
            # Sections whose fields all have defaults default to {} so that the API
            # server fills them in as the models do (optional sections stay absent).
            child_nullable = "anyOf" in child and {"type": "null"} in child["anyOf"]
            if (
                name not in required
                and not child_nullable
                and "properties" in converted
                and not converted.get("required")
                and "default" not in converted
            ):
                converted = _ordered({**converted, "default": {}})
            properties[name] = converted
        node["properties"] = properties
    if isinstance(node.get("additionalProperties"), dict):
        node["additionalProperties"] = _structural(node["additionalProperties"], defs)
    if "items" in node:
        node["items"] = _structural(node["items"], defs)
    if "anyOf" in node:
        node["anyOf"] = [_structural(option, defs) for option in node["anyOf"]]
    return _ordered(node)


# Keys people read first come first in the YAML.
_KEY_ORDER: Final = ("type", "description", "default", "enum", "format", "pattern")
_KEY_LAST: Final = ("properties", "additionalProperties", "items", "required")


def _ordered(node: Schema) -> Schema:
    first = [key for key in _KEY_ORDER if key in node]
    last = [key for key in _KEY_LAST if key in node]
    middle = sorted(key for key in node if key not in first and key not in last)
    return {key: node[key] for key in (*first, *middle, *last)}


def model_schema(model: type[Spec] | type[Status]) -> Schema:
    raw = model.model_json_schema(by_alias=True, mode="validation")
    return _structural(raw, raw.get("$defs", {}))


def node_at(root: Schema, scope: str) -> Schema:
    """The schema node of a rule scope: "spec.drafter.perBatchSize[]" -> its items."""
    node = root
    for part in scope.split("."):
        is_items = part.endswith("[]")
        node = node["properties"][part.removesuffix("[]")]
        if is_items:
            node = node["items"]
    return node


def _add_rules(root: Schema, version: tuple[int, int]) -> None:
    def entry(rule: str, message: str, field_path: str) -> Schema:
        item: Schema = {"rule": rule, "message": message}
        if field_path and version >= FIELD_PATH_SINCE:
            item["fieldPath"] = field_path
        return item

    for rule in RULES:
        if rule.cel is None or version < rule.since:
            continue
        node = node_at(root, rule.scope)
        node.setdefault("x-kubernetes-validations", []).append(
            entry(rule.cel, rule.cel_message, rule.field)
        )
    # No fieldPath: it must resolve in the schema, which leaves metadata's fields out.
    root.setdefault("x-kubernetes-validations", []).append(entry(NAME_CEL, NAME_MESSAGE, ""))


def _without_defaults(node: Schema) -> Schema:
    """Status is written whole by the operator, so server-side defaults there buy nothing;
    and Kubernetes 1.20 refuses the CRD over them (an empty-string default reads as null)."""
    node = {key: value for key, value in node.items() if key != "default"}
    if "properties" in node:
        node["properties"] = {k: _without_defaults(v) for k, v in node["properties"].items()}
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            node[key] = _without_defaults(node[key])
    if "anyOf" in node:
        node["anyOf"] = [_without_defaults(option) for option in node["anyOf"]]
    return node


def _status_schema() -> Schema:
    schema = _without_defaults(model_schema(Status))
    conditions = schema["properties"]["conditions"]
    conditions["x-kubernetes-list-type"] = "map"
    conditions["x-kubernetes-list-map-keys"] = ["type"]
    return schema


def open_api_schema(kube_version: str = DEFAULT_KUBE_VERSION) -> Schema:
    version = parse_kube_version(kube_version)
    spec = model_schema(Spec)
    spec["description"] = "What the user asks for; the operator never writes it."
    status = _status_schema()
    status["description"] = "What is in effect and why; written by the operator only."
    root: Schema = {
        "type": "object",
        "description": "vLLM with a speculative-decoding drafter that specguard keeps only "
        "while it makes per-token latency better, judged against a shadow copy without it.",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string", "description": "specguard.io/v1alpha1"},
            "kind": {"type": "string", "description": "SpeculativeDeployment"},
            "metadata": {"type": "object"},
            "spec": spec,
            "status": status,
        },
    }
    if version >= CEL_SINCE:
        _add_rules(root, version)
    return root


PRINTER_COLUMNS: Final[list[Schema]] = [
    {
        "name": "Mode",
        "type": "string",
        "jsonPath": ".status.mode",
        "description": "Arm that serves clients",
    },
    {
        "name": "Drafter",
        "type": "string",
        "jsonPath": ".spec.drafter.method",
        "description": "Speculative-decoding method",
    },
    {
        "name": "Rung",
        "type": "string",
        "jsonPath": ".status.ladder.rung.name",
        "description": "Drafter configuration the speculative arm runs (spec.ladder)",
    },
    {
        "name": "Ratio",
        "type": "number",
        "jsonPath": ".status.lastVerdict.ratio",
        "description": "Per-token latency, speculative / baseline, of the last verdict",
    },
    {
        "name": "Concurrency",
        "type": "number",
        "jsonPath": ".status.lastVerdict.concurrency.speculative",
        "description": "Per-pod concurrency the drafter arm saw in the last verdict",
    },
    {
        "name": "Ready",
        "type": "string",
        "jsonPath": '.status.conditions[?(@.type=="Ready")].status',
        "description": "Ready condition: clients are served (a swap included)",
    },
    {
        "name": "Swapping",
        "type": "string",
        "jsonPath": '.status.conditions[?(@.type=="Swapping")].status',
        "description": "Swapping condition: a rolling swap between the arms runs",
    },
    {
        "name": "Halted",
        "type": "string",
        "jsonPath": '.status.conditions[?(@.type=="Halted")].status',
        "description": "Halted condition: automatic changes stopped after flaps "
        "(kubectl specguard retry resumes them)",
    },
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


def crd(kube_version: str = DEFAULT_KUBE_VERSION) -> Schema:
    """The CustomResourceDefinition object for a server of ``kube_version``."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": c.CRD_NAME,
            "labels": {c.LABEL_APP_NAME: "specguard", c.LABEL_APP_PART_OF: "specguard"},
        },
        "spec": {
            "group": c.GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": c.KIND,
                "listKind": c.LIST_KIND,
                "plural": c.PLURAL,
                "singular": c.SINGULAR,
                "shortNames": list(c.SHORT_NAMES),
                "categories": list(c.CATEGORIES),
            },
            "versions": [
                {
                    "name": c.VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": copy.deepcopy(PRINTER_COLUMNS),
                    "schema": {"openAPIV3Schema": open_api_schema(kube_version)},
                }
            ],
        },
    }
