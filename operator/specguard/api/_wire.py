"""Base model and passthrough types for the resource's wire format.

Fields are snake_case in Python and camelCase on the wire (``populate_by_name`` accepts
both). Unknown fields are an error: a typo such as ``numSpeculativeToken`` must not be
dropped silently, which is what the API server's pruning would do to it.
"""

from __future__ import annotations

import re
from decimal import Decimal
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


class SpecModel(WireModel):
    """A part of the user's spec. Strict types, as the CRD's schema: a string "4" where an
    integer belongs (or "true" for a boolean) is refused by the API server, so Python must
    not quietly convert it."""

    model_config = ConfigDict(strict=True)


# Kubernetes objects specguard passes through untouched (the parts of affinity below its
# three kinds): the API server keeps them as they are and kubernetes-validate checks the
# rendered result. Everything a typo could break is typed instead (Toleration, EnvVarSource).
Passthrough = Annotated[
    dict[str, Any],
    WithJsonSchema({"type": "object", "x-kubernetes-preserve-unknown-fields": True}),
]

# Names as the API server checks them (k8s.io/apimachinery/pkg/util/validation).
DNS1123_LABEL: Final = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
# Secret, ConfigMap and PersistentVolumeClaim names.
DNS1123_SUBDOMAIN_PATTERN: Final = rf"^{DNS1123_LABEL}(\.{DNS1123_LABEL})*$"
_QUALIFIED_NAME: Final = r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
# Extended resource names are "<domain>/<name>" (nvidia.com/gpu); a domain has a dot.
EXTENDED_RESOURCE_PATTERN: Final = rf"^{DNS1123_LABEL}(\.{DNS1123_LABEL})+/{_QUALIFIED_NAME}$"
# Label keys (toleration keys): an optional DNS-subdomain prefix and a name.
QUALIFIED_NAME_PATTERN: Final = rf"^({DNS1123_LABEL}(\.{DNS1123_LABEL})*/)?{_QUALIFIED_NAME}$"
# Label values (toleration values); may be empty.
LABEL_VALUE_PATTERN: Final = rf"^({_QUALIFIED_NAME})?$"
# Keys of a Secret or ConfigMap.
CONFIG_KEY_PATTERN: Final = r"^[-._a-zA-Z0-9]+$"

# resource.Quantity's own pattern (k8s.io/apimachinery) without the minus sign and with an
# exponent of at most two digits: "16Gi", "500m", "1e3" or 2. A negative size or request is
# refused by the API server for a Deployment, and "1e999999999" (which the API server's own
# pattern takes) made it time out on the Deployment that carried it.
QUANTITY_PATTERN: Final = (
    r"^\+?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|"
    r"([eE](\+|-)?[0-9]{1,2}))?$"
)
MAX_QUANTITY_LENGTH: Final = 32
# The largest quantity anywhere in the spec: more memory than any node has; every
# quantity (shmSize, requests, limits, divisor) is at most this.
MAX_QUANTITY: Final = "64Ti"
_QUANTITY_RE: Final = re.compile(QUANTITY_PATTERN)
_BINARY_SUFFIXES: Final = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL_SUFFIXES: Final = {
    "n": -9,
    "u": -6,
    "m": -3,
    "k": 3,
    "M": 6,
    "G": 9,
    "T": 12,
    "P": 15,
    "E": 18,
}


def _check_quantity(value: str | int) -> str | int:
    if isinstance(value, str) and len(value) > MAX_QUANTITY_LENGTH:
        raise ValueError(
            f"invalid quantity of {len(value)} characters: at most {MAX_QUANTITY_LENGTH}"
        )
    if isinstance(value, str) and not _QUANTITY_RE.fullmatch(value):
        raise ValueError(
            f"invalid quantity {value!r}: use a non-negative Kubernetes quantity like '16Gi'"
        )
    if isinstance(value, int) and value < 0:
        raise ValueError(f"invalid quantity {value}: must not be negative")
    return value


def quantity_value(value: str | int) -> Decimal:
    """The number a valid quantity stands for: "1Gi" -> 1073741824, "500m" -> 0.5."""
    if isinstance(value, int):
        return Decimal(value)
    text = value.removeprefix("+")
    if text[-2:] in _BINARY_SUFFIXES:
        return Decimal(text[:-2]) * Decimal(1024) ** _BINARY_SUFFIXES[text[-2:]]
    if text[-1:] in _DECIMAL_SUFFIXES:
        return Decimal(text[:-1]) * Decimal(10) ** _DECIMAL_SUFFIXES[text[-1:]]
    return Decimal(text)  # plain or with an exponent ("1e3"), which Decimal reads


Quantity = Annotated[
    int | str,
    AfterValidator(_check_quantity),
    WithJsonSchema(
        {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "minimum": 0,
            "maxLength": MAX_QUANTITY_LENGTH,
            "pattern": QUANTITY_PATTERN,
            "x-kubernetes-int-or-string": True,
        }
    ),
]
