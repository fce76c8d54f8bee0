"""Is a response's tool call valid? Assembled from the stream and checked against the
request's own tool schema, free of I/O (used by the router on both arms of a mirrored pair).

A request that carries ``tools`` gets a :class:`ToolCallCheck`. The router's meter hands it
every parsed chunk's ``choices``: streamed ``delta.tool_calls`` fragments are joined per
call ``index`` (the first fragment names the function, the others append to its
``arguments``), and a non-streamed ``message.tool_calls`` is read whole. At the end,
:meth:`ToolCallCheck.result` says what came back, one word (``judge.TOOL_CALLS``):

- ``none``: no tool call (the model answered in text: not a failure of the call);
- ``valid``: every call names one of the request's functions and its arguments are a
  non-empty JSON object that the function's ``parameters`` schema accepts;
- ``empty``: a call's arguments are empty (or only whitespace);
- ``invalid_json``: they do not parse as JSON, or are not an object;
- ``unknown_tool``: a call names no function of the request (or none at all);
- ``invalid_schema``: they parse, but the schema refuses them (a required property
  missing, a wrong type, a value outside an enum, ...);
- ``unchecked``: too large to keep (arguments over :data:`MAX_ARGUMENT_BYTES`, more than
  :data:`MAX_CALLS` calls) or a schema over :data:`MAX_SCHEMA_BYTES`.

The text is held only until the response ends, never logged, never written anywhere: the
result is one of these words.

The schema check is the subset of JSON Schema that tool definitions use (``type``, ``enum``,
``const``, ``properties``, ``required``, ``additionalProperties``, ``items``,
``prefixItems``, ``minItems``/``maxItems``, ``minLength``/``maxLength``, ``minimum``/
``maximum`` and their exclusive forms, ``multipleOf``, ``anyOf``/``oneOf``/``allOf``/``not``
and local ``$ref`` into ``$defs``/``definitions``), with the 2020-12 meaning of each
(tests compare it with the ``jsonschema`` package on generated schemas). Other keywords
are not checked: ``pattern`` and ``format`` would run a client's regular expression on
the router's event loop, and a schema that needs them still gets the other checks. Depth
and work are bounded, so no schema can make a check slow.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any, Final

# The words (the Sample schema's, judge._sample.TOOL_CALLS); INVALID_TOOL_CALLS: broken ones.
from specguard.judge import INVALID_TOOL_CALLS, TOOL_CALLS
from specguard.judge import ToolCall as ToolCallResult

MAX_TOOLS: Final = 128
MAX_SCHEMA_BYTES: Final = 64 * 1024
MAX_CALLS: Final = 16
MAX_ARGUMENT_BYTES: Final = 256 * 1024
MAX_DEPTH: Final = 32
# Schema nodes visited for one instance: a oneOf of oneOfs cannot multiply without bound.
MAX_STEPS: Final = 20_000


class ToolCallCheck:
    """The tool calls of one response, assembled as the chunks arrive (see the module
    docstring); :meth:`result` at the end."""

    __slots__ = ("_calls", "_overflow", "_schemas", "_size")

    def __init__(self, schemas: Mapping[str, Any | None], *, overflow: bool = False) -> None:
        # name -> parameters schema (None: none given, any JSON object is accepted)
        self._schemas = schemas
        self._calls: dict[int, list[Any]] = {}  # index -> [name, [argument fragments]]
        self._size = 0
        self._overflow = overflow

    @classmethod
    def for_request(cls, body: Mapping[str, Any] | None) -> ToolCallCheck | None:
        """A check for a request that carries tools (and does not turn them off with
        ``tool_choice: none``), else None."""
        if body is None:
            return None
        tools = body.get("tools")
        if not isinstance(tools, list) or not tools or body.get("tool_choice") == "none":
            return None
        schemas: dict[str, Any | None] = {}
        overflow = len(tools) > MAX_TOOLS
        for tool in tools[:MAX_TOOLS]:
            function = tool.get("function") if isinstance(tool, dict) else None
            name = function.get("name") if isinstance(function, dict) else None
            if not isinstance(name, str):
                continue
            parameters = function.get("parameters")  # type: ignore[union-attr]
            if parameters is not None and _size(parameters) > MAX_SCHEMA_BYTES:
                overflow = True
            schemas[name] = parameters
        return cls(schemas, overflow=overflow)

    def observe(self, choices: Any) -> None:
        """The ``choices`` of one streamed chunk (``delta.tool_calls``) or of a whole
        response (``message.tool_calls``)."""
        if not isinstance(choices, list):
            return
        for choice in choices:
            if not isinstance(choice, dict):
                continue
            holder = choice.get("delta")
            if not isinstance(holder, dict):
                holder = choice.get("message")
            calls = holder.get("tool_calls") if isinstance(holder, dict) else None
            if isinstance(calls, list):
                for position, call in enumerate(calls):
                    if isinstance(call, dict):
                        self._fragment(call, position)

    def _fragment(self, call: Mapping[str, Any], position: int) -> None:
        index = call.get("index", position)
        if not isinstance(index, int) or isinstance(index, bool):
            index = position
        entry = self._calls.get(index)
        if entry is None:
            if len(self._calls) >= MAX_CALLS:
                self._overflow = True
                return
            entry = self._calls[index] = [None, []]
        function = call.get("function")
        if not isinstance(function, dict):
            return
        name = function.get("name")
        if isinstance(name, str) and name and entry[0] is None:
            entry[0] = name
        arguments = function.get("arguments")
        if isinstance(arguments, str) and arguments:
            self._size += len(arguments)
            if self._size > MAX_ARGUMENT_BYTES:
                self._overflow = True
                self._calls.clear()
                return
            entry[1].append(arguments)

    def result(self) -> ToolCallResult:
        """What the response's tool calls were (the first problem found, in call order)."""
        if self._overflow:
            return "unchecked"
        if not self._calls:
            return "none"
        for index in sorted(self._calls):
            name, parts = self._calls[index]
            text = "".join(parts)
            if not text.strip():
                return "empty"
            try:
                value = json.loads(text)
            except (ValueError, RecursionError):
                return "invalid_json"
            if not isinstance(value, dict):
                return "invalid_json"
            if name not in self._schemas:
                return "unknown_tool"
            schema = self._schemas[name]
            if schema is not None and not schema_accepts(schema, value):
                return "invalid_schema"
        return "valid"


