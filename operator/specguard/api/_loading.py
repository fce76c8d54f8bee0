"""YAML text → plain JSON-like documents, safely: no input makes this hang, use unbounded
memory or raise anything but :class:`LoadError` with one short line.

Pure (the caller reads the bytes). Bounds, each checked before the work it protects:

- the input size (the caller reads at most :data:`MAX_INPUT_BYTES` + 1 bytes);
- nesting depth while the parser builds the node tree (:data:`MAX_DEPTH`), so a
  ``[[[[...`` bomb stops at the limit instead of in a RecursionError;
- the size and depth a document would have once its aliases are expanded
  (:data:`MAX_NODES`), computed on the node graph without expanding it, so a
  "billion laughs" alias bomb is refused in microseconds; recursive aliases are refused;
- only what JSON (and so the API server) can hold: strings, integers, finite floats,
  booleans, null, lists and string-keyed mappings. A YAML date, timestamp, ``!!binary``,
  ``!!set``, ``!!omap``, NaN or infinity, or a non-string key, is refused with its field path
  (kubectl would turn some of them into strings the operator never saw);
- duplicate keys in a mapping are refused with their line (the last would silently win).
"""

from __future__ import annotations

import math
from typing import Any, Final

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.resolver import Resolver

from specguard.api._errors import shown

MAX_INPUT_BYTES: Final = 256 << 10  # a resource is a few KiB; pure-Python YAML reads ~100 KiB/s
MAX_DEPTH: Final = 64
MAX_NODES: Final = 200_000
MAX_DOCUMENTS: Final = 100
MAX_INT_CHARACTERS: Final = 100


class LoadError(ValueError):
    """Input that is not usable YAML; the message is one line without the source name."""


class _Checks(SafeConstructor):
    """Depth cap while composing, duplicate keys and long integers while constructing;
    mixed into both loaders below."""

    _depth = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        self._depth += 1
        if self._depth > MAX_DEPTH:
            mark = self.peek_event().start_mark  # type: ignore[attr-defined]
            raise LoadError(f"line {mark.line + 1}: nested deeper than {MAX_DEPTH} levels")
        try:
            return Composer.compose_node(self, parent, index)  # type: ignore[arg-type]
        finally:
            self._depth -= 1

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if isinstance(key_node, ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                key = (key_node.tag, key_node.value)
                if key in seen:
                    raise LoadError(
                        f"line {key_node.start_mark.line + 1}: duplicate key "
                        f"{shown(key_node.value)}"
                    )
                seen.add(key)
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node: ScalarNode) -> int:
        # int() of more than 4300 digits raises ValueError (not a YAMLError); any integer
        # that long is out of every field's range anyway.
        if len(node.value) > MAX_INT_CHARACTERS:
            raise LoadError(
                f"line {node.start_mark.line + 1}: an integer of {len(node.value)} characters "
                "is out of range"
            )
        return super().construct_yaml_int(node)


_Checks.add_constructor("tag:yaml.org,2002:int", _Checks.construct_yaml_int)  # type: ignore[type-var]


class _PythonLoader(_Checks, yaml.SafeLoader):
    """Pure-Python scanner and parser (when PyYAML is built without libyaml)."""

    def fetch_flow_collection_start(self, token_class: Any) -> None:
        # Stop "[[[[..." in the scanner: past here it looks ahead over every open level.
        if self.flow_level >= MAX_DEPTH:
            raise LoadError(f"line {self.line + 1}: nested deeper than {MAX_DEPTH} levels")
        super().fetch_flow_collection_start(token_class)


def _loader(text: str) -> Any:
    """A loader for ``text``: libyaml's event parser (fast, and not recursive) under the
    Python composer with the checks above, or the pure-Python one."""
    try:
        from yaml._yaml import CParser
    except ImportError:
        return _PythonLoader(text)

    class _CLoader(_Checks, CParser, Resolver):
        def __init__(self, stream: str) -> None:
            CParser.__init__(self, stream)
            SafeConstructor.__init__(self)
            Resolver.__init__(self)
            self.anchors: dict[str, Node] = {}

        get_node = Composer.get_node
        check_node = Composer.check_node
        compose_document = Composer.compose_document
        compose_scalar_node = Composer.compose_scalar_node
        compose_sequence_node = Composer.compose_sequence_node
        compose_mapping_node = Composer.compose_mapping_node

    return _CLoader(text)


