"""The SpeculativeDeployment object and the one entry point that validates it.

``parse_resource`` checks the shape of every field (pydantic) and then every cross-field
rule (:mod:`specguard.api._rules`), and raises one :class:`SpecError` listing all problems,
each with its field path, so the operator can put them in a condition and an Event and
``specguard render`` can print them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from specguard.api._errors import Problem, SpecError, problems_from_pydantic, shown
from specguard.api._rules import Partial, check_rules
from specguard.api._spec import Spec
from specguard.api._status import Status
from specguard.api._wire import DNS1123_LABEL, DNS1123_SUBDOMAIN_PATTERN, LABEL_VALUE_PATTERN
from specguard.api.constants import API_VERSION, KIND

# Every object specguard derives is named "<name>-<suffix>" and the Services must be
# DNS-1035 labels (63 characters): "-router" is the longest suffix.
NAME_PATTERN: Final = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
MAX_NAME_LENGTH: Final = 56
NAME_CEL: Final = (
    f"self.metadata.name.matches('{NAME_PATTERN}') && size(self.metadata.name) <= {MAX_NAME_LENGTH}"
)
NAME_MESSAGE: Final = (
    f"metadata.name: must be a DNS-1035 label of at most {MAX_NAME_LENGTH} characters "
    "(lowercase letters, digits and '-', starting with a letter)"
)


class ObjectMeta(BaseModel):
    """The parts of metav1.ObjectMeta specguard reads; the rest is kept as it is."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow")

    name: str
    namespace: str = "default"
    uid: str | None = None
    generation: int | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


# metav1.ObjectMeta's fields: the API server refuses any other (strict field validation,
# kubectl's default), so Python does too.
OBJECT_META_FIELDS: Final = frozenset(
    {
        "name", "generateName", "namespace", "selfLink", "uid", "resourceVersion",
        "generation", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds",
        "labels", "annotations", "ownerReferences", "finalizers", "managedFields",
    }
)  # fmt: skip
TOP_LEVEL_FIELDS: Final = frozenset({"apiVersion", "kind", "metadata", "spec", "status"})
NAMESPACE_PATTERN: Final = rf"^{DNS1123_LABEL}$"
MAX_ANNOTATIONS_BYTES: Final = 256 * 1024
_LABEL_KEY_NAME: Final = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE: Final = re.compile(LABEL_VALUE_PATTERN)
_KEY_PREFIX: Final = re.compile(DNS1123_SUBDOMAIN_PATTERN)


