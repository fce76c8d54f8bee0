"""Base model and passthrough types for the resource's wire format.

Fields are snake_case in Python and camelCase on the wire (``populate_by_name`` accepts
both). Unknown fields are an error: a typo such as ``numSpeculativeToken`` must not be
dropped silently, which is what the API server's pruning would do to it.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Final

from pydantic import AfterValidator, BaseModel, ConfigDict, WithJsonSchema
from pydantic.alias_generators import to_camel


class WireModel(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        validate_default=True,
    )

    def to_wire(self) -> dict[str, Any]:
        """The object as it appears in YAML/JSON: camelCase keys, unset optionals left out."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


# Kubernetes objects specguard passes through untouched (tolerations, affinity, ...): the
# API server keeps them as they are and kubernetes-validate checks the rendered result.
Passthrough = Annotated[
    dict[str, Any],
    WithJsonSchema({"type": "object", "x-kubernetes-preserve-unknown-fields": True}),
]

# resource.Quantity's own pattern (k8s.io/apimachinery), so "16Gi", "500m" or 2.
QUANTITY_PATTERN: Final = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|"
    r"([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
_QUANTITY_RE: Final = re.compile(QUANTITY_PATTERN)


def _check_quantity(value: str | int) -> str | int:
    if isinstance(value, str) and not _QUANTITY_RE.fullmatch(value):
        raise ValueError(f"invalid quantity {value!r}: use a Kubernetes quantity like '16Gi'")
    return value


Quantity = Annotated[
    int | str,
    AfterValidator(_check_quantity),
    WithJsonSchema(
        {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": QUANTITY_PATTERN,
            "x-kubernetes-int-or-string": True,
        }
    ),
]
