"""Which kind of request this is, and how many tokens its prompt has.

Domain: the ``X-Specguard-Domain`` header wins; otherwise a request with ``tools`` is a
tool call; otherwise a keyword classifier over the first 2,000 characters of the prompt
text (first match in the order below, case-insensitive), falling back to ``chat``.
The text is only scanned, never kept.

Prompt tokens: ``ceil(characters / 4)`` per text part (the usual rule of thumb for BPE
tokenizers on English) plus 4 tokens of chat-template overhead per message.
"""

from __future__ import annotations

import json
import re
from typing import Any

from specguard.sim._profiles import DOMAINS

_RULES: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "translation",
        re.compile(r"\btranslat|\bin (french|german|spanish|chinese|japanese|english)\b", re.I),
    ),
    (
        "code",
        re.compile(
            r"```|\bdef \w+\(|\bfunction\b|\bpython\b|\bjavascript\b|\bcode\b|\bcompile|\bbug\b",
            re.I,
        ),
    ),
    (
        "math",
        re.compile(
            r"\bsolve\b|\bequation|\bintegral|\bprove\b|\bcalculat|\bcompute\b|\bmath|"
            r"\d+\s*[-+*/^=]\s*\d+",
            re.I,
        ),
    ),
    (
        "rag",
        re.compile(r"\bcontext:|\baccording to the (document|passage|text)|\bdocuments?:", re.I),
    ),
    (
        "writing",
        re.compile(r"\bwrite (a|an|me)\b|\bstory\b|\bpoem\b|\bessay\b|\bblog post\b", re.I),
    ),
)

TOKENS_PER_MESSAGE = 4
CLASSIFY_CHARS = 2000


def classify_text(text: str) -> str:
    # Only the first CLASSIFY_CHARS characters: regexes over a 100k-character RAG prompt
    # would take the event loop for tens of milliseconds.
    head = text[:CLASSIFY_CHARS]
    for domain, pattern in _RULES:
        if pattern.search(head):
            return domain
    return "chat"


def choose_domain(header: str | None, has_tools: bool, text: str) -> str:
    if header:
        value = header.strip().lower()
        if value in DOMAINS:
            return value
    if has_tools:
        return "tool_call"
    return classify_text(text)


def count_tokens(text: str) -> int:
    return (len(text) + 3) // 4


def message_text(messages: Any) -> str:
    """Concatenated text parts of chat messages (for classification and counting)."""
    parts: list[str] = []
    if not isinstance(messages, list):
        return ""
    for message in messages:
        if not isinstance(message, dict):
            continue
        content = message.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    parts.append(part["text"])
    return "\n".join(parts)


def chat_prompt_tokens(messages: Any, tools: Any) -> int:
    n_messages = len(messages) if isinstance(messages, list) else 0
    tokens = count_tokens(message_text(messages)) + TOKENS_PER_MESSAGE * n_messages
    if tools:
        tokens += count_tokens(json.dumps(tools))
    return max(1, tokens)


def completion_prompt_text(prompt: Any) -> str:
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):
        if prompt and all(isinstance(p, int) for p in prompt):
            return "x" * (4 * len(prompt))  # token ids: one token each
        return "\n".join(p for p in prompt if isinstance(p, str))
    return ""
