"""Tool-call arguments: a JSON instance of the request's tool schema, cut into one fragment
per generated token; and ``--fault-invalid-tool-calls``, which breaks some of them.

A request whose first tool declares ``parameters`` gets arguments that schema accepts: every
required property (and the optional ones, half the time), values of the declared type within
its bounds, enum and const values as given, strings of filler words (grown to fill the
tokens the engine generates). Without ``parameters`` the arguments are ``{"query": "..."}``
(:func:`specguard.sim._filler.tool_tokens`). The fault returns them broken in one of three
ways, as reported for vLLM with speculative decoding: cut short (not JSON), empty, or
missing a required property (or a value of the wrong type).
"""

from __future__ import annotations

import json
import random
from typing import Any, Final, Literal

from specguard.sim._filler import WORDS, tool_tokens

Breakage = Literal["truncated", "empty", "schema"]
BREAKAGES: Final[tuple[Breakage, ...]] = ("truncated", "empty", "schema")
_MAX_DEPTH: Final = 8


def _word(rng: random.Random) -> str:
    return rng.choice(WORDS).strip()


def instance(schema: Any, rng: random.Random, depth: int = 0) -> Any:
    """A value the schema accepts (the subset tool definitions use)."""
    if not isinstance(schema, dict) or depth > _MAX_DEPTH:
        return {} if depth == 0 else _word(rng)
    if "const" in schema:
        return schema["const"]
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return rng.choice(enum)
    for key in ("anyOf", "oneOf", "allOf"):
        options = schema.get(key)
        if isinstance(options, list) and options and "type" not in schema:
            return instance(options[0], rng, depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind is None:
        kind = "object" if "properties" in schema or depth == 0 else "string"
    return _typed(str(kind), schema, rng, depth)


def _typed(kind: str, schema: dict[str, Any], rng: random.Random, depth: int) -> Any:
    if kind == "object":
        properties = schema.get("properties")
        properties = properties if isinstance(properties, dict) else {}
        required = [r for r in schema.get("required", ()) if isinstance(r, str)]
        out: dict[str, Any] = {}
        for name, sub in properties.items():
            if name in required or rng.random() < 0.5:
                out[name] = instance(sub, rng, depth + 1)
        for name in required:
            out.setdefault(name, _word(rng))
        return out
    if kind == "array":
        low = schema.get("minItems", 1)
        count = max(int(low) if isinstance(low, int) else 1, 1)
        high = schema.get("maxItems")
        if isinstance(high, int):
            count = min(count, high)
        return [instance(schema.get("items", {}), rng, depth + 1) for _ in range(count)]
    if kind in ("integer", "number"):
        return _number(kind, schema, rng)
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "null":
        return None
    text = _word(rng)
    low, high = schema.get("minLength"), schema.get("maxLength")
    while isinstance(low, int) and len(text) < low:
        text += " " + _word(rng)
    if isinstance(high, int):
        text = text[:high]
    return text


def _number(kind: str, schema: dict[str, Any], rng: random.Random) -> int | float:
    low = schema.get("minimum", schema.get("exclusiveMinimum", 0))
    high = schema.get("maximum", schema.get("exclusiveMaximum", low + 100))
    low = low + 1 if "exclusiveMinimum" in schema and "minimum" not in schema else low
    high = high - 1 if "exclusiveMaximum" in schema and "maximum" not in schema else high
    value = rng.randint(int(low), max(int(low), int(high)))
    return value if kind == "integer" else float(value)


def _grow(value: Any, schema: Any, text_len: int, want: int, rng: random.Random) -> Any:
    """``value`` with words added to its first free string (no bounds, enum or const), so
    its JSON text has at least ``want`` characters; unchanged when there is none."""
    if not isinstance(value, dict) or not isinstance(schema, dict):
        return value
    properties = schema.get("properties")
    properties = properties if isinstance(properties, dict) else {}
    for name, item in value.items():
        sub = properties.get(name, {})
        free = isinstance(sub, dict) and not ({"enum", "const", "maxLength"} & set(sub))
        if isinstance(item, str) and free:
            words = [item]
            while text_len < want:
                word = _word(rng)
                words.append(word)
                text_len += len(word) + 1
            return {**value, name: " ".join(words)}
    return value


def _split(text: str, n: int) -> list[str]:
    """``n`` fragments joining to ``text`` (empty ones when it is shorter than ``n``)."""
    size = len(text)
    return [text[size * i // n : size * (i + 1) // n] for i in range(n)]


def _broken(value: dict[str, Any], schema: Any, breakage: Breakage, rng: random.Random) -> str:
    if breakage == "empty":
        return ""
    if breakage == "schema" and isinstance(schema, dict):
        required = [r for r in schema.get("required", ()) if isinstance(r, str) and r in value]
        if required:
            missing = dict(value)
            del missing[rng.choice(required)]
            return json.dumps(missing)
        properties = schema.get("properties")
        for name, sub in (properties if isinstance(properties, dict) else {}).items():
            if name in value and isinstance(sub, dict) and sub.get("type") == "string":
                return json.dumps({**value, name: 12345})
    text = json.dumps(value)
    return text[: max(1, len(text) * 3 // 4)]


def tool_arguments(
    rng: random.Random, schema: Any, n: int, breakage: Breakage | None = None
) -> list[str]:
    """``n`` fragments (one per generated token) of a call's arguments: valid for
    ``schema`` once joined, or broken as ``breakage`` says."""
    if n <= 0:
        return []
    if schema is None and breakage is None:
        return tool_tokens(rng, n)
    value = instance(schema, rng) if schema is not None else {"query": _word(rng)}
    if not isinstance(value, dict):
        value = {"value": value}
    text = json.dumps(value)
    if len(text) < n:
        value = _grow(value, schema, len(text), n, rng)
        text = json.dumps(value)
    if breakage is not None:
        text = _broken(value, schema, breakage, rng)
    if len(text) < n and breakage != "empty":
        text += " " * (n - len(text))  # whitespace after a JSON value is still JSON
    return _split(text, n)
