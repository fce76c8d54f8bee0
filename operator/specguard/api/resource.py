"""The SpeculativeDeployment object and the one entry point that validates it.

``parse_resource`` checks the shape of every field (pydantic) and then every cross-field
rule (:mod:`specguard.api.rules`), and raises one :class:`SpecError` listing all problems,
each with its field path, so the operator can put them in a condition and an Event and
``specguard render`` can print them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError
from pydantic.alias_generators import to_camel

from specguard.api.constants import API_VERSION, KIND
from specguard.api.errors import Problem, SpecError, problems_from_pydantic
from specguard.api.rules import RULES
from specguard.api.spec import Spec
from specguard.api.status import Status

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
    if re.fullmatch(NAME_PATTERN, name) and len(name) <= MAX_NAME_LENGTH:
        return []
    return [
        Problem("metadata.name", NAME_MESSAGE.removeprefix("metadata.name: ") + f", got {name!r}")
    ]


def check_rules(spec: Spec, sections: frozenset[str] | None = None) -> list[Problem]:
    """Problems the cross-field rules find; only rules whose sections all validated run."""
    problems: list[Problem] = []
    for rule in RULES:
        if sections is None or rule.sections <= sections:
            problems.extend(rule.check(spec))
    return problems


def validate_spec(raw: Any) -> Spec:
    """``spec`` as a model, or SpecError with every problem (shape and cross-field)."""
    if not isinstance(raw, Mapping):
        raise SpecError([Problem("spec", "must be a mapping")])
    try:
        spec = Spec.model_validate(raw)
    except ValidationError as error:
        problems = problems_from_pydantic(error, "spec")
        partial, valid = _valid_sections(raw)
        problems.extend(check_rules(partial, valid))
        raise SpecError(_unique(problems)) from None
    problems = check_rules(spec)
    if problems:
        raise SpecError(_unique(problems))
    return spec


def _valid_sections(raw: Mapping[str, Any]) -> tuple[Spec, frozenset[str]]:
    # Validate each top-level field on its own so that the rules about the valid parts
    # still run: the user sees every problem at once, not one round per fix.
    values: dict[str, Any] = {}
    valid: set[str] = set()
    for name, field in Spec.model_fields.items():
        alias = field.alias or name
        if alias not in raw and name not in raw:
            if not field.is_required():
                valid.add(alias)
            continue
        annotated: Any = (
            Annotated[field.annotation, *field.metadata] if field.metadata else field.annotation
        )
        adapter: TypeAdapter[Any] = TypeAdapter(annotated)
        try:
            # Strict, as Spec itself (see SpecModel).
            values[name] = adapter.validate_python(raw.get(alias, raw.get(name)), strict=True)
        except ValidationError:
            continue
        valid.add(alias)
    return Spec.model_construct(**values), frozenset(valid)


def _unique(problems: list[Problem]) -> list[Problem]:
    return list(dict.fromkeys(problems))


def parse_resource(obj: Mapping[str, Any]) -> SpeculativeDeployment:
    """Validate a SpeculativeDeployment (as read from YAML or the API server).

    Raises SpecError carrying every problem, each with its field path.
    """
    if not isinstance(obj, Mapping):
        raise SpecError([Problem("(root)", "a SpeculativeDeployment must be a mapping")])
    problems: list[Problem] = []
    if obj.get("apiVersion") != API_VERSION:
        problems.append(
            Problem("apiVersion", f"must be {API_VERSION}, got {obj.get('apiVersion')!r}")
        )
    if obj.get("kind") != KIND:
        problems.append(Problem("kind", f"must be {KIND}, got {obj.get('kind')!r}"))
    metadata = obj.get("metadata")
    if metadata is not None and not isinstance(metadata, Mapping):
        problems.append(Problem("metadata", "must be a mapping"))
    elif metadata is None or metadata.get("name") is None:
        problems.append(Problem("metadata.name", "required field is missing"))
    elif not isinstance(metadata["name"], str):
        problems.append(Problem("metadata.name", f"must be a string, got {metadata['name']!r}"))
    else:
        problems.extend(check_name(metadata["name"]))
        try:
            ObjectMeta.model_validate(metadata)
        except ValidationError as error:
            problems.extend(problems_from_pydantic(error, "metadata"))
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
    return SpeculativeDeployment.model_validate(obj)