def _children(node: Node) -> list[Node]:
    if isinstance(node, SequenceNode):
        return list(node.value)
    if isinstance(node, MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _check_expansion(root: Node) -> None:
    """Refuse a node graph whose alias-expanded tree is too big, too deep or cyclic, without
    expanding it: size and depth of each distinct node are computed once (iteratively)."""
    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            on_path.discard(key)
            children = _children(node)
            size[key] = 1 + sum(size[id(child)] for child in children)
            depth[key] = 1 + max((depth[id(child)] for child in children), default=0)
            if size[key] > MAX_NODES:
                raise LoadError(
                    f"line {node.start_mark.line + 1}: aliases expand to more than "
                    f"{MAX_NODES} values"
                )
            if depth[key] > MAX_DEPTH:
                raise LoadError(
                    f"line {node.start_mark.line + 1}: aliases nest deeper than {MAX_DEPTH} levels"
                )
            continue
        if key in size:
            continue
        if key in on_path:
            raise LoadError(f"line {node.start_mark.line + 1}: an alias refers to itself")
        on_path.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in _children(node) if id(child) not in size)


def _path(parent: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{parent}[{key}]"
    part = shown(key, quote=False)
    return f"{parent}.{part}" if parent else part


def _check_json(value: Any, path: str) -> None:
    """Refuse what JSON cannot hold, naming the field (iterative: depth is bounded above)."""
    stack: list[tuple[Any, str]] = [(value, path)]
    while stack:
        item, where = stack.pop()
        here = where or "(root)"
        if isinstance(item, dict):
            for key, child in item.items():
                if not isinstance(key, str):
                    raise LoadError(
                        f"{here}: key {shown(key)} is a YAML {_kind(key)}, not a string; quote it"
                    )
                stack.append((child, _path(where, key)))
        elif isinstance(item, list):
            stack.extend((child, _path(where, index)) for index, child in enumerate(item))
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise LoadError(f"{here}: {item} is not a JSON number; quote it or use a number")
        elif item is not None and not isinstance(item, str | int):  # bool is an int
            raise LoadError(
                f"{here}: a YAML {_kind(item)} is not JSON; quote it to make it a string"
            )


def _kind(value: Any) -> str:
    names = {
        "date": "date",
        "datetime": "timestamp",
        "bytes": "!!binary",
        "set": "!!set",
        "tuple": "pair",
        "NoneType": "null",
        "bool": "boolean",
        "int": "integer",
        "float": "float",
    }
    return names.get(type(value).__name__, type(value).__name__)


def _position(text: str, index: int) -> str:
    line = text.count("\n", 0, index) + 1
    column = index - (text.rfind("\n", 0, index) + 1) + 1
    return f"line {line} column {column}"


def decode(data: bytes) -> str:
    """UTF-8 text of ``data`` (size already checked); LoadError naming the byte otherwise."""
    if len(data) > MAX_INPUT_BYTES:
        raise LoadError(f"larger than {MAX_INPUT_BYTES // 1024} KiB")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        text = data[: exc.start].decode("utf-8")
        raise LoadError(f"{_position(text, len(text))}: not UTF-8 text") from None


def load_documents(text: str) -> list[Any]:
    """The documents of a YAML stream as JSON-like values (empty documents dropped)."""
    if len(text) > MAX_INPUT_BYTES:
        raise LoadError(f"larger than {MAX_INPUT_BYTES // 1024} KiB")
    documents: list[Any] = []
    loader: Any = None
    try:
        loader = _loader(text)
        while loader.check_node():
            node = loader.get_node()
            if node is None:
                continue
            if len(documents) >= MAX_DOCUMENTS:
                raise LoadError(f"more than {MAX_DOCUMENTS} documents")
            _check_expansion(node)
            value = loader.construct_document(node)
            _check_json(value, "")
            if value is not None:
                documents.append(value)
    except yaml.reader.ReaderError as exc:
        character = f"U+{exc.character:04X}" if isinstance(exc.character, int) else "a byte"
        raise LoadError(
            f"{_position(text, exc.position)}: character {character} is not allowed in YAML"
        ) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1} column {mark.column + 1}: " if mark is not None else ""
        reason = exc.problem or exc.context or "invalid YAML"
        raise LoadError(f"{where}not valid YAML: {shown(reason, quote=False, limit=160)}") from None
    except yaml.YAMLError as exc:
        raise LoadError(f"not valid YAML: {shown(str(exc), quote=False, limit=160)}") from None
    except RecursionError:  # a guard above should stop it first
        raise LoadError(f"nested deeper than {MAX_DEPTH} levels") from None
    finally:
        if loader is not None:
            loader.dispose()
    return documents