def _size(value: Any) -> int:
    try:
        return len(json.dumps(value, separators=(",", ":")))
    except (TypeError, ValueError, RecursionError):
        return MAX_SCHEMA_BYTES + 1


# --- the schema subset ------------------------------------------------------------------


class _Budget:
    __slots__ = ("steps",)

    def __init__(self) -> None:
        self.steps = 0


class _TooDeepError(Exception):
    """The schema (or the value) is deeper, or the check longer, than the bounds."""


def schema_accepts(schema: Any, value: Any) -> bool:
    """Does the JSON Schema subset ``schema`` accept the JSON ``value``? A schema too deep
    or too costly to check counts as accepting (nothing is claimed about it)."""
    try:
        return _accepts(schema, value, schema, 0, _Budget())
    except (_TooDeepError, RecursionError):
        return True


_TYPES: Final = ("object", "array", "string", "integer", "number", "boolean", "null")


def _is_type(value: Any, kind: str) -> bool:
    if kind == "object":
        return isinstance(value, dict)
    if kind == "array":
        return isinstance(value, list)
    if kind == "string":
        return isinstance(value, str)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "null":
        return value is None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    if kind == "number":
        return True
    return isinstance(value, int) or (math.isfinite(value) and value == int(value))


def _equal(a: Any, b: Any) -> bool:
    """JSON equality: 1 == 1.0, but true is not 1."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    return type(a) is type(b) and bool(a == b)


def _resolve(ref: Any, root: Any) -> Any:
    """A local reference (#/$defs/x, #/definitions/x, #); anything else is not followed."""
    if not isinstance(ref, str) or not ref.startswith("#"):
        return True
    node = root
    for written in ref[1:].split("/")[1:]:
        part = written.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        else:
            return True
    return node


def _number(schema: Mapping[str, Any], key: str) -> float | None:
    value = schema.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return value


def _accepts(schema: Any, value: Any, root: Any, depth: int, budget: _Budget) -> bool:
    budget.steps += 1
    if depth > MAX_DEPTH or budget.steps > MAX_STEPS:
        raise _TooDeepError
    if schema is True or not isinstance(schema, dict):
        return schema is not False
    deeper = depth + 1
    if "$ref" in schema and not _accepts(_resolve(schema["$ref"], root), value, root, deeper,
                                         budget):  # fmt: skip
        return False
    kind = schema.get("type")
    if isinstance(kind, str) and kind in _TYPES and not _is_type(value, kind):
        return False
    if isinstance(kind, list):
        known = [k for k in kind if isinstance(k, str) and k in _TYPES]
        if known and not any(_is_type(value, k) for k in known):
            return False
    if "const" in schema and not _equal(schema["const"], value):
        return False
    enum = schema.get("enum")
    if isinstance(enum, list) and not any(_equal(option, value) for option in enum):
        return False
    if isinstance(value, dict) and not _object(schema, value, root, deeper, budget):
        return False
    if isinstance(value, list) and not _array(schema, value, root, deeper, budget):
        return False
    if isinstance(value, str) and not _string(schema, value):
        return False
    if (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and not _numeric(schema, value)
    ):
        return False
    for key in ("allOf", "anyOf", "oneOf"):
        options = schema.get(key)
        if not isinstance(options, list) or not options:
            continue
        passed = sum(1 for option in options if _accepts(option, value, root, deeper, budget))
        if (key == "allOf" and passed < len(options)) or (key == "anyOf" and passed == 0):
            return False
        if key == "oneOf" and passed != 1:
            return False
    return not ("not" in schema and _accepts(schema["not"], value, root, deeper, budget))


def _object(
    schema: Mapping[str, Any], value: dict[str, Any], root: Any, depth: int, budget: _Budget
) -> bool:
    required = schema.get("required")
    if isinstance(required, list) and any(
        isinstance(name, str) and name not in value for name in required
    ):
        return False
    properties = schema.get("properties")
    properties = properties if isinstance(properties, dict) else {}
    extra = schema.get("additionalProperties", True)
    for name, item in value.items():
        if name in properties:
            if not _accepts(properties[name], item, root, depth, budget):
                return False
        elif not _accepts(extra, item, root, depth, budget):
            return False
    return True


def _array(
    schema: Mapping[str, Any], value: list[Any], root: Any, depth: int, budget: _Budget
) -> bool:
    low, high = _number(schema, "minItems"), _number(schema, "maxItems")
    if (low is not None and len(value) < low) or (high is not None and len(value) > high):
        return False
    prefix = schema.get("prefixItems")
    prefix = prefix if isinstance(prefix, list) else []
    for item, item_schema in zip(value, prefix, strict=False):
        if not _accepts(item_schema, item, root, depth, budget):
            return False
    rest = value[len(prefix) :]
    if "items" in schema and not isinstance(schema["items"], list):
        return all(_accepts(schema["items"], item, root, depth, budget) for item in rest)
    return True


def _string(schema: Mapping[str, Any], value: str) -> bool:
    low, high = _number(schema, "minLength"), _number(schema, "maxLength")
    # JSON Schema counts code points, as len() does.
    return not ((low is not None and len(value) < low) or (high is not None and len(value) > high))


def _numeric(schema: Mapping[str, Any], value: float) -> bool:
    checks: Sequence[tuple[str, Any]] = (
        ("minimum", lambda bound: value >= bound),
        ("maximum", lambda bound: value <= bound),
        ("exclusiveMinimum", lambda bound: value > bound),
        ("exclusiveMaximum", lambda bound: value < bound),
    )
    for key, holds in checks:
        bound = _number(schema, key)
        if bound is not None and not holds(bound):
            return False
    step = _number(schema, "multipleOf")
    if step is not None and step > 0:
        quotient = value / step
        if math.isfinite(quotient) and abs(quotient - round(quotient)) > 1e-9 * max(
            1.0, abs(quotient)
        ):
            return False
    return True


__all__ = [
    "INVALID_TOOL_CALLS",
    "MAX_ARGUMENT_BYTES",
    "MAX_CALLS",
    "MAX_SCHEMA_BYTES",
    "TOOL_CALLS",
    "ToolCallCheck",
    "ToolCallResult",
    "schema_accepts",
]