class SpeculativeDeployment(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    api_version: Literal["specguard.io/v1alpha1"] = "specguard.io/v1alpha1"
    kind: Literal["SpeculativeDeployment"] = "SpeculativeDeployment"
    metadata: ObjectMeta
    spec: Spec
    status: Status | None = None

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def namespace(self) -> str:
        return self.metadata.namespace


def check_name(name: str) -> list[Problem]:
    if len(name) <= MAX_NAME_LENGTH and re.fullmatch(NAME_PATTERN, name):
        return []
    return [
        Problem(
            "metadata.name", NAME_MESSAGE.removeprefix("metadata.name: ") + f", got {shown(name)}"
        )
    ]


def _qualified_name_problem(key: str) -> str | None:
    """Why ``key`` is not a label or annotation key (Kubernetes' qualified name), or None."""
    prefix, slash, name = key.rpartition("/")
    if slash and (len(prefix) > 253 or not _KEY_PREFIX.fullmatch(prefix)):
        return "its prefix must be a lowercase DNS subdomain of at most 253 characters"
    if len(name) > 63 or not _LABEL_KEY_NAME.fullmatch(name):
        return (
            "its name must be at most 63 letters, digits, '-', '_' or '.', starting and "
            "ending with a letter or digit"
        )
    return None


def _string_map(metadata: Mapping[str, Any], field: str) -> list[Problem]:
    value = metadata.get(field)
    if value is None:
        return []
    if not isinstance(value, Mapping):
        return [Problem(f"metadata.{field}", f"must be a mapping, got {shown(value)}")]
    problems = []
    for key, item in value.items():
        path = f"metadata.{field}.{shown(key, quote=False)}"
        why = _qualified_name_problem(key) if isinstance(key, str) else "must be a string"
        if why is not None:
            problems.append(Problem(path, f"invalid key: {why}"))
        if not isinstance(item, str):
            problems.append(Problem(path, f"must be a string, got {shown(item)}"))
        elif field == "labels" and (len(item) > 63 or not _LABEL_VALUE.fullmatch(item)):
            problems.append(
                Problem(
                    path,
                    "a label value is at most 63 letters, digits, '-', '_' or '.', starting "
                    f"and ending with a letter or digit, got {shown(item)}",
                )
            )
    if field == "annotations":
        size = sum(len(str(k)) + len(str(v)) for k, v in value.items())
        if size > MAX_ANNOTATIONS_BYTES:
            problems.append(
                Problem("metadata.annotations", f"larger than {MAX_ANNOTATIONS_BYTES} bytes")
            )
    return problems


def _metadata_without_nulls(metadata: Any) -> Any:
    """A null field of metadata reads as unset (Go's JSON decoding into ObjectMeta), and so
    does an empty namespace (the API server fills in the request's)."""
    if not isinstance(metadata, Mapping):
        return metadata
    return {
        k: v
        for k, v in metadata.items()
        if not (v is None and k in OBJECT_META_FIELDS) and not (k == "namespace" and v == "")
    }


def check_metadata(metadata: Any) -> list[Problem]:
    """What the API server would refuse in ``metadata`` (of a new object)."""
    if metadata is None:
        return [Problem("metadata.name", "required field is missing")]
    if not isinstance(metadata, Mapping):
        return [Problem("metadata", f"must be a mapping, got {shown(metadata)}")]
    metadata = _metadata_without_nulls(metadata)
    problems: list[Problem] = []
    for key in metadata:
        if key not in OBJECT_META_FIELDS:
            problems.append(Problem(f"metadata.{shown(key, quote=False)}", "unknown field"))
    name = metadata.get("name")
    if name is None:
        problems.append(Problem("metadata.name", "required field is missing"))
    elif not isinstance(name, str):
        problems.append(Problem("metadata.name", f"must be a string, got {shown(name)}"))
    else:
        problems.extend(check_name(name))
    namespace = metadata.get("namespace")
    if namespace is not None and (
        not isinstance(namespace, str)
        or len(namespace) > 63
        or not re.fullmatch(NAMESPACE_PATTERN, namespace)
    ):
        problems.append(
            Problem(
                "metadata.namespace",
                "must be a DNS-1123 label of at most 63 characters (lowercase letters, digits "
                f"and '-'), got {shown(namespace)}",
            )
        )
    problems += _string_map(metadata, "labels")
    problems += _string_map(metadata, "annotations")
    if not problems:
        try:
            ObjectMeta.model_validate(metadata)
        except ValidationError as error:
            problems.extend(problems_from_pydantic(error, "metadata"))
    return problems


def validate_spec(raw: Any) -> Spec:
    """``spec`` as a model, or SpecError with every problem (shape and cross-field).

    Read as the API server reads it: camelCase names only, strict types, and a null in a
    field is the same as leaving the field out. When the shape is wrong, the cross-field
    rules still run on every field that is right (see :class:`~specguard.api._rules.Partial`).
    """
    if not isinstance(raw, Mapping):
        raise SpecError([Problem("spec", f"must be a mapping, got {shown(raw)}")])
    raw = prune_nulls(raw)
    too_big = list(_outside_int64(raw, _spec_schema(), "spec"))
    try:
        if too_big:
            raise SpecError(too_big)
        spec = Spec.model_validate(raw, by_alias=True, by_name=False)
    except (ValidationError, SpecError) as error:
        problems = too_big
        if isinstance(error, ValidationError):
            problems = problems + problems_from_pydantic(error, "spec")
        problems.extend(check_rules(Partial(Spec, raw)))
        raise SpecError(_unique(problems)) from None
    problems = check_rules(spec)
    if problems:
        raise SpecError(_unique(problems))
    return spec


def prune_nulls(raw: Mapping[str, Any]) -> dict[str, Any]:
    """``raw`` without the null fields of typed sections and typed maps, as the API server
    prunes them (nulls in free-form objects and in lists stay)."""
    return _prune(raw, _spec_schema())  # type: ignore[no-any-return]


_SCHEMA: dict[str, Any] = {}


def _spec_schema() -> dict[str, Any]:
    """spec's node of the CRD schema: what the API server prunes and type-checks by."""
    if not _SCHEMA:
        from specguard.api._crd import model_schema  # crd imports this module

        _SCHEMA.update(model_schema(Spec))
    return _SCHEMA


INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1


def _fits_int64(value: int) -> bool:
    return INT64_MIN <= value <= INT64_MAX


def _outside_int64(value: Any, schema: Mapping[str, Any], path: str) -> Iterator[Problem]:
    """Integers of the schema's integer fields that do not fit in an int64: the API server
    reads them as floats and refuses them ("must be of type integer")."""
    if schema.get("type") == "integer":
        if isinstance(value, int) and not isinstance(value, bool) and not _fits_int64(value):
            yield Problem(path, f"{shown(value)} does not fit in a 64-bit integer")
        return
    if isinstance(value, Mapping) and "properties" in schema:
        for key, item in value.items():
            if key in schema["properties"]:
                yield from _outside_int64(item, schema["properties"][key], f"{path}.{key}")
    elif isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for index, item in enumerate(value):
            yield from _outside_int64(item, schema["items"], f"{path}[{index}]")


def _prune(value: Any, schema: Mapping[str, Any]) -> Any:
    if isinstance(value, Mapping) and "properties" in schema:
        properties = schema["properties"]
        return {
            key: _prune(item, properties[key]) if key in properties else item
            for key, item in value.items()
            if not (item is None and key in properties)
        }
    if isinstance(value, Mapping) and isinstance(schema.get("additionalProperties"), Mapping):
        inner = schema["additionalProperties"]
        return {key: _prune(item, inner) for key, item in value.items() if item is not None}
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        return [_prune(item, schema["items"]) for item in value]
    return value


def _unique(problems: list[Problem]) -> list[Problem]:
    return list(dict.fromkeys(problems))


def parse_resource(obj: Mapping[str, Any]) -> SpeculativeDeployment:
    """Validate a SpeculativeDeployment (as read from YAML or the API server).

    Raises SpecError carrying every problem, each with its field path.
    """
    if not isinstance(obj, Mapping):
        raise SpecError([Problem("(root)", "a SpeculativeDeployment must be a mapping")])
    problems: list[Problem] = []
    for key in obj:
        if key not in TOP_LEVEL_FIELDS:
            problems.append(Problem(shown(key, quote=False), "unknown field"))
    if obj.get("apiVersion") != API_VERSION:
        problems.append(
            Problem("apiVersion", f"must be {API_VERSION}, got {shown(obj.get('apiVersion'))}")
        )
    if obj.get("kind") != KIND:
        problems.append(Problem("kind", f"must be {KIND}, got {shown(obj.get('kind'))}"))
    problems += check_metadata(obj.get("metadata"))
    if "spec" not in obj:
        problems.append(Problem("spec", "required field is missing"))
    else:
        try:
            validate_spec(obj["spec"])
        except SpecError as error:
            problems.extend(error.problems)
    if obj.get("status") is not None:
        try:
            Status.model_validate(obj["status"])
        except ValidationError as error:
            problems.extend(problems_from_pydantic(error, "status"))
    if problems:
        raise SpecError(problems)
    known = {key: obj[key] for key in TOP_LEVEL_FIELDS if key in obj}
    return SpeculativeDeployment.model_validate(
        {
            **known,
            "metadata": _metadata_without_nulls(obj["metadata"]),
            "spec": prune_nulls(obj["spec"]),
        }
    )
