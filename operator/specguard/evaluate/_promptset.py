"""Prompt sets for the sweep: the ones shipped with specguard and the user's own JSONL.

One JSON object per line, either a chat request or a completion request:

    {"messages": [{"role": "user", "content": "..."}], "tools": [...], "max_tokens": 128,
     "subset": "tool_call", "id": "optional-name"}
    {"prompt": "...", "max_tokens": 64, "subset": "support"}

``messages`` (a list of chat messages) or ``prompt`` (a string), exactly one of them;
``subset`` (default ``default``), ``tools`` (chat only) and ``max_tokens`` are optional.
Unknown fields are ignored. Errors name the file, the line and the field.

The shipped sets live next to this module in ``prompts/<subset>.jsonl`` and were written
for specguard (no downloaded data set): tool calls with realistic JSON-schema tools and
multi-turn tool results, RAG with retrieved passages, math reasoning, and chat.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

BUILTIN_SUBSETS: tuple[str, ...] = ("tool_call", "rag", "math_reasoning", "chat")
DEFAULT_SUBSET = "default"
# The simulator's domain names (and the router's X-Specguard-Domain tags) for the shipped
# subsets; a user's own subset name is sent as it is.
SUBSET_DOMAINS: dict[str, str] = {"math_reasoning": "math"}
_SUBSET_RE = re.compile(r"[a-z0-9][a-z0-9_.-]{0,31}")
_ROLES = {"system", "user", "assistant", "tool", "developer"}


class PromptError(ValueError):
    """A prompt file or record that cannot be used; the message names where and why."""


@dataclass(frozen=True, slots=True)
class Prompt:
    """One request body's worth of input. Never logged."""

    subset: str
    messages: tuple[Mapping[str, Any], ...] | None = None
    prompt: str | None = None
    tools: tuple[Mapping[str, Any], ...] | None = None
    max_tokens: int | None = None
    id: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def is_chat(self) -> bool:
        return self.messages is not None

    @property
    def path(self) -> str:
        return "/v1/chat/completions" if self.is_chat else "/v1/completions"

    @property
    def domain(self) -> str:
        return SUBSET_DOMAINS.get(self.subset, self.subset)

    def body(
        self, model: str, default_max_tokens: int, override_max_tokens: int | None
    ) -> dict[str, Any]:
        """The streamed request body: usage on every chunk so tokens per chunk are exact."""
        max_tokens = override_max_tokens or self.max_tokens or default_max_tokens
        body: dict[str, Any] = {
            "model": model,
            "max_tokens": max_tokens,
            "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        }
        if self.messages is not None:
            body["messages"] = [dict(m) for m in self.messages]
            if self.tools:
                body["tools"] = [dict(t) for t in self.tools]
        else:
            body["prompt"] = self.prompt
        return body


def parse_record(data: Any, where: str) -> Prompt:
    """A `Prompt` from one decoded JSON record; ``where`` prefixes error messages."""
    if not isinstance(data, Mapping):
        raise PromptError(f"{where}: expected a JSON object, got {type(data).__name__}")
    has_messages, has_prompt = "messages" in data, "prompt" in data
    if has_messages == has_prompt:
        raise PromptError(
            f"{where}: needs exactly one of 'messages' (chat) or 'prompt' (completion)"
        )
    messages: tuple[Mapping[str, Any], ...] | None = None
    prompt: str | None = None
    if has_messages:
        messages = _messages(data["messages"], where)
    else:
        prompt = data["prompt"]
        if not isinstance(prompt, str) or not prompt:
            raise PromptError(f"{where}: prompt: expected a non-empty string")
    subset = data.get("subset", DEFAULT_SUBSET)
    if not isinstance(subset, str) or not _SUBSET_RE.fullmatch(subset):
        raise PromptError(
            f"{where}: subset: expected a short lower-case name (letters, digits, _ . -), "
            f"got {subset!r}"
        )
    tools = data.get("tools")
    if tools is not None:
        if prompt is not None:
            raise PromptError(f"{where}: tools: only chat records ('messages') can carry tools")
        if not isinstance(tools, list) or not all(isinstance(t, Mapping) for t in tools):
            raise PromptError(f"{where}: tools: expected a list of tool objects")
        tools = tuple(tools) or None
    max_tokens = data.get("max_tokens")
    if max_tokens is not None and (
        isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1
    ):
        raise PromptError(f"{where}: max_tokens: expected a whole number >= 1, got {max_tokens!r}")
    ident = data.get("id")
    if ident is not None and not isinstance(ident, str):
        raise PromptError(f"{where}: id: expected a string")
    return Prompt(
        subset=subset,
        messages=messages,
        prompt=prompt,
        tools=tools,
        max_tokens=max_tokens,
        id=ident,
    )


def _messages(value: Any, where: str) -> tuple[Mapping[str, Any], ...]:
    if not isinstance(value, list) or not value:
        raise PromptError(f"{where}: messages: expected a non-empty list of chat messages")
    for index, message in enumerate(value):
        if not isinstance(message, Mapping):
            raise PromptError(f"{where}: messages[{index}]: expected an object")
        role = message.get("role")
        if role not in _ROLES:
            raise PromptError(
                f"{where}: messages[{index}].role: expected one of "
                f"{', '.join(sorted(_ROLES))}, got {role!r}"
            )
        content = message.get("content")
        if content is None and not message.get("tool_calls"):
            raise PromptError(
                f"{where}: messages[{index}].content: missing "
                "(only an assistant tool call may omit it)"
            )
    return tuple(value)


def parse_lines(lines: Iterable[str], source: str) -> list[Prompt]:
    prompts: list[Prompt] = []
    for number, line in enumerate(lines, start=1):
        text = line.strip()
        if not text:
            continue
        where = f"{source}:{number}"
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise PromptError(f"{where}: not JSON ({exc.msg})") from exc
        prompts.append(parse_record(data, where))
    if not prompts:
        raise PromptError(f"{source}: no prompts in the file")
    return prompts


def load_file(path: str | Path) -> list[Prompt]:
    """The user's JSONL prompts; PromptError for a missing file or a bad line."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise PromptError(f"--prompts: file not found: {path}") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise PromptError(f"--prompts: cannot read {path}: {exc}") from exc
    return parse_lines(text.splitlines(), str(path))


def load_builtin(subset: str) -> list[Prompt]:
    """One shipped prompt set."""
    if subset not in BUILTIN_SUBSETS:
        raise PromptError(
            f"--subsets: unknown subset {subset!r}; shipped subsets are "
            f"{', '.join(BUILTIN_SUBSETS)} "
            "(use --prompts FILE.jsonl for your own)"
        )
    text = (
        resources.files("specguard.evaluate")
        .joinpath("prompts", f"{subset}.jsonl")
        .read_text("utf-8")
    )
    return parse_lines(text.splitlines(), f"{subset}.jsonl")


def select(prompts: Sequence[Prompt], subsets: Sequence[str] | None) -> dict[str, list[Prompt]]:
    """Prompts grouped by subset, in the order asked for (or first-seen order)."""
    grouped: dict[str, list[Prompt]] = {}
    for prompt in prompts:
        grouped.setdefault(prompt.subset, []).append(prompt)
    if not subsets:
        return grouped
    missing = [name for name in subsets if name not in grouped]
    if missing:
        raise PromptError(
            f"--subsets: {', '.join(missing)} not in the prompt file (it has {', '.join(grouped)})"
        )
    return {name: grouped[name] for name in subsets}


def load(prompts_file: str | Path | None, subsets: Sequence[str] | None) -> dict[str, list[Prompt]]:
    """The prompts of a sweep, by subset: the user's file, or the shipped sets."""
    if prompts_file is not None:
        return select(load_file(prompts_file), subsets)
    names = list(subsets) if subsets else list(BUILTIN_SUBSETS)
    return {name: load_builtin(name) for name in names}


__all__ = [
    "BUILTIN_SUBSETS",
    "DEFAULT_SUBSET",
    "SUBSET_DOMAINS",
    "Prompt",
    "PromptError",
    "load",
    "load_builtin",
    "load_file",
    "parse_lines",
    "parse_record",
    "select",
]
